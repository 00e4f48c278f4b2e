"""Compliance frameworks: the shipped mappings, the file validation, the control verdicts and
the CLI (`scan --framework`, `frameworks list`, `frameworks docs`)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.errors import InputError
from gpu_audit.postscan.frameworks import (
    FRAMEWORK_DIR,
    compliance_section,
    control_verdict,
    frameworks_markdown,
    load_framework,
    resolve_frameworks,
    shipped_frameworks,
)
from gpu_audit.registry import load_checks
from gpu_audit.report import SCHEMA_FILE

CHECKS = load_checks(plugins=False)
ROOT = Path(__file__).resolve().parents[2]
# The twelve requirements of docs/AIConformance-1.35.md in cncf/k8s-ai-conformance.
CNCF_1_35 = {
    "dra_support",
    "driver_runtime_management",
    "gpu_sharing",
    "virtualized_accelerator",
    "ai_inference",
    "gang_scheduling",
    "cluster_autoscaling",
    "pod_autoscaling",
    "accelerator_metrics",
    "ai_service_metrics",
    "secure_accelerator_access",
    "robust_controller",
}
VALID = """\
id: tiny
title: Tiny framework
version: "1"
date: 2026-01-31
url: https://example.com/tiny
description: A framework for the tests.
controls:
  - id: C-1
    title: GPU quantities are whole
    description: Shown by GPU-WL-001.
    url: https://example.com/tiny#c-1
    checks: [GPU-WL-001]
  - id: C-2
    title: Nodes advertise GPUs
    description: Shown by two node checks.
    url: https://example.com/tiny#c-2
    checks: [GPU-NODE-001, GPU-NODE-002]
not_assessable:
  - id: C-3
    title: Buy capacity early
    url: https://example.com/tiny#c-3
    reason: Purchasing is outside the cluster.
