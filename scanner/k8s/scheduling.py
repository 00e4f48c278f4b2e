"""Taints, tolerations and node affinity, evaluated exactly as the scheduler does."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.selectors import expression_matches, map_selector_matches
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


def _node_selector_term_matches(term: Mapping[str, Any], node: Resource) -> bool:
    expressions = as_list(term.get("matchExpressions"))
    fields = as_list(term.get("matchFields"))
    if not expressions and not fields:
        return False  # an empty term matches no objects
    labels = node.labels
    if not all(expression_matches(as_mapping(e), labels) for e in expressions):
        return False
    name_labels = {"metadata.name": node.ref.name}
    return all(expression_matches(as_mapping(f), name_labels) for f in fields)


def node_affinity_matches(pod_spec: Mapping[str, Any], node: Resource) -> bool:
    """nodeSelector AND requiredDuringSchedulingIgnoredDuringExecution (terms ORed)."""
    if not map_selector_matches(pod_spec.get("nodeSelector"), node.labels):
        return False
    required = as_mapping(
        as_mapping(as_mapping(pod_spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    if not required:
        return True
    terms = [as_mapping(t) for t in as_list(required.get("nodeSelectorTerms"))]
    return any(_node_selector_term_matches(t, node) for t in terms)


def node_affinity_keys(pod_spec: Mapping[str, Any]) -> tuple[frozenset[str], bool]:
    """The node label keys node_affinity_matches may read for this pod spec (nodeSelector and
    required node affinity), and whether a term selects nodes by field (metadata.name)."""
    keys = {str(k) for k in as_mapping(pod_spec.get("nodeSelector"))}
    by_field = False
    required = as_mapping(
        as_mapping(as_mapping(pod_spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
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
