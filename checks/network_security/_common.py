"""Shared by the network and security checks: NetworkPolicy types and selection. Namespace
labels and recognising the GPU/network stack's own pods come from `gpu_audit.api`."""

from __future__ import annotations

from gpu_audit.api import (
    PodTemplate,
    Resource,
    as_list,
    as_mapping,
    image_registry_and_path,
    label_selector_matches,
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


# --------------------------------------------------------------------------- managed platforms

ADDON_MANAGER_LABEL = "addonmanager.kubernetes.io/mode"
# Where GKE publishes its own GPU node agents (device plugin, driver installer, MIG
# partitioner): registry, then the start of the repository path.
_GKE_GPU_IMAGE_SOURCES = (
    ("gke.gcr.io", ""),
    ("gcr.io", "gke-release/"),
    ("gcr.io", "cos-cloud/"),
)


def is_platform_gpu_agent(template: PodTemplate) -> str:
    """A node agent the managed platform deploys and reconciles itself in kube-system (GKE's
    nvidia-gpu-device-plugin, its driver installer): what makes it one, "" when it is not.
    By design it needs the host's devices, and an edit would be reverted by the addon manager,
    so it is not the object a user changes."""
    owner = template.owner
    if owner.ref.namespace != "kube-system" or not _daemonset_pod(owner):
        return ""
    mode = owner.labels.get(ADDON_MANAGER_LABEL) or template.labels.get(ADDON_MANAGER_LABEL)
    if mode:
        return f"managed by the platform's addon manager ({ADDON_MANAGER_LABEL}={mode})"
    images = [c.image for c in template.containers()]
    if images and all(_gke_gpu_image(i) for i in images):
        return f"GKE's own GPU node agent ({images[0]})"
    return ""


def _daemonset_pod(owner: Resource) -> bool:
    return owner.ref.kind == "DaemonSet" or any(
        as_mapping(ref).get("kind") == "DaemonSet"
        for ref in as_list(owner.metadata.get("ownerReferences"))
    )


def _gke_gpu_image(image: str) -> bool:
    host, path = image_registry_and_path(image)
    return any(host == h and path.startswith(prefix) for h, prefix in _GKE_GPU_IMAGE_SOURCES) and (
        "nvidia" in path or "gpu" in path
    )
