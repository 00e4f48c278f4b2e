"""Renderers of the fleet document (gpu_audit.fleet): JSON, table, HTML and Prometheus. Like
every renderer they read the document only: a fleet just scanned and one built from saved
reports render the same. Each cluster's own report is rendered by the single-cluster
renderers (the table's sections, the HTML page's findings)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpu_audit.report import dumps
from gpu_audit.reports.base import Document, impact_text
from gpu_audit.reports.html import environment, group_by_check, page_assets
from gpu_audit.reports.prometheus import render_fleet_prometheus
from gpu_audit.reports.table import SEVERITIES, render_table
from gpu_audit.reports.terminal import cell, table, wrap_lines

# The report's status colours for a cluster's status.
STATUS_CSS = {"complete": "passed", "incomplete": "not_evaluated", "failed": "error"}


def render_fleet_json(fleet: Document, color: bool = False, width: int | None = None) -> str:
    return dumps(fleet)


def _findings_text(entry: Mapping[str, Any]) -> str:
    counts = [f"{entry['by_severity'][s]} {s}" for s in SEVERITIES if entry["by_severity"][s]]
    return ", ".join(counts) or ("-" if entry["status"] == "failed" else "none")


def _why(entry: Mapping[str, Any]) -> list[str]:
    """Why a cluster is not complete: the reason it failed, else one line per permission it
    lacks, per other input not read, and the checks that raised."""
    if entry["error"]:
        return [f"{entry['status'].upper()}: {cell(entry['name'])}: {cell(entry['error'])}"]
    lines = [f"INCOMPLETE: {cell(entry['name'])}:"]
    if entry["missing_permissions"]:
        lines.append("  missing permission(s):")
        lines.extend(f"    {cell(reason)}" for reason in entry["missing_permissions"])
    other = [g for g in entry["gaps"] if g["reason"] not in entry["missing_permissions"]]
    if other:
        lines.append("  not read:")
        lines.extend(f"    {cell(g['type'])}: {cell(g['reason'])}" for g in other)
    if entry["checks_errored"]:
        lines.append(f"  check(s) raised: {cell(', '.join(entry['checks_errored']))}")
    return lines


def fleet_summary_lines(fleet: Document, width: int | None = None) -> list[str]:
    """The fleet summary: the counts, then one row per cluster, worst first, then what each
    cluster that is not complete lacks. A table wider than `width` (a terminal's) is given
    as one paragraph per cluster."""
    summary = fleet["summary"]
    head = (
        f"Fleet: {summary['clusters']} cluster(s): {summary['complete']} complete, "
        f"{summary['incomplete']} incomplete, {summary['failed']} failed; "
        f"{summary['findings']} finding(s)"
    )
    if summary["impact"]["gpus"]:
        head += f" touching {impact_text(summary['impact'])}"
    rows = [
        [
            cell(c["name"]),
            c["status"].upper() if c["status"] != "complete" else c["status"],
            "n/a" if c["score"] is None else f"{c['score']:.1f}",
            cell(c["grade"] or "-"),
            # Beside the grade, so that "complete" and grade "incomplete" (too few checks
            # evaluated for a grade) read as the two things they are.
            "-" if c["coverage_ratio"] is None else f"{c['coverage_ratio']:.0%}",
            _findings_text(c),
            impact_text(c["impact"]) if c["impact"]["gpus"] else "-",
        ]
        for c in fleet["clusters"]
    ]
    lines = [
        head,
        "",
        table(
            rows,
            ["CLUSTER", "STATUS", "SCORE", "GRADE", "COVERAGE", "FINDINGS", "GPU IMPACT"],
            width=width,
        ),
    ]
    lacking = [c for c in fleet["clusters"] if c["status"] != "complete"]
    if lacking:
        lines.append("")
        lines.extend(line for c in lacking for line in _why(c))
    return lines


def render_fleet_table(fleet: Document, color: bool = False, width: int | None = None) -> str:
    """The fleet summary, then each cluster's own table report under its name."""
    summary = "\n".join(fleet_summary_lines(fleet, width))
    parts = [wrap_lines(summary, width) if width else summary]
    for entry in fleet["clusters"]:
        rule = f"=== cluster {cell(entry['name'])} ({entry['status']}) ==="
        body = (
            render_table(entry["report"], color, width).rstrip("\n")
            if entry["report"] is not None
            else f"Not scanned: {cell(entry['error'])}"
        )
        parts.append(f"{rule}\n{body}")
    return "\n\n".join(parts) + "\n"


def render_fleet_html(fleet: Document, color: bool = False, width: int | None = None) -> str:
    """One self-contained page: the fleet summary (worst cluster first, what each incomplete
    one lacks), then a section per cluster with its findings grouped by check as the report
    page shows them. No script runs on it (the filters of the report page work on one
    cluster's findings)."""
    env = environment()
    env.globals["group_by_check"] = group_by_check
    clusters = [(c, f"cluster-{n}") for n, c in enumerate(fleet["clusters"], 1)]
    return env.get_template("fleet.html.j2").render(
        fleet=fleet,
        clusters=clusters,
        severities=SEVERITIES,
        status_css=STATUS_CSS,
        new_fingerprints=[],
        **page_assets(env, script=False),
    )


FleetRenderer = Callable[[Document, bool, int | None], str]
FLEET_RENDERERS: dict[str, tuple[str, FleetRenderer]] = {
    "json": ("json", render_fleet_json),
    "table": ("txt", render_fleet_table),
    "html": ("html", render_fleet_html),
    "prometheus": ("prom", lambda fleet, color, width: render_fleet_prometheus(fleet)),
}
