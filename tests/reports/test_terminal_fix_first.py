"""The terminal report of issue 19: the "Fix first" list at its top (the HTML report's items, in
the HTML report's order), quantities of the Pending section as the HTML writes them, and a
--namespace scan that explains only that namespace's Pending pods."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.reports.base import impact_text, object_name
from gpu_audit.reports.html import render_html
from gpu_audit.reports.table import render_table
from gpu_audit.reports.terminal import strip_colour

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "fixtures" / "clusters" / "sample"
HEADING = "Fix first"
# An item's first line: rank, severity, object, check; its second: the fix.
ITEM = re.compile(r"^ ?(\d+)\. ([A-Z]+) (.+) \((GPU-[A-Z]+-\d+)\)(?:: (.+))?$")


def scan(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["scan", "--from-file", str(SAMPLE), "-o", "json", *args])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    return scan()


def fix_first_block(text: str) -> list[str]:
    """The lines of the "Fix first" list, continuation lines joined to the line they go on."""
    lines = strip_colour(text).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADING))
    end = lines.index("", start)
    joined: list[str] = []
    for line in lines[start + 1 : end]:
        if line.startswith("      "):  # a wrapped line goes on
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return [lines[start], *joined]


def items(text: str) -> list[tuple[str, str, str, str, str]]:
    """(severity, object, check, impact, fix) of each item of the list."""
    _, *lines = fix_first_block(text)
    found: list[tuple[str, str, str, str, str]] = []
    for head, fix in zip(lines[::2], lines[1::2], strict=True):
        match = ITEM.match(head)
        assert match, head
        assert int(match[1]) == len(found) + 1
        found.append((match[2], match[3], match[4], match[5] or "", fix.strip()))
    return found


def html_items(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(severity, check) of each item of the HTML report's "Fix first" list, in its order."""
    page = render_html(document)
    section = page[page.index('<ol class="fix-list">') : page.index("</ol>")]
    return re.findall(
        r'data-severity="(\w+)">.*?<span class="check-id">([^<]+)</span>', section, re.S
    )


@pytest.mark.parametrize("width", [80, 200, None])
def test_the_fix_first_list_is_the_html_reports_at_the_top(
    sample: dict[str, Any], width: int | None
) -> None:
    text = render_table(sample, True, width)
    plain = strip_colour(text)
    # At the top: before the findings table, after the score.
    assert plain.index("Score ") < plain.index(HEADING) < plain.index("SEVERITY    CHECK")
    found = items(text)
    findings = sample["findings"]
    assert len(found) == 10 < len(findings)
    assert fix_first_block(text)[0].startswith(f"{HEADING} (10 of {len(findings)} findings;")
    # The HTML report's items, in its order: the most severe first, then the most GPUs.
    assert [(sev.lower(), check) for sev, _, check, _, _ in found] == html_items(sample)
    for (severity, obj, check, impact, fix), finding in zip(found, findings, strict=False):
        assert (severity, obj, check) == (
            finding["severity"].upper(),
            object_name(finding["resource"]),
            finding["check_id"],
        )
        assert impact == impact_text(finding["impact"])
        assert fix in (f"goal: {finding['title']}", *fix_commands(finding))
    # The fixes that are a command are given whole, as the remediation has them.
    quota = next(f for f in found if f[2] == "GPU-QUOTA-001")
    assert quota[4] == "fix: kubectl -n ml-serving create quota gpu-quota " + (
        "--hard=requests.nvidia.com/gpu=4"
    )
    if width is not None:
        assert max(map(len, plain.splitlines())) <= width
    assert "\x1b[31mHIGH\x1b[0m DaemonSet" in text  # the severity in colour


def fix_commands(finding: dict[str, Any]) -> list[str]:
    return [f"fix: {line.strip()}" for line in finding["remediation"].splitlines()]


