"""Prometheus text exposition (format 0.0.4), for node_exporter's textfile collector or a
Pushgateway: https://prometheus.io/docs/instrumenting/exposition_formats/

Every metric is a gauge: each file describes one scan. Series follow the report's lists, and
its maps in sorted key order: a report read back from JSON has its keys sorted, and the output
must not depend on whether the report was just built or read back. A value the report does not hold (no
score when nothing was evaluated, no duration unless the scan recorded it, no timestamp unless
the report was stamped) has no sample, never a made-up 0.

A report with a cluster name (`scan --cluster-name`, else the kubeconfig context) labels every
sample `cluster="<name>"`, so that one Prometheus (or Thanos, Mimir) holds the series of a fleet
apart; a fleet document gives one exposition of every cluster's series, and a failed cluster its
`gpu_audit_scan_complete` 0. On a Pushgateway the label agrees with the `cluster` of the
grouping key (gpu_audit.postscan.pushgateway), which overwrites it anyway: "Any of those labels
already set in the body of the request ... will be overwritten to match the labels defined by
the URL path" (https://github.com/prometheus/pushgateway#url).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_audit.reports.base import Document, Renderer

PREFIX = "gpu_audit_"
COMPLETE_HELP = "1 when all input was collected and no check raised."
Labels = Mapping[str, str]


@dataclass
class Family:
    name: str
    help: str
    samples: list[tuple[Labels, float | int]] = field(default_factory=list)

    def add(self, value: float | int | bool | None, **labels: str) -> None:
        if value is not None:
            self.samples.append((labels, int(value) if isinstance(value, bool) else value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float | int) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def _lines(family: Family) -> Iterable[str]:
    name = PREFIX + family.name
    yield f"# HELP {name} {_escape_help(family.help)}"
    yield f"# TYPE {name} gauge"
    for labels, value in family.samples:
        pairs = ",".join(f'{key}="{_escape_label(text)}"' for key, text in labels.items())
        yield f"{name}{{{pairs}}} {_value(value)}" if pairs else f"{name} {_value(value)}"


def _epoch_seconds(timestamp: str | None) -> int | None:
    if not timestamp:
        return None
    return int(dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp())


def _check_labels(check: Mapping[str, Any]) -> dict[str, str]:
    return {"check_id": check["id"], "category": check["category"], "severity": check["severity"]}


def build_families(document: Document) -> list[Family]:
    score, summary, coverage = document["score"], document["summary"], document["coverage"]
    overall = Family("score", "Overall score, 0-100 (no sample when nothing was evaluated).")
    overall.add(score["overall"])
    grade = Family("grade_info", "Overall grade (A-F) and the severity that capped it, as labels.")
    if score["grade"] is not None:
        grade.add(1, grade=score["grade"], capped_by=score["capped_by"] or "")
    categories = Family("category_score", "Score of each category, 0-100.")
    for entry in score["categories"]:
        categories.add(entry["score"], category=entry["category"])
    by_severity = Family("findings", "Findings that count (not exempted), by severity.")
    for severity, count in sorted(summary["by_severity"].items()):
        by_severity.add(count, severity=severity)
    by_category = Family("category_findings", "Findings that count (not exempted), by category.")
    for category, count in sorted(summary.get("by_category", {}).items()):
        by_category.add(count, category=category)
    related = Family(
        "related_objects",
        "Entries of related[] (schema 1.2) of the findings that count, by the finding's severity: "
        "the victims and other objects one finding on the object to change stands for.",
    )
    findings = document["findings"]
    if all("related" in f for f in findings):  # reports before schema 1.2 hold no such count
        per_severity: Counter[str] = Counter()
        for finding in findings:
            per_severity[finding["severity"]] += len(finding["related"])
        for severity in sorted(summary["by_severity"]):
            related.add(per_severity.get(severity, 0), severity=severity)
    exempted = Family("exempted_findings", "Failed results accepted by an exemption.")
    exempted.add(summary.get("exempted"))
    per_check = Family("check_findings", "Findings that count (not exempted), by check.")
    status = Family("check_status", "Verdict of each check: one series per check, value 1.")
    for check in document["checks"]:
        labels = _check_labels(check)
        per_check.add(check["results"]["failed"], **labels)
        status.add(1, **labels, status=check["status"])
    checks = Family("checks", "Checks by verdict (passed, failed, not_evaluated, error).")
    for verdict, count in sorted(summary["checks"].items()):
        checks.add(count, status=verdict)
    ratio = Family("coverage_ratio", "Evaluated checks / enabled checks that apply, 0-1.")
    ratio.add(coverage["ratio"])
    complete = Family("scan_complete", COMPLETE_HELP)
    complete.add(document["complete"])
    duration = Family("scan_duration_seconds", "Wall-clock duration of the scan.")
    duration.add(document.get("scan_duration_seconds"))
    last = Family(
        "last_successful_scan_timestamp_seconds",
        "When the last complete scan ran (Unix time; from the report's generated_at).",
    )
    if document["complete"]:
        last.add(_epoch_seconds(document["generated_at"]))
    families = [overall, grade, categories, by_severity, by_category, related, exempted, per_check]
    families = [*families, status, checks, ratio, complete, duration, last]
    cluster = document.get("cluster")
    if cluster:
        for family in families:
            family.samples = [({"cluster": cluster, **labels}, v) for labels, v in family.samples]
    return families


def _text(families: Iterable[Family]) -> str:
    return "\n".join(line for family in families for line in _lines(family)) + "\n"


def render_prometheus(document: Document, color: bool = False) -> str:
    return _text(build_families(document))


def render_fleet_prometheus(fleet: Document, color: bool = False) -> str:
    """Every cluster's series of a fleet document in one exposition (each metric family
    once), each labelled with its cluster's name; a failed cluster has only its
    `gpu_audit_scan_complete` 0."""
    merged: dict[str, Family] = {}
    for entry in fleet["clusters"]:
        report = entry["report"]
        if report is None:
            family = merged.setdefault("scan_complete", Family("scan_complete", COMPLETE_HELP))
            family.add(0, cluster=entry["name"])
            continue
        for family in build_families({**report, "cluster": entry["name"]}):
            merged.setdefault(family.name, Family(family.name, family.help)).samples.extend(
                family.samples
            )
    return _text(merged.values())


PROMETHEUS = Renderer(
    "prometheus", "prom", render_prometheus, "Prometheus text exposition (textfile collector)"
)
