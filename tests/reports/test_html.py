"""The HTML report is self-contained and renders everything from the cluster as text."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner

from gpu_audit.cli import main


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def render(runner: CliRunner, path: Path) -> str:
    result = runner.invoke(main, ["scan", "--from-file", str(path), "--format", "html"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_hostile_names_are_escaped(runner: CliRunner, repo_root: Path) -> None:
    page = render(runner, repo_root / "fixtures" / "clusters" / "hostile")
    parsed = Elements()
    parsed.feed(page)
    assert [t for t, _ in parsed.tags].count("script") == 1  # only the report's own script
    assert not any(t == "img" for t, _ in parsed.tags)
    assert not any(
        name.startswith("on") or (value or "").startswith("javascript:")
        for _, attrs in parsed.tags
        for name, value in attrs.items()
    )
    text = "".join(parsed.text)
    assert "container <script>alert(4)</script>" in text  # shown, as text
    assert "&lt;script&gt;alert(4)&lt;/script&gt;" in page


def test_page_is_self_contained(runner: CliRunner, sample_cluster: Path) -> None:
    page = render(runner, sample_cluster)
    parsed = Elements()
    parsed.feed(page)
    for tag, attrs in parsed.tags:
        assert not (tag in ("script", "img", "iframe") and attrs.get("src")), (tag, attrs)
        assert not (tag == "link" and attrs.get("rel") == "stylesheet"), attrs
    assert "default-src 'none'" in page  # the CSP forbids any fetch
    anchors = [attrs.get("href") or "" for tag, attrs in parsed.tags if tag == "a"]
    assert anchors and all(a.startswith("https://") for a in anchors)
    assert 'id="GPU-WL-001"' in page  # stable anchors per check
