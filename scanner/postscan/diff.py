"""Comparing two reports finding by finding: what is new, resolved, unchanged.

Findings are matched by their `fingerprint` (check id, object and field; see
gpu_audit.report.fingerprint), so a changed message or severity does not make a finding new;
a finding whose severity changed (the evidence changed: more GPUs, a workload now serving) is
`severity_changed`, with its `old_severity`, not unchanged.
Exempted findings take part too (flagged `exempted`): an accepted finding still exists, and
accepting one is not resolving it. An old finding that is gone from the new report because
its check was not evaluated there (input missing, check skipped or raising) is `not_rechecked`,
not resolved: a partial scan must not look like a fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpu_audit import __version__
from gpu_audit.errors import InputError
from gpu_audit.model import Severity
from gpu_audit.report import SCHEMA_VERSION, Document, finding_order, load_report

DIFF_SCHEMA_VERSION = "1.1"  # 1.1: severity_changed
DIFF_SCHEMA_FILE = Path(__file__).parents[1] / "schema" / "diff.schema.json"
_EVALUATED = ("passed", "failed")
_SEVERITIES = frozenset(s.value for s in Severity)
_FINDING_FIELDS = ("check_id", "title", "severity", "category", "message", "path", "fingerprint")
_RESOURCE_FIELDS = ("type", "kind", "namespace", "name")


def _finding_problems(path: str, key: str, items: object) -> list[str]:
    if not isinstance(items, list):
        return [f"{path}: '{key}' is not a list"]
    problems: list[str] = []
    for number, item in enumerate(items, 1):
        where = f"{path}: {key}[{number}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: not an object")
            continue
        missing = [f for f in _FINDING_FIELDS if not isinstance(item.get(f), str)]
        resource = item.get("resource")
        if not isinstance(resource, dict) or any(f not in resource for f in _RESOURCE_FIELDS):
            missing.append("resource")
        if missing:
            problems.append(f"{where}: missing or invalid {', '.join(missing)}")
        elif item["severity"] not in _SEVERITIES:
            problems.append(f"{where}: unknown severity {item['severity']!r}")
    return problems


# Fingerprints, which a comparison matches findings by, exist from schema 1.1 on; later minor
# versions only add fields (1.2: related objects), so 1.1 and newer 1.x reports compare.
_FIRST_COMPARABLE_MINOR = 1


def comparable_version(version: object) -> bool:
    """A report schema version this module can compare: 1.1 or any later 1.x."""
    major, _, minor = str(version).partition(".")
    return (
        major == SCHEMA_VERSION.split(".", 1)[0]
        and minor.isdigit()
        and int(minor) >= _FIRST_COMPARABLE_MINOR
    )


def check_comparable(document: Mapping[str, Any], path: str) -> None:
    """Refuse a report this module cannot compare: another schema version (1.0 reports have
    no fingerprints) or one whose findings lack the fields a comparison reads."""
    version = document.get("schema_version")
    if not comparable_version(version):
        raise InputError(
            [
                f"{path}: report schema {version} cannot be compared by this gpu-audit "
                f"(schema {SCHEMA_VERSION}); scan again with gpu-audit {__version__}"
            ]
        )
    problems = [
        problem
        for key in ("findings", "exempted_findings")
        for problem in _finding_problems(path, key, document.get(key))
    ]
    checks = document.get("checks")
    if not isinstance(checks, list) or not all(
        isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("status"), str)
        for c in checks
    ):
        problems.append(f"{path}: 'checks' is not a list of checks with id and status")
    if problems:
        raise InputError(problems)


def load_comparable(path: str) -> Document:
    """A saved report, read and checked for comparison."""
    document = load_report(path)
    check_comparable(document, path)
    return document


def _item(finding: Mapping[str, Any], exempted: bool) -> dict[str, Any]:
    resource = finding["resource"]
    return {
        **{f: finding[f] for f in _FINDING_FIELDS},
        "resource": {f: resource[f] for f in _RESOURCE_FIELDS},
        "exempted": exempted,
    }


def _items(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every finding of a report, counted and exempted, by fingerprint."""
    return {
        item["fingerprint"]: item
        for item in [
            *(_item(f, False) for f in document["findings"]),
            *(_item(f, True) for f in document["exempted_findings"]),
        ]
    }


def _sorted(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=finding_order)


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The `summary` and `findings` {new, resolved, unchanged, severity_changed,
    not_rechecked} of two comparable reports. Findings in both are given as the new report
    has them; those whose severity changed also carry the `old_severity`."""
    before, after = _items(old), _items(new)
    evaluated = {c["id"] for c in new["checks"] if c["status"] in _EVALUATED}
    gone = [before[fp] for fp in before.keys() - after.keys()]
    kept = sorted(after.keys() & before.keys())
    groups = {
        "new": _sorted([after[fp] for fp in after.keys() - before.keys()]),
        "resolved": _sorted([f for f in gone if f["check_id"] in evaluated]),
        "unchanged": _sorted(
            [after[fp] for fp in kept if after[fp]["severity"] == before[fp]["severity"]]
        ),
        "severity_changed": _sorted(
            [
                {**after[fp], "old_severity": before[fp]["severity"]}
                for fp in kept
                if after[fp]["severity"] != before[fp]["severity"]
            ]
        ),
        "not_rechecked": _sorted([f for f in gone if f["check_id"] not in evaluated]),
    }
    counted_new = Counter(f["severity"] for f in groups["new"] if not f["exempted"])
    return {
        "summary": {
            **{group: len(items) for group, items in groups.items()},
            "new_by_severity": {s.value: counted_new.get(s.value, 0) for s in Severity},
        },
        "findings": groups,
    }


def _about(document: Mapping[str, Any], path: str) -> dict[str, Any]:
    score = document.get("score")
    score = score if isinstance(score, dict) else {}
    return {
        "file": path,
        "generated_at": document.get("generated_at"),
        "overall": score.get("overall"),
        "grade": score.get("grade"),
    }


def baseline_section(
    old: Mapping[str, Any], old_path: str, new: Mapping[str, Any]
) -> dict[str, Any]:
    """A report's `baseline` section: how it compares with the report at old_path. `new` needs
    only the report's `checks`, `findings` and `exempted_findings`
    (gpu_audit.report.report_entries)."""
    return {**_about(old, old_path), **compare(old, new)}


def diff_reports(
    old: Mapping[str, Any], old_path: str, new: Mapping[str, Any], new_path: str
) -> Document:
    """The document of `gpu-audit diff`: both reports named, then the comparison. Its own
    `diff_schema_version` (no `schema_version`) keeps it from being taken for a report."""
    return {
        "diff_schema_version": DIFF_SCHEMA_VERSION,
        "tool": {"name": "gpu-audit", "version": __version__},
        "old": _about(old, old_path),
        "new": _about(new, new_path),
        **compare(old, new),
    }


def new_at_or_above(comparison: Mapping[str, Any], severity: Severity) -> list[dict[str, Any]]:
    """The new findings that count (not exempted) with this severity or worse."""
    return [
        f
        for f in comparison["findings"]["new"]
        if not f["exempted"] and Severity(f["severity"]).rank >= severity.rank
    ]
