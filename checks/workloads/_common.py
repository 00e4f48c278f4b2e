"""Helpers shared by the workload checks: the GPU-stack allowlist, env resolution, GPU counts."""

from __future__ import annotations

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

# --------------------------------------------------------------------------- GPU-stack allowlist

# Image repositories of the NVIDIA GPU stack, matched without the registry host so that
# air-gapped mirrors (registry.corp/nvidia/k8s-device-plugin) are recognised as well.
# Entries ending in "/" match a whole repository folder. Extend here for in-house operands.
GPU_STACK_IMAGE_PATHS: tuple[str, ...] = (
    "nvidia/gpu-operator",  # operator, and the validator in older releases
    "nvidia/k8s-device-plugin",  # device plugin, GFD (>= v0.15), MPS control daemon
    "nvidia/gpu-feature-discovery",  # standalone GFD before it merged into the plugin
    "nvidia/driver",
    "nvidia/vgpu-manager",
    "nvidia/k8s/container-toolkit",
    "nvidia/k8s/dcgm-exporter",
    "nvidia/cloud-native/",  # dcgm, validator, mig-manager, driver-manager, cc/kata/vgpu managers
    "nvidia/kubevirt-gpu-device-plugin",
    "nvidia/dra-driver-nvidia-gpu",
    "nvidia/k8s-dra-driver-gpu",
    "nvidia/k8s-dra-driver",
    "nvidia/mellanox/",  # NVIDIA network operator (MOFED, RDMA shared device plugin)
    "nfd/node-feature-discovery",
    "eks/aws-efa-k8s-device-plugin",
)

# Owners through which a GPU-stack pod may reach the snapshot without its DaemonSet.
_STACK_OWNER_KINDS = frozenset({"DaemonSet", "ClusterPolicy", "NVIDIADriver"})


def image_repository(image: str) -> str:
    """`registry/path/name` of an image reference, without tag or digest, lower-cased."""
    ref = image.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    return ref.lower()


def _repository_path(repository: str) -> str:
    """The repository without its registry host (a first part with a dot, a port or localhost)."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return rest
    return repository


def is_gpu_stack_image(image: str) -> bool:
    path = _repository_path(image_repository(image))
    return any(
        path.startswith(entry) if entry.endswith("/") else path == entry
        for entry in GPU_STACK_IMAGE_PATHS
    )


def _runs_as_node_agent(template: PodTemplate) -> bool:
    owner = template.owner
    if owner.ref.kind == "DaemonSet":
        return True
    # A Pod dumped without its DaemonSet still names it in ownerReferences.
    return any(
        str(as_mapping(ref).get("kind", "")) in _STACK_OWNER_KINDS
        for ref in as_list(owner.metadata.get("ownerReferences"))
    )


def is_gpu_stack(template: PodTemplate) -> bool:
    """A node agent of the GPU stack: run by a DaemonSet (or the operator) and built only from
    GPU-stack images. Both conditions, so that a user's privileged DaemonSet that merely
    borrows a CUDA image, or a Deployment named like an operand, is still audited."""
    containers = template.containers()
    return (
        bool(containers)
        and _runs_as_node_agent(template)
        and all(is_gpu_stack_image(c.image) for c in containers)
    )


# --------------------------------------------------------------------------- containers


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


def is_privileged(container: Container) -> bool:
    return container.security_context.get("privileged") is True


def added_capabilities(container: Container) -> set[str]:
    caps = as_mapping(container.security_context.get("capabilities"))
    return {str(c).upper().removeprefix("CAP_") for c in as_list(caps.get("add"))}


def volume(template: PodTemplate, name: str) -> Mapping[str, Any]:
    for raw in map(as_mapping, as_list(template.spec.get("volumes"))):
        if raw.get("name") == name:
            return raw
    return {}
