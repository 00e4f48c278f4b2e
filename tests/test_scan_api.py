"""A scan as a library call (gpu_audit.scan.run_scan), and the CLI as a thin layer over it."""

from __future__ import annotations

import ast
import datetime as dt
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.errors import InputError
from gpu_audit.model import Severity
from gpu_audit.registry import RegistryError
from gpu_audit.report import dumps
from gpu_audit.scan import Inputs, ScanOptions, run_scan

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "clusters" / "sample"
CLI_SOURCE = ROOT / "scanner" / "cli.py"
EPOCH = "1700000000"

EXEMPTIONS = """\
exemptions:
  - checks: GPU-WL-001
    match: {kind: Job, namespace: ml-training, name: tokenizer-eval}
    reason: evaluated by the platform team
    expires: 2030-06-30
  - checks: GPU-SRV-*
    match: {namespace: nowhere}
    reason: matches nothing, so the scan warns
"""


@pytest.fixture
def old_report(runner: CliRunner, tmp_path: Path) -> Path:
    """A baseline: the sample cluster's nodes and pods only."""
    target = tmp_path / "old.json"
    result = runner.invoke(
        main,
        [
            "scan",
            *("--from-file", str(SAMPLE / "nodes.yaml")),
            *("--from-file", str(SAMPLE / "pods.yaml")),
            *("-o", "json", "--output-file", str(target)),
        ],
    )
    assert result.exit_code == 0, result.output
    return target


@pytest.fixture
def exemptions(tmp_path: Path) -> Path:
    path = tmp_path / "exemptions.yaml"
    path.write_text(EXEMPTIONS, encoding="utf-8")
    return path


def test_run_scan_gives_the_bytes_the_cli_writes(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, old_report: Path, exemptions: Path
) -> None:
    options = ScanOptions(
        Inputs(files=(str(SAMPLE),)),
        exemptions_file=str(exemptions),
        today=dt.date(2025, 6, 1),
        baseline=str(old_report),
        frameworks=("cncf-ai-conformance", "eks-aiml"),
        cluster_name="lab",
        source_date_epoch=EPOCH,
        fail_on_new=Severity.HIGH,
    )
    result = run_scan(options)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    cli = runner.invoke(
        main,
        [
            *("scan", "--from-file", str(SAMPLE), "-o", "json"),
            *("--exemptions", str(exemptions), "--today", "2025-06-01"),
            *("--baseline", str(old_report), "--fail-on-new", "high"),
            *("--framework", "cncf-ai-conformance,eks-aiml", "--cluster-name", "lab"),
        ],
    )
    assert dumps(result.document) == cli.stdout
    document = result.document
    assert document["generated_at"] == "2023-11-14T22:13:20Z"
    assert document["baseline"]["file"] == str(old_report)
    assert document["baseline"]["summary"]["new"] > 0
    assert [c["id"] for c in document["compliance"]] == ["cncf-ai-conformance", "eks-aiml"]
    assert document["exempted_findings"] and document["cluster"] == "lab"
    # What the CLI turns into stderr lines and its exit code.
    assert result.warnings == (f"{exemptions}: entry 2 matches no finding",)
    assert list(result.warnings) == [
        line.removeprefix("gpu-audit: warning: ")
        for line in cli.stderr.splitlines()
        if line.startswith("gpu-audit: warning: ")
    ]
    assert result.complete and not result.errors
    assert result.failed == bool(result.failing_new) and result.failing == []
    assert cli.exit_code == (1 if result.failed else 0)


def test_a_library_scan_does_not_need_click(
    runner: CliRunner, old_report: Path, exemptions: Path
) -> None:
    program = textwrap.dedent(
        f"""
        import sys
        from gpu_audit.report import dumps
        from gpu_audit.scan import Inputs, ScanOptions, run_scan

        result = run_scan(
            ScanOptions(
                Inputs(files=({str(SAMPLE)!r},)),
                exemptions_file={str(exemptions)!r},
                baseline={str(old_report)!r},
                frameworks=("nvidia-gpu-operator",),
                source_date_epoch={EPOCH!r},
            )
        )
        assert "click" not in sys.modules, "a library scan imported click"
        sys.stdout.write(dumps(result.document))
        """
    )
    library = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    cli = runner.invoke(
        main,
        [
            *("scan", "--from-file", str(SAMPLE), "--format", "json"),
            *("--exemptions", str(exemptions), "--baseline", str(old_report)),
            *("--framework", "nvidia-gpu-operator"),
        ],
        env={"SOURCE_DATE_EPOCH": EPOCH},
    )
    assert cli.exit_code == 0, cli.output
    assert library.stdout == cli.stdout
    assert json.loads(library.stdout)["exemptions"]["date"] == "2023-11-14"


def test_problems_are_raised_not_printed(old_report: Path) -> None:
    files = Inputs(files=(str(SAMPLE),))
    with pytest.raises(InputError, match="unknown category 'nope'"):
        run_scan(ScanOptions(files, categories=("nope",)))
    with pytest.raises(RegistryError, match="GPU-NOPE-001"):
        run_scan(ScanOptions(files, only=("GPU-NOPE-001",)))
    with pytest.raises(InputError, match="--fail-on-new needs --baseline"):
        run_scan(ScanOptions(files, fail_on_new=Severity.LOW))
    with pytest.raises(InputError, match="SOURCE_DATE_EPOCH='soon'"):
        run_scan(ScanOptions(files, source_date_epoch="soon"))
    with pytest.raises(InputError, match=r"missing\.yaml"):
        run_scan(ScanOptions(Inputs(files=(str(SAMPLE / "missing.yaml"),))))
    # The gates the CLI's exit codes come from.
    gated = run_scan(ScanOptions(files, only=("GPU-WL-001",), fail_on=Severity.LOW))
    assert gated.failed and gated.failing == gated.document["findings"]
    assert not run_scan(ScanOptions(files, only=("GPU-WL-001",))).failed


# What only the scan pipeline (gpu_audit.scan) may import: the CLI maps flags to ScanOptions
# and the ScanResult to files, stderr lines and exit codes.
PIPELINE_MODULES = {
    "gc",
    "gpu_audit.engine",
    "gpu_audit.postscan.exemptions",
    "gpu_audit.sources.files",
    "gpu_audit.sources.live",
}
PIPELINE_NAMES = {
    "apply_exemptions",
    "baseline_section",
    "build_report",
    "collect",
    "compliance_section",
    "diagnostics_section",
    "evaluation_date",
    "load_exemptions",
    "load_files",
    "report_entries",
    "resolve_frameworks",
    "run_check",
    "run_checks",
    "timestamp_from_epoch",
}


def test_the_cli_holds_no_pipeline_logic() -> None:
    tree = ast.parse(CLI_SOURCE.read_text(encoding="utf-8"))
    modules: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):  # module level and inside functions alike
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add(node.module or "")
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)  # e.g. engine.run_checks(...)
    assert "gpu_audit.scan" in modules
    assert modules & PIPELINE_MODULES == set()
    assert names & PIPELINE_NAMES == set()
