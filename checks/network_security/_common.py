"""Shared by the network and security checks: recognising the GPU/network stack's own pods."""

from __future__ import annotations

from gpu_audit.api import PodTemplate
from gpu_audit.checks.serving._common import image_repository

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


def is_nvidia_stack(template: PodTemplate) -> bool:
    """The GPU/network stack's own pods: a system namespace AND a stack image, both, so that
    an ordinary workload deployed into gpu-operator is still audited."""
    if template.owner.ref.namespace not in SYSTEM_NAMESPACES:
        return False
    return any(
        fragment in image_repository(c.image)[1]
        for c in template.containers()
        for fragment in SYSTEM_IMAGES
    )
