"""What the cost checks share: the Pods that hold a node, and their GPU requests."""

from __future__ import annotations

from decimal import Decimal

from gpu_audit.api import (
    Resource,
    Snapshot,
    effective_pod_request,
    is_gpu_resource,
    owner_kinds,
    pod_is_active,
    pods_on_node,
    templates_of,
)


def pod_gpus(pod: Resource) -> Decimal:
    """GPU units (whole, shared or MIG) the scheduler reserves for the pod."""
    total = Decimal(0)
    for template in templates_of(pod):
        for name, value in effective_pod_request(template).items():
            if is_gpu_resource(name):
                total += value
    return total


def is_node_agent(pod: Resource) -> bool:
    """DaemonSet and static (mirror) pods run on every node: they are not tenants."""
    return "DaemonSet" in owner_kinds(pod) or "kubernetes.io/config.mirror" in pod.annotations


def tenants(snapshot: Snapshot, node_name: str) -> list[Resource]:
    """The active, non-agent Pods bound to the node."""
    return [
        pod
        for pod in pods_on_node(snapshot, node_name)
        if pod_is_active(pod) and not is_node_agent(pod)
    ]


# Where a cloud node names its instance (spec.providerID) and the labels of node groups that an
# autoscaler or its owner can shrink.
_CLOUD_PROVIDER_IDS = (
    "aws://",
    "gce://",
    "azure://",
    "oci://",
    "ibm://",
    "alicloud://",
    "hcloud://",
)
_NODE_GROUP_LABELS = (
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
)


def cloud_billed(node: Resource) -> str:
    """Why the node is an hourly-billed instance that can be released, "" when the input does
    not show it."""
    for label in _NODE_GROUP_LABELS:
        if label in node.labels:
            return f"{label}={node.labels[label]}"
    provider = str(node.spec.get("providerID") or "")
    if provider.startswith(_CLOUD_PROVIDER_IDS):
        return f"cloud instance {provider.split('://', 1)[0]}"
    return ""
