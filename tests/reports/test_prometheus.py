"""Prometheus text exposition: parsed back with prometheus_client's own parser, every value
taken from the report."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpu_audit.cli import main
from gpu_audit.reports.prometheus import render_prometheus

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    families: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        families[family.name] = [(dict(s.labels), s.value) for s in family.samples]
    return families


def scan(runner: CliRunner, source: Path, out: Path, *extra: str, **env: str) -> dict[str, Any]:
    args = ["scan", "--from-file", str(source), "-o", "json", "-o", "prometheus", *extra]
    result = runner.invoke(main, [*args, "--output-dir", str(out)], env=env)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return document


@pytest.fixture
def sample(runner: CliRunner, sample_cluster: Path, tmp_path: Path) -> tuple[dict[str, Any], str]:
    document = scan(runner, sample_cluster, tmp_path)
    return document, (tmp_path / "report.prom").read_text(encoding="utf-8")


def single(samples: Samples, name: str) -> float:
    ((labels, value),) = samples[f"gpu_audit_{name}"]
    assert labels == {}
    return value


def test_values_come_from_the_report(sample: tuple[dict[str, Any], str]) -> None:
    document, text = sample
    samples = parse(text)
    score, summary = document["score"], document["summary"]
    assert single(samples, "score") == score["overall"]
    assert samples["gpu_audit_grade_info"] == [
        ({"grade": score["grade"], "capped_by": score["capped_by"] or ""}, 1.0)
    ]
    assert single(samples, "coverage_ratio") == document["coverage"]["ratio"]
    assert single(samples, "scan_complete") == 1.0
    assert {lab["severity"]: v for lab, v in samples["gpu_audit_findings"]} == summary[
        "by_severity"
    ]
    assert {lab["category"]: v for lab, v in samples["gpu_audit_category_findings"]} == summary[
        "by_category"
    ]
    assert sum(v for _, v in samples["gpu_audit_findings"]) == summary["findings"] > 0
    assert {lab["category"]: v for lab, v in samples["gpu_audit_category_score"]} == {
        c["category"]: c["score"] for c in score["categories"] if c["score"] is not None
    }
    assert {lab["status"]: v for lab, v in samples["gpu_audit_checks"]} == summary["checks"]
    assert single(samples, "exempted_findings") == summary["exempted"]


def test_one_status_series_per_check(sample: tuple[dict[str, Any], str]) -> None:
    document, text = sample
    samples = parse(text)
    status = samples["gpu_audit_check_status"]
    assert [lab["check_id"] for lab, _ in status] == [c["id"] for c in document["checks"]]
    for (labels, value), check in zip(status, document["checks"], strict=True):
        assert value == 1.0
        assert labels == {
            "check_id": check["id"],
            "category": check["category"],
            "severity": check["severity"],
            "status": check["status"],
        }
    per_check = {lab["check_id"]: v for lab, v in samples["gpu_audit_check_findings"]}
    assert per_check == {c["id"]: c["results"]["failed"] for c in document["checks"]}


def test_no_sample_for_what_the_report_does_not_hold(sample: tuple[dict[str, Any], str]) -> None:
    document = copy.deepcopy(sample[0])
    document["score"].update(overall=None, grade=None, capped_by=None)
    document["coverage"]["ratio"] = None
    document["complete"] = False
    samples = parse(render_prometheus(document))
    for name in ("score", "grade_info", "coverage_ratio", "scan_duration_seconds"):
        assert samples[f"gpu_audit_{name}"] == [], name
    assert samples["gpu_audit_last_successful_scan_timestamp_seconds"] == []
    assert single(samples, "scan_complete") == 0.0


def test_duration_and_timestamp_when_the_scan_records_them(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    document = scan(
        runner, sample_cluster, tmp_path, "--record-duration", SOURCE_DATE_EPOCH="1764633600"
    )
    assert isinstance(document["scan_duration_seconds"], float)
    samples = parse((tmp_path / "report.prom").read_text(encoding="utf-8"))
    assert single(samples, "scan_duration_seconds") == document["scan_duration_seconds"] >= 0
    assert single(samples, "last_successful_scan_timestamp_seconds") == 1764633600


def test_by_default_the_report_holds_no_duration(sample: tuple[dict[str, Any], str]) -> None:
    document, text = sample
    assert document["scan_duration_seconds"] is None
    assert parse(text)["gpu_audit_scan_duration_seconds"] == []


def test_label_values_are_escaped(sample: tuple[dict[str, Any], str]) -> None:
    document = copy.deepcopy(sample[0])
    odd = 'a\\b "quoted"\nnext line'
    document["checks"][0]["category"] = odd
    text = render_prometheus(document)
    assert 'category="a\\\\b \\"quoted\\"\\nnext line"' in text
    status = parse(text)["gpu_audit_check_status"]
    assert status[0][0]["category"] == odd


def test_render_reproduces_the_scan_output(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    scan(runner, sample_cluster, tmp_path)
    again = tmp_path / "again"
    result = runner.invoke(
        main,
        ["render", str(tmp_path / "report.json"), "-o", "prometheus", "--output-dir", str(again)],
    )
    assert result.exit_code == 0, result.output
    assert (again / "report.prom").read_bytes() == (tmp_path / "report.prom").read_bytes()
