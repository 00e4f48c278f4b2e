"""Spot and preemptible capacity: the node labels and taints each provider marks it with, and
whether a pod template pins or opts in to it. Used by the DIST and COST checks, through
`gpu_audit.api`.
"""

from __future__ import annotations

from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
    str_map,
)
from gpu_audit.k8s.pods import PodTemplate

# Node labels (and the values) that mark spot / preemptible capacity, per provider.
SPOT_LABELS: dict[str, frozenset[str]] = {
    "karpenter.sh/capacity-type": frozenset({"spot"}),
    "eks.amazonaws.com/capacityType": frozenset({"SPOT"}),
    "cloud.google.com/gke-spot": frozenset({"true"}),
    "cloud.google.com/gke-preemptible": frozenset({"true"}),
    "kubernetes.azure.com/scalesetpriority": frozenset({"spot"}),
}
# Taints only spot nodes carry: tolerating one is an opt-in to spot capacity.
SPOT_TAINT_KEYS = frozenset(
    {
        "kubernetes.azure.com/scalesetpriority",
        "cloud.google.com/gke-spot",
        "cloud.google.com/gke-preemptible",
    }
)


def _required_terms(template: PodTemplate) -> list[dict[str, object]]:
    affinity = as_mapping(as_mapping(template.spec.get("affinity")).get("nodeAffinity"))
    required = as_mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    return [dict(as_mapping(t)) for t in as_list(required.get("nodeSelectorTerms"))]


def _expression_allows_spot(expr: dict[str, object]) -> bool:
    wanted = SPOT_LABELS.get(str(expr.get("key", "")))
    if wanted is None or expr.get("operator") != "In":
        return False
    return any(str(v) in wanted for v in as_list(expr.get("values")))


def runs_on_spot(template: PodTemplate) -> bool:
    """Whether the template pins or opts in to spot/preemptible nodes."""
    selector = str_map(template.spec.get("nodeSelector"))
    if any(selector.get(k) in v for k, v in SPOT_LABELS.items()):
        return True
    for term in _required_terms(template):
        expressions = [dict(as_mapping(e)) for e in as_list(term.get("matchExpressions"))]
        if any(_expression_allows_spot(e) for e in expressions):
            return True
    return any(
        str(as_mapping(t).get("key", "")) in SPOT_TAINT_KEYS
        for t in as_list(template.spec.get("tolerations"))
    )
