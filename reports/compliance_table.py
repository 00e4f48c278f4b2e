"""Terminal rendering of the report's `compliance` section: one short table per framework.

Reads only the JSON-shaped dicts of the section, which gpu_audit.postscan.frameworks builds;
the reasons may quote the cluster, so every value goes through gpu_audit.reports.terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_audit.reports.terminal import cell, table, wrap_lines

_STATUS = {"pass": "PASS", "fail": "FAIL", "not_evaluated": "not evaluated"}


def _detail(control: Mapping[str, Any]) -> str:
    checks = control["checks"]
    if control["status"] == "fail":
        return cell("failed: " + ", ".join(c["id"] for c in checks if c["status"] == "failed"))
    if control["status"] == "not_evaluated":
        return cell(control["reason"])
    passed = sum(1 for c in checks if c["status"] == "passed")
    rest = ", the rest not applicable" if passed < len(checks) else ""
    return f"{passed} of {len(checks)} checks passed{rest}"


def _heading(framework: Mapping[str, Any]) -> str:
    summary = framework["summary"]
    score = "n/a" if summary["score"] is None else f"{summary['score']:.1f}%"
    return (
        f"Compliance: {cell(framework['title'])} ({cell(framework['version'])}): score {score}, "
        f"{summary['passed']} pass, {summary['failed']} fail, "
        f"{summary['not_evaluated']} not evaluated, "
        f"{summary['not_assessable']} not assessable by a scanner"
    )


def compliance_lines(
    frameworks: Sequence[Mapping[str, Any]], width: int | None = None
) -> list[str]:
    lines: list[str] = []
    for framework in frameworks:
        rows = [
            [cell(c["id"]), _STATUS[c["status"]], cell(c["title"]), _detail(c)]
            for c in framework["controls"]
        ]
        controls = table(
            rows, ["CONTROL", "STATUS", "TITLE", "DETAIL"], [None, None, 45, 60], width=width
        )
        heading = _heading(framework)
        lines.extend([heading if width is None else wrap_lines(heading, width), controls, ""])
    return lines
