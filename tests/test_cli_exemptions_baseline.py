"""The command line for exemptions (--exemptions, --today), baselines (--baseline,
--fail-on-new) and `gpu-audit diff`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from referencing import Registry, Resource

from gpu_audit.cli import main
from gpu_audit.postscan.diff import DIFF_SCHEMA_FILE
from gpu_audit.report import SCHEMA_FILE

REPORT_SCHEMA = json.loads(SCHEMA_FILE.read_text())
DIFF_SCHEMA = json.loads(DIFF_SCHEMA_FILE.read_text())


def job(name: str, gpus: str) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: ml}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: train
          image: nvcr.io/nvidia/pytorch:24.08-py3
          resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """before/ has one fractional-GPU Job; after/ fixes it and adds a new one."""
    (tmp_path / "before").mkdir()
    (tmp_path / "before" / "jobs.yaml").write_text(job("old", "0.5") + "---" + job("kept", "0.5"))
    (tmp_path / "after").mkdir()
    (tmp_path / "after" / "jobs.yaml").write_text(
        job("old", "1") + "---" + job("kept", "0.5") + "---" + job("added", "0.5")
    )
    (tmp_path / "exemptions.yaml").write_text(
        "exemptions:\n"
        "  - checks: GPU-WL-001\n"
        "    match: {kind: Job, namespace: ml, name: added}\n"
        "    reason: evaluated by the platform team\n"
        "    expires: 2025-06-30\n"
    )
    return tmp_path


def scan(runner: CliRunner, folder: Path, *args: str) -> Any:
    return runner.invoke(main, ["scan", "--from-file", str(folder), "--only", "GPU-WL-001", *args])


def save(runner: CliRunner, folder: Path, target: Path, *args: str) -> dict[str, Any]:
    result = scan(runner, folder, "-o", "json", "--output-file", str(target), *args)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(target.read_text())
    jsonschema.validate(document, REPORT_SCHEMA, format_checker=jsonschema.FormatChecker())
    return document


def test_exemptions_file_is_applied_and_reproducible(runner: CliRunner, workdir: Path) -> None:
    args = ("--exemptions", str(workdir / "exemptions.yaml"), "--today", "2025-06-01")
    first = scan(runner, workdir / "after", "-o", "json", *args)
    second = scan(runner, workdir / "after", "-o", "json", *args)
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    document = json.loads(first.stdout)
    jsonschema.validate(document, REPORT_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert [f["resource"]["name"] for f in document["exempted_findings"]] == ["added"]
    assert document["exemptions"]["date"] == "2025-06-01"
    assert first.stderr == ""


def test_an_expired_entry_warns_on_stderr_and_counts_again(
    runner: CliRunner, workdir: Path
) -> None:
    result = scan(
        runner,
        workdir / "after",
        "--exemptions",
        str(workdir / "exemptions.yaml"),
        "--today",
        "2025-07-01",
        "--fail-on",
        "high",
    )
    assert result.exit_code == 1
    assert (
        f"gpu-audit: warning: {workdir}/exemptions.yaml: entry 1 expired on 2025-06-30; "
        "its 1 finding(s) count again"
    ) in result.stderr


def test_source_date_epoch_is_the_day_expiry_is_judged_on(runner: CliRunner, workdir: Path) -> None:
    result = runner.invoke(
        main,
        [
            "scan",
            *("--from-file", str(workdir / "after"), "--only", "GPU-WL-001", "-o", "json"),
            *("--exemptions", str(workdir / "exemptions.yaml")),
        ],
        env={"SOURCE_DATE_EPOCH": "1751328000"},  # 2025-07-01
    )
    assert json.loads(result.stdout)["exemptions"]["entries"][0]["status"] == "expired"


def test_an_invalid_exemptions_file_exits_2_naming_entry_and_field(
    runner: CliRunner, workdir: Path
) -> None:
    bad = workdir / "bad.yaml"
    bad.write_text("exemptions:\n  - checks: GPU-WL-001\n    reason: ''\n")
    result = scan(runner, workdir / "after", "--exemptions", str(bad))
    assert result.exit_code == 2
    assert f"gpu-audit: error: {bad}: entry 1: field 'reason': required" in result.stderr


def test_fail_on_new_looks_only_at_new_findings(runner: CliRunner, workdir: Path) -> None:
    old = workdir / "old.json"
    save(runner, workdir / "before", old)
    unchanged_only = scan(
        runner, workdir / "before", "--baseline", str(old), "--fail-on-new", "low"
    )
    assert unchanged_only.exit_code == 0, unchanged_only.output
    with_new = scan(runner, workdir / "after", "--baseline", str(old), "--fail-on-new", "high")
    assert with_new.exit_code == 1
    above = scan(runner, workdir / "after", "--baseline", str(old), "--fail-on-new", "critical")
    assert above.exit_code == 0
    exempted_new = scan(
        runner,
        workdir / "after",
        *("--baseline", str(old), "--fail-on-new", "low"),
        *("--exemptions", str(workdir / "exemptions.yaml"), "--today", "2025-06-01"),
    )
    assert exempted_new.exit_code == 0, exempted_new.output


def test_the_baseline_section_and_its_table(runner: CliRunner, workdir: Path) -> None:
    old = workdir / "old.json"
    save(runner, workdir / "before", old)
    document = save(runner, workdir / "after", workdir / "new.json", "--baseline", str(old))
    assert document["baseline"]["summary"]["new"] == 1
    assert [f["resource"]["name"] for f in document["baseline"]["findings"]["resolved"]] == ["old"]
    table = runner.invoke(main, ["render", str(workdir / "new.json")]).stdout
    assert f"Compared with {old}: 1 new, 1 resolved, 1 unchanged" in table
    assert "Resolved since the baseline:" in table
    # The findings table (under the "Fix first" list) marks the new finding.
    findings = table[table.index("BASELINE  ") :]
    rows = [line for line in findings.splitlines() if "Job ml/added" in line]
    assert rows and rows[0].startswith("new ")


def test_fail_on_new_needs_a_baseline(runner: CliRunner, workdir: Path) -> None:
    result = scan(runner, workdir / "after", "--fail-on-new", "high")
    assert result.exit_code == 2
    assert "--fail-on-new needs --baseline" in result.stderr


def test_diff_as_json_and_table(runner: CliRunner, workdir: Path) -> None:
    old, new = workdir / "old.json", workdir / "new.json"
    save(runner, workdir / "before", old)
    save(runner, workdir / "after", new)
    as_json = runner.invoke(main, ["diff", str(old), str(new), "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    registry: Registry[Any] = Registry().with_resource(
        REPORT_SCHEMA["$id"], Resource.from_contents(REPORT_SCHEMA)
    )
    jsonschema.Draft202012Validator(DIFF_SCHEMA, registry=registry).validate(document)
    assert document["old"]["file"] == str(old)
    assert document["summary"]["new"] == 1 and document["summary"]["resolved"] == 1
    table = runner.invoke(main, ["diff", str(old), str(new)])
    assert "Compared with the old report: 1 new, 1 resolved, 1 unchanged" in table.stdout
    assert "New findings that count: 1 high" in table.stdout
    failing = runner.invoke(main, ["diff", str(old), str(new), "--fail-on-new", "high"])
    assert failing.exit_code == 1
    same = runner.invoke(main, ["diff", str(new), str(new), "--fail-on-new", "info"])
    assert same.exit_code == 0, same.output
    assert "Compared with the old report: 0 new, 0 resolved, 2 unchanged" in same.stdout


def test_diff_refuses_other_schema_versions_and_non_reports(
    runner: CliRunner, workdir: Path
) -> None:
    new = workdir / "new.json"
    document = save(runner, workdir / "after", new)
    old = workdir / "old-1.0.json"
    old.write_text(json.dumps(document | {"schema_version": "1.0"}))
    result = runner.invoke(main, ["diff", str(old), str(new)])
    assert result.exit_code == 2
    assert f"{old}: report schema 1.0 cannot be compared" in result.stderr
    not_report = workdir / "list.json"
    not_report.write_text("[1, 2]")
    result = runner.invoke(main, ["diff", str(not_report), str(new)])
    assert result.exit_code == 2
    assert f"{not_report}: not a gpu-audit JSON report" in result.stderr
    diff_doc = workdir / "diff.json"
    diff_doc.write_text(runner.invoke(main, ["diff", str(new), str(new), "-o", "json"]).stdout)
    result = runner.invoke(main, ["diff", str(diff_doc), str(new)])
    assert result.exit_code == 2  # a comparison is not a report
