"""A terminal that fits (issue 19, item 3): the table laid out to the terminal's width, colour
only on a terminal, -q, every non-zero exit explained in one line, the incomplete banner, and
small inputs that get no letter grade."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner, Result

from gpu_audit.cli import main
from gpu_audit.report import SCHEMA_FILE
from gpu_audit.reports.base import object_name
from gpu_audit.reports.table import render_table
from gpu_audit.reports.terminal import wrap_lines
from gpu_audit.scoring import COVERAGE_FLOOR

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "clusters" / "sample"
CHECKS = ROOT / "fixtures" / "checks"
REPORT_SCHEMA = json.loads(SCHEMA_FILE.read_text())
ESC = "\x1b["


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    result = run("scan", "--from-file", str(SAMPLE), "-o", "json", "--framework", "eks-aiml")
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def in_a_terminal(args: list[str], columns: int, env: dict[str, str]) -> tuple[int, str]:
    """Run gpu-audit with stdout and stderr on a pseudo-terminal `columns` wide; its exit
    code and everything it wrote (as the terminal got it, \\r\\n line ends)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_audit", *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(), b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def terminal_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    return {**env, **extra}


# --------------------------------------------------------------------------- width
@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_whole_report_fits_the_width_it_is_given(sample: dict[str, Any], width: int) -> None:
    text = render_table(sample, False, width)
    assert sample["diagnostics"]["pending_pods"] and sample["compliance"]
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert too_wide == []
    # Nothing is lost to the layout: every finding's check id and every pool are there.
    for finding in sample["findings"]:
        assert finding["check_id"] in text
    for pool in sample["diagnostics"]["inventory"]["pools"]:
        assert pool["pool"] in text
    # The fix of the Pending pod is YAML to copy: its comments wrapped as comments.
    fix = fix_block(text)
    assert all(line.lstrip().startswith("# ") for line in fix.splitlines()[1:])
    assert fix_words(fix) == fix_words(fix_block(render_table(sample, False, None)))


def fix_block(text: str) -> str:
    start = text.index("  Fix:\n")
    return text[start : text.index("\n\n", start)]


def fix_words(block: str) -> list[str]:
    return [w for line in block.splitlines() for w in line.split() if w != "#"]


def test_yaml_is_wrapped_at_its_comments_only() -> None:
    yaml_text = "    # " + "why " * 30 + "\n    limits: {nvidia.com/gpu: " + "9" * 80 + "}"
    wrapped = wrap_lines(yaml_text, 40, yaml=True).splitlines()
    assert all(line.startswith("    # ") and len(line) <= 40 for line in wrapped[:-1])
    assert wrapped[-1] == yaml_text.splitlines()[-1]  # a value cut in two would change it


def test_a_terminal_gets_its_width_and_colour_a_pipe_neither(sample: dict[str, Any]) -> None:
    args = ["scan", "--from-file", str(SAMPLE)]
    code, shown = in_a_terminal(args, 80, terminal_env())
    assert code == 0
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in shown.splitlines()]
    assert max(map(len, lines)) <= 80
    assert f"{ESC}31mHIGH{ESC}0m" in shown  # severities in colour on a terminal
    # NO_COLOR (no-color.org): the same layout without a single escape sequence.
    code, plain = in_a_terminal(args, 80, terminal_env(NO_COLOR="1"))
    assert code == 0 and ESC not in plain and plain.splitlines() == lines
    # A pipe (CliRunner's stdout is not a terminal): no colour, and the same bytes whatever
    # terminal ran the command.
    piped = run(*args).stdout
    assert ESC not in piped
    assert run(*args, env={"COLUMNS": "80"}).stdout == piped


def test_the_finding_column_does_not_repeat_the_object(sample: dict[str, Any]) -> None:
    text = render_table(sample, False, 1000)  # wide enough for one line per finding
    rows = [re.split(r"\s{2,}", line) for line in text.splitlines()]
    by_check = [r for r in rows if len(r) == 4 and r[1].startswith("GPU-")]
    assert len(by_check) >= len(sample["findings"])
    objects = {object_name(f["resource"]) for f in sample["findings"]}
    for _severity, _check, obj, finding in by_check:
        assert obj in objects
        assert not finding.startswith(obj), finding
    # Every message opens with its object, so each message's rest is what the row shows.
    first = sample["findings"][0]
    rest = first["message"][len(object_name(first["resource"])) :].strip()
    assert rest and rest in text


