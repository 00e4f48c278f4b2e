"""Diagnostics computed from the snapshot: the GPU inventory and why GPU pods are Pending.

Pure functions of the Snapshot, like the checks; the scan report carries their results in its
`diagnostics` section and `gpu-audit inventory` / `gpu-audit why-pending` print them.
"""

from __future__ import annotations

from typing import Any

from gpu_audit.diagnostics.fit import cluster_usage
from gpu_audit.diagnostics.inventory import build_inventory
from gpu_audit.diagnostics.pending import (
    PendingExplanation,
    explain_pending,
    pending_gpu_pods,
    resolve_target,
)
from gpu_audit.diagnostics.predicates import scheduling_context
from gpu_audit.snapshot import Snapshot

# DRA (resource.k8s.io): the devices drivers publish, the claims that hold them, the classes
# and templates the Pending pods' claims name. A cluster that does not serve the API is not an
# incomplete scan ("API not served").
DRA_TYPES = ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
# What the diagnostics read from a live cluster (PodGroup CRDs are optional).
DIAGNOSTIC_TYPES = (
    "Node",
    "Pod",
    "Namespace",
    "Event",
    "RuntimeClass",
    "PodGroup.scheduling.volcano.sh",
    "PodGroup.scheduling.x-k8s.io",
    *DRA_TYPES,
)
REQUIRED_TYPES = ("Node", "Pod")
# What a scan lists for its diagnostics section on top of what its checks read; the PodGroup
# CRDs are left out there so that a cluster without Volcano is not an incomplete scan.
SCAN_TYPES = ("Node", "Pod", "Namespace", "Event", "RuntimeClass", *DRA_TYPES)

__all__ = [
    "DIAGNOSTIC_TYPES",
    "REQUIRED_TYPES",
    "SCAN_TYPES",
    "build_inventory",
    "diagnostics_section",
    "explain_targets",
]


# Nodes shown per Pending pod in a scan report. The summary and histogram count every node;
# listing all of them would make a report of pending pods x nodes (5,000 nodes each).
# `gpu-audit why-pending` shows every node.
REPORT_NODES_PER_POD = 20


def diagnostics_section(snapshot: Snapshot) -> dict[str, Any]:
    """The report's `diagnostics`: the inventory and every Pending GPU pod's explanation
    (sorted by namespace and name), or null parts when the input has no Nodes or no Pods."""
    usage = cluster_usage(snapshot)
    inventory = build_inventory(snapshot, usage).as_dict() if snapshot.has("Node") else None
    pending = None
    if snapshot.has("Pod"):
        ctx = scheduling_context(snapshot, usage)
        pending = [
            explain_pending(snapshot, pod, ctx).as_dict(REPORT_NODES_PER_POD)
            for pod in pending_gpu_pods(snapshot, usage)
        ]
    return {"inventory": inventory, "pending_pods": pending}


def explain_targets(snapshot: Snapshot, target: str | None) -> list[PendingExplanation]:
    """`gpu-audit why-pending`: the named pod or workload (see resolve_target), or every
    Pending GPU pod when `target` is None."""
    usage = cluster_usage(snapshot)
    ctx = scheduling_context(snapshot, usage)
    if target is None:
        return [explain_pending(snapshot, p, ctx) for p in pending_gpu_pods(snapshot, usage)]
    return [explain_pending(snapshot, p, ctx, t) for p, t in resolve_target(snapshot, target)]
