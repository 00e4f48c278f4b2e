"""The HTML report is self-contained, renders everything from the cluster as text, and shows
the optional sections of the report document only when they are there."""

from __future__ import annotations

import base64
import hashlib
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.reports.base import humanise, quantity
from gpu_audit.reports.html import http_url, render_html, usage_segments


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def ids(self) -> set[str]:
        return {attrs["id"] or "" for _, attrs in self.tags if "id" in attrs}

    def with_class(self, name: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.tags if name in (a.get("class") or "").split()]


def parse(page: str) -> Elements:
    parsed = Elements()
    parsed.feed(page)
    return parsed


def scan(runner: CliRunner, path: Path, *args: str, fmt: str = "html") -> str:
    result = runner.invoke(main, ["scan", "--from-file", str(path), *args, "--format", fmt])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_hostile_names_are_escaped(runner: CliRunner, repo_root: Path) -> None:
    page = scan(runner, repo_root / "fixtures" / "clusters" / "hostile")
    parsed = parse(page)
    assert [t for t, _ in parsed.tags].count("script") == 1  # only the report's own script
    assert not any(t in ("img", "iframe", "object", "embed") for t, _ in parsed.tags)
    assert not any(
        name.startswith("on") or (value or "").strip().lower().startswith("javascript:")
        for _, attrs in parsed.tags
        for name, value in attrs.items()
    )
    text = "".join(parsed.text)
    assert "container <script>window.pwned='container'</script>" in text  # shown, as text
    assert "&lt;script&gt;window.pwned=&#39;container&#39;&lt;/script&gt;" in page
    # the sections the hostile objects reach: inventory, pending pods, exemptions
    assert {"inventory", "pending", "exempted", "exemption-warnings"} <= parsed.ids()
    assert "<img src=x onerror=\"window.pwned='product'\">" in text
    assert "<script>window.pwned='reason'</script>" in text


