"""Shared by the network and security checks: recognising the GPU/network stack's own pods."""

from __future__ import annotations

from gpu_audit.api import PodTemplate, Resource, Snapshot, as_list, label_selector_matches
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


def policy_types(policy: Resource) -> set[str]:
    """Effective policyTypes: as written, else Ingress plus Egress when spec.egress is a
    non-empty list (`egress: []` alone isolates nothing for egress)."""
    written = {str(t) for t in as_list(policy.spec.get("policyTypes"))}
    if written:
        return written
    return {"Ingress", "Egress"} if as_list(policy.spec.get("egress")) else {"Ingress"}


def policy_selects(policy: Resource, template: PodTemplate) -> bool:
    return policy.ref.namespace == template.owner.ref.namespace and label_selector_matches(
        policy.spec.get("podSelector"), template.labels
    )


def namespace_labels(snapshot: Snapshot, namespace: str) -> dict[str, str]:
    """A namespace's labels; the automatic kubernetes.io/metadata.name label is always there."""
    found = snapshot.get("Namespace", "", namespace)
    labels = dict(found.labels) if found is not None else {}
    labels.setdefault("kubernetes.io/metadata.name", namespace)
    return labels
