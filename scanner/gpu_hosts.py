"""Which nodes are GPU hosts, and their GPU quantities as the kubelet reports them.

Wider than `gpu_nodes`: it also counts cloud-labelled GPU instances that a dump shows before
(or without) GFD/NFD labels. Used by the NODE, SCHED and COST checks, through `gpu_audit.api`.
"""

from __future__ import annotations

from decimal import Decimal

from gpu_audit.k8s import (
    AMD_GPU,
    QuantityError,
    as_mapping,
    is_gpu_node,
    is_gpu_resource,
    parse_quantity,
)
from gpu_audit.karpenter import GPU_COUNT_LABELS
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

# Cloud labels that mark GPU instances before (or without) GFD/NFD. The shared is_gpu_node
# only knows the NVIDIA/NFD labels and capacity, which a GKE or AKS node without the GPU
# Operator may not carry in a dump.
_ACCELERATOR_LABELS = (
    "cloud.google.com/gke-accelerator",
    "kubernetes.azure.com/accelerator",
)


def is_gpu_host(node: Resource) -> bool:
    """A node with (or meant to have) NVIDIA GPUs, including cloud-labelled ones."""
    if is_gpu_node(node):
        return True
    labels = node.labels
    if any(labels.get(key) for key in _ACCELERATOR_LABELS):
        return labels.get("kubernetes.azure.com/accelerator", "nvidia") == "nvidia"
    return any(_positive_int(labels.get(key)) for key in GPU_COUNT_LABELS)


def gpu_hosts(snapshot: Snapshot) -> tuple[Resource, ...]:
    return tuple(n for n in snapshot.of("Node") if is_gpu_host(n))


def _positive_int(value: str | None) -> bool:
    try:
        return value is not None and int(value) > 0
    except ValueError:
        return False


def gpu_quantities(node: Resource, section: str) -> dict[str, Decimal]:
    """NVIDIA GPU resources (whole, shared, MIG) in status.capacity or status.allocatable."""
    out: dict[str, Decimal] = {}
    values = node.status.get(section)
    if section == "allocatable" and values is None:
        # The API server defaults a missing allocatable to capacity (SetDefaults_NodeStatus),
        # so a dump written by hand must be read the way the cluster would store it.
        values = node.status.get("capacity")
    for name, value in as_mapping(values).items():
        key = str(name)
        if not is_gpu_resource(key) or key == AMD_GPU:
            continue
        try:
            out[key] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def has_resource_status(node: Resource) -> bool:
    """Whether the object carries live status with resources (a dump, not a manifest)."""
    status = node.status
    return "capacity" in status or "allocatable" in status
