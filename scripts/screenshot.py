"""Screenshot of the HTML report of the sample cluster, for the README (`make screenshot`).

Scans fixtures/clusters/sample (or renders --report JSON), opens the page from disk in headless
Debian Chromium through the system chromedriver, and saves the top of the page as a PNG.
Needs `chromium`, `chromium-driver` and the dev extra (selenium).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def render_sample(out_dir: Path, report: str | None) -> Path:
    gpu_audit = str(Path(sys.executable).with_name("gpu-audit"))
    page = out_dir / "report.html"
    command = (
        [gpu_audit, "render", str(Path(report).resolve())]
        if report
        else [gpu_audit, "scan", "--from-file", "fixtures/clusters/sample"]
    )
    # From the repository root, so the page names the input as a relative path.
    subprocess.run([*command, "--format", "html", "--output-file", str(page)], check=True, cwd=ROOT)
    return page


def screenshot(page: Path, output: Path, width: int, height: int) -> None:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(page.resolve().as_uri())
        output.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(output))
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", help="render this JSON report instead of scanning the sample")
    parser.add_argument("--html", help="screenshot this HTML page as it is")
    parser.add_argument("--output", default=str(ROOT / "docs" / "report-screenshot.png"))
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(args.html) if args.html else render_sample(Path(tmp), args.report)
        screenshot(page, Path(args.output), args.width, args.height)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
