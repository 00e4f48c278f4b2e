"""What only the NODE checks share: integer labels and the nodes whose GPUs a DRA driver
publishes. GPU hosts, lifecycle taints and NodePools come from `gpu_audit.api`."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_audit.api import Snapshot, as_list


def label_int(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


def dra_gpu_nodes(snapshot: Snapshot) -> frozenset[str]:
    """Nodes whose GPUs the NVIDIA DRA driver publishes (not its ComputeDomain slices)."""
    names: set[str] = set()
    for slice_ in snapshot.of("ResourceSlice"):
        spec = slice_.spec
        if spec.get("driver") == "gpu.nvidia.com" and as_list(spec.get("devices")):
            names.add(str(spec.get("nodeName", "")))
    return frozenset(names)