def test_a_pipe_gets_each_line_whole_and_no_colour(sample: dict[str, Any]) -> None:
    text = render_table(sample, False, None)
    assert "\x1b" not in text
    assert (
        "    fix: kubectl -n ml-serving create quota gpu-quota --hard=requests.nvidia.com/gpu=4\n"
        in text
    )


def test_few_findings_are_all_listed_and_none_lists_nothing(sample: dict[str, Any]) -> None:
    few = copy.deepcopy(sample)
    few["findings"] = few["findings"][-3:]  # low ones, without a GPU impact of their own
    text = render_table(few, False, 80)
    block = fix_first_block(text)
    assert block[0] == f"{HEADING} (most severe first, then most GPUs):"
    assert [check for _, _, check, _, _ in items(text)] == [f["check_id"] for f in few["findings"]]
    assert [impact for _, _, _, impact, _ in items(text)] == [
        impact_text(f["impact"]) if f["impact"] and f["impact"]["gpus"] else ""
        for f in few["findings"]
    ]
    none = copy.deepcopy(sample)
    none["findings"] = []
    assert HEADING not in render_table(none, False, 80)


def test_pending_quantities_are_humanised_as_the_html_has_them(sample: dict[str, Any]) -> None:
    (pod,) = sample["diagnostics"]["pending_pods"]
    raw = json.dumps(pod)
    assert "31369508Ki" in raw and "15052268Ki" in raw  # the JSON keeps the exact values
    for width in (80, None):
        text = render_table(sample, False, width)
        pending = " ".join(text[text.index("Pending GPU pods") :].split())
        assert "requests: cpu 32 cores, memory 256Gi, nvidia.com/gpu 8 GPUs" in pending
        assert "allocatable 29.9Gi" in pending and "allocatable 14.4Gi" in pending
        assert not re.search(r"\d{5,}Ki", pending)
    html = render_html(sample)
    assert "29.9Gi" in html and "31369508Ki" not in html


def test_why_pending_humanises_the_same_way() -> None:
    result = CliRunner().invoke(main, ["why-pending", "--from-file", str(SAMPLE)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "memory: wants 256Gi, allocatable 29.9Gi" in text
    assert "31369508Ki" not in text


def test_a_namespace_scan_explains_only_its_pending_pods(sample: dict[str, Any]) -> None:
    (pod,) = sample["diagnostics"]["pending_pods"]
    assert pod["pod"]["namespace"] == "ml-training"
    serving, training = scan("-n", "ml-serving"), scan("-n", "ml-training")
    assert serving["diagnostics"]["pending_pods"] == []
    assert training["diagnostics"]["pending_pods"] == [pod]
    # The inventory is of the nodes: the same whichever namespace is shown.
    assert serving["diagnostics"]["inventory"] == sample["diagnostics"]["inventory"]
    table = CliRunner().invoke(main, ["scan", "--from-file", str(SAMPLE), "-n", "ml-training"])
    assert "Pending GPU pods of namespace ml-training (1):" in table.stdout
    # Files are read whole: no word of namespaces left unlisted.
    assert "Only the pods of namespace" not in table.stdout
    other = CliRunner().invoke(main, ["scan", "--from-file", str(SAMPLE), "-n", "ml-serving"])
    assert "Pending GPU pods" not in other.stdout
    assert "llama-finetune-worker-0 (Pending)" not in other.stdout


def test_a_live_listing_of_one_namespace_says_what_the_node_usage_counts(
    sample: dict[str, Any],
) -> None:
    listed = copy.deepcopy(sample)
    listed["source"]["details"] = {"namespace": "ml-training"}  # as gpu_audit.sources.live
    text = render_table(listed, False, 80)
    note = " ".join(text[text.index("Only the pods") : text.index("GPU inventory")].split())
    assert note == (
        "Only the pods of namespace ml-training were listed: the GPU usage below (REQUESTED, "
        "IDLE, HELD, FIT) and each node's verdict on a Pending pod count them alone, not the "
        "pods of other namespaces on the same nodes."
    )
    assert "Only the pods" not in render_table(sample, False, 80)
