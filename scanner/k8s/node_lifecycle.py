"""Node lifecycle as taints show it: which taints are transient (set while a node joins, is
cordoned or drained) rather than a dedication of the node, and whether a node is still joining.

Used by the NODE, SCHED and COST checks, through `gpu_audit.api`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_audit.k8s.scheduling import (
    Taint,
    node_is_ready,
    node_taints,
)
from gpu_audit.model import Resource

HARD_EFFECTS = ("NoSchedule", "NoExecute")

# Condition and lifecycle taints: set and removed by the node lifecycle controller, cloud
# controller, cordon, Karpenter or cluster-autoscaler. They are neither a dedication of the node
# nor something a workload should tolerate by hand.
_TRANSIENT_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
_TRANSIENT_TAINT_KEYS = frozenset(
    {
        "karpenter.sh/disrupted",
        "karpenter.sh/unregistered",
        "ToBeDeletedByClusterAutoscaler",
        "DeletionCandidateOfClusterAutoscaler",
    }
)

# Taints a node carries while it is still joining; its device plugin has not registered yet.
_BOOTSTRAP_TAINTS = frozenset(
    {"node.cloudprovider.kubernetes.io/uninitialized", "karpenter.sh/unregistered"}
)


def is_transient_taint(taint: Taint) -> bool:
    return taint.key.startswith(_TRANSIENT_TAINT_PREFIXES) or taint.key in _TRANSIENT_TAINT_KEYS


def dedicating_taints(
    taints: Sequence[Taint], effects: Sequence[str] = HARD_EFFECTS
) -> list[Taint]:
    """Taints with one of `effects` that keep ordinary pods off for good (not lifecycle ones)."""
    return [t for t in taints if t.effect in effects and not is_transient_taint(t)]


def is_bootstrapping(node: Resource) -> bool:
    """NotReady, or still carrying a join-time taint. Checks have no clock, so this replaces
    the catalogue's "younger than N minutes" guards."""
    return node_is_ready(node) is False or is_joining(node)


def is_joining(node: Resource) -> bool:
    """Still carrying a join-time taint: not ready yet, rather than broken."""
    return any(t.key in _BOOTSTRAP_TAINTS for t in node_taints(node))
