"""What only the NODE checks share: integer labels and the nodes whose GPUs a DRA driver
publishes. GPU hosts, lifecycle taints and NodePools come from `gpu_audit.api`."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_audit.api import NVIDIA_GPU_DRIVER, Snapshot, node_devices


def label_int(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


def dra_gpu_nodes(snapshot: Snapshot) -> frozenset[str]:
    """Nodes whose GPUs the NVIDIA DRA driver publishes (not its ComputeDomain slices)."""
    return frozenset(node_devices(snapshot, NVIDIA_GPU_DRIVER))
