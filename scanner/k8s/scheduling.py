"""Taints, tolerations and node affinity, evaluated exactly as the scheduler does."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.selectors import LabelExpression, label_expression
from gpu_audit.model import Resource

# --------------------------------------------------------------------------- taints and nodes

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


def node_taints(node: Resource) -> tuple[Taint, ...]:
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in map(as_mapping, as_list(node.spec.get("taints")))
    )


def tolerates(tolerations: Sequence[Any], taint: Taint) -> bool:
    """The scheduler's ToleratesTaint: empty key + Exists matches every taint, an empty
    effect matches every effect, operator defaults to Equal."""
    for raw in tolerations:
        tol = as_mapping(raw)
        effect = str(tol.get("effect") or "")
        if effect and effect != taint.effect:
            continue
        key = str(tol.get("key") or "")
        operator = str(tol.get("operator") or "Equal")
        if operator == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and str(tol.get("value") or "") == taint.value:
            return True
    return False


def untolerated_taints(pod_spec: Mapping[str, Any], node: Resource) -> tuple[Taint, ...]:
    tolerations = as_list(pod_spec.get("tolerations"))
    return tuple(
        t
        for t in node_taints(node)
        if t.effect in SCHEDULING_EFFECTS and not tolerates(tolerations, t)
    )


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """A pod spec's nodeSelector and required node affinity, read once: checks and
    diagnostics test one spec against thousands of nodes."""

    selector: tuple[tuple[str, str], ...]
    # Per nodeSelectorTerm (ORed): its matchExpressions and matchFields; None when the spec
    # has no required node affinity.
    terms: tuple[tuple[tuple[LabelExpression, ...], tuple[LabelExpression, ...]], ...] | None

    def matches(self, node: Resource) -> bool:
        labels = node.labels
        for key, value in self.selector:
            if labels.get(key) != value:
                return False
        if self.terms is None:
            return True
        return any(_term_matches(e, f, node) for e, f in self.terms)

    def required_values(self) -> dict[str, frozenset[str]]:
        """Label values a node must have to match, per key: the nodeSelector's, and those of
        the `In` expressions of the only nodeSelectorTerm. A node lacking one does not match;
        one having them all may (the other expressions decide)."""
        required = {key: frozenset((value,)) for key, value in self.selector}
        if self.terms is not None and len(self.terms) == 1:
            expressions, fields = self.terms[0]
            for e in expressions if expressions or fields else ():
                if e.operator == "In":
                    allowed = frozenset(e.values)
                    required[e.key] = required.get(e.key, allowed) & allowed
        return required


def _term_matches(
    expressions: tuple[LabelExpression, ...], fields: tuple[LabelExpression, ...], node: Resource
) -> bool:
    if not expressions and not fields:
        return False  # an empty term matches no objects
    labels = node.labels
    if not all(e.matches(labels) for e in expressions):
        return False
    name_labels = {"metadata.name": node.ref.name}
    return all(f.matches(name_labels) for f in fields)


def _required_node_affinity(pod_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(
        as_mapping(as_mapping(pod_spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )


def node_affinity_of(pod_spec: Mapping[str, Any]) -> NodeAffinity:
    """The spec's node placement rules, to match against many nodes."""
    required = _required_node_affinity(pod_spec)
    terms = None
    if required:
        terms = tuple(
            (
                tuple(label_expression(as_mapping(e)) for e in as_list(t.get("matchExpressions"))),
                tuple(label_expression(as_mapping(f)) for f in as_list(t.get("matchFields"))),
            )
            for t in map(as_mapping, as_list(required.get("nodeSelectorTerms")))
        )
    return NodeAffinity(tuple(str_map(pod_spec.get("nodeSelector")).items()), terms)


# The last spec read by node_affinity_matches: callers test one spec against every node in
# turn, and snapshot objects are read-only, so the identity of the spec is its key.
_last_affinity: list[tuple[Mapping[str, Any], NodeAffinity]] = []


def node_affinity_matches(pod_spec: Mapping[str, Any], node: Resource) -> bool:
    """nodeSelector AND requiredDuringSchedulingIgnoredDuringExecution (terms ORed)."""
    if _last_affinity and _last_affinity[0][0] is pod_spec:
        return _last_affinity[0][1].matches(node)
    affinity = node_affinity_of(pod_spec)
    _last_affinity[:] = [(pod_spec, affinity)]
    return affinity.matches(node)


