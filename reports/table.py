"""The terminal report: a summary, the findings table, and what was not assessed.

Every value from the document goes through gpu_audit.reports.terminal (`cell`) before layout is
added: escaped control characters, long values clipped with a marker.
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gpu_audit.reports.base import (
    Document,
    Renderer,
    fix_first,
    impact_text,
    object_name,
    related_lines,
)
from gpu_audit.reports.compliance_table import compliance_lines
from gpu_audit.reports.diagnostics_table import diagnostics_lines
from gpu_audit.reports.terminal import (
    DEFAULT_WIDTH,
    cell,
    fit_widths,
    natural_width,
    strip_colour,
    table,
    wrap_lines,
)
from gpu_audit.snapshot import API_NOT_SERVED, CRD_NOT_INSTALLED

SEVERITIES = ("critical", "high", "medium", "low", "info")
# How gpu_audit.sources.live words a gap: an API the cluster does not serve (nothing to fix),
# and a list the scanner's identity may not do.
ABSENT_API = (CRD_NOT_INSTALLED, API_NOT_SERVED)
FORBIDDEN = "forbidden: list "
HEADER_PADDING = 2  # tabulate's "simple" format makes a column two wider than its header
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


def _filter_line(shown: Mapping[str, Any]) -> str:
    """What `output_filter` (--namespace, --min-severity) left out of the findings shown."""
    hidden = shown["hidden_findings"]
    if not shown.get("namespace"):
        floor = cell(shown["min_severity"])
        return f"Showing findings at or above {floor}: {hidden} below it not shown"
    which = f"on objects of namespace {cell(shown['namespace'])}"
    if shown.get("min_severity"):
        which += f" at or above {cell(shown['min_severity'])}"
    return f"Showing findings {which}: {hidden} others not shown (cluster-scoped ones included)"


def _baseline_line(baseline: Mapping[str, Any], name: str) -> str:
    counts = baseline["summary"]
    line = (
        f"Compared with {cell(name)}: {counts['new']} new, {counts['resolved']} resolved, "
        f"{counts['unchanged']} unchanged"
    )
    if counts.get("severity_changed"):  # from diff schema 1.1
        line += f", {counts['severity_changed']} with a new severity"
    if counts["not_rechecked"]:
        line += f", {counts['not_rechecked']} not re-checked (their check did not run)"
    return line


# Related objects named per role in the FINDING column; the JSON and HTML reports list them all.
RELATED_NAMES_SHOWN = 2


def _without_object(message: str, resource: Mapping[str, Any]) -> str:
    """The message without the object it opens with (the OBJECT column shows it)."""
    name = object_name(resource)
    if message.startswith(name) and message[len(name) : len(name) + 1] in (" ", ":"):
        return message[len(name) :].lstrip(" :") or message
    return message


def _finding_text(finding: Mapping[str, Any]) -> str:
    """The message, then one line per role of its related objects, a few names each; each
    line made printable on its own, so that only these newlines are layout."""
    message = _without_object(finding["message"], finding["resource"])
    text = cell(message) + (" (exempted)" if finding.get("exempted") else "")
    return "\n".join([text, *map(cell, related_lines(finding, RELATED_NAMES_SHOWN))])


def _fitted(
    rows: Sequence[Sequence[str]], headers: Sequence[str], shares: Sequence[int], width: int
) -> str:
    """A table laid out to `width` columns: the columns of share 0 at their natural width,
    the others wrapped in proportion to their shares."""
    natural = [
        max(len(header) + HEADER_PADDING, natural_width([strip_colour(row[i]) for row in rows]))
        for i, header in enumerate(headers)
    ]
    return table(rows, headers, fit_widths(width, natural, shares))


def _severity_text(finding: Mapping[str, Any]) -> str:
    """The severity, and the one it had before when a comparison says it changed."""
    was = finding.get("old_severity")
    now = cell(finding["severity"].upper())
    return f"{cell(was.upper())}->{now}" if was else now


def _findings_table(
    findings: Sequence[Mapping[str, Any]],
    color: bool,
    new: Collection[str] | None,
    width: int = DEFAULT_WIDTH,
) -> str:
    """Findings of a report or of a comparison (whose items say when they are exempted); with
    `new` (the fingerprints new since a baseline), a first column marks those."""
    headers = ["SEVERITY", "CHECK", "OBJECT", "FINDING"]
    shares = [0, 0, 2, 3]
    rows = [
        [
            _paint(_severity_text(f), f["severity"], color),
            cell(f["check_id"]),
            cell(object_name(f["resource"])),
            _finding_text(f),
        ]
        for f in findings
    ]
    if new is not None:
        headers, shares = ["BASELINE", *headers], [0, *shares]
        rows = [
            ["new" if f["fingerprint"] in new else "", *row]
            for f, row in zip(findings, rows, strict=True)
        ]
    return _fitted(rows, headers, shares, width)


def _exempted_table(findings: Sequence[Mapping[str, Any]], width: int) -> str:
    rows = [
        [
            cell(f["check_id"]),
            cell(object_name(f["resource"])),
            _exempted_by(f["exemption"]),
            cell(f["exemption"]["reason"]),
        ]
        for f in findings
    ]
    return _fitted(rows, ["CHECK", "OBJECT", "EXEMPTED BY", "REASON"], [0, 2, 2, 3], width)


def _fix_first_lines(document: Document, color: bool, width: int | None) -> list[str]:
    """The "Fix first" list, the HTML report's items (gpu_audit.reports.base.fix_first): each
    finding's severity, object, check and GPU impact, then its fix in one line. With `width`,
    each item is wrapped to it; without (a file or a pipe), each line stays whole, to copy a
    command or grep."""
    items = fix_first(document)
    if not items:
        return []
    shown = len(document["findings"])
    which = f"{len(items)} of {shown} findings; " if shown > len(items) else ""
    lines = [_prose(f"Fix first ({which}most severe first, then most GPUs):", width)]
    for rank, item in enumerate(items, 1):
        finding = item.finding
        severity = cell(finding["severity"].upper())
        head = f"{severity} {cell(object_name(finding['resource']))} ({cell(finding['check_id'])})"
        if (finding.get("impact") or {}).get("gpus"):
            head += f": {cell(impact_text(finding['impact']))}"
        fix = f"{'fix' if item.command else 'goal'}: {cell(item.fix)}"
        number = f"{rank:>2}. "
        first = _item_lines(number + head, width)
        if first[0].startswith(number + severity):
            first[0] = (
                number
                + _paint(severity, finding["severity"], color)
                + first[0][len(number + severity) :]
            )
        lines.extend([*first, *_item_lines(f"    {fix}", width)])
    return [*lines, ""]


def _item_lines(text: str, width: int | None) -> list[str]:
    """A line of the "Fix first" list, wrapped to `width` under its text (whole without)."""
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent="      ", break_on_hyphens=False)


def _rbac_rule(reason: str) -> list[str]:
    """The ClusterRole rule a "forbidden: list PLURAL[.GROUP]" gap asks for, as YAML lines of
    a `rules:` list; none for any other gap."""
    if not reason.startswith(FORBIDDEN):
        return []
    plural, _, group = reason[len(FORBIDDEN) :].strip().partition(".")
    return [
        f'- apiGroups: ["{cell(group)}"]',
        f'  resources: ["{cell(plural)}"]',
        '  verbs: ["list"]',
    ]


def _gap_lines(document: Document) -> list[str]:
    """What the source could not read: first the real gaps, which make the scan incomplete
    (each forbidden list with the RBAC rule to add), then, apart, the APIs this cluster does
    not serve (their checks do not apply: nothing to fix)."""
    gaps = document["source"]["gaps"]
    absent = [g for g in gaps if g["reason"].startswith(ABSENT_API)]
    failed = [g for g in gaps if not g["reason"].startswith(ABSENT_API)]
    lines: list[str] = []
    if failed:
        lines.append(
            f"INCOMPLETE: {len(failed)} resource type(s) could not be read; the checks that "
            "need them were not evaluated:"
        )
        for gap in failed:
            lines.append(f"  {cell(gap['type'])}: {cell(gap['reason'])}")
            rule = _rbac_rule(gap["reason"])
            if rule:
                lines.append("    add this rule to the scanner's ClusterRole:")
                lines.extend(f"      {line}" for line in rule)
        if any(_rbac_rule(g["reason"]) for g in failed):
            lines.append("  (`gpu-audit rbac` prints the whole role a scan needs)")
    elif not document["complete"]:
        lines.append("INCOMPLETE: a check raised (see Not assessed below)")
    if absent:
        names = ", ".join(cell(g["reason"].partition(":")[2].strip()) for g in absent)
        lines.extend(
            [
                *([""] if lines else []),
                f"Not installed in this cluster (their checks do not apply): {names}",
            ]
        )
    return [*lines, ""] if lines else []


def render_table(document: Document, color: bool = False, width: int | None = None) -> str:
    """The terminal report. With `width` (a terminal's), everything is laid out that many
    characters wide: tables fitted, or given as records; long lines wrapped. Without (a file
    or a pipe), only the findings tables are wrapped, DEFAULT_WIDTH wide, and every other line
    stays whole, for grep."""
    score, cov, summary = document["score"], document["coverage"], document["summary"]
    fitted = width or DEFAULT_WIDTH
    overall = (
        "n/a (nothing evaluated)" if score["overall"] is None else f"{score['overall']:.1f}/100"
    )
    grade = cell(score["grade"] or "-")
    if score["grade"] == "incomplete":  # gpu_audit.scoring.COVERAGE_FLOOR
        grade += " (too few of the applicable checks evaluated for a grade)"
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
    shown = document.get("output_filter")
    if shown and shown["hidden_findings"]:
        lines.append(_filter_line(shown))
    lines.append("")
    lines.extend(_gap_lines(document))
    # Prose so far (the tables below are laid out to the width already, and the YAML of the
    # diagnostics' fixes must not be wrapped): wrapped on a terminal.
    lines = [_prose("\n".join(lines), width), *_fix_first_lines(document, color, width)]
    if document["findings"]:
        new = {f["fingerprint"] for f in baseline["findings"]["new"]} if baseline else None
        lines.extend([_findings_table(document["findings"], color, new, fitted), ""])
    if exempted:
        lines.extend(["Exempted findings:", _exempted_table(exempted, fitted), ""])
    if baseline and baseline["findings"]["resolved"]:
        lines.extend(
            [
                "Resolved since the baseline:",
                _findings_table(baseline["findings"]["resolved"], color, None, fitted),
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
        lines.append(_fitted(rows, ["CHECK", "STATUS", "REASON"], [0, 0, 1], fitted))
        lines.append("")
    lines.extend(
        diagnostics_lines(
            document.get("diagnostics"),
            width,
            namespace=(shown or {}).get("namespace"),
            listed=source.get("details", {}).get("namespace"),
        )
    )
    lines.extend(compliance_lines(document.get("compliance", []), width))  # from schema 1.1
    exemption_warnings = document.get("exemptions", {}).get("warnings", [])
    lines.extend(
        _prose(f"warning: {cell(w)}", width) for w in [*source["warnings"], *exemption_warnings]
    )
    return "\n".join(lines).rstrip("\n") + "\n"


def _prose(text: str, width: int | None) -> str:
    """Lines of text wrapped to a terminal's width; whole without one."""
    return text if width is None else wrap_lines(text, width)


def render_diff_table(document: Document, color: bool = False, width: int | None = None) -> str:
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
        ("severity_changed", "Severity changed:"),
        ("not_rechecked", "Not re-checked (their check did not run in the new report):"),
    ):
        if groups[group]:
            lines.extend(
                [heading, _findings_table(groups[group], color, None, width or DEFAULT_WIDTH), ""]
            )
    return "\n".join(lines).rstrip("\n") + "\n"


TABLE = Renderer("table", "txt", render_table, "terminal summary and findings table")
