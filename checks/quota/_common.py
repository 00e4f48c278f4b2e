"""Helpers shared by the quota checks: tenant namespaces, GPU demand, namespace targets."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from gpu_audit.api import (
    Container,
    ObjRef,
    PodTemplate,
    Resource,
    Snapshot,
    gpu_pod_templates,
)

# Namespaces of the control plane and the GPU stack: their pods (CUDA validators) are not a
# tenant's workload, and quotas there would only break the stack.
SYSTEM_NAMESPACES = frozenset(
    {
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "gpu-operator",
        "gpu-operator-resources",
        "nvidia-gpu-operator",
        "nvidia-device-plugin",
        "nvidia-dra-driver-gpu",
        "network-operator",
        "node-feature-discovery",
    }
)


def tenant_gpu_templates(snapshot: Snapshot) -> dict[str, list[PodTemplate]]:
    """GPU pod templates by namespace, outside the system namespaces."""
    out: dict[str, list[PodTemplate]] = defaultdict(list)
    for template in gpu_pod_templates(snapshot):
        namespace = template.owner.ref.namespace
        if namespace and namespace not in SYSTEM_NAMESPACES:
            out[namespace].append(template)
    return dict(sorted(out.items()))


def container_gpus(container: Container) -> dict[str, Decimal]:
    return {
        name: quantity
        for name in container.gpu_resource_names()
        if (quantity := container.gpu_quantity(name)) is not None
    }


def template_gpus(template: PodTemplate) -> dict[str, Decimal]:
    """What one pod of the template asks for, per GPU resource: app containers and sidecars
    add up, init containers run one at a time (the effective-request rule)."""
    total: dict[str, Decimal] = defaultdict(Decimal)
    init_peak: dict[str, Decimal] = defaultdict(Decimal)
    for container in template.containers():
        for name, quantity in container_gpus(container).items():
            if container.init and not container.is_sidecar:
                init_peak[name] = max(init_peak[name], quantity)
            else:
                total[name] += quantity
    return {n: max(total[n], init_peak[n]) for n in set(total) | set(init_peak)}


def namespace_target(snapshot: Snapshot, namespace: str, template: PodTemplate) -> Resource:
    """The Namespace object to report on; a stand-in when the input has none, so a finding
    about a namespace names the namespace, not one of its workloads."""
    found = snapshot.get("Namespace", "", namespace)
    if found is not None:
        return found
    raw = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return Resource(ObjRef("Namespace", "", namespace), "v1", raw, template.owner.source)
