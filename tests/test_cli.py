"""The command line end to end: exit codes, the JSON contract, determinism, bad input."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.report import SCHEMA_FILE
from gpu_audit.sources import live

SEVERITIES = {"critical", "high", "medium", "low", "info"}
STATUSES = {"passed", "failed", "not_evaluated", "error"}


def scan_json(
    runner: CliRunner, *args: str, stdin: str | None = None
) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(main, ["scan", *args, "--format", "json"], input=stdin)
    return result.exit_code, json.loads(result.stdout)


def test_json_contract_on_the_sample_cluster(runner: CliRunner, sample_cluster: Path) -> None:
    code, report = scan_json(runner, "--from-file", str(sample_cluster))
    jsonschema.validate(report, json.loads(SCHEMA_FILE.read_text()))
    assert report["schema_version"] == "1.3"
    assert report["score"]["overall"] is None or 0 <= report["score"]["overall"] <= 100
    assert report["score"]["grade"] in {"A", "B", "C", "D", "F"}
    assert report["findings"], "the sample cluster is built with misconfigurations"
    for finding in report["findings"]:
        assert finding["severity"] in SEVERITIES
        assert set(finding["resource"]) >= {"kind", "namespace", "name"}
        assert finding["message"] and finding["remediation"]
        assert isinstance(finding["related"], list)  # on every finding from schema 1.2 on
    assert {c["status"] for c in report["checks"]} <= STATUSES
    # The misconfigurations the sample cluster documents are found, on the right objects.
    found = {
        (f["check_id"], f["resource"]["kind"], f["resource"]["namespace"], f["resource"]["name"])
        for f in report["findings"]
    }
    assert ("GPU-WL-001", "Job", "ml-training", "tokenizer-eval") in found
    assert ("GPU-WL-001", "Deployment", "ml-serving", "triton-llm") in found
    nodes = [f for f in report["findings"] if f["resource"]["kind"] == "Node"]
    assert all(f["resource"]["namespace"] is None for f in nodes)
    assert code == 0  # --fail-on defaults to none


def test_same_input_gives_identical_bytes(runner: CliRunner, sample_cluster: Path) -> None:
    first = runner.invoke(main, ["scan", "--from-file", str(sample_cluster), "-o", "json"]).stdout
    second = runner.invoke(main, ["scan", "--from-file", str(sample_cluster), "-o", "json"]).stdout
    assert first == second
    assert json.loads(first)["generated_at"] is None


def test_source_date_epoch_sets_the_timestamp(runner: CliRunner, sample_cluster: Path) -> None:
    result = runner.invoke(
        main,
        ["scan", "--from-file", str(sample_cluster), "-o", "json"],
        env={"SOURCE_DATE_EPOCH": "1764633600"},
    )
    assert json.loads(result.stdout)["generated_at"] == "2025-12-02T00:00:00Z"


def test_a_kubectl_list_on_stdin_scans_like_the_files(
    runner: CliRunner, sample_cluster: Path
) -> None:
    items: list[Any] = []
    for path in sorted(sample_cluster.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            items.extend(doc["items"] if doc["kind"] == "List" else [doc])
    dump = json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}
    )
    _, from_stdin = scan_json(runner, "--from-file", "-", stdin=dump)
    _, from_dir = scan_json(runner, "--from-file", str(sample_cluster))
    assert from_stdin["findings"] and from_stdin["score"] == from_dir["score"]
    assert _without_source(from_stdin["findings"]) == _without_source(from_dir["findings"])


def _without_source(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings minus where each object was read from (a file, or stdin)."""
    return [
        f | {"resource": {k: v for k, v in f["resource"].items() if k != "source"}}
        for f in findings
    ]


@pytest.mark.parametrize(
    ("fail_on", "expected"), [("none", 0), ("critical", 0), ("high", 1), ("medium", 1)]
)
def test_fail_on_sets_the_exit_code(
    runner: CliRunner, repo_root: Path, fail_on: str, expected: int
) -> None:
    fixture = repo_root / "fixtures/checks/GPU-WL-001/fail-request-differs-from-limit.yaml"
    result = runner.invoke(
        main, ["scan", "--from-file", str(fixture), "--only", "GPU-WL-001", "--fail-on", fail_on]
    )
    assert result.exit_code == expected, result.output


