"""The terminal output (the table, the diagnostics and compliance tables, `inventory`,
`why-pending` and the CLI's stderr lines) shows cluster data as text, never as terminal
commands, and costs time linear in the size of a value: long values are clipped with a marker
before tabulate wraps them (issue 17, items 3 and 4)."""

from __future__ import annotations

import copy
import json
import textwrap
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.postscan.diff import diff_reports
from gpu_audit.reports.diagnostics_table import render_inventory
from gpu_audit.reports.table import render_diff_table, render_table
from gpu_audit.reports.terminal import MAX_CHARS, cell, clip, table
from tests.builders import container, gpu_node, pod, pod_spec

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "fixtures" / "clusters" / "sample"

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # writes "echo pwned" to the clipboard
TITLE = "\x1b]0;owned\x07"  # sets the window title
CSI = "\x1b[2J\x1b[H"  # clears the screen
C1 = "\x9b31m\x9d0;t\x9c"  # the same commands with 8-bit C1 introducers
FORGED = "\rfake\nCRITICAL  GPU-FAKE-001"  # a carriage return and a forged table row
BIDI = "\u202egnp.exe"  # right-to-left override
PAYLOAD = OSC52 + TITLE + CSI + C1 + FORGED + BIDI
POD = f"train{PAYLOAD}"
NODE = f"gpu-{TITLE}"
PRODUCT = f"A100{OSC52}"
# How the payload reads once escaped: every character visible.
SHOWN = (
    r"\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b]0;owned\x07\x1b[2J\x1b[H\x9b31m\x9d0;t\x9c"
    r"\rfake\nCRITICAL  GPU-FAKE-001\u202egnp.exe"
)
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# The longest text textwrap may be handed: a clipped value whose every character took the
# longest escape (\uXXXX), plus the marker.
WRAP_BOUND = 6 * MAX_CHARS + 32


def unsafe(text: str) -> list[str]:
    """Characters a terminal would act on (control characters but the newline that is the
    output's own layout, separators, bidi controls, lone surrogates), judged independently of
    the implementation, by Unicode category."""
    return sorted(
        {
            c
            for c in text
            if c != "\n"
            and (unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or c in BIDI_CONTROLS)
        }
    )


