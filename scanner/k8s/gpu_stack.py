"""Recognising the GPU stack's own pods (operator operands, device plugins, DCGM, NFD, the
network operator), so that checks do not flag the privileges those pods need.

Two tests, for two questions:

- `is_gpu_stack_node_agent`: run by a DaemonSet (or the operator) AND built only from images of
  the GPU-stack allowlist, wherever it is installed. Use it where a stack pod is exempt from a
  rule about what a container may do (GPU-WL privileged mode, NVIDIA_VISIBLE_DEVICES without a
  GPU request): every container must be a known stack image, so a user's DaemonSet that merely
  borrows a CUDA image is still audited, and the stack is recognised in any namespace (NVIDIA's
  static manifests install into the current one, often `default`).
- `is_stack_pod_in_system_namespace`: in a namespace the NVIDIA/network operators install into
  AND with at least one container whose image names a stack component. Use it where the exempt
  pods are the stack's deployment as a whole (API tokens, host networking): a helper container
  of another image in an operator pod is exempt with it, and an ordinary workload deployed into
  gpu-operator is still audited.

The check on raw GPU device access (GPU-NET) exempts a pod that passes either test. Checks use
these through `gpu_audit.api`.
"""

from __future__ import annotations

from gpu_audit.k8s.images import (
    image_registry_and_path,
    image_repository,
)
from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
)
from gpu_audit.k8s.pods import PodTemplate

# --------------------------------------------------------------------------- node agents

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


def _repository_path(repository: str) -> str:
    """The repository without its registry host (a first part with a dot, a port or localhost)."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return rest
    return repository


def is_gpu_stack_image(image: str) -> bool:
    """Whether the image is on the GPU-stack allowlist, from any registry or mirror."""
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


def is_gpu_stack_node_agent(template: PodTemplate) -> bool:
    """A node agent of the GPU stack: run by a DaemonSet (or the operator) and built only from
    GPU-stack images. Both conditions, so that a user's privileged DaemonSet that merely
    borrows a CUDA image, or a Deployment named like an operand, is still audited."""
    containers = template.containers()
    return (
        bool(containers)
        and _runs_as_node_agent(template)
        and all(is_gpu_stack_image(c.image) for c in containers)
    )


# --------------------------------------------------------------------------- system namespaces

# Namespaces the NVIDIA/network operators and the standalone device plugin install into.
SYSTEM_NAMESPACES = frozenset(
    {
        "gpu-operator",
        "nvidia-gpu-operator",
        "nvidia-device-plugin",
        "nvidia-dra-driver-gpu",
        "kube-system",
        "nvidia-network-operator",
        "network-operator",
    }
)
# Image repository fragments of the stack's components (operands of the GPU and network
# operators, the EFA plugin).
SYSTEM_IMAGES = (
    "k8s-device-plugin",
    "gpu-operator",
    "driver",
    "container-toolkit",
    "dcgm",
    "gpu-feature-discovery",
    "k8s-mig-manager",
    "gpu-operator-validator",
    "nvidia-fs",
    "network-operator",
    "mofed",
    "doca-driver",
    "efa-k8s-device-plugin",
    "k8s-kata-manager",
    "k8s-cc-manager",
    "vgpu-device-manager",
    "vgpu-manager",
    "k8s-driver-manager",
    "gdrdrv",
)


def is_stack_pod_in_system_namespace(template: PodTemplate) -> bool:
    """The GPU/network stack's own pods: a system namespace AND a stack image, both, so that
    an ordinary workload deployed into gpu-operator is still audited."""
    if template.owner.ref.namespace not in SYSTEM_NAMESPACES:
        return False
    return any(
        fragment in image_registry_and_path(c.image)[1]
        for c in template.containers()
        for fragment in SYSTEM_IMAGES
    )
