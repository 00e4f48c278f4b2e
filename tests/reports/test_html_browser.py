"""The HTML report in a real headless Chromium, opened from disk (file://).

One browser session (conftest.py) serves the whole module.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CSP_META = '<meta http-equiv="Content-Security-Policy"'


def _scan(runner: CliRunner, out: Path, *args: str) -> Path:
    result = runner.invoke(main, ["scan", *args, "--format", "html", "--output-file", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample cluster's report (with its JSON), the hostile cluster's report, and that
    report with its Content-Security-Policy and its script removed."""
    out = tmp_path_factory.mktemp("html")
    runner = CliRunner()
    sample = str(ROOT / "fixtures" / "clusters" / "sample")
    hostile = str(ROOT / "fixtures" / "clusters" / "hostile")
    json_result = runner.invoke(main, ["scan", "--from-file", sample, "--format", "json"])
    assert json_result.exit_code == 0, json_result.output
    (out / "sample.json").write_text(json_result.stdout, encoding="utf-8")
    pages = {
        "sample": _scan(runner, out / "sample.html", "--from-file", sample),
        "hostile": _scan(runner, out / "hostile.html", "--from-file", hostile),
    }
    page = pages["hostile"].read_text(encoding="utf-8")
    lines = [line for line in page.splitlines() if not line.startswith(CSP_META)]
    assert len(lines) == len(page.splitlines()) - 1
    pages["hostile-no-csp"] = out / "hostile-no-csp.html"
    pages["hostile-no-csp"].write_text("\n".join(lines), encoding="utf-8")
    sample_page = pages["sample"].read_text(encoding="utf-8")
    start, end = sample_page.index("<script>"), sample_page.index("</script>") + len("</script>")
    pages["sample-no-js"] = out / "sample-no-js.html"
    pages["sample-no-js"].write_text(sample_page[:start] + sample_page[end:], encoding="utf-8")
    return pages


@pytest.fixture(scope="module")
def sample_report(pages: dict[str, Path]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        (pages["sample"].parent / "sample.json").read_text("utf-8")
    )
    return document


def browser_log(browser: WebDriver) -> list[dict[str, Any]]:
    """The console entries since the last call (goog:loggingPrefs); reading clears them."""
    entries: list[dict[str, Any]] = browser.get_log("browser")  # type: ignore[no-untyped-call]
    return entries


def open_page(browser: WebDriver, page: Path) -> None:
    browser_log(browser)  # drop what earlier pages logged
    browser.get(page.resolve().as_uri())


def console_errors(browser: WebDriver) -> list[dict[str, Any]]:
    return [entry for entry in browser_log(browser) if entry["level"] == "SEVERE"]


def css(browser: WebDriver, selector: str) -> list[WebElement]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def click(browser: WebDriver, selector: str) -> WebElement:
    """Click like a user, with the element in mid-screen (not under the sticky headers)."""
    element = css(browser, selector)[0]
    browser.execute_script(
        "arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", element
    )
    element.click()
    return element


def count_visible(browser: WebDriver, selector: str) -> tuple[int, int]:
    """(visible, all) elements that match the selector."""
    counts: list[int] = browser.execute_script(
        "const all = Array.from(document.querySelectorAll(arguments[0]));"
        "return [all.filter((e) => e.checkVisibility()).length, all.length];",
        selector,
    )
    return counts[0], counts[1]


def visible_findings(browser: WebDriver) -> list[dict[str, str]]:
    """The data attributes of the findings a user sees (one script call, not one per row)."""
    found: list[dict[str, str]] = browser.execute_script(
        "return Array.from(document.querySelectorAll('#findings .finding'))"
        ".filter((f) => f.checkVisibility()).map((f) => ({...f.dataset}))"
    )
    return found


def test_sample_report_loads_without_console_errors(
    browser: WebDriver, pages: dict[str, Path], sample_report: dict[str, Any]
) -> None:
    open_page(browser, pages["sample"])
    assert console_errors(browser) == []  # a CSP hash that did not match would be logged here
    assert css(browser, "#filters")[0].is_displayed()  # the script ran (it reveals the filters)
    assert css(browser, "#score")[0].text == f"{sample_report['score']['overall']:.1f}"
    assert css(browser, "#grade")[0].text == sample_report["score"]["grade"]
    assert len(visible_findings(browser)) == len(sample_report["findings"])
    charts = css(browser, "#overview .chart")
    assert len(charts) == 3 and all(c.is_displayed() for c in charts)
    png = browser.get_screenshot_as_png()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_severity_filter_hides_unchecked_severities(
    browser: WebDriver, pages: dict[str, Path], sample_report: dict[str, Any]
) -> None:
    open_page(browser, pages["sample"])
    by_severity = Counter(f["severity"] for f in sample_report["findings"])
    assert by_severity["medium"] and by_severity["high"]
    click(browser, ".sev-filter[value=medium]")
    shown = visible_findings(browser)
    assert len(shown) == len(sample_report["findings"]) - by_severity["medium"]
    assert {f["severity"] for f in shown} == set(by_severity) - {"medium"}
    total = len(sample_report["findings"])
    assert css(browser, "#shown-count")[0].text == f"{len(shown)} of {total} findings shown"
    click(browser, "#reset-filters")
    assert len(visible_findings(browser)) == total
    assert console_errors(browser) == []