@pytest.fixture
def bounded_wrapping(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Fails the test as soon as textwrap (which tabulate wraps columns with, in time that
    grows with the square of an unbroken word) is handed more than WRAP_BOUND characters."""
    original = textwrap.TextWrapper.wrap
    sizes: list[int] = []

    def wrap(self: textwrap.TextWrapper, text: str) -> list[str]:
        sizes.append(len(text))
        assert len(text) <= WRAP_BOUND, f"textwrap handed {len(text)} characters"
        return original(self, text)

    monkeypatch.setattr(textwrap.TextWrapper, "wrap", wrap)
    yield sizes


def hostile_cluster() -> list[dict[str, Any]]:
    """A Pending privileged GPU pod that fits no node, its scheduling condition and event, the
    node; names, labels and messages carry terminal commands. The pod is listed twice (a
    source warning that names it) and has an exemption without a reason (a warning on
    stderr that names it)."""
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu"
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": f"{message}{CSI}.",
    }
    spec = pod_spec(container(gpus=2, securityContext={"privileged": True}))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": POD},
        "reason": "FailedScheduling",
        "type": "Warning",
        "count": 3,
        "message": f"{message}{OSC52}.",
    }
    return [
        gpu_node(NODE, 1, {"nvidia.com/gpu.product": PRODUCT}, ready=True),
        pod(
            POD,
            spec,
            phase="Pending",
            status={"conditions": [unschedulable]},
            annotations={"gpu-audit.io/exempt": "GPU-SEC-002"},
        ),
        pod(POD, phase="Pending"),
        event,
    ]


def write_cluster(folder: Path, items: list[dict[str, Any]], name: str = "cluster.json") -> Path:
    path = folder / name
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.fixture
def hostile_file(tmp_path: Path) -> Path:
    # The file's name carries a command too: the header line and the warnings quote it.
    return write_cluster(tmp_path, hostile_cluster(), f"in{TITLE}.json")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------- escapes


def test_values_are_escaped_visibly_and_clipped_with_a_marker() -> None:
    assert cell(PAYLOAD) == SHOWN
    assert cell("plain text, ünïcödé, 漢字 and a\\backslash") == (
        "plain text, ünïcödé, 漢字 and a\\backslash"
    )
    assert cell("\x00\x7f\x85\u2028\udc80") == r"\x00\x7f\x85\u2028\udc80"
    assert clip("a" * (MAX_CHARS + 123_456)) == "a" * MAX_CHARS + "…(+123456 chars)"
    assert clip("a" * MAX_CHARS) == "a" * MAX_CHARS
    # The marker counts the characters of the value; escapes come after the cut.
    assert cell("\x1b" * (MAX_CHARS + 1)) == r"\x1b" * MAX_CHARS + "…(+1 chars)"


SHOWN_NODE = r"gpu-\x1b]0;owned\x07"
SHOWN_PRODUCT = r"A100\x1b]52;c;ZWNobyBwd25lZA==\x07"


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["scan", "--no-plugins", "--framework", "nvidia-gpu-operator"], [SHOWN, SHOWN_NODE]),
        (["why-pending"], [SHOWN, SHOWN_NODE]),
        (["inventory"], [SHOWN_PRODUCT]),
    ],
    ids=["scan", "why-pending", "inventory"],
)
def test_terminal_commands_in_cluster_data_are_shown_not_run(
    hostile_file: Path, command: list[str], shown: list[str]
) -> None:
    code, stdout, stderr = run(*command, "--from-file", str(hostile_file))
    assert code in (0, 1), stderr
    assert unsafe(stdout + stderr) == []
    for text in shown:
        assert text in stdout
    assert not any(line.startswith("CRITICAL  GPU-FAKE-001") for line in stdout.splitlines())


def test_the_scan_report_shows_every_hostile_value_whole(hostile_file: Path) -> None:
    _, stdout, _ = run("scan", "--no-plugins", "--from-file", str(hostile_file))
    flat = stdout.replace("\n", "")
    # The pending pod's heading, the event and condition messages, the inventory's product
    # and the duplicate's warning: each escaped, nothing dropped.
    assert f"Pod ml/train{SHOWN} (Pending)" in stdout
    assert r"1 Insufficient nvidia.com/gpu\x1b]52;c;ZWNobyBwd25lZA==\x07." in stdout
    assert r"1 Insufficient nvidia.com/gpu\x1b[2J\x1b[H." in stdout
    assert SHOWN_PRODUCT in stdout
    assert f"warning: {hostile_file.parent}/in" + r"\x1b]0;t\x07" not in stdout
    assert any(line.startswith("warning: ") and SHOWN in line for line in stdout.splitlines())
    assert "GPU-SEC-002" in flat


def test_stderr_lines_escape_what_they_quote(hostile_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code, _, stderr = run(
        "scan", "--no-plugins", "--from-file", str(hostile_file), "-o", "json",
        "--output-file", str(out),
    )  # fmt: skip
    assert code in (0, 1)
    assert unsafe(stderr) == []
    (warning,) = [line for line in stderr.splitlines() if line.startswith("gpu-audit: warning:")]
    assert f"gpu-audit: warning: Pod ml/train{SHOWN}: gpu-audit.io/exempt has no" in warning
    # The report file keeps the data as it was (JSON escapes it in its own way).
    assert POD in {f["resource"]["name"] for f in json.loads(out.read_text())["findings"]}

    code, _, stderr = run("scan", "--from-file", str(tmp_path / f"missing{OSC52}.yaml"))
    assert code == 2 and unsafe(stderr) == []
    assert r"missing\x1b]52;c;ZWNobyBwd25lZA==\x07.yaml" in stderr


# --------------------------------------------------------------------------- long values


def _document(folder: Path, name: str) -> dict[str, Any]:
    """The report of a privileged GPU pod named `name` (renamed in the report: scanning a
    10 MiB name is not what this tests)."""
    spec = pod_spec(container(securityContext={"privileged": True}))
    path = write_cluster(folder, [gpu_node("gpu", 1), pod("placeholder", spec, node_name="gpu")])
    code, stdout, stderr = run("scan", "--no-plugins", "--from-file", str(path), "-o", "json")
    assert code in (0, 1), stderr
    document: dict[str, Any] = json.loads(stdout.replace("placeholder", name))
    return document


def test_a_10_mib_name_is_clipped_before_any_wrapping(
    tmp_path: Path, bounded_wrapping: list[int]
) -> None:
    name = "n" * (10 * 2**20)
    document = _document(tmp_path, name)
    assert any(f["resource"]["name"] == name for f in document["findings"])
    text = render_table(document)
    assert bounded_wrapping and max(bounded_wrapping) <= MAX_CHARS + 32
    hidden = len(f"Pod ml/{name}") - MAX_CHARS
    assert f"…(+{hidden}chars)" in text.replace("\n", "").replace(" ", "")
    # Each finding shows at most MAX_CHARS of the name in its OBJECT column and as many in
    # its message: the output is bounded by the number of findings, not by the name.
    findings = len(document["findings"])
    assert len(text) < 40_000 + findings * 8 * MAX_CHARS
    assert max(len(line) for line in text.splitlines()) <= 2 * MAX_CHARS


def _strings(node: Any, payload: str, keep: frozenset[str], key: str = "") -> Any:
    """`node` with every string replaced by `payload`, but the values of `keep` keys (which
    the renderers look up in tables of their own, as the schema's enums)."""
    if isinstance(node, dict):
        return {k: _strings(v, payload, keep, k) for k, v in node.items()}
    if isinstance(node, list):
        return [_strings(v, payload, keep, key) for v in node]
    if isinstance(node, str) and key not in keep:
        return payload
    return node


@pytest.fixture(scope="module")
def full_document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A report with every section the table shows: findings, exempted findings, a baseline
    with new and resolved findings, checks not assessed, the inventory, Pending pods, a
    compliance framework and warnings."""
    folder = tmp_path_factory.mktemp("full")
    before = folder / "before.json"
    extra = pod("was-privileged", pod_spec(container(securityContext={"privileged": True})))
    write_cluster(folder, [extra], "extra.json")
    code, _, stderr = run(
        "scan", "--no-plugins", "--from-file", str(SAMPLE), "--from-file",
        str(folder / "extra.json"), "-o", "json", "--output-file", str(before),
    )  # fmt: skip
    assert code in (0, 1), stderr
    exempt = pod(
        "exempt",
        pod_spec(container(securityContext={"privileged": True})),
        annotations={
            "gpu-audit.io/exempt": "GPU-SEC-002",
            "gpu-audit.io/exempt-reason": "accepted",
        },
    )
    now = write_cluster(folder, [*hostile_cluster(), exempt], "now.json")
    code, stdout, stderr = run(
        "scan", "--no-plugins", "--from-file", str(SAMPLE), "--from-file", str(now),
        "--framework", "nvidia-gpu-operator", "--baseline", str(before), "-o", "json",
    )  # fmt: skip
    assert code in (0, 1), stderr
    document: dict[str, Any] = json.loads(stdout)
    baseline = document["baseline"]["findings"]
    assert baseline["new"] and baseline["resolved"] and document["exempted_findings"]
    assert document["diagnostics"]["inventory"]["pools"]
    assert document["diagnostics"]["pending_pods"] and document["compliance"]
    assert document["source"]["warnings"]
    return document


# Keys whose values the renderers compare with or look up in their own constants.
LOOKED_UP = frozenset({"status", "source", "severity", "mode", "fingerprint", "role"})


def test_every_string_the_table_shows_is_escaped_and_clipped(
    full_document: dict[str, Any], bounded_wrapping: list[int]
) -> None:
    payload = PAYLOAD + "x" * (3 * MAX_CHARS)
    hostile = _strings(copy.deepcopy(full_document), payload, LOOKED_UP)
    text = render_table(hostile)
    assert unsafe(text) == []
    assert SHOWN in text
    marker = f"…(+{len(payload) - MAX_CHARS}chars)"  # as it reads without the wrapping
    assert marker in text.replace("\n", "").replace(" ", "")
    assert payload not in text
    assert bounded_wrapping, "the findings table wraps its columns"


def test_the_diff_table_escapes_and_clips_too(
    full_document: dict[str, Any], bounded_wrapping: list[int], tmp_path: Path
) -> None:
    payload = PAYLOAD + "x" * (3 * MAX_CHARS)
    hostile = _strings(copy.deepcopy(full_document), payload, LOOKED_UP)
    empty = copy.deepcopy(hostile)
    empty["findings"] = []
    document = diff_reports(empty, str(tmp_path / f"old{TITLE}.json"), hostile, "new.json")
    text = render_diff_table(document)
    assert unsafe(text) == []
    assert r"old\x1b]0;owned\x07.json" in text and SHOWN in text


def test_names_that_look_like_numbers_stay_as_written() -> None:
    inventory = {
        "pools": [
            {
                "pool": "1e3",
                "product": "0x10",
                "nodes": ["n"],
                "ready": 1,
                "cordoned": 0,
                "mig": {"strategy": "none", "profiles": {}},
                "sharing": {"mode": "none", "replicas": 0},
                "resources": [],
            }
        ],
        "totals": [],
        "finished_gpu_pods": [],
    }
    row = next(line for line in render_inventory(inventory).splitlines() if "(none" in line)
    assert row.split()[:2] == ["1e3", "0x10"]


def test_a_wrapped_column_keeps_kubernetes_names_whole() -> None:
    # textwrap's default (and tabulate's maxcolwidths) breaks after hyphens.
    name = "ml-serving/llama-3-70b-instruct-gateway"
    text = table(
        [[f"Deployment {name}", "7 replicas of a model server without a PodDisruptionBudget"]],
        ["OBJECT", "MESSAGE"],
        widths=[len(name) + 2, 24],
    )
    lines = [line.strip() for line in text.splitlines()]
    assert any(line.startswith(name) for line in lines), text
    assert "PodDisruptionBudget" in text.replace("\n", "")
    assert max(len(line) for line in text.splitlines()) <= len(name) + 2 + 2 + 24
