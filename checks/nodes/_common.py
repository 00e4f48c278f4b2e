"""What the NODE (and SCHED) checks agree on: which nodes and Karpenter NodePools are GPU
capacity, which taints are transient, and how GPU quantities read off a node."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

from gpu_audit.api import (
    AMD_GPU,
    QuantityError,
    Resource,
    Snapshot,
    Taint,
    as_list,
    as_mapping,
    is_gpu_node,
    is_gpu_resource,
    node_is_ready,
    node_taints,
    parse_quantity,
    str_map,
)

NODEPOOL = "NodePool.karpenter.sh"
HARD_EFFECTS = ("NoSchedule", "NoExecute")

# Cloud labels that mark GPU instances before (or without) GFD/NFD. The shared is_gpu_node
# only knows the NVIDIA/NFD labels and capacity, which a GKE or AKS node without the GPU
# Operator may not carry in a dump.
_ACCELERATOR_LABELS = (
    "cloud.google.com/gke-accelerator",
    "kubernetes.azure.com/accelerator",
)
_GPU_COUNT_LABELS = ("karpenter.k8s.aws/instance-gpu-count", "karpenter.azure.com/sku-gpu-count")

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


def is_gpu_host(node: Resource) -> bool:
    """A node with (or meant to have) NVIDIA GPUs, including cloud-labelled ones."""
    if is_gpu_node(node):
        return True
    labels = node.labels
    if any(labels.get(key) for key in _ACCELERATOR_LABELS):
        return labels.get("kubernetes.azure.com/accelerator", "nvidia") == "nvidia"
    return any(_positive_int(labels.get(key)) for key in _GPU_COUNT_LABELS)


def gpu_hosts(snapshot: Snapshot) -> tuple[Resource, ...]:
    return tuple(n for n in snapshot.of("Node") if is_gpu_host(n))


def _positive_int(value: str | None) -> bool:
    try:
        return value is not None and int(value) > 0
    except ValueError:
        return False


def is_transient_taint(taint: Taint) -> bool:
    return taint.key.startswith(_TRANSIENT_TAINT_PREFIXES) or taint.key in _TRANSIENT_TAINT_KEYS


def dedicating_taints(
    taints: Sequence[Taint], effects: Sequence[str] = HARD_EFFECTS
) -> list[Taint]:
    """Taints with one of `effects` that keep ordinary pods off for good (not lifecycle ones)."""
    return [t for t in taints if t.effect in effects and not is_transient_taint(t)]


def raw_taints(items: object) -> tuple[Taint, ...]:
    """Taints from a raw list (Node.spec.taints or a NodePool template)."""
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in map(as_mapping, as_list(items))
    )


# --------------------------------------------------------------------------- node quantities


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


def label_int(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


# --------------------------------------------------------------------------- Karpenter NodePools

GpuScope = Literal["only", "maybe", "none"]

_AWS_GPU_FAMILY = re.compile(r"^(p\d|g\d|gr\d)")
_AZURE_GPU_SIZE = re.compile(r"^standard_n[cdv]", re.IGNORECASE)
_GCP_GPU_SERIES = re.compile(r"^(a2|a3|a4|g2|g4)-")
_GPU_CATEGORIES = frozenset({"p", "g"})
_GPU_ONLY_KEYS = frozenset(
    {
        "karpenter.k8s.aws/instance-gpu-name",
        "karpenter.k8s.aws/instance-gpu-manufacturer",
        "karpenter.k8s.aws/instance-gpu-memory",
        "karpenter.azure.com/sku-gpu-name",
        "karpenter.azure.com/sku-gpu-manufacturer",
    }
)


def _is_gpu_instance_type(name: str) -> bool:
    family = name.split(".", 1)[0]
    return bool(
        _AWS_GPU_FAMILY.match(family) or _AZURE_GPU_SIZE.match(name) or _GCP_GPU_SERIES.match(name)
    )


def nodepool_requirements(nodepool: Resource) -> list[Mapping[str, Any]]:
    spec = as_mapping(as_mapping(nodepool.spec.get("template")).get("spec"))
    return [as_mapping(r) for r in as_list(spec.get("requirements"))]


def nodepool_template_labels(nodepool: Resource) -> dict[str, str]:
    return str_map(
        as_mapping(as_mapping(nodepool.spec.get("template")).get("metadata")).get("labels")
    )


def nodepool_taints(nodepool: Resource) -> tuple[Taint, ...]:
    """Permanent taints only: startupTaints are removed after boot and need no toleration."""
    return raw_taints(
        as_mapping(as_mapping(nodepool.spec.get("template")).get("spec")).get("taints")
    )


def _requirement_scope(req: Mapping[str, Any]) -> GpuScope:
    key = str(req.get("key", ""))
    operator = str(req.get("operator", ""))
    values = [str(v) for v in as_list(req.get("values"))]
    if key in _GPU_COUNT_LABELS:
        return _count_scope(operator, values)
    if key in _GPU_ONLY_KEYS:
        # These labels exist only on GPU instance types.
        if operator == "DoesNotExist":
            return "none"
        return "only" if operator in ("Exists", "In") else "maybe"
    if operator != "In" or not values:
        return "maybe"
    if key == "karpenter.k8s.aws/instance-category":
        return _all_or_none([v in _GPU_CATEGORIES for v in values])
    if key == "karpenter.k8s.aws/instance-family":
        return _all_or_none([bool(_AWS_GPU_FAMILY.match(v)) for v in values])
    if key in ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type"):
        return _all_or_none([_is_gpu_instance_type(v) for v in values])
    return "maybe"


def _count_scope(operator: str, values: list[str]) -> GpuScope:
    if operator == "Exists":
        return "only"
    if operator == "DoesNotExist":
        return "none"
    try:
        numbers = [int(v) for v in values]
    except ValueError:
        return "maybe"
    if operator == "In" and numbers:
        return _all_or_none([n > 0 for n in numbers])
    if operator in ("Gt", "Gte") and numbers:
        return "only" if numbers[0] >= (0 if operator == "Gt" else 1) else "maybe"
    return "maybe"


def _all_or_none(flags: list[bool]) -> GpuScope:
    if all(flags):
        return "only"
    return "none" if not any(flags) else "maybe"


def nodepool_gpu_scope(nodepool: Resource) -> GpuScope:
    """Whether a NodePool launches only GPU instances, never, or maybe both.

    Requirements are ANDed, so one requirement that forces GPUs (or excludes them) decides.
    """
    if nodepool_template_labels(nodepool).get("nvidia.com/gpu.present") == "true":
        return "only"
    scopes = {_requirement_scope(r) for r in nodepool_requirements(nodepool)}
    if "none" in scopes:
        return "none"
    return "only" if "only" in scopes else "maybe"


# --------------------------------------------------------------------------- node state

# Taints a node carries while it is still joining; its device plugin has not registered yet.
_BOOTSTRAP_TAINTS = frozenset(
    {"node.cloudprovider.kubernetes.io/uninitialized", "karpenter.sh/unregistered"}
)


def is_bootstrapping(node: Resource) -> bool:
    """NotReady, or still carrying a join-time taint. Checks have no clock, so this replaces
    the catalogue's "younger than N minutes" guards."""
    return node_is_ready(node) is False or is_joining(node)


def is_joining(node: Resource) -> bool:
    """Still carrying a join-time taint: not ready yet, rather than broken."""
    return any(t.key in _BOOTSTRAP_TAINTS for t in node_taints(node))


def dra_gpu_nodes(snapshot: Snapshot) -> frozenset[str]:
    """Nodes whose GPUs the NVIDIA DRA driver publishes (not its ComputeDomain slices)."""
    names: set[str] = set()
    for slice_ in snapshot.of("ResourceSlice"):
        spec = slice_.spec
        if spec.get("driver") == "gpu.nvidia.com" and as_list(spec.get("devices")):
            names.add(str(spec.get("nodeName", "")))
    return frozenset(names)