# --------------------------------------------------------------------------- -q and exits
def test_quiet_prints_nothing_but_errors(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    args = ["scan", "--from-file", str(SAMPLE), "-o", "json", "--output-file", str(out)]
    loud = run(*args)
    assert loud.exit_code == 0 and f"wrote {out}" in loud.stderr and "score" in loud.stderr
    quiet = run(*args, "-q")
    assert quiet.exit_code == 0 and quiet.stderr == "" and out.is_file()


def test_fail_on_explains_exit_1_in_one_line(sample: dict[str, Any]) -> None:
    at_or_above = sum(1 for f in sample["findings"] if f["severity"] in ("critical", "high"))
    result = run("scan", "--from-file", str(SAMPLE), "--fail-on", "high", "-q")
    assert result.exit_code == 1
    assert result.stderr == (
        f"gpu-audit: exit 1: {at_or_above} finding(s) at or above high (--fail-on)\n"
    )


def test_a_raising_check_explains_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
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
    result = run("scan", "--from-file", str(SAMPLE), "-q")
    assert result.exit_code == 3
    assert result.stderr.splitlines() == [
        "gpu-audit: GPU-WL-001 check raised RuntimeError: boom",
        "gpu-audit: exit 3: scan incomplete: 1 check(s) raised (GPU-WL-001)",
    ]
    assert "INCOMPLETE: a check raised" in result.stdout


def test_diff_explains_exit_1(tmp_path: Path, sample: dict[str, Any]) -> None:
    old = copy.deepcopy(sample)
    old["findings"] = old["findings"][1:]
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(sample))
    result = run(
        "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--fail-on-new", "info"
    )
    assert result.exit_code == 1
    assert result.stderr == "gpu-audit: exit 1: 1 new finding(s) at or above info (--fail-on-new)\n"


# --------------------------------------------------------------------------- incomplete
def test_the_incomplete_banner_names_the_permission_and_keeps_absent_apis_apart(
    sample: dict[str, Any],
) -> None:
    document = copy.deepcopy(sample)
    document["complete"] = False
    document["source"]["gaps"] = [
        {"type": "Pod", "reason": "forbidden: list pods"},
        {
            "type": "ClusterPolicy.nvidia.com",
            "reason": "forbidden: list clusterpolicies.nvidia.com",
        },
        {
            "type": "Queue.scheduling.volcano.sh",
            "reason": "CRD not installed: queues.scheduling.volcano.sh",
        },
    ]
    text = render_table(document, False, 100)
    banner = text[text.index("INCOMPLETE") : text.index("\n\n", text.index("INCOMPLETE"))]
    assert banner.startswith("INCOMPLETE: 2 resource type(s) could not be read")
    for group, plural in (("", "pods"), ("nvidia.com", "clusterpolicies")):
        rule = (
            "    add this rule to the scanner's ClusterRole:\n"
            f'      - apiGroups: ["{group}"]\n'
            f'        resources: ["{plural}"]\n'
            '        verbs: ["list"]\n'
        )
        assert rule in banner
    assert "volcano" not in banner  # a CRD the cluster does not have is nothing to fix
    assert (
        "Not installed in this cluster (their checks do not apply): queues.scheduling.volcano.sh"
        in text
    )
    # Only absent APIs: the scan is complete, and says so by saying nothing is missing.
    document["complete"] = True
    document["source"]["gaps"] = document["source"]["gaps"][2:]
    assert "INCOMPLETE" not in render_table(document, False, 100)


# --------------------------------------------------------------------------- small inputs
POD_MANIFEST = """\
apiVersion: v1
kind: Pod
metadata: {name: train, namespace: ml}
spec:
  containers:
    - name: train
      image: nvcr.io/nvidia/pytorch:24.08-py3
      resources: {limits: {nvidia.com/gpu: "1"}}
"""


def test_a_single_manifest_gets_no_letter_grade(tmp_path: Path, sample: dict[str, Any]) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(POD_MANIFEST)
    nodes = next(SAMPLE.glob("*node*"))
    for source in (pod, nodes):
        result = run("scan", "--from-file", str(source), "-o", "json")
        report = json.loads(result.stdout)
        jsonschema.validate(report, REPORT_SCHEMA)
        assert report["coverage"]["ratio"] < COVERAGE_FLOOR
        assert report["score"]["grade"] == "incomplete", source
        assert report["score"]["overall"] is not None  # the number stays, beside its coverage
        table = run("scan", "--from-file", str(source)).stdout
        assert "grade incomplete (too few of the applicable checks evaluated" in table
    # The sample is a whole cluster: above the floor, a letter.
    assert sample["coverage"]["ratio"] >= COVERAGE_FLOOR
    assert sample["score"]["grade"] in {"A", "B", "C", "D", "F"}


def test_a_pod_without_status_is_not_a_pending_pod(tmp_path: Path) -> None:
    nodes = next(SAMPLE.glob("*node*"))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD_MANIFEST)
    result = run("why-pending", "--from-file", str(nodes), "--from-file", str(manifest))
    assert result.exit_code == 0 and result.stdout == "No Pending pod requests a GPU.\n"
    report = json.loads(
        run("scan", "--from-file", str(nodes), "--from-file", str(manifest), "-o", "json").stdout
    )
    assert report["diagnostics"]["pending_pods"] == []
    # The same pod as the API server has it (status.phase Pending, no node) is one.
    submitted = tmp_path / "submitted.yaml"
    submitted.write_text(POD_MANIFEST + "status: {phase: Pending}\n")
    result = run("why-pending", "--from-file", str(nodes), "--from-file", str(submitted))
    assert result.stdout.startswith("Pod ml/train (Pending)")
    # Named explicitly, a manifest is still explained as the new pod it would be.
    named = run("why-pending", "ml/train", "--from-file", str(nodes), "--from-file", str(manifest))
    assert named.exit_code == 0 and named.stdout.startswith("Pod ml/train (Pending)")
