"""Comparing reports by fingerprint: new, resolved, unchanged, not re-checked."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_audit.engine import run_checks
from gpu_audit.errors import InputError
from gpu_audit.model import Severity
from gpu_audit.postscan.diff import (
    baseline_section,
    check_comparable,
    compare,
    new_at_or_above,
)
from gpu_audit.postscan.exemptions import apply_exemptions
from gpu_audit.registry import load_checks
from gpu_audit.report import Document, build_report, dumps, fingerprint, fingerprints
from gpu_audit.sources.files import load_files

REGISTRY = load_checks(plugins=False)


def job(name: str, gpus: str = "0.5", annotations: dict[str, str] | None = None) -> str:
    """A Job that GPU-WL-001 fails (fractional limit) unless gpus is whole."""
    meta = {"name": name, "namespace": "ml", "annotations": annotations or {}}
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {json.dumps(meta)}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: train
          image: nvcr.io/nvidia/pytorch:24.08-py3
          resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}
"""


def report(tmp_path: Path, *manifests: str, checks: tuple[str, ...] = ("GPU-WL-001",)) -> Document:
    path = tmp_path / f"in-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text("---".join(manifests))
    snapshot = load_files([str(path)])
    runs, section = apply_exemptions(
        run_checks([REGISTRY[c] for c in checks], snapshot),
        snapshot,
        REGISTRY,
        None,
        dt.date(2025, 6, 1),
    )
    # Through JSON, as a saved report would be read back.
    loaded: Document = json.loads(dumps(build_report(snapshot, runs, exemptions=section)))
    return loaded


def names(items: list[dict[str, Any]]) -> list[str]:
    return [f["resource"]["name"] for f in items]


def test_findings_are_new_resolved_or_unchanged(tmp_path: Path) -> None:
    old = report(tmp_path, job("kept"), job("fixed"))
    new = report(tmp_path, job("kept"), job("fixed", gpus="1"), job("added"))
    result = compare(old, new)
    groups = result["findings"]
    assert names(groups["new"]) == ["added"]
    assert names(groups["resolved"]) == ["fixed"]
    assert names(groups["unchanged"]) == ["kept"]
    assert groups["not_rechecked"] == []
    assert result["summary"] == {
        "new": 1,
        "resolved": 1,
        "unchanged": 1,
        "severity_changed": 0,
        "not_rechecked": 0,
        "new_by_severity": {"critical": 0, "high": 1, "medium": 0, "low": 0, "info": 0},
    }
    assert [f["check_id"] for f in new_at_or_above(result, Severity.HIGH)] == ["GPU-WL-001"]
    assert new_at_or_above(result, Severity.CRITICAL) == []


def test_a_changed_message_is_still_the_same_finding(tmp_path: Path) -> None:
    old = report(tmp_path, job("a", gpus="0.5"))
    new = report(tmp_path, job("a", gpus="1.5"))
    assert old["findings"][0]["message"] != new["findings"][0]["message"]
    groups = compare(old, new)["findings"]
    assert names(groups["unchanged"]) == ["a"]
    assert groups["unchanged"][0]["message"] == new["findings"][0]["message"]


def test_an_exempted_finding_is_not_resolved_and_does_not_fail_as_new(tmp_path: Path) -> None:
    accepted = {"gpu-audit.io/exempt": "GPU-WL-001", "gpu-audit.io/exempt-reason": "accepted"}
    old = report(tmp_path, job("a"))
    new = report(tmp_path, job("a", annotations=accepted), job("b", annotations=accepted))
    result = compare(old, new)
    assert [(f["resource"]["name"], f["exempted"]) for f in result["findings"]["unchanged"]] == [
        ("a", True)
    ]
    assert names(result["findings"]["new"]) == ["b"]
    assert result["summary"]["new_by_severity"]["high"] == 0
    assert new_at_or_above(result, Severity.INFO) == []


def test_findings_of_a_check_that_did_not_run_are_not_rechecked(tmp_path: Path) -> None:
    old = report(tmp_path, job("a"), checks=("GPU-WL-001", "GPU-WL-003"))
    new = report(tmp_path, job("a"), checks=("GPU-WL-001",))
    groups = compare(old, new)["findings"]
    assert {f["check_id"] for f in groups["not_rechecked"]} == {"GPU-WL-003"}
    assert groups["resolved"] == []


def test_the_baseline_section_names_the_old_report(tmp_path: Path) -> None:
    old = report(tmp_path, job("a"))
    new = report(tmp_path, job("a"), job("b"))
    baseline = baseline_section(old, "old.json", new)
    assert new["baseline"] is None  # the input is not changed
    assert baseline["file"] == "old.json"
    assert baseline["overall"] == old["score"]["overall"]
    assert baseline["grade"] == old["score"]["grade"]
    assert baseline["summary"]["new"] == 1


def test_fingerprints_do_not_depend_on_other_objects(tmp_path: Path) -> None:
    alone = report(tmp_path, job("a"))
    crowded = report(tmp_path, job("0-first"), job("a"), job("z-last"))
    [fp] = [f["fingerprint"] for f in alone["findings"]]
    assert fp in {f["fingerprint"] for f in crowded["findings"]}
    assert fp == fingerprint(alone["findings"][0])


def test_findings_that_share_an_identity_are_told_apart_by_message() -> None:
    base = {
        "check_id": "GPU-QUOTA-001",
        "resource": {"type": "Namespace", "namespace": None, "name": "ml"},
        "path": "",
    }
    items = [{**base, "message": "no quota for gpu"}, {**base, "message": "no quota for shared"}]
    first, second = fingerprints(items)
    assert first != second
    assert fingerprints(items[:1]) == [fingerprint(items[0])]


def test_reports_of_another_schema_version_are_refused(tmp_path: Path) -> None:
    old = report(tmp_path, job("a")) | {"schema_version": "1.0"}
    with pytest.raises(InputError, match=r"old.json: report schema 1.0 cannot be compared"):
        check_comparable(old, "old.json")


def test_malformed_findings_are_named(tmp_path: Path) -> None:
    broken = report(tmp_path, job("a"))
    del broken["findings"][0]["fingerprint"]
    broken["exempted_findings"] = [{"check_id": "GPU-WL-001"}, "x"]
    with pytest.raises(InputError) as error:
        check_comparable(broken, "r.json")
    assert error.value.problems == (
        "r.json: findings[1]: missing or invalid fingerprint",
        "r.json: exempted_findings[1]: missing or invalid title, severity, category, message, "
        "path, fingerprint, resource",
        "r.json: exempted_findings[2]: not an object",
    )
