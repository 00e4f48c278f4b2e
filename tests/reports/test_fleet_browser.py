"""The fleet HTML page in a real headless Chromium, opened from disk: the summary lists the
clusters worst first and says which are not fully assessed, each cluster's section shows its
findings, and a hostile cluster's names and messages are shown as text, running nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.fleet import Member, build_fleet, load_members
from gpu_audit.reports.fleet import render_fleet_html
from tests.reports.test_html_browser import console_errors, count_visible, css, open_page

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_NAME = "<img src=x onerror=\"window.pwned='cluster'\">"


@pytest.fixture(scope="module")
def fleet_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("fleet-html")
    runner = CliRunner()
    files = []
    for name, cluster in (("sample", "lab-a100"), ("hostile", HOSTILE_NAME)):
        path = out / f"{name}.json"
        result = runner.invoke(
            main,
            [
                "scan", "--from-file", str(ROOT / "fixtures" / "clusters" / name), "-o", "json",
                "--output-file", str(path), "--cluster-name", cluster,
            ],
        )  # fmt: skip
        assert result.exit_code in (0, 3), result.output
        files.append(str(path))
    members, _ = load_members(files)
    down = Member("down", error="cannot reach the cluster at https://10.0.0.9:6443")
    fleet = build_fleet([*members, down])
    page = out / "fleet.html"
    page.write_text(render_fleet_html(fleet), encoding="utf-8")
    return page, json.loads(json.dumps(fleet))


def test_the_fleet_page_in_a_browser(
    browser: WebDriver, fleet_page: tuple[Path, dict[str, Any]]
) -> None:
    page, fleet = fleet_page
    open_page(browser, page)
    assert console_errors(browser) == []
    assert browser.execute_script("return window.pwned === undefined")
    assert css(browser, "script") == []
    rows = css(browser, "#fleet-table tbody tr")
    assert [r.get_attribute("data-cluster") for r in rows] == [c["name"] for c in fleet["clusters"]]
    assert rows[0].get_attribute("data-cluster") == "down"
    alert = css(browser, "#fleet-incomplete")[0]
    assert alert.is_displayed()
    assert "down: failed: cannot reach the cluster at https://10.0.0.9:6443" in alert.text
    text = css(browser, "body")[0].text
    assert f"Cluster {HOSTILE_NAME}" in text  # shown as text
    # Each cluster's section holds its findings, all visible without a script.
    for n, entry in enumerate(fleet["clusters"], 1):
        shown, every = count_visible(browser, f"#cluster-{n} .finding")
        report = entry["report"]
        assert (shown, every) == ((len(report["findings"]),) * 2 if report else (0, 0))
    # The summary's links lead to the sections.
    targets = [a.get_attribute("href") for a in css(browser, "#fleet-table a")]
    assert [t.rsplit("#", 1)[1] for t in targets if t] == [
        f"cluster-{n}" for n in range(1, len(fleet["clusters"]) + 1)
    ]