def node_affinity_keys(pod_spec: Mapping[str, Any]) -> tuple[frozenset[str], bool]:
    """The node label keys node_affinity_matches may read for this pod spec (nodeSelector and
    required node affinity), and whether a term selects nodes by field (metadata.name)."""
    keys = {str(k) for k in as_mapping(pod_spec.get("nodeSelector"))}
    by_field = False
    required = _required_node_affinity(pod_spec)
    for term in map(as_mapping, as_list(required.get("nodeSelectorTerms"))):
        expressions = as_list(term.get("matchExpressions"))
        keys.update(str(as_mapping(e).get("key", "")) for e in expressions)
        by_field = by_field or bool(as_list(term.get("matchFields")))
    return frozenset(keys), by_field


def node_is_schedulable(node: Resource) -> bool:
    return node.spec.get("unschedulable") is not True


def node_is_ready(node: Resource) -> bool | None:
    """True/False from the Ready condition; None when the object carries no status."""
    for cond in map(as_mapping, as_list(node.status.get("conditions"))):
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return None


def schedules_on(pod_spec: Mapping[str, Any], node: Resource) -> bool:
    """Whether the node passes the pod's placement rules (selectors, affinity, taints),
    ignoring resource fit."""
    return node_affinity_matches(pod_spec, node) and not untolerated_taints(pod_spec, node)


def schedules_on_key(pod_spec: Mapping[str, Any]) -> str:
    """What schedules_on reads of a pod spec (nodeSelector, node affinity, tolerations) as one
    comparable string: pod specs with one key schedule on the same nodes."""
    affinity = as_mapping(pod_spec.get("affinity")).get("nodeAffinity")
    parts = [pod_spec.get("nodeSelector"), affinity, pod_spec.get("tolerations")]
    return json.dumps(parts, sort_keys=True, default=_plain)


def _plain(value: object) -> object:
    """Snapshot values are read-only mappings and tuples; JSON wants dicts and lists."""
    return dict(value) if isinstance(value, Mapping) else str(value)


# --------------------------------------------------------------------------- DaemonSet pods

# Tolerations the DaemonSet controller adds to every pod it creates (AddOrUpdateDaemonPodTolerations;
# kubernetes.io/docs/concepts/workloads/controllers/daemonset/#taints-and-tolerations).
# not-ready and unreachable carry no tolerationSeconds: daemon pods are never evicted for them.
DAEMONSET_POD_TOLERATIONS: tuple[Mapping[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
# Added only to the pods of a DaemonSet with spec.hostNetwork: true.
DAEMONSET_HOST_NETWORK_TOLERATION: Mapping[str, str] = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def daemonset_pod_tolerations(pod_spec: Mapping[str, Any]) -> list[Any]:
    """The tolerations a DaemonSet's pods really carry: the template's, plus those the
    DaemonSet controller adds (network-unavailable only with host networking)."""
    out: list[Any] = [*as_list(pod_spec.get("tolerations")), *DAEMONSET_POD_TOLERATIONS]
    if pod_spec.get("hostNetwork") is True:
        out.append(DAEMONSET_HOST_NETWORK_TOLERATION)
    return out


def daemonset_untolerated_taints(pod_spec: Mapping[str, Any], node: Resource) -> tuple[Taint, ...]:
    """NoSchedule/NoExecute taints of the node that a pod of this DaemonSet pod spec does not
    tolerate, counting the DaemonSet controller's automatic tolerations. tolerationSeconds only
    bounds how long a NoExecute taint is tolerated once the pod runs: it still tolerates it
    for placement."""
    tolerations = daemonset_pod_tolerations(pod_spec)
    return tuple(
        t
        for t in node_taints(node)
        if t.effect in SCHEDULING_EFFECTS and not tolerates(tolerations, t)
    )


def daemonset_schedules_on(pod_spec: Mapping[str, Any], node: Resource) -> bool:
    """Whether the DaemonSet controller places a pod of this pod spec on the node
    (NodeShouldRunDaemonPod: spec.nodeName, nodeSelector and required node affinity, taints with
    the automatic daemon tolerations), ignoring resource fit."""
    node_name = str(pod_spec.get("nodeName") or "")
    if node_name and node_name != node.ref.name:
        return False
    return node_affinity_matches(pod_spec, node) and not daemonset_untolerated_taints(
        pod_spec, node
    )
