"""The fleet view: several clusters' reports as one document, worst cluster first.

Built from single-cluster report documents only (as `scan --format json` writes them), whether
they were just scanned (`scan --context A --context B`, `--all-contexts`: `scan_fleet` scans the
contexts concurrently) or read back from files (`gpu-audit fleet runs/*.json`): renderers read
the fleet document and never know which. A cluster that could not be scanned at all
(unreachable, credentials rejected) is in the fleet as `failed`, with the reason; one whose scan
is incomplete (a permission it lacks, a check that raised) says what was not assessed.

The fleet document (`fleet_schema_version`, scanner/schema/fleet.schema.json):

- `clusters`: one entry per cluster, worst first: failed clusters, then the lowest score (no
  score counts as the lowest), the worst severity found, the most GPUs in findings,
  incomplete before complete, and the name (ties never depend on input order). Each entry has
  its status, score, grade, findings by severity, the gaps and missing permissions of an
  incomplete scan, the checks that raised, the GPU impact of its findings, and the whole
  `report` (null for a failed cluster).
- `summary`: clusters by status, findings by severity over the fleet, the fleet's GPU impact.

GPU impact per cluster is the sum of its counted findings' `impact` (gpu_audit.impact): a GPU
that several findings touch counts once per finding, so it ranks clusters, it is not a GPU
count. `cost_per_day` is null unless every finding that runs GPU-hours has a cost.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpu_audit import __version__
from gpu_audit.errors import InputError
from gpu_audit.model import Severity
from gpu_audit.report import Document, load_report
from gpu_audit.scan import ConfigError, LiveError, ScanOptions, ScanResult, run_scan
from gpu_audit.snapshot import CollectionGap
from gpu_audit.sources.live import kubeconfig_contexts

FLEET_SCHEMA_VERSION = "1.0"
FLEET_SCHEMA_FILE = Path(__file__).parent / "schema" / "fleet.schema.json"
COMPLETE, INCOMPLETE, FAILED = "complete", "incomplete", "failed"
FORBIDDEN = "forbidden"
DEFAULT_WORKERS = 4


@dataclass(frozen=True, slots=True)
class Member:
    """One cluster of a fleet: its report, or why it has none (`error`); `file` is where a
    saved report was read from."""

    name: str
    report: Document | None = None
    error: str | None = None
    context: str | None = None
    file: str | None = None


def _number(value: Decimal) -> float | int:
    rounded = value.quantize(Decimal("0.001")).normalize()
    return int(rounded) if rounded == rounded.to_integral_value() else float(rounded)


def _impact(findings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    gpus, hours, cost = Decimal(0), Decimal(0), Decimal(0)
    priced = True
    for finding in findings:
        impact = finding.get("impact") or {}
        gpus += Decimal(str(impact.get("gpus", 0)))
        finding_hours = Decimal(str(impact.get("gpu_hours_per_day", 0)))
        hours += finding_hours
        if impact.get("cost_per_day") is not None:
            cost += Decimal(str(impact["cost_per_day"]))
        elif finding_hours:
            priced = False
    return {
        "gpus": _number(gpus),
        "gpu_hours_per_day": _number(hours),
        "cost_per_day": _number(cost) if priced and hours else None,
    }


def _sum_impacts(impacts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fleet's impact: the clusters' sums; its cost null unless every cluster's with
    GPU-hours has one."""
    hours = sum((Decimal(str(i["gpu_hours_per_day"])) for i in impacts), Decimal(0))
    costs = [i["cost_per_day"] for i in impacts if i["gpu_hours_per_day"]]
    return {
        "gpus": _number(sum((Decimal(str(i["gpus"])) for i in impacts), Decimal(0))),
        "gpu_hours_per_day": _number(hours),
        "cost_per_day": (
            _number(sum((Decimal(str(c)) for c in costs), Decimal(0)))
            if costs and None not in costs
            else None
        ),
    }


def _no_findings() -> dict[str, int]:
    return {s.value: 0 for s in Severity}


def _entry(member: Member) -> dict[str, Any]:
    report = member.report
    if report is None:
        return {
            "name": member.name,
            "context": member.context,
            "file": member.file,
            "status": FAILED,
            "error": member.error or "not scanned",
            "score": None,
            "grade": None,
            "capped_by": None,
            "coverage_ratio": None,
            "findings": 0,
            "by_severity": _no_findings(),
            "gaps": [],
            "missing_permissions": [],
            "checks_errored": [],
            "impact": _impact(()),
            "generated_at": None,
            "report": None,
        }
    source = report["source"]
    gaps = [
        {"type": g["type"], "reason": g["reason"]}
        for g in source.get("gaps") or []
        if not CollectionGap(g["type"], g["reason"]).api_absent
    ]
    return {
        "name": member.name,
        "context": member.context or (source.get("details") or {}).get("context") or None,
        "file": member.file,
        "status": COMPLETE if report["complete"] else INCOMPLETE,
        "error": None,
        "score": report["score"]["overall"],
        "grade": report["score"]["grade"],
        "capped_by": report["score"]["capped_by"],
        "coverage_ratio": report["coverage"]["ratio"],
        "findings": report["summary"]["findings"],
        "by_severity": {
            s.value: report["summary"]["by_severity"].get(s.value, 0) for s in Severity
        },
        "gaps": gaps,
        "missing_permissions": sorted(
            g["reason"] for g in gaps if g["reason"].startswith(FORBIDDEN)
        ),
        "checks_errored": [c["id"] for c in report["checks"] if c["status"] == "error"],
        "impact": _impact(report["findings"]),
        "generated_at": report.get("generated_at"),
        "report": report,
    }


_STATUS_ORDER = {FAILED: 0, INCOMPLETE: 1, COMPLETE: 2}


