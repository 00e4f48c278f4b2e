"""The renderer interface: a name, a file extension and a pure render function."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Document = Mapping[str, Any]

# How each role of a finding's related objects is introduced, in the document's order.
RELATED_LABELS = {
    "symptom": "affects",
    "selected-by": "selects",
    "owner": "owned by",
    "cause": "caused by",
}


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