def test_category_and_namespace_filters(
    browser: WebDriver, pages: dict[str, Path], sample_report: dict[str, Any]
) -> None:
    from selenium.webdriver.support.ui import Select

    open_page(browser, pages["sample"])
    findings = sample_report["findings"]
    category = Counter(f["category"] for f in findings).most_common(1)[0][0]
    Select(css(browser, "#category-filter")[0]).select_by_value(category)
    assert len(visible_findings(browser)) == sum(f["category"] == category for f in findings)
    Select(css(browser, "#category-filter")[0]).select_by_value("")
    namespace = "ml-training"
    Select(css(browser, "#namespace-filter")[0]).select_by_value(namespace)
    shown = visible_findings(browser)
    assert len(shown) == sum(f["resource"]["namespace"] == namespace for f in findings) > 0
    assert count_visible(browser, "#findings details.check")[0] == len(
        {f["check_id"] for f in findings if f["resource"]["namespace"] == namespace}
    )


def test_text_filter_and_no_match(
    browser: WebDriver, pages: dict[str, Path], sample_report: dict[str, Any]
) -> None:
    open_page(browser, pages["sample"])
    check_id = sample_report["findings"][-1]["check_id"]
    css(browser, "#text-filter")[0].send_keys(check_id.lower())
    expected = sum(f["check_id"] == check_id for f in sample_report["findings"])
    assert len(visible_findings(browser)) == expected
    assert not css(browser, "#no-match")[0].is_displayed()
    css(browser, "#text-filter")[0].send_keys("-no-such-finding")
    assert visible_findings(browser) == []
    assert css(browser, "#no-match")[0].is_displayed()


def test_copy_button_copies_the_snippet(browser: WebDriver, pages: dict[str, Path]) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    open_page(browser, pages["sample"])
    browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    snippet = css(browser, "#findings .snippet pre")[0].get_attribute("textContent")
    button = click(browser, "#findings button.copy")
    # The label changes when the clipboard's promise settles, after the click returns.
    WebDriverWait(browser, 10).until(lambda _: button.text != "Copy")
    assert button.text in ("Copied", "Selected: press Ctrl+C")
    if button.text == "Copied":
        pasted = browser.execute_async_script(
            "const done = arguments[0];"
            "navigator.clipboard.readText().then(done, (e) => done('error: ' + e));"
        )
        assert pasted == snippet
    else:  # no clipboard access: the snippet is selected for Ctrl+C
        assert browser.execute_script("return window.getSelection().toString()") == snippet
    assert console_errors(browser) == []


def test_without_javascript_everything_is_visible(
    browser: WebDriver, pages: dict[str, Path], sample_report: dict[str, Any]
) -> None:
    open_page(browser, pages["sample-no-js"])
    assert len(visible_findings(browser)) == len(sample_report["findings"])
    assert not css(browser, "#filters")[0].is_displayed()  # controls that would do nothing
    assert count_visible(browser, "button.copy")[0] == 0
    shown, snippets = count_visible(browser, "#findings .snippet pre")
    assert shown == snippets == sum(bool(f["remediation"]) for f in sample_report["findings"])


def test_print_media_hides_controls_and_shows_every_finding(
    browser: WebDriver, pages: dict[str, Path], sample_report: dict[str, Any]
) -> None:
    open_page(browser, pages["sample"])
    click(browser, ".sev-filter[value=high]")  # filtered on screen...
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert len(visible_findings(browser)) == len(sample_report["findings"])  # ...not on paper
        assert not css(browser, "#filters")[0].is_displayed()
        assert not css(browser, "nav.toc")[0].is_displayed()
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


@pytest.mark.parametrize("page", ["hostile", "hostile-no-csp"])
def test_hostile_cluster_data_is_shown_as_text_and_runs_nothing(
    browser: WebDriver, pages: dict[str, Path], page: str
) -> None:
    """The payloads set window.pwned. Without the CSP too, so escaping alone is tested."""
    from selenium.common.exceptions import NoAlertPresentException

    open_page(browser, pages[page])
    assert browser.execute_script("return window.pwned === undefined")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 (reading it is the test)
    injected = "img, iframe, object, embed, svg:not(.chart):not(.ring):not(.usage) *[onload]"
    assert css(browser, injected) == []
    assert len(css(browser, "script")) == 1  # the report's own
    handlers = "Array.from(document.querySelectorAll('*')).filter((e) => Array.from(e.attributes).some((a) => a.name.startsWith('on'))).length"
    assert browser.execute_script(f"return {handlers}") == 0
    hrefs = browser.execute_script("return Array.from(document.links, (a) => a.href)")
    assert hrefs and all(h.startswith(("https://", "http://", "file://")) for h in hrefs), hrefs
    text = css(browser, "body")[0].text
    assert "container <script>window.pwned='container'</script>" in text
    assert "<img src=x onerror=\"window.pwned='product'\">" in text  # GPU inventory
    assert "trainer-<svg onload=window.pwned='name'>" in text  # pending pods, findings
    assert "<script>window.pwned='reason'</script>" in text  # exempted finding's reason
    if page == "hostile":
        assert console_errors(browser) == []