def test_only_skip_and_category_select_checks(runner: CliRunner, sample_cluster: Path) -> None:
    _, only = scan_json(runner, "--from-file", str(sample_cluster), "--only", "GPU-WL-001")
    assert [c["id"] for c in only["checks"]] == ["GPU-WL-001"]
    _, skipped = scan_json(runner, "--from-file", str(sample_cluster), "--skip", "GPU-WL-001")
    assert "GPU-WL-001" not in {c["id"] for c in skipped["checks"]}
    _, cat = scan_json(runner, "--from-file", str(sample_cluster), "--category", "WL")
    assert {c["category"] for c in cat["checks"]} == {"workloads"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "GPU-NOPE-001"], "unknown check id(s): GPU-NOPE-001"),
        (["--category", "gardening"], "unknown category 'gardening'"),
        (["--format", "json", "--format", "html"], "several --format values need --output-dir"),
    ],
)
def test_usage_errors_exit_2(
    runner: CliRunner, sample_cluster: Path, args: list[str], message: str
) -> None:
    result = runner.invoke(main, ["scan", "--from-file", str(sample_cluster), *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_bad_input_exits_2_naming_file_and_document(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\n---\nkind: [\n")
    result = runner.invoke(main, ["scan", "--from-file", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"gpu-audit: error: {bad}: document 2: invalid YAML at line")
    assert "Traceback" not in result.output


def test_no_traceback_in_a_real_process(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "Pod",')
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_audit", "scan", "--from-file", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"gpu-audit: error: {bad}: invalid JSON at line 1 column 16: Expecting property name enclosed in double quotes"
    )


def test_live_scanning_is_refused_clearly_without_from_file(runner: CliRunner) -> None:
    result = runner.invoke(main, ["scan"])
    assert result.exit_code in (2, 3)
    assert "gpu-audit: error:" in result.stderr and "Traceback" not in result.output


def test_output_dir_and_render_round_trip(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    result = runner.invoke(
        main,
        [
            "scan",
            "--from-file",
            str(sample_cluster),
            "-o",
            "json",
            "-o",
            "html",
            "-o",
            "table",
            "--output-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    saved = tmp_path / "report.json"
    html = (tmp_path / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    rendered = runner.invoke(main, ["render", str(saved), "--format", "html"]).stdout
    assert rendered == html
    table = runner.invoke(main, ["render", str(saved)]).stdout
    assert table == (tmp_path / "report.txt").read_text()
    assert "GPU-WL-001" in table and "Score" in table


def test_render_refuses_what_is_not_a_report(runner: CliRunner, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    result = runner.invoke(main, ["render", str(other)])
    assert result.exit_code == 2
    assert f"{other}: not a gpu-audit JSON report" in result.stderr


def test_a_check_that_raises_gives_exit_3_and_a_report(
    runner: CliRunner, sample_cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from gpu_audit import registry

    real = registry.builtin_checks

    def broken() -> dict[str, Any]:
        checks = real()

        def explode(snapshot: object) -> Any:
            raise RuntimeError("boom")

        checks["GPU-WL-001"] = dataclasses.replace(checks["GPU-WL-001"], function=explode)
        return checks

    monkeypatch.setattr(registry, "builtin_checks", broken)
    result = runner.invoke(main, ["scan", "--from-file", str(sample_cluster), "-o", "json"])
    assert result.exit_code == 3
    report = json.loads(result.stdout)
    status = {c["id"]: c for c in report["checks"]}["GPU-WL-001"]
    assert (status["status"], status["reason"]) == ("error", "check raised RuntimeError: boom")
    assert report["complete"] is False
    assert "GPU-WL-001 check raised RuntimeError: boom" in result.stderr


def test_checks_list_and_show(runner: CliRunner) -> None:
    listed = json.loads(runner.invoke(main, ["checks", "list", "--format", "json"]).stdout)
    assert {"GPU-WL-001"} <= {c["id"] for c in listed}
    assert all(c["references"] and c["remediation"] for c in listed)
    only_high = json.loads(
        runner.invoke(main, ["checks", "list", "-o", "json", "--severity", "high"]).stdout
    )
    assert only_high and {c["severity"] for c in only_high} == {"high"}
    shown = runner.invoke(main, ["checks", "show", "gpu-wl-001"])
    assert (
        shown.exit_code == 0
        and "Why it matters:" in shown.stdout
        and "Remediation:" in shown.stdout
    )
    missing = runner.invoke(main, ["checks", "show", "GPU-XX-999"])
    assert missing.exit_code == 2 and "unknown check id" in missing.stderr


def test_a_cluster_that_refuses_connections_is_given_up_before_the_timeout(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale context (nothing listens at its address) is retried for the first-contact bound,
    not the whole --timeout, and named in one line."""
    monkeypatch.setattr(live, "FIRST_CONTACT_S", 1.0)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = f"https://127.0.0.1:{port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "stale", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "stale",
            }
        )
    )
    started = time.monotonic()
    result = runner.invoke(
        main, ["scan", "--kubeconfig", str(kubeconfig), "--timeout", "600", "--no-plugins"]
    )
    assert time.monotonic() - started < 60  # far from --timeout: a hang, not a speed goal
    assert result.exit_code == 3, result.output
    line = result.stderr.strip().splitlines()[0]
    assert line.startswith(f"gpu-audit: error: cannot reach the cluster at {server}: gave up after")
    assert "GET /version" in line and "Traceback" not in result.output
