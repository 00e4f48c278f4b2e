"""Helpers shared by the workload checks: env resolution, GPU counts, security context and
volumes. The GPU-stack allowlist and image references come from `gpu_audit.api`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    Container,
    PodTemplate,
    Snapshot,
    as_list,
    as_mapping,
)

# CUDA/ML images: their CUDA runtime changes with the tag, and a container running one is
# expected to use a GPU (CPU helpers in GPU pods pull the same images).
CUDA_IMAGE = re.compile(
    r"(nvidia/cuda|nvcr\.io/nvidia/|pytorch/pytorch|tensorflow/tensorflow:.*gpu|"
    r"vllm/vllm-openai|huggingface/text-generation-inference|ghcr\.io/huggingface/|"
    r"lmsysorg/sglang|rocm/)"
)


def is_cuda_image(image: str) -> bool:
    return bool(CUDA_IMAGE.search(image.lower()))


def gpu_count(container: Container) -> Decimal:
    """Sum of the container's GPU quantities (limits, falling back to requests)."""
    total = Decimal(0)
    for name in container.gpu_resource_names():
        total += container.gpu_quantity(name) or Decimal(0)
    return total


def resolved_env(snapshot: Snapshot, container: Container, name: str) -> tuple[bool, str | None]:
    """Whether `name` is set in the container's environment, and its value when known.

    `env` wins over `envFrom` (as in the kubelet); ConfigMaps are resolved from the snapshot.
    A value from a Secret, a field ref or a ConfigMap missing from the input is (True, None).
    """
    namespace = container.template.owner.ref.namespace
    entry = container.env().get(name)
    if entry is not None:
        if "value" in entry or "valueFrom" not in entry:
            return True, str(entry.get("value") or "")
        ref = as_mapping(as_mapping(entry.get("valueFrom")).get("configMapKeyRef"))
        data = _configmap_data(snapshot, namespace, str(ref.get("name", "")))
        value = data.get(str(ref.get("key", ""))) if data is not None else None
        return True, value
    for source in map(as_mapping, as_list(container.raw.get("envFrom"))):
        prefix = str(source.get("prefix") or "")
        if not name.startswith(prefix):
            continue
        ref = as_mapping(source.get("configMapRef"))
        if ref:
            data = _configmap_data(snapshot, namespace, str(ref.get("name", "")))
            if data is not None and name[len(prefix) :] in data:
                return True, data[name[len(prefix) :]]
    return False, None


def _configmap_data(snapshot: Snapshot, namespace: str, name: str) -> dict[str, str] | None:
    found = snapshot.get("ConfigMap", namespace, name)
    if found is None:
        return None
    return {str(k): str(v) for k, v in as_mapping(found.raw.get("data")).items()}


def env_list_value(env: Iterable[Any], name: str) -> str | None:
    """The value of `name` in a plain `[{name, value}]` list (ClusterPolicy component env)."""
    for entry in map(as_mapping, env):
        if entry.get("name") == name:
            return str(entry.get("value") or "")
    return None


def added_capabilities(container: Container) -> set[str]:
    caps = as_mapping(container.security_context.get("capabilities"))
    return {str(c).upper().removeprefix("CAP_") for c in as_list(caps.get("add"))}


def volume(template: PodTemplate, name: str) -> Mapping[str, Any]:
    for raw in map(as_mapping, as_list(template.spec.get("volumes"))):
        if raw.get("name") == name:
            return raw
    return {}
