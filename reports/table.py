"""The terminal report: a summary, the findings table, and what was not assessed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tabulate import tabulate

from gpu_audit.reports.base import Document, Renderer

SEVERITIES = ("critical", "high", "medium", "low", "info")
_COLOURS = {"critical": "\033[1;31m", "high": "\033[31m", "medium": "\033[33m", "low": "\033[36m"}
_RESET = "\033[0m"


def _paint(text: str, severity: str, color: bool) -> str:
    code = _COLOURS.get(severity)
    return f"{code}{text}{_RESET}" if color and code else text


def _where(resource: Mapping[str, Any]) -> str:
    ns = resource["namespace"]
    return (
        f"{resource['kind']} {ns}/{resource['name']}"
        if ns
        else f"{resource['kind']} {resource['name']}"
    )


def _without_subject(message: str, subject: str) -> str:
    """Messages start with the object they are about; the OBJECT column already says it."""
    return message[len(subject) :].lstrip() if message.startswith(subject + " ") else message


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


def render_table(document: Document, color: bool = False) -> str:
    score, cov, summary = document["score"], document["coverage"], document["summary"]
    overall = (
        "n/a (nothing evaluated)" if score["overall"] is None else f"{score['overall']:.1f}/100"
    )
    grade = score["grade"] or "-"
    if score["capped_by"]:
        grade += f" (capped: a {score['capped_by']} check fails)"
    lines = [
        f"gpu-audit {document['tool']['version']}: {document['source']['objects']} objects "
        f"from {', '.join(document['source']['inputs']) or document['source']['type']}",
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
        "",
    ]
    if document["findings"]:
        rows = [
            [
                _paint(f["severity"].upper(), f["severity"], color),
                f["check_id"],
                _where(f["resource"]),
                f["message"],
            ]
            for f in document["findings"]
        ]
        lines.append(
            tabulate(
                rows,
                headers=["SEVERITY", "CHECK", "OBJECT", "FINDING"],
                tablefmt="simple",
                maxcolwidths=[None, None, 40, 70],
            )
        )
        lines.append("")
    blocked = [
        c
        for c in document["checks"]
        if c["status"] in ("not_evaluated", "error") and c["applicable"]
    ]
    if blocked:
        lines.append("Not assessed:")
        rows = [[c["id"], c["status"].replace("_", " "), c["reason"]] for c in blocked]
        lines.append(
            tabulate(
                rows,
                headers=["CHECK", "STATUS", "REASON"],
                tablefmt="simple",
                maxcolwidths=[None, None, 80],
            )
        )
        lines.append("")
    lines.extend(f"warning: {warning}" for warning in document["source"]["warnings"])
    return "\n".join(lines).rstrip("\n") + "\n"


TABLE = Renderer("table", "txt", render_table, "terminal summary and findings table")