def _csp(parsed: Elements) -> str:
    (content,) = [
        a["content"]
        for t, a in parsed.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert content
    return content


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_page_is_self_contained_under_a_strict_csp(runner: CliRunner, sample_cluster: Path) -> None:
    page = scan(runner, sample_cluster)
    parsed = parse(page)
    for tag, attrs in parsed.tags:
        assert not (tag in ("script", "img", "iframe") and attrs.get("src")), (tag, attrs)
        assert not (tag == "link" and attrs.get("rel") == "stylesheet"), attrs
        assert "style" not in attrs, (tag, attrs)  # inline styles would need 'unsafe-inline'
    csp = _csp(parsed)
    assert csp.startswith("default-src 'none'; ") and "unsafe" not in csp
    style = page.split("<style>", 1)[1].split("</style>", 1)[0]
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    assert f"style-src {_sha256(style)};" in csp
    assert f"script-src {_sha256(script)};" in csp
    anchors = [attrs.get("href") or "" for tag, attrs in parsed.tags if tag == "a"]
    external = [a for a in anchors if not a.startswith("#")]
    assert external and all(a.startswith("https://") for a in external)
    assert {"GPU-WL-001", "check-GPU-WL-001", "overview", "findings"} <= parsed.ids()


def test_overview_shows_the_documents_numbers(runner: CliRunner, sample_cluster: Path) -> None:
    document = json.loads(scan(runner, sample_cluster, fmt="json"))
    page = render_html(document)
    score = document["score"]
    assert f'id="score">{score["overall"]:.1f}<' in page
    assert f'id="grade">{score["grade"]}<' in page
    assert f'id="finding-count">{document["summary"]["findings"]}<' in page
    parsed = parse(page)
    charts = parsed.with_class("chart")
    assert [c["aria-label"] for c in charts] == [
        "findings by severity",
        "score by category",
        "score by namespace",
    ]
    text = "".join(parsed.text)
    for row in score["categories"]:  # each label whole, each score beside its coverage
        assert f'<span class="bar-label">{row["title"]}</span>' in page.replace("&amp;", "&")
        if row["score"] is not None:
            cov = row["coverage"]
            assert (
                f"{row['score']:.1f} · {row['grade']} · "
                f"{cov['evaluated']} of {cov['applicable']} checks evaluated"
            ) in text
    assert len(parsed.with_class("finding")) == len(document["findings"])
    assert len(parsed.with_class("copy")) >= sum(
        bool(f["remediation"]) for f in document["findings"]
    )
    assert render_html(document) == page  # deterministic


def test_optional_sections_are_left_out_when_absent(
    runner: CliRunner, sample_cluster: Path
) -> None:
    """As in a schema 1.0 report, which `gpu-audit render` still reads."""
    document: dict[str, Any] = json.loads(scan(runner, sample_cluster, fmt="json"))
    for key in ("exempted_findings", "exemptions", "baseline", "compliance", "diagnostics"):
        document.pop(key, None)
    document["summary"].pop("exempted", None)
    for finding in document["findings"]:
        finding.pop("fingerprint", None)
    ids = parse(render_html(document)).ids()
    assert "findings" in ids
    assert not ids & {"baseline", "inventory", "pending", "exempted", "compliance"}


def test_baseline_and_compliance_sections(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old.json"
    old.write_text(scan(runner, sample_cluster, "--skip", "GPU-HPA-001", fmt="json"), "utf-8")
    args = ("--baseline", str(old), "--framework", "eks-aiml")
    document = json.loads(scan(runner, sample_cluster, *args, fmt="json"))
    parsed = parse(render_html(document))
    assert {"baseline", "compliance", "framework-eks-aiml", "inventory"} <= parsed.ids()
    new = document["baseline"]["findings"]["new"]
    assert new and {f["check_id"] for f in new} == {"GPU-HPA-001"}
    assert len(parsed.with_class("status-new")) == len(new)
    controls = [a for t, a in parsed.tags if t == "tr" and "data-status" in a]
    (framework,) = document["compliance"]
    assert [c["data-status"] for c in controls] == [c["status"] for c in framework["controls"]]


@pytest.mark.parametrize(
    ("url", "link"),
    [
        ("https://kubernetes.io/docs/", True),
        ("http://example.com/a", True),
        ("javascript:alert(1)", False),
        (" JavaScript:alert(1)", False),
        ("data:text/html,<script>", False),
        ("//evil.example", False),
        ("https:/no-host", False),
        (None, False),
    ],
)
def test_only_http_urls_become_links(url: object, link: bool) -> None:
    assert (http_url(url) is not None) is link


def test_usage_bar_splits_allocatable() -> None:
    counts = {"allocatable": 8, "requested": 4, "held_by_finished": 1, "idle": 4}
    assert usage_segments(counts) == [
        ("requested", 0.0, 0.375),
        ("held", 0.375, 0.125),
        ("idle", 0.5, 0.5),
    ]
    assert usage_segments({**counts, "allocatable": 0}) == ()


def test_quantities_are_shown_as_people_read_them() -> None:
    # 274877906944 bytes = 256 x 2^30; 31369508Ki = 32122376192 bytes = 29.92 x 2^30
    assert quantity(274877906944, "memory") == "256Gi"
    assert quantity("95690m", "cpu") == "95.69 cores" and quantity(1, "cpu") == "1 core"
    assert (
        quantity(8, "nvidia.com/gpu") == "8 GPUs" and quantity(1, "nvidia.com/mig-1g.10gb") == "1"
    )
    detail = "memory: wants 256Gi, allocatable 31369508Ki; cpu: wants 8, allocatable 3920m"
    assert humanise(detail) == (
        "memory: wants 256Gi, allocatable 29.9Gi; cpu: wants 8, allocatable 3.92 cores"
    )
    # "5m" outside a cpu clause is not millicores; small numbers stay
    assert humanise("restarted 5m ago, 12345 times") == "restarted 5m ago, 12345 times"


def test_a_namespace_listing_says_what_its_usage_counts(
    runner: CliRunner, sample_cluster: Path
) -> None:
    # A live `scan --namespace` lists that namespace's pods alone (source.details.namespace):
    # the inventory and the pending verdicts say so, and a whole listing says nothing.
    document = json.loads(scan(runner, sample_cluster, fmt="json"))
    assert "namespace" not in document["source"]["details"]
    assert "were listed (a live scan with --namespace)" not in render_html(document)
    document["source"]["details"]["namespace"] = "ml-<b>training"
    page = render_html(document)
    notes = [
        " ".join(text.split())
        for text in page.split('<p class="alert warn">')[1:]
        if "a live scan with --namespace" in text
    ]
    assert len(notes) == 2, notes
    assert all("ml-&lt;b&gt;training" in note for note in notes)
