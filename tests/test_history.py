"""scan --history-dir / --history-keep / --cluster-name / --pushgateway, offline."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.postscan.history import (
    record,
    render_index,
    run_stem,
    summary_line,
)
from gpu_audit.postscan.pushgateway import group_path
from gpu_audit.report import dumps
from gpu_audit.reports.prometheus import render_prometheus

T0 = dt.datetime(2025, 6, 1, 3, 0, 0, tzinfo=dt.UTC)


def _document(score: float | None, cluster: str | None = "prod", **severity: int) -> dict[str, Any]:
    by_severity = {s: severity.get(s, 0) for s in ("critical", "high", "medium", "low", "info")}
    return {
        "schema_version": "1.1",
        "generated_at": None,
        "cluster": cluster,
        "score": {"overall": score, "grade": None if score is None else "D"},
        "summary": {"findings": sum(by_severity.values()), "by_severity": by_severity},
        "coverage": {"ratio": 0.8125},
        "complete": True,
    }


def _record(root: Path, document: dict[str, Any], now: dt.datetime, keep: int = 30) -> Path:
    rendered = {"json": dumps(document), "html": f"<p>{document['score']['overall']}</p>"}
    return record(root, document, rendered, keep=keep, now=now).run


def test_two_runs_give_two_entries_an_index_and_a_trend(tmp_path: Path) -> None:
    first = _record(tmp_path, _document(60.0, high=2), T0)
    second = _record(tmp_path, _document(70.5, high=1), T0 + dt.timedelta(days=1))
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "20250601T030000Z-prod.html",
        "20250601T030000Z-prod.json",
        "20250602T030000Z-prod.html",
        "20250602T030000Z-prod.json",
    ]
    assert (first.name, second.name) == ("20250601T030000Z-prod.json", "20250602T030000Z-prod.json")
    for name in ("latest.json", "latest.html"):
        assert not (tmp_path / name).is_symlink()
    assert (tmp_path / "latest.json").read_text() == second.read_text()
    assert (tmp_path / "latest.html").read_text() == "<p>70.5</p>"
    index = (tmp_path / "index.html").read_text()
    rows = re.findall(r"<tr><td>(.*?)</td>", index)
    assert rows == ["2025-06-02 03:00:00 UTC", "2025-06-01 03:00:00 UTC"]  # newest first
    assert "+10.5" in index  # the change since the previous run
    (points,) = re.findall(r'<polyline class="line" points="([^"]+)"', index)
    ys = [float(p.split(",")[1]) for p in points.split()]
    assert len(ys) == 2 and ys[1] < ys[0]  # the score went up: the line rises
    assert 'href="runs/20250602T030000Z-prod.html"' in index
    assert 'href="latest.html"' in index


def test_retention_keeps_the_newest_runs(tmp_path: Path) -> None:
    for day in range(4):
        _record(tmp_path, _document(50.0 + day), T0 + dt.timedelta(days=day), keep=2)
    stems = sorted(p.stem for p in (tmp_path / "runs").glob("*.json"))
    assert stems == ["20250603T030000Z-prod", "20250604T030000Z-prod"]
    assert sorted(p.stem for p in (tmp_path / "runs").glob("*.html")) == stems
    assert (tmp_path / "index.html").read_text().count("<tr><td>") == 2


def test_runs_in_the_same_second_do_not_overwrite(tmp_path: Path) -> None:
    first = _record(tmp_path, _document(50.0), T0)
    second = _record(tmp_path, _document(55.0), T0)
    assert first != second
    assert sorted(p.name for p in (tmp_path / "runs").glob("*.json")) == [
        first.name,
        second.name,
    ]
    assert json.loads((tmp_path / "latest.json").read_text())["score"]["overall"] == 55.0


def test_a_stamped_report_is_filed_under_its_own_time(tmp_path: Path) -> None:
    document = _document(50.0) | {"generated_at": "2024-01-02T03:04:05Z"}
    assert _record(tmp_path, document, T0).name == "20240102T030405Z-prod.json"


def test_cluster_names_are_made_safe_in_file_names_and_escaped_in_the_index(
    tmp_path: Path,
) -> None:
    hostile = '<img src=x onerror=alert(1)>/../"x"'
    assert run_stem(T0, hostile) == "20250601T030000Z-img_src_x_onerror_alert_1_.._x"
    assert run_stem(T0, None) == "20250601T030000Z-unnamed"
    path = _record(tmp_path, _document(50.0, cluster=hostile), T0)
    assert path.parent == tmp_path / "runs"
    index = (tmp_path / "index.html").read_text()
    assert "<img" not in index and "&lt;img src=x onerror=alert(1)&gt;" in index


def test_an_unreadable_old_run_is_reported_and_left_out(tmp_path: Path) -> None:
    _record(tmp_path, _document(50.0), T0)
    (tmp_path / "runs" / "20250601T030000Z-prod.json").write_text("{not json")
    rendered = {"json": dumps(_document(60.0)), "html": ""}
    result = record(tmp_path, _document(60.0), rendered, keep=5, now=T0 + dt.timedelta(days=1))
    assert result.unreadable == ("20250601T030000Z-prod",)
    assert (tmp_path / "index.html").read_text().count("<tr><td>") == 1


def test_runs_without_a_score_are_gaps_in_the_trend() -> None:
    page = render_index([])
    assert "no runs yet" in page and "No run has a score yet." in page


def test_summary_line() -> None:
    document = _document(64.66, critical=2, medium=27)
    assert summary_line(document, "h/runs/x.html") == (
        "gpu-audit: cluster prod score 64.7 (D), 29 findings (2 critical, 27 medium), "
        "coverage 81%, report h/runs/x.html"
    )
    empty = _document(None, cluster=None) | {"complete": False}
    assert summary_line(empty) == (
        "gpu-audit: cluster unnamed no score, 0 findings, coverage 81%, incomplete"
    )


def test_scan_into_a_history_dir(runner: CliRunner, sample_cluster: Path, tmp_path: Path) -> None:
    args = ["scan", "--from-file", str(sample_cluster), "--cluster-name", "lab-a100"]
    history = ["--history-dir", str(tmp_path), "--history-keep", "5"]
    for epoch in ("1748746800", "1748833200"):
        result = runner.invoke(main, [*args, *history], env={"SOURCE_DATE_EPOCH": epoch})
        assert result.exit_code == 0, result.output
        assert result.stdout == ""  # the reports went to the history
        (line,) = result.stderr.splitlines()
        assert re.fullmatch(
            r"gpu-audit: cluster lab-a100 score \d+\.\d \([A-F]\), \d+ findings \(.*\), "
            r"coverage \d+%, report .*/runs/\d{8}T\d{6}Z-lab-a100\.html",
            line,
        ), line
    runs = sorted(p.name for p in (tmp_path / "runs").glob("*.json"))
    assert runs == ["20250601T030000Z-lab-a100.json", "20250602T030000Z-lab-a100.json"]
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert latest["cluster"] == "lab-a100"
    assert latest["generated_at"] == "2025-06-02T03:00:00Z"
    assert "<!doctype html>" in (tmp_path / "latest.html").read_text().lower()
    assert (tmp_path / "index.html").read_text().count("<tr><td>") == 2


def test_the_report_names_the_cluster(runner: CliRunner, sample_cluster: Path) -> None:
    base = ["scan", "--from-file", str(sample_cluster), "-o", "json"]
    named = runner.invoke(main, [*base, "--cluster-name", "prod"])
    assert json.loads(named.stdout)["cluster"] == "prod"
    assert json.loads(runner.invoke(main, base).stdout)["cluster"] is None


class _Pushgateway(http.server.BaseHTTPRequestHandler):
    """Records each request; answers with the status the test sets."""

    requests: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []
    status: ClassVar[int] = 200

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append((self.command, self.path, dict(self.headers), body))
        self.send_response(self.status)
        self.end_headers()
        if self.status >= 400:
            self.wfile.write(b"pushed metrics are invalid or inconsistent")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def pushgateway() -> Iterator[str]:
    _Pushgateway.requests = []
    _Pushgateway.status = 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pushgateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_metrics_are_put_to_the_pushgateway(
    runner: CliRunner, sample_cluster: Path, pushgateway: str, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    result = runner.invoke(
        main,
        [
            "scan",
            "--from-file",
            str(sample_cluster),
            "--cluster-name",
            "lab-a100",
            "--pushgateway",
            pushgateway + "/",
            "-o",
            "json",
            "--output-file",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.output
    ((method, path, headers, body),) = _Pushgateway.requests
    assert (method, path) == ("PUT", "/metrics/job/gpu-audit/cluster/lab-a100")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert body.decode() == render_prometheus(json.loads(report.read_text()))
    assert f"pushed metrics to {pushgateway}/metrics/job/gpu-audit/cluster/lab-a100" in (
        result.stderr
    )
    assert result.stderr.splitlines()[-1].endswith(f"report {report}")


def test_a_rejected_push_is_an_error_naming_the_pushgateway(
    runner: CliRunner, sample_cluster: Path, pushgateway: str
) -> None:
    _Pushgateway.status = 400
    result = runner.invoke(
        main, ["scan", "--from-file", str(sample_cluster), "--pushgateway", pushgateway]
    )
    assert result.exit_code == 2
    assert "gpu-audit: error: pushgateway http://127.0.0.1:" in result.stderr
    assert "answered HTTP 400: pushed metrics are invalid or inconsistent" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("url", ["localhost:9091", "ftp://host/", "http://"])
def test_a_bad_pushgateway_url_is_a_usage_error(
    runner: CliRunner, sample_cluster: Path, url: str
) -> None:
    result = runner.invoke(main, ["scan", "--from-file", str(sample_cluster), "--pushgateway", url])
    assert result.exit_code == 2 and "expected an http(s) URL" in result.stderr


def test_cluster_names_with_a_slash_use_the_base64_grouping_key() -> None:
    assert group_path("prod-1.eu") == "/metrics/job/gpu-audit/cluster/prod-1.eu"
    assert group_path("eu/prod") == "/metrics/job/gpu-audit/cluster@base64/ZXUvcHJvZA"
