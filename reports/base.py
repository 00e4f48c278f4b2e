"""The renderer interface (a name, a file extension and a pure render function) and what
every renderer words the same way: quantities, impacts, fixes, the "Fix first" list."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
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


_BINARY_UNITS = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)
_SUFFIXED_BYTES = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi)\b")
_MILLICORES = re.compile(r"(?<![\w.])(\d+)m\b")
_PLAIN_INT = re.compile(r"(?<![\w.])(\d{5,})(?![\w.])")
BYTE_RESOURCES = ("memory", "ephemeral-storage", "hugepages-")
WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
FIX_FIRST = 10  # findings in the "Fix first" list at the top of the HTML and terminal reports


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


@dataclass(frozen=True, slots=True)
class FixItem:
    """A finding of the "Fix first" list and its fix in one line (`fix_command`), if any."""

    finding: Mapping[str, Any]
    command: str | None

    @property
    def fix(self) -> str:
        """The command, else the state the finding's check asks for (its title)."""
        return self.command or str(self.finding["title"])


def fix_first(document: Document) -> list[FixItem]:
    """The findings to fix first, as the HTML and the terminal reports list them: the first
    FIX_FIRST of the document's order (severity, then GPU impact), each with its fix."""
    return [FixItem(f, fix_command(f)) for f in document["findings"][:FIX_FIRST]]


def _bytes(value: Decimal) -> str:
    """Bytes in the largest binary unit they reach: 256Gi, 29.9Gi, 512."""
    for unit, size in _BINARY_UNITS:
        if abs(value) >= size:
            scaled = value / size
            if scaled == scaled.to_integral_value():
                return f"{int(scaled)}{unit}"
            return f"{format(round(scaled, 1).normalize(), 'f')}{unit}"
    return number(int(value)) if value == value.to_integral_value() else number(float(value))


def _cores(value: Decimal) -> str:
    text = format(round(value, 2).normalize(), "f")
    return f"{text} core{'' if value == 1 else 's'}"


def quantity(value: object, resource: str) -> str:
    """A resource amount as a person reads it: memory in Gi/Mi, CPU in cores, GPUs counted."""
    if isinstance(value, bool):
        return str(value)
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return humanise(f"{resource}: {value}").split(": ", 1)[1]
    if resource.startswith(BYTE_RESOURCES):
        return _bytes(amount)
    if resource == "cpu":
        return _cores(amount)
    if resource in WHOLE_GPU_RESOURCES:
        return f"{number(value)} GPU{'' if amount == 1 else 's'}"
    return number(value)


def _suffixed(match: re.Match[str]) -> str:
    unit = dict(_BINARY_UNITS)[match.group(2)]
    return _bytes(Decimal(match.group(1)) * unit)


def humanise(text: str) -> str:
    """Quantities in a sentence made readable: `allocatable 31369508Ki` -> 29.9Gi, a memory
    clause's raw bytes -> Gi, a cpu clause's millicores -> cores. Display only: the JSON and
    the remediations keep the exact values."""
    clauses = []
    for clause in text.split(";"):
        head = clause.lstrip().split(":", 1)[0]
        clause = _SUFFIXED_BYTES.sub(_suffixed, clause)
        if head.startswith(BYTE_RESOURCES):
            clause = _PLAIN_INT.sub(lambda m: _bytes(Decimal(m.group(1))), clause)
        elif head == "cpu":
            clause = _MILLICORES.sub(lambda m: _cores(Decimal(m.group(1)) / 1000), clause)
        clauses.append(clause)
    return ";".join(clauses)


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