"""


def _write(tmp_path: Path, text: str, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(InputError) as caught:
        load_framework(path, CHECKS)
    return list(caught.value.problems)


# --- the shipped mappings -------------------------------------------------------------------


def test_shipped_frameworks_load_and_name_only_existing_checks() -> None:
    found = shipped_frameworks(CHECKS)  # an unknown check id in a mapping raises here
    assert set(found) == {"cncf-ai-conformance", "eks-aiml", "nvidia-gpu-operator"}
    for framework in found.values():
        assert Path(framework.file).stem == framework.id
        assert framework.controls
        for control in framework.controls:
            assert control.checks and set(control.checks) <= set(CHECKS)
        assert all(u.reason for u in framework.not_assessable)


def test_cncf_mapping_accounts_for_every_requirement_once() -> None:
    cncf = shipped_frameworks(CHECKS)["cncf-ai-conformance"]
    mapped = [c.id for c in cncf.controls]
    unassessed = [u.id for u in cncf.not_assessable]
    assert sorted(mapped + unassessed) == sorted(CNCF_1_35)
    assert all(
        c.url.startswith("https://github.com/cncf/k8s-ai-conformance/") for c in cncf.controls
    )


def test_eks_and_nvidia_controls_cite_their_publishers() -> None:
    found = shipped_frameworks(CHECKS)
    eks = found["eks-aiml"]
    eks_urls = [c.url for c in eks.controls] + [u.url for u in eks.not_assessable]
    assert all(
        url.startswith("https://docs.aws.amazon.com/eks/latest/best-practices/aiml-")
        for url in eks_urls
    )
    nvidia_urls = [c.url for c in found["nvidia-gpu-operator"].controls]
    assert all(
        url.startswith(("https://docs.nvidia.com/", "https://github.com/NVIDIA/"))
        for url in nvidia_urls
    )


def test_mapping_files_ship_as_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data = config["tool"]["setuptools"]["package-data"]["gpu_audit.postscan"]
    pattern = f"{FRAMEWORK_DIR.name}/*.yaml"
    assert pattern in data
    shipped = (ROOT / "scanner" / "postscan").glob(pattern)
    assert sorted(FRAMEWORK_DIR.glob("*.yaml")) == sorted(shipped)


def test_docs_frameworks_md_is_generated_from_the_mappings() -> None:
    titles = {check_id: c.title for check_id, c in CHECKS.items()}
    expected = frameworks_markdown(shipped_frameworks(CHECKS).values(), titles)
    committed = (ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8")
    assert committed == expected, "docs/frameworks.md drifted: run `make docs`"


# --- validation of framework files ----------------------------------------------------------


def test_a_valid_file_loads_with_sorted_check_ids(tmp_path: Path) -> None:
    framework = load_framework(_write(tmp_path, VALID), CHECKS)
    assert framework.id == "tiny" and framework.date == "2026-01-31"
    assert [c.checks for c in framework.controls] == [
        ("GPU-WL-001",),
        ("GPU-NODE-001", "GPU-NODE-002"),
    ]
    assert [u.id for u in framework.not_assessable] == ["C-3"]


def test_an_unknown_check_id_names_the_file_and_the_control(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID.replace("[GPU-WL-001]", "[GPU-WL-999]"))
    assert _problems(path) == [
        f"{path}: controls[0] (C-1): unknown check id GPU-WL-999 (see `gpu-audit checks list`)"
    ]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("[GPU-WL-001]", "[]"), "controls[0] (C-1): checks must be a non-empty list"),
        (("[GPU-WL-001]", "[gpu-wl-1]"), "controls[0] (C-1): 'gpu-wl-1' is not a check id"),
        (
            ("[GPU-WL-001]", "[GPU-WL-001, GPU-WL-001]"),
            "controls[0] (C-1): check GPU-WL-001 is listed twice",
        ),
        (("id: C-2", "id: C-1"), "control id C-1 is used twice"),
        (("id: C-3", "id: C-1"), "control id C-1 is used twice"),
        (("date: 2026-01-31", "date: Jan 2026"), "date must be YYYY-MM-DD"),
        (("url: https://example.com/tiny\n", "url: http://example.com\n"), "https:// URL"),
        (("title: Tiny framework\n", ""), "title must be a non-empty string"),
        (('version: "1"', 'version: "1"\nowner: me'), "unknown key(s) owner"),
        (("    reason: Purchasing is outside the cluster.\n", ""), "reason must be a non-empty"),
    ],
)
def test_bad_files_are_input_errors_that_say_what_is_wrong(
    tmp_path: Path, edit: tuple[str, str], expected: str
) -> None:
    old, new = edit
    assert old in VALID
    problems = _problems(_write(tmp_path, VALID.replace(old, new, 1)))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("controls: [\n", "invalid YAML at line"),
        ("- just\n- a list\n", "a framework file is a YAML mapping"),
        (VALID.split("controls:")[0] + "controls: []\n", "controls must be a non-empty list"),
    ],
)
def test_unreadable_or_misshapen_files_are_input_errors(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = _write(tmp_path, text)
    problems = _problems(path)
    assert any(p.startswith(f"{path}: ") and expected in p for p in problems), problems


def test_unknown_framework_names_list_the_available_ones() -> None:
    with pytest.raises(InputError) as caught:
        resolve_frameworks(["nist"], CHECKS)
    (problem,) = caught.value.problems
    assert "unknown framework" in problem and "eks-aiml" in problem


# --- control verdicts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("states", "status"),
    [
        ({"A": "passed", "B": "failed"}, "fail"),
        ({"A": "failed", "B": "not_evaluated"}, "fail"),  # a failure is not hidden by a gap
        ({"A": "passed", "B": "passed"}, "pass"),
        ({"A": "passed", "B": "not_applicable"}, "pass"),  # nothing to apply to is neutral
        ({"A": "not_applicable", "B": "not_applicable"}, "not_evaluated"),
        ({"A": "passed", "B": "not_evaluated"}, "not_evaluated"),  # partial is not a pass
        ({"A": "passed", "B": "error"}, "not_evaluated"),
        ({"A": "passed", "B": "not_run"}, "not_evaluated"),
    ],
)
def test_control_verdicts(states: dict[str, str], status: str) -> None:
    assert control_verdict(states)[0] == status


def test_not_evaluated_controls_say_which_checks_are_open() -> None:
    status, reason = control_verdict(
        {"A": "passed", "B": "not_run", "C": "not_evaluated", "D": "not_applicable"}
    )
    assert status == "not_evaluated"
    assert reason == "not evaluated: C; not run: B (1 of 3 passed)"
    assert control_verdict({"A": "failed"}) == ("fail", None)


def _entry(check_id: str, status: str, applicable: bool = True) -> dict[str, Any]:
    return {"id": check_id, "status": status, "applicable": applicable}


def test_compliance_section_scores_decided_controls(tmp_path: Path) -> None:
    framework = load_framework(_write(tmp_path, VALID), CHECKS)
    checks = [
        _entry("GPU-WL-001", "passed"),
        _entry("GPU-NODE-001", "failed"),
        _entry("GPU-NODE-002", "not_evaluated", applicable=False),
    ]
    (result,) = compliance_section([framework], checks)
    assert [c["status"] for c in result["controls"]] == ["pass", "fail"]
    assert result["controls"][1]["checks"] == [
        {"id": "GPU-NODE-001", "status": "failed"},
        {"id": "GPU-NODE-002", "status": "not_applicable"},
    ]
    assert result["summary"] == {
        "score": 50.0,
        "passed": 1,
        "failed": 1,
        "not_evaluated": 0,
        "not_assessable": 1,
    }
    assert result["not_assessable"][0]["reason"] == "Purchasing is outside the cluster."


def test_a_framework_with_no_decided_control_has_no_score(tmp_path: Path) -> None:
    framework = load_framework(_write(tmp_path, VALID), CHECKS)
    (result,) = compliance_section([framework], [_entry("GPU-WL-001", "error")])
    assert result["summary"]["score"] is None
    assert result["controls"][1]["reason"].startswith("not run: GPU-NODE-001, GPU-NODE-002")


# --- command line ---------------------------------------------------------------------------


def _scan(runner: CliRunner, cluster: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(main, ["scan", "--from-file", str(cluster), "-o", "json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_scan_adds_a_compliance_section_that_matches_the_schema(
    runner: CliRunner, sample_cluster: Path
) -> None:
    code, report = _scan(
        runner, sample_cluster, "--framework", "nvidia-gpu-operator", "--framework", "eks-aiml"
    )
    assert code == 0
    jsonschema.validate(report, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    assert [f["id"] for f in report["compliance"]] == ["eks-aiml", "nvidia-gpu-operator"]
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    for framework in report["compliance"]:
        for control in framework["controls"]:
            mapped = {c["id"]: c["status"] for c in control["checks"]}
            for check_id, state in mapped.items():
                reported = statuses[check_id]
                assert state == reported or (state, reported) == ("not_applicable", "not_evaluated")
            if control["status"] == "fail":
                assert "failed" in mapped.values()


def test_scan_without_framework_has_an_empty_compliance_list(
    runner: CliRunner, sample_cluster: Path
) -> None:
    _, report = _scan(runner, sample_cluster)
    assert report["compliance"] == []


def test_checks_left_out_by_only_are_not_run_and_block_a_pass(
    runner: CliRunner, sample_cluster: Path
) -> None:
    _, report = _scan(
        runner, sample_cluster, "--framework", "cncf-ai-conformance", "--only", "GPU-MON-001"
    )
    (framework,) = report["compliance"]
    metrics = next(c for c in framework["controls"] if c["id"] == "accelerator_metrics")
    assert metrics["checks"] == [
        {"id": "GPU-MON-001", "status": "passed"},
        {"id": "GPU-STACK-005", "status": "not_run"},
    ]
    assert metrics["status"] == "not_evaluated"


def test_scan_accepts_a_framework_file_and_the_table_shows_it(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    path = _write(tmp_path, VALID)
    result = runner.invoke(
        main, ["scan", "--from-file", str(sample_cluster), "--framework", str(path)]
    )
    assert "Compliance: Tiny framework (1): score" in result.stdout
    assert "C-2" in result.stdout and "C-3" not in result.stdout


def test_saved_reports_render_their_compliance_section(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "report.json"
    runner.invoke(
        main,
        [
            "scan",
            "--from-file",
            str(sample_cluster),
            "-o",
            "json",
            "--output-file",
            str(saved),
            "--framework",
            "cncf-ai-conformance",
        ],
    )
    rendered = runner.invoke(main, ["render", str(saved), "--format", "table"]).stdout
    assert "Compliance: CNCF Kubernetes AI Conformance (v1.35 checklist)" in rendered
    assert "secure_accelerator_access" in rendered


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nist-800-53", "--framework 'nist-800-53': unknown framework"),
        ("missing.yaml", "missing.yaml: cannot read"),
    ],
)
def test_scan_with_a_bad_framework_exits_2(
    runner: CliRunner, sample_cluster: Path, value: str, expected: str
) -> None:
    result = runner.invoke(main, ["scan", "--from-file", str(sample_cluster), "--framework", value])
    assert result.exit_code == 2
    assert expected in result.stderr


def test_frameworks_list(runner: CliRunner) -> None:
    table = runner.invoke(main, ["frameworks", "list"])
    assert table.exit_code == 0
    assert [line.split()[0] for line in table.stdout.splitlines()[2:]] == [
        "cncf-ai-conformance",
        "eks-aiml",
        "nvidia-gpu-operator",
    ]
    listed = json.loads(runner.invoke(main, ["frameworks", "list", "-o", "json"]).stdout)
    cncf = next(f for f in listed if f["id"] == "cncf-ai-conformance")
    assert cncf["controls"] + cncf["not_assessable"] == len(CNCF_1_35)
