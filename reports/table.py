"""The terminal report: a summary, the findings table, and what was not assessed.

Every value from the document goes through gpu_audit.reports.terminal (`cell`) before layout is
added: escaped control characters, long values clipped with a marker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gpu_audit.reports.base import Document, Renderer, object_name, related_lines
from gpu_audit.reports.compliance_table import compliance_lines
from gpu_audit.reports.diagnostics_table import diagnostics_lines
from gpu_audit.reports.terminal import cell, table

SEVERITIES = ("critical", "high", "medium", "low", "info")
_COLOURS = {"critical": "\033[1;31m", "high": "\033[31m", "medium": "\033[33m", "low": "\033[36m"}
_RESET = "\033[0m"


def _paint(text: str, severity: str, color: bool) -> str:
    code = _COLOURS.get(severity)
    return f"{code}{text}{_RESET}" if color and code else text


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


def _exempted_by(exemption: Mapping[str, Any]) -> str:
    if exemption["source"] == "annotation":
        return "annotation"
    until = f", until {exemption['expires']}" if exemption["expires"] else ""
    return cell(f"{exemption['file']} entry {exemption['entry']}{until}")


def _baseline_line(baseline: Mapping[str, Any], name: str) -> str:
    counts = baseline["summary"]
    line = (
        f"Compared with {cell(name)}: {counts['new']} new, {counts['resolved']} resolved, "
        f"{counts['unchanged']} unchanged"
    )
    if counts["not_rechecked"]:
        line += f", {counts['not_rechecked']} not re-checked (their check did not run)"
    return line


# Related objects named per role in the FINDING column; the JSON and HTML reports list them all.
RELATED_NAMES_SHOWN = 2


def _finding_text(finding: Mapping[str, Any]) -> str:
    """The message, then one line per role of its related objects, a few names each; each
    line made printable on its own, so that only these newlines are layout."""
    text = cell(finding["message"]) + (" (exempted)" if finding.get("exempted") else "")
    return "\n".join([text, *map(cell, related_lines(finding, RELATED_NAMES_SHOWN))])


def _findings_table(
    findings: Sequence[Mapping[str, Any]], color: bool, new: Collection[str] | None
) -> str:
    """Findings of a report or of a comparison (whose items say when they are exempted); with
    `new` (the fingerprints new since a baseline), a first column marks those."""
    headers = ["SEVERITY", "CHECK", "OBJECT", "FINDING"]
    widths: list[int | None] = [None, None, 40, 70]
    rows = [
        [
            _paint(cell(f["severity"].upper()), f["severity"], color),
            cell(f["check_id"]),
            cell(object_name(f["resource"])),
            _finding_text(f),
        ]
        for f in findings
    ]
    if new is not None:
        headers, widths = ["BASELINE", *headers], [None, *widths]
        rows = [
            ["new" if f["fingerprint"] in new else "", *row]
            for f, row in zip(findings, rows, strict=True)
        ]
    return table(rows, headers, widths)


def _exempted_table(findings: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            cell(f["check_id"]),
            cell(object_name(f["resource"])),
            _exempted_by(f["exemption"]),
            cell(f["exemption"]["reason"]),
        ]
        for f in findings
    ]
    return table(rows, ["CHECK", "OBJECT", "EXEMPTED BY", "REASON"], [None, 40, 40, 60])


def render_table(document: Document, color: bool = False) -> str:
    score, cov, summary = document["score"], document["coverage"], document["summary"]
    overall = (
        "n/a (nothing evaluated)" if score["overall"] is None else f"{score['overall']:.1f}/100"
    )
    grade = cell(score["grade"] or "-")
    if score["capped_by"]:
        grade += f" (capped: a {cell(score['capped_by'])} check fails)"
    source = document["source"]
    lines = [
        f"gpu-audit {cell(document['tool']['version'])}: {source['objects']} objects "
        f"from {cell(', '.join(source['inputs']) or source['type'])}",
        f"Score {overall}  grade {grade}  coverage {_percent(cov['ratio'])} "
        f"({cov['evaluated']} of {cov['enabled'] - cov['not_applicable']} applicable checks evaluated)",
        "Findings: "
        + ", ".join(
            f"{summary['by_severity'][sev]} {sev}"
            for sev in SEVERITIES
            if summary["by_severity"][sev]
        )
        if summary["findings"]
        else "Findings: none",
    ]
    # Reports of schema 1.0 have neither exemptions nor a baseline.
    exempted = document.get("exempted_findings", [])
    if exempted:
        lines.append(f"Exempted: {len(exempted)} (listed below, not counted in the score)")
    baseline = document.get("baseline")
    if baseline:
        lines.append(_baseline_line(baseline, baseline["file"]))
    lines.append("")
    if document["findings"]:
        new = {f["fingerprint"] for f in baseline["findings"]["new"]} if baseline else None
        lines.extend([_findings_table(document["findings"], color, new), ""])
    if exempted:
        lines.extend(["Exempted findings:", _exempted_table(exempted), ""])
    if baseline and baseline["findings"]["resolved"]:
        lines.extend(
            [
                "Resolved since the baseline:",
                _findings_table(baseline["findings"]["resolved"], color, None),
                "",
            ]
        )
    blocked = [
        c
        for c in document["checks"]
        if c["status"] in ("not_evaluated", "error") and c["applicable"]
    ]
    if blocked:
        lines.append("Not assessed:")
        rows = [
            [cell(c["id"]), cell(c["status"].replace("_", " ")), cell(c["reason"])] for c in blocked
        ]
        lines.append(table(rows, ["CHECK", "STATUS", "REASON"], [None, None, 80]))
        lines.append("")
    lines.extend(diagnostics_lines(document.get("diagnostics")))
    lines.extend(compliance_lines(document.get("compliance", [])))  # absent before schema 1.1
    exemption_warnings = document.get("exemptions", {}).get("warnings", [])
    lines.extend(f"warning: {cell(w)}" for w in [*source["warnings"], *exemption_warnings])
    return "\n".join(lines).rstrip("\n") + "\n"


def render_diff_table(document: Document, color: bool = False) -> str:
    """`gpu-audit diff`: both scores, the counts, then the new and the resolved findings."""

    def about(report: Mapping[str, Any]) -> str:
        score = "n/a" if report["overall"] is None else f"{report['overall']:.1f}"
        return f"{cell(report['file'])} (score {score}, grade {cell(report['grade'] or '-')})"

    summary, groups = document["summary"], document["findings"]
    counted = [
        f"{summary['new_by_severity'][s]} {s}" for s in SEVERITIES if summary["new_by_severity"][s]
    ]
    lines = [
        f"gpu-audit diff: {about(document['old'])} -> {about(document['new'])}",
        _baseline_line(document, "the old report"),
        f"New findings that count: {', '.join(counted) or 'none'}",
        "",
    ]
    for group, heading in (
        ("new", "New:"),
        ("resolved", "Resolved:"),
        ("not_rechecked", "Not re-checked (their check did not run in the new report):"),
    ):
        if groups[group]:
            lines.extend([heading, _findings_table(groups[group], color, None), ""])
    return "\n".join(lines).rstrip("\n") + "\n"


TABLE = Renderer("table", "txt", render_table, "terminal summary and findings table")
