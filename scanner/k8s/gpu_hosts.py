"""Which nodes are GPU hosts, and their GPU quantities as the kubelet reports them.

Wider than `gpu_nodes`: it also counts cloud-labelled GPU instances that a dump shows before
(or without) GFD/NFD labels. Used by the NODE, SCHED and COST checks, through `gpu_audit.api`.
"""

from __future__ import annotations

from decimal import Decimal

from gpu_audit.k8s.gpu_resources import (
    AMD_GPU,
    is_gpu_resource,
)
from gpu_audit.k8s.karpenter import GPU_COUNT_LABELS
from gpu_audit.k8s.objects import as_mapping
from gpu_audit.k8s.quantities import (
    QuantityError,
    parse_quantity,
)
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

GPU_NODE_LABELS = (
    "nvidia.com/gpu.present",
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)


def is_gpu_node(node: Resource) -> bool:
    """A node that has, or should have, NVIDIA GPUs: GFD/NFD labels or GPU capacity.

    Works without capacity on purpose: nodes whose device plugin never registered still count.
    """
    labels = node.labels
    if any(labels.get(key) == "true" for key in GPU_NODE_LABELS):
        return True
    if any(k.startswith(("nvidia.com/gpu.", "nvidia.com/mig.")) for k in labels):
        return True
    for section in ("capacity", "allocatable"):
        for name, value in as_mapping(node.status.get(section)).items():
            if is_gpu_resource(str(name)) and str(name) != AMD_GPU:
                try:
                    if parse_quantity(value) > 0:
                        return True
                except QuantityError:
                    continue
    return False


def gpu_nodes(snapshot: Snapshot) -> tuple[Resource, ...]:
    # Many checks ask, some once per workload: the answer is kept per snapshot.
    return snapshot.derived(
        ("gpu_hosts.gpu_nodes",), lambda s: tuple(n for n in s.of("Node") if is_gpu_node(n))
    )


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
    return snapshot.derived(
        ("gpu_hosts.gpu_hosts",), lambda s: tuple(n for n in s.of("Node") if is_gpu_host(n))
    )


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
