from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    format_quantity,
    gpu_hosts,
    gpu_quantities,
    has_resource_status,
    is_bootstrapping,
    passed,
)
from gpu_audit.checks.nodes._common import label_int

_SHARED = "nvidia.com/gpu.shared"
_WHOLE = "nvidia.com/gpu"


@check(
    id="GPU-NODE-002",
    title="Allocatable GPUs equal capacity, and capacity equals what GFD counted on the node",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=("Node",),
    rationale="""
        Kubelet reports every device the plugin registered as capacity and only the healthy
        ones as allocatable, so allocatable below capacity means GPUs were marked unhealthy
        (XID errors) and the scheduler silently lost them. Capacity that differs from GFD's
        gpu.count x gpu.replicas, or a gpu.count below the instance type's GPU count, means a
        GPU fell off the bus or the plugin runs a stale sharing config.
    """,
    detection="""
        Live (nodes with status): for every NVIDIA GPU resource in capacity, allocatable lower
        than capacity fails high. Under MIG strategy none or single, capacity of
        nvidia.com/gpu.shared (when positive; the renameByDefault layout) or else nvidia.com/gpu
        must equal nvidia.com/gpu.count x max(1, nvidia.com/gpu.replicas), and with strategy
        none gpu.count must not be below karpenter.k8s.aws/instance-gpu-count (medium). A stale
        or absent nvidia.com/gpu key next to nvidia.com/gpu.shared is not a mismatch. No
        built-in instance-type table: only the Karpenter label is trusted. Nodes that are
        NotReady or still joining are skipped (no clock for the catalogue's 2-minute guard).
    """,
    severity_evidence="""
        High when allocatable is below capacity: the kubelet has marked those GPUs unhealthy
        and the scheduler lost them. Medium when capacity differs from GFD's count x replicas
        or GFD counts fewer GPUs than the Karpenter instance type has: concrete, but the node
        still serves the GPUs it advertises. Nodes NotReady or joining are not judged, and MIG
        mixed nodes are not compared with GFD's count.
    """,
    remediation="""
        kubectl describe node $name
        # then: the device plugin logs on $name (grep -i -E 'xid|unhealthy'), and
        # kubectl drain $name --ignore-daemonsets --delete-emptydir-data to reset or replace GPUs
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/issues/58",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/README.md",
    ),
)
def gpu_capacity_matches_gfd_and_health(snapshot: Snapshot) -> Iterator[Result]:
    for node in gpu_hosts(snapshot):
        capacity = gpu_quantities(node, "capacity")
        if not has_resource_status(node) or is_bootstrapping(node) or not any(capacity.values()):
            continue  # no plugin advertising at all is GPU-NODE-001's finding
        problems = [*_unhealthy(node, capacity), *_count_mismatch(node, capacity)]
        if not problems:
            yield passed(node, "allocatable GPUs equal capacity and GFD's count", path="status")
        for message, severity in problems:
            yield failed(node, message, path="status", severity=severity)


def _unhealthy(node: Resource, capacity: dict[str, Decimal]) -> Iterator[tuple[str, Severity]]:
    allocatable = gpu_quantities(node, "allocatable")
    for name, total in sorted(capacity.items()):
        free = allocatable.get(name, Decimal(0))
        if free < total:
            lost = format_quantity(total - free)
            yield (
                f"{lost} of {format_quantity(total)} {name} unhealthy: capacity exceeds allocatable",
                Severity.HIGH,
            )


def _count_mismatch(node: Resource, capacity: dict[str, Decimal]) -> Iterator[tuple[str, Severity]]:
    labels = node.labels
    strategy = labels.get("nvidia.com/mig.strategy", "none")
    count = label_int(labels, "nvidia.com/gpu.count")
    if strategy not in ("none", "single") or count is None:
        return
    replicas = max(1, label_int(labels, "nvidia.com/gpu.replicas") or 1)
    key = _SHARED if capacity.get(_SHARED, Decimal(0)) > 0 else _WHOLE
    have = capacity.get(key, Decimal(0))
    if have != count * replicas:
        yield (
            f"capacity {key}={format_quantity(have)} but GFD counts {count} GPUs x {replicas} replicas",
            Severity.MEDIUM,
        )
    expected = label_int(labels, "karpenter.k8s.aws/instance-gpu-count")
    if strategy == "none" and expected and count < expected:
        yield (
            f"GFD counts {count} GPUs but the instance type has {expected}",
            Severity.MEDIUM,
        )
