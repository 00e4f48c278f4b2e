"""The renderer interface: a name, a file extension and a pure render function."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.model import Severity
from gpu_audit.report import shown_findings

Document = Mapping[str, Any]

# How each role of a finding's related objects is introduced, in the document's order.
RELATED_LABELS = {
    "symptom": "affects",
    "selected-by": "selects",
    "owner": "owned by",
    "cause": "caused by",
}


# Commands in a remediation that change something (not `kubectl describe` or `get`).
_ACTION = re.compile(
    r"^(kubectl\s+(-n\s+\S+\s+)?(apply|create|label|annotate|patch|taint|rollout|scale|set|delete"
    r"|cordon|drain|uncordon)\b|helm\s+(upgrade|install)\b)"
)


def number(value: object) -> str:
    """Quantities as the document gives them: 8 and 0.5, never 8.0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return format(Decimal(str(value)).normalize(), "f")


def fix_command(finding: Mapping[str, Any]) -> str | None:
    """The remediation's first command that changes something (kubectl apply, label, patch,
    helm upgrade ...), without its trailing comment; None when it has none."""
    for line in str(finding.get("remediation") or "").splitlines():
        if _ACTION.match(line.strip()):
            return line.strip().split("   #", 1)[0].rstrip()
    return None


def impact_text(impact: Mapping[str, Any] | None) -> str:
    """A finding's `impact` in words, "" without one:
    "16 GPUs · 192 GPU-h/day · NVIDIA-A100-SXM4-40GB · $672.00/day"."""
    if not impact:
        return ""
    gpus = impact["gpus"]
    parts = [f"{number(gpus)} GPU{'' if gpus == 1 else 's'}"]
    if impact["gpu_hours_per_day"]:
        parts.append(f"{number(impact['gpu_hours_per_day'])} GPU-h/day")
    if impact.get("product"):
        parts.append(str(impact["product"]))
    if impact.get("cost_per_day") is not None:
        parts.append(f"${impact['cost_per_day']:,.2f}/day")
    return " · ".join(parts)


def object_name(resource: Mapping[str, Any]) -> str:
    """`Kind namespace/name`, or `Kind name` for a cluster-scoped object."""
    ns = resource.get("namespace")
    return (
        f"{resource['kind']} {ns}/{resource['name']}"
        if ns
        else f"{resource['kind']} {resource['name']}"
    )


def related_groups(finding: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """A finding's related objects as (label, names) per role, in the document's order; empty
    for findings without any (and for reports older than schema 1.2, which have no `related`)."""
    groups: dict[str, list[str]] = {}
    related: Sequence[Mapping[str, Any]] = finding.get("related") or []
    for item in related:
        label = RELATED_LABELS.get(str(item.get("role")), str(item.get("role")))
        groups.setdefault(label, []).append(object_name(item))
    return list(groups.items())


def related_lines(finding: Mapping[str, Any], limit: int | None = None) -> list[str]:
    """One line per role ("affects: Node a, Node b"); with `limit`, at most that many names per
    line and "+N more" for the rest."""
    lines = []
    for label, names in related_groups(finding):
        shown = names if limit is None else names[:limit]
        more = len(names) - len(shown)
        lines.append(f"{label}: {', '.join(shown)}" + (f" +{more} more" if more else ""))
    return lines


@dataclass(frozen=True, slots=True)
class Renderer:
    name: str
    extension: str
    render: Callable[[Document, bool], str]  # (document, colour) -> text
    description: str = ""


def at_or_above(document: Document, min_severity: Severity | None) -> Document:
    """The document as `--min-severity` shows it: only the findings (and exempted findings)
    of that severity or worse, and an `output_filter` that says how many were left out (in
    all, with a --namespace filter applied by the scan). The
    score, grade, coverage and summary stay those of the whole scan: the filter changes what
    is shown, not what was checked (--only, --skip and --category change that)."""
    if min_severity is None:
        return document

    floor = min_severity.rank
    return shown_findings(
        document, lambda f: Severity(f["severity"]).rank >= floor, min_severity=min_severity.value
    )
