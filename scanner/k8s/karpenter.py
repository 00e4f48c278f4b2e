"""Karpenter NodePools as GPU capacity: their requirements, template labels and taints, and
whether a NodePool launches GPU instances only, never, or maybe.

Used by the NODE, SCHED and COST checks, through `gpu_audit.api`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
    str_map,
    template_metadata,
    template_spec,
)
from gpu_audit.k8s.scheduling import Taint
from gpu_audit.model import Resource

NODEPOOL = "NodePool.karpenter.sh"

# Instance GPU-count labels Karpenter puts on the nodes it launches (AWS, Azure). A NodePool
# requirement on them decides its GPU scope; on a Node they mark a GPU instance.
GPU_COUNT_LABELS = ("karpenter.k8s.aws/instance-gpu-count", "karpenter.azure.com/sku-gpu-count")

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
    spec = template_spec(nodepool.spec)
    return [as_mapping(r) for r in as_list(spec.get("requirements"))]


def nodepool_template_labels(nodepool: Resource) -> dict[str, str]:
    return str_map(template_metadata(nodepool.spec).get("labels"))


def nodepool_taints(nodepool: Resource) -> tuple[Taint, ...]:
    """Permanent taints only: startupTaints are removed after boot and need no toleration."""
    raw = template_spec(nodepool.spec).get("taints")
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in map(as_mapping, as_list(raw))
    )


def _requirement_scope(req: Mapping[str, Any]) -> GpuScope:
    key = str(req.get("key", ""))
    operator = str(req.get("operator", ""))
    values = [str(v) for v in as_list(req.get("values"))]
    if key in GPU_COUNT_LABELS:
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
