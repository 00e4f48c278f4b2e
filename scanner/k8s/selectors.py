"""Label selectors (metav1.LabelSelector and plain maps) as the apiserver evaluates them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

# --------------------------------------------------------------------------- label selectors


@dataclass(frozen=True, slots=True)
class LabelExpression:
    """A matchExpressions entry (or a node selector requirement), read once."""

    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        key, operator, values = self.key, self.operator, self.values
        present = key in labels
        if operator == "In":
            return present and labels[key] in values
        if operator == "NotIn":
            return not present or labels[key] not in values
        if operator == "Exists":
            return present
        if operator == "DoesNotExist":
            return not present
        if operator in ("Gt", "Lt") and present and values:
            try:
                have, want = int(labels[key]), int(values[0])
            except ValueError:
                return False
            return have > want if operator == "Gt" else have < want
        return False


def label_expression(expr: Mapping[str, Any]) -> LabelExpression:
    return LabelExpression(
        str(expr.get("key", "")),
        str(expr.get("operator", "")),
        tuple(str(v) for v in as_list(expr.get("values"))),
    )


def expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return label_expression(expr).matches(labels)


def label_selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels AND matchExpressions. `{}` matches everything."""
    sel = as_mapping(selector)
    for key, value in str_map(sel.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    return all(
        expression_matches(as_mapping(expr), labels)
        for expr in as_list(sel.get("matchExpressions"))
    )


def map_selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """A plain map selector (Service.spec.selector, nodeSelector)."""
    return all(labels.get(k) == v for k, v in str_map(selector).items())


def select(
    snapshot: Snapshot, type_: str, namespace: str | None, selector: object
) -> tuple[Resource, ...]:
    """Objects of `type_` (in `namespace`, or everywhere when None) whose labels match a
    LabelSelector. Uses the label index for the first matchLabels pair."""
    sel = as_mapping(selector)
    match_labels = str_map(sel.get("matchLabels"))
    if match_labels:
        key = min(match_labels)
        candidates: Sequence[Resource] = snapshot.with_label(type_, key, match_labels[key])
        if namespace is not None:
            candidates = [r for r in candidates if r.ref.namespace == namespace]
    elif namespace is not None:
        candidates = snapshot.in_namespace(type_, namespace)
    else:
        candidates = snapshot.of(type_)
    return tuple(r for r in candidates if label_selector_matches(sel, r.labels))


def namespace_labels(snapshot: Snapshot, namespace: str) -> dict[str, str]:
    """The labels a namespaceSelector sees on a Namespace: its own, plus the immutable
    kubernetes.io/metadata.name label the API server sets on every Namespace, which is there
    even when the input has no Namespace objects."""
    found = snapshot.get("Namespace", "", namespace)
    labels = dict(found.labels) if found is not None else {}
    labels.setdefault("kubernetes.io/metadata.name", namespace)
    return labels
