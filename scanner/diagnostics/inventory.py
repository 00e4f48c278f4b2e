"""The GPU inventory: per node pool and GPU product, what exists, what is used, what is wasted.

Counts follow the scheduler (see fit.py): requested = the effective requests of bound,
unfinished pods; idle = allocatable minus requested; the fragmentation columns say how many
pods of 1, 2, 4 and 8 units of a GPU resource still fit on the ready, uncordoned nodes.
GPUs the NVIDIA DRA driver publishes in ResourceSlices are rows of their own
("gpu.nvidia.com/gpu (DRA)"): published devices as capacity and allocatable, devices allocated
to ResourceClaims as requested (see dra.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.diagnostics.dra import DRA_SUFFIX, dra_inventory, with_dra
from gpu_audit.diagnostics.fit import (
    ZERO,
    ClusterUsage,
    NodeUsage,
    as_number,
    cluster_usage,
    finished_gpu_holder,
    gpu_part,
    is_finished,
    node_name_of,
)
from gpu_audit.k8s.fabric import node_fabric
from gpu_audit.k8s.gpu_hosts import is_gpu_node
from gpu_audit.k8s.gpu_resources import (
    NVIDIA_GPU,
    NVIDIA_MIG_PREFIX,
    is_gpu_resource,
)
from gpu_audit.k8s.quantities import add_quantities
from gpu_audit.k8s.scheduling import (
    node_is_ready,
    node_is_schedulable,
)
from gpu_audit.model import Resource
from gpu_audit.redact import redact_tree
from gpu_audit.snapshot import Snapshot

FIT_SIZES = (1, 2, 4, 8)
# Node labels naming the node group, per provider, most specific first.
POOL_LABELS = (
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "node.kubernetes.io/instance-type",
)
NO_POOL = "(no pool label)"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"


@dataclass(frozen=True, slots=True)
class GpuResourceCounts:
    """One GPU resource name (nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-1g.5gb...)
    summed over the nodes of a pool."""

    resource: str
    capacity: Decimal
    allocatable: Decimal
    requested: Decimal
    idle: Decimal
    held_by_finished: Decimal
    fits: tuple[tuple[int, int], ...]  # (pod size, how many such pods still fit)

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "capacity": as_number(self.capacity),
            "allocatable": as_number(self.allocatable),
            "requested": as_number(self.requested),
            "idle": as_number(self.idle),
            "held_by_finished": as_number(self.held_by_finished),
            "fits": {str(size): count for size, count in self.fits},
        }


@dataclass(frozen=True, slots=True)
class PoolInventory:
    pool: str
    product: str
    nodes: tuple[str, ...]
    ready: int
    cordoned: int
    mig_strategy: str
    mig_profiles: tuple[tuple[str, int], ...]
    sharing: str
    replicas: str
    resources: tuple[GpuResourceCounts, ...]
    # Fabric devices per node (EFA, RDMA, GKE networks): resource -> "32" or "0-32".
    fabric: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "product": self.product,
            "nodes": list(self.nodes),
            "ready": self.ready,
            "cordoned": self.cordoned,
            "mig": {"strategy": self.mig_strategy, "profiles": dict(self.mig_profiles)},
            "sharing": {"mode": self.sharing, "replicas": self.replicas or None},
            "resources": [r.as_dict() for r in self.resources],
            "fabric": dict(self.fabric),
        }


@dataclass(frozen=True, slots=True)
class GpuInventory:
    pools: tuple[PoolInventory, ...]
    totals: tuple[GpuResourceCounts, ...]
    finished_gpu_pods: tuple[str, ...]  # Succeeded/Failed pods that requested GPUs

    def as_dict(self) -> dict[str, Any]:
        """The inventory as `inventory` and the report show it, through the redaction of
        gpu_audit.redact (pool names and products are label values)."""
        inventory: dict[str, Any] = redact_tree(
            {
                "pools": [p.as_dict() for p in self.pools],
                "totals": [t.as_dict() for t in self.totals],
                "finished_gpu_pods": list(self.finished_gpu_pods),
            }
        )
        return inventory


def pool_of(node: Resource) -> str:
    labels = node.labels
    return next((labels[key] for key in POOL_LABELS if labels.get(key)), NO_POOL)


def _joined(values: Iterable[str]) -> str:
    return ",".join(sorted({v for v in values if v}))


def _mig_profiles(nodes: Iterable[NodeUsage]) -> dict[str, int]:
    """Mixed strategy: one nvidia.com/mig-<profile> resource per profile. Single strategy: the
    slices are advertised as nvidia.com/gpu and GFD names the profile in the product label
    (<model>-MIG-<profile>)."""
    profiles: dict[str, int] = defaultdict(int)
    for usage in nodes:
        for name, value in usage.allocatable.items():
            if name.startswith(NVIDIA_MIG_PREFIX):
                profiles[name[len(NVIDIA_MIG_PREFIX) :]] += int(value)
        product = usage.node.labels.get(PRODUCT_LABEL, "")
        if usage.node.labels.get(MIG_STRATEGY_LABEL) == "single" and "-MIG-" in product:
            profiles[product.split("-MIG-", 1)[1]] += int(usage.allocatable.get(NVIDIA_GPU, ZERO))
    return dict(profiles)


def _usable(usage: NodeUsage) -> bool:
    return node_is_ready(usage.node) is not False and node_is_schedulable(usage.node)


def _counts(
    resource: str, nodes: Iterable[NodeUsage], held: Mapping[str, Mapping[str, Decimal]]
) -> GpuResourceCounts:
    capacity = allocatable = requested = idle = held_total = ZERO
    fits = dict.fromkeys(FIT_SIZES, 0)
    for usage in nodes:
        capacity += usage.capacity.get(resource, ZERO)
        allocatable += usage.allocatable.get(resource, ZERO)
        requested += usage.requested.get(resource, ZERO)
        free = max(usage.free(resource), ZERO)
        idle += free
        held_total += held.get(usage.node.ref.name, {}).get(resource, ZERO)
        if _usable(usage):
            for size in FIT_SIZES:
                fits[size] += int(free // size)
    return GpuResourceCounts(
        resource, capacity, allocatable, requested, idle, held_total, tuple(fits.items())
    )


def _fabric(nodes: Iterable[NodeUsage]) -> tuple[tuple[str, str], ...]:
    """Fabric devices per node of the pool, per resource: one count, or the range when the
    nodes differ (0 for nodes without the resource)."""
    per_node = [node_fabric(usage.node) for usage in nodes]
    names = sorted({name for fabric in per_node for name in fabric})
    out = []
    for name in names:
        counts = [int(fabric.get(name, ZERO)) for fabric in per_node]
        low, high = min(counts), max(counts)
        out.append((name, str(low) if low == high else f"{low}-{high}"))
    return tuple(out)


def _gpu_resources(nodes: Iterable[NodeUsage]) -> list[str]:
    names: set[str] = set()
    for usage in nodes:
        for section in (usage.capacity, usage.allocatable, usage.requested):
            names.update(n for n in section if is_gpu_resource(n) or n.endswith(DRA_SUFFIX))
    return sorted(names)


def _held(usage: ClusterUsage) -> dict[str, dict[str, Decimal]]:
    """GPUs per node and resource that bound pods keep although their GPU containers exited."""
    held: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for node in usage.nodes.values():
        for pod in node.pods:
            if finished_gpu_holder(pod):
                add_quantities(held[node_name_of(pod)], gpu_part(usage.request_of(pod)))
    return held


def build_inventory(snapshot: Snapshot, usage: ClusterUsage | None = None) -> GpuInventory:
    usage = usage or cluster_usage(snapshot)
    dra = dra_inventory(snapshot)  # GPUs of the NVIDIA DRA driver, counted as resources
    groups: dict[tuple[str, str], list[NodeUsage]] = defaultdict(list)
    for node in snapshot.of("Node"):
        devices = dra.get(node.ref.name)
        if is_gpu_node(node) or devices is not None:
            product = node.labels.get(PRODUCT_LABEL) or (devices.product if devices else "")
            key = (pool_of(node), product or "(unknown product)")
            groups[key].append(with_dra(usage.nodes[node.ref.name], devices))
    held = _held(usage)
    for name, devices in dra.items():
        add_quantities(held.setdefault(name, {}), devices.held)
    pools = []
    for (pool, product), members in sorted(groups.items()):
        labels = [m.node.labels for m in members]
        pools.append(
            PoolInventory(
                pool=pool,
                product=product,
                nodes=tuple(m.node.ref.name for m in members),
                ready=sum(1 for m in members if node_is_ready(m.node) is True),
                cordoned=sum(1 for m in members if not node_is_schedulable(m.node)),
                mig_strategy=_joined(x.get(MIG_STRATEGY_LABEL, "none") for x in labels),
                mig_profiles=tuple(sorted(_mig_profiles(members).items())),
                sharing=_joined(x.get(SHARING_LABEL, "none") for x in labels),
                replicas=_joined(x.get(REPLICAS_LABEL, "") for x in labels),
                resources=tuple(_counts(r, members, held) for r in _gpu_resources(members)),
                fabric=_fabric(members),
            )
        )
    everything = [m for members in groups.values() for m in members]
    finished = sorted(
        f"{p.ref.namespace}/{p.ref.name}"
        for p in snapshot.of("Pod")
        if is_finished(p) and gpu_part(usage.request_of(p))
    )
    return GpuInventory(
        pools=tuple(pools),
        totals=tuple(_counts(r, everything, held) for r in _gpu_resources(everything)),
        finished_gpu_pods=tuple(finished),
    )