def cluster_order(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """Worst cluster first: failed, then the lowest score (none counts as the lowest), the
    worst severity found, the most GPUs in findings, incomplete before complete, the name."""
    found = [s for s in Severity if entry["by_severity"].get(s.value)]
    worst = max((s.rank for s in found), default=-1)
    return (
        entry["status"] != FAILED,
        -1.0 if entry["score"] is None else entry["score"],
        -worst,
        -Decimal(str(entry["impact"]["gpus"])),
        _STATUS_ORDER[entry["status"]],
        entry["name"],
        entry["file"] or "",
    )


def build_fleet(members: Sequence[Member]) -> Document:
    """The fleet document of these clusters (see the module's docstring)."""
    clusters = sorted((_entry(m) for m in members), key=cluster_order)
    by_status = {s: sum(1 for c in clusters if c["status"] == s) for s in _STATUS_ORDER}
    return {
        "fleet_schema_version": FLEET_SCHEMA_VERSION,
        "tool": {"name": "gpu-audit", "version": __version__},
        "summary": {
            "clusters": len(clusters),
            **by_status,
            "findings": sum(c["findings"] for c in clusters),
            "by_severity": {
                s.value: sum(c["by_severity"][s.value] for c in clusters) for s in Severity
            },
            "impact": _sum_impacts([c["impact"] for c in clusters]),
        },
        "clusters": clusters,
    }


def fleet_complete(fleet: Mapping[str, Any]) -> bool:
    """Every cluster was scanned, completely."""
    return all(c["status"] == COMPLETE for c in fleet["clusters"])


# --------------------------------------------------------------------------- saved reports


def _fleet_members(path: str) -> list[Member] | None:
    """The clusters of a saved fleet document (`--format json` of a fleet), None when the
    file is not one."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(document, dict) or "fleet_schema_version" not in document:
        return None
    if str(document["fleet_schema_version"]).split(".", 1)[0] != FLEET_SCHEMA_VERSION[0]:
        return None
    return [
        Member(c["name"], c["report"], c["error"], c["context"], c["file"] or path)
        for c in document.get("clusters") or []
    ]


def _read(path: str) -> list[Member]:
    try:
        report = load_report(path)
    except InputError:
        members = _fleet_members(path)
        if members is None:
            raise
        return members
    return [Member(str(report.get("cluster") or Path(path).stem), report, file=path)]


def load_members(paths: Sequence[str]) -> tuple[list[Member], list[str]]:
    """The clusters of these saved reports (or saved fleet documents, whose clusters they
    hold), and the files left out because a newer report of the same cluster is among them
    (a history's runs/*.json holds every run of a cluster: the latest `generated_at` stands
    for it, the last one given on a tie). A report without a cluster name is named after its
    file. Raises InputError naming every file that is not a gpu-audit report."""
    problems: list[str] = []
    loaded: list[Member] = []
    for path in paths:
        try:
            loaded.extend(_read(path))
        except InputError as exc:
            problems.extend(exc.problems)
    if problems:
        raise InputError(problems)
    latest: dict[str, tuple[str, Member]] = {}
    superseded: list[str] = []
    for index, member in enumerate(loaded):
        stamp = f"{(member.report or {}).get('generated_at') or ''}\0{index:09d}"
        kept = latest.get(member.name)
        if kept is not None and kept[0] > stamp:
            superseded.append(member.file or "")
            continue
        if kept is not None:
            superseded.append(kept[1].file or "")
        latest[member.name] = (stamp, member)
    return [member for _, member in latest.values()], sorted(superseded)


# --------------------------------------------------------------------------- live scans


def fleet_contexts(kubeconfig: str | None, named: Sequence[str], every: bool) -> list[str]:
    """The contexts a fleet scan reads: those `named` (each once, in the order given), or
    `every` context of the kubeconfig. Raises ConfigError naming a context the kubeconfig
    does not have, as a single scan's unknown --context is."""
    known = kubeconfig_contexts(kubeconfig)
    if every:
        if not known:
            raise ConfigError(f"{kubeconfig or 'kubeconfig'}: no contexts")
        return list(dict.fromkeys(known))
    unknown = [c for c in named if c not in known]
    if unknown:
        where = kubeconfig or "the kubeconfig"
        raise ConfigError(f"context(s) not in {where}: {', '.join(unknown)}")
    return list(dict.fromkeys(named))


def scan_fleet(
    options: ScanOptions,
    contexts: Sequence[str],
    workers: int = DEFAULT_WORKERS,
    scan: Callable[[ScanOptions], ScanResult] = run_scan,
) -> tuple[list[Member], list[ScanResult]]:
    """Scan each kubeconfig context with `options` (its connection's context replaced, the
    cluster named after the context), at most `workers` at a time. A context that cannot be
    scanned at all (LiveError: unreachable, credentials rejected, its kubeconfig entry
    unusable) is a failed member; the others are scanned all the same. Problems of the options
    themselves (InputError, RegistryError), the same for every context, are raised."""

    def one(context: str) -> Member | ScanResult:
        inputs = dataclasses.replace(
            options.inputs,
            connection=dataclasses.replace(options.inputs.connection, context=context),
            progress=None,
        )
        try:
            return scan(dataclasses.replace(options, inputs=inputs, cluster_name=context))
        except LiveError as exc:
            return Member(context, error=str(exc), context=context)

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(contexts)))) as pool:
        outcomes = list(pool.map(one, contexts))
    members: list[Member] = []
    results: list[ScanResult] = []
    for context, outcome in zip(contexts, outcomes, strict=True):
        if isinstance(outcome, Member):
            members.append(outcome)
        else:
            results.append(outcome)
            members.append(Member(context, outcome.document, context=context))
    return members, results
