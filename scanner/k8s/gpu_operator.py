"""The NVIDIA GPU Operator as the STACK, SHARE and NODE checks see it: the active ClusterPolicy
and the operands it enables, which DaemonSets are device plugins, and where a DaemonSet (or an
operand missing from the input) would run. Checks use these through `gpu_audit.api`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
)
from gpu_audit.k8s.pods import templates_of
from gpu_audit.k8s.scheduling import schedules_on
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

CLUSTER_POLICY = "ClusterPolicy.nvidia.com"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
DEVICE_PLUGIN_SOCKET_DIR = "/var/lib/kubelet/device-plugins"

# Components whose unset `enabled` means on (IsEnabled() returns true for nil); errata adds dcgm.
_ON_BY_DEFAULT = frozenset(
    {"driver", "toolkit", "devicePlugin", "dcgmExporter", "dcgm", "gfd", "migManager"}
)


def active_cluster_policy(snapshot: Snapshot) -> Resource | None:
    """The ClusterPolicy the operator reconciles: not `ignored`, oldest first (the operator
    ignores every instance but one)."""
    candidates = [cp for cp in snapshot.of(CLUSTER_POLICY) if cp.status.get("state") != "ignored"]
    candidates.sort(key=lambda cp: (str(cp.metadata.get("creationTimestamp", "")), cp.ref.name))
    return candidates[0] if candidates else None


def component_enabled(policy: Resource, component: str) -> bool:
    value = as_mapping(policy.spec.get(component)).get("enabled")
    if value is None:
        return component in _ON_BY_DEFAULT
    return value is True or str(value).lower() == "true"


def _is_operator_owned(resource: Resource) -> bool:
    return any(
        ref.get("kind") == "ClusterPolicy"
        and str(ref.get("apiVersion", "")).startswith("nvidia.com/")
        for ref in map(as_mapping, as_list(resource.metadata.get("ownerReferences")))
    )


def pod_spec(resource: Resource) -> Mapping[str, Any]:
    """The pod spec of the object's first pod template ({} when it has none)."""
    templates = templates_of(resource)
    return templates[0].spec if templates else {}


def operand_label(resource: Resource) -> str | None:
    """The `nvidia.com/gpu.deploy.<operand>` key an operator operand is pinned with, if any."""
    for key in as_mapping(pod_spec(resource).get("nodeSelector")):
        if str(key).startswith(DEPLOY_PREFIX):
            return str(key)
    return None


def is_operator_operand(resource: Resource) -> bool:
    """Created by the GPU Operator: owned by the ClusterPolicy, or pinned by its deploy label
    (a dump may have lost ownerReferences; a static manifest with the same name has neither)."""
    return _is_operator_owned(resource) or operand_label(resource) is not None


def operator_node_labels(node: Resource) -> dict[str, str]:
    """The node's labels as the operator will leave them: it sets every missing
    `nvidia.com/gpu.deploy.<operand>` label to "true" on GPU nodes unless
    `nvidia.com/gpu.deploy.operands=false`, so a dump taken before that still simulates."""
    labels = dict(node.labels)
    if labels.get(DEPLOY_PREFIX + "operands") == "false":
        return labels
    for operand in (
        "driver",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "gpu-feature-discovery",
        "mig-manager",
        "operator-validator",
    ):
        labels.setdefault(DEPLOY_PREFIX + operand, "true")
    return labels


def operand_deployed(node: Resource, operand: str) -> bool:
    return operator_node_labels(node).get(DEPLOY_PREFIX + operand) == "true"


def _with_labels(node: Resource, labels: Mapping[str, str]) -> Resource:
    metadata = {**node.metadata, "labels": dict(labels)}
    return Resource(node.ref, node.api_version, {**node.raw, "metadata": metadata}, node.source)


def daemonset_runs_on(daemonset: Resource, node: Resource) -> bool:
    """Whether the DaemonSet's pod lands on the node: selectors, affinity and taints. A live
    DaemonSet that schedules no pod anywhere runs nowhere."""
    status = daemonset.status
    # The API server zero-fills a DaemonSet's status on create; only a status the controller
    # has observed (observedGeneration set) says the DaemonSet really schedules nowhere.
    observed = bool(status.get("observedGeneration"))
    if observed and status.get("desiredNumberScheduled") == 0:
        return False
    target = (
        _with_labels(node, operator_node_labels(node)) if is_operator_operand(daemonset) else node
    )
    return schedules_on(pod_spec(daemonset), target)


def containers(resource: Resource) -> tuple[Mapping[str, Any], ...]:
    """The raw (non-init) containers of every pod template of the object."""
    return tuple(
        c.raw
        for template in templates_of(resource)
        for c in template.containers(include_init=False)
    )


def command_line(container: Mapping[str, Any]) -> str:
    """A raw container's command and args joined by spaces."""
    return " ".join(
        str(x) for x in as_list(container.get("command")) + as_list(container.get("args"))
    )


def _host_paths(resource: Resource) -> tuple[str, ...]:
    return tuple(
        str(as_mapping(v.get("hostPath")).get("path", ""))
        for v in map(as_mapping, as_list(pod_spec(resource).get("volumes")))
        if v.get("hostPath")
    )


# Binaries that ship in the device-plugin image but do not register a resource.
_NOT_A_PLUGIN = ("gpu-feature-discovery", "mps-control-daemon", "config-manager")


def _plugin_image(image: str) -> bool:
    lowered = image.lower()
    # AWS's EFA plugin (eks/aws-efa-k8s-device-plugin) registers vpc.amazonaws.com/efa only.
    if "efa-k8s-device-plugin" in lowered:
        return False
    return (
        "k8s-device-plugin" in lowered
        or "nvidia-gpu-device-plugin" in lowered  # GKE's built-in plugin
        or ("hami" in lowered and "device-plugin" in lowered)  # HAMi registers nvidia.com/gpu
    )


def _is_nvidia_device_plugin(daemonset: Resource) -> bool:
    """A DaemonSet that registers nvidia.com/gpu with the kubelet.

    GFD and the MPS control daemon use the same image but other binaries; the KubeVirt/Kata
    sandbox plugins (kubevirt-gpu-device-plugin) register per-model names for VMs.
    """
    mains = containers(daemonset)
    if not any(p.startswith(DEVICE_PLUGIN_SOCKET_DIR) for p in _host_paths(daemonset)):
        return False
    if all(any(b in command_line(c) for b in _NOT_A_PLUGIN) for c in mains):
        return False
    if _is_operator_owned(daemonset) and daemonset.ref.name == "nvidia-device-plugin-daemonset":
        return True  # the operator fills the image in at run time
    return any(_plugin_image(str(c.get("image", ""))) for c in mains)


def device_plugin_daemonsets(snapshot: Snapshot) -> tuple[Resource, ...]:
    """The DaemonSets that register nvidia.com/gpu with the kubelet."""
    return tuple(ds for ds in snapshot.of("DaemonSet") if _is_nvidia_device_plugin(ds))


# Every operand DaemonSet carries this toleration; spec.daemonsets.tolerations are added to it.
_OPERAND_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def policy_operand_runs_on(policy: Resource, node: Resource, operand: str) -> bool:
    """Where the operator would run `operand` (a deploy-label suffix) when its DaemonSet is not
    in the input: the node keeps the deploy label and tolerates the operand's tolerations."""
    if not operand_deployed(node, operand):
        return False
    extra = as_list(as_mapping(policy.spec.get("daemonsets")).get("tolerations"))
    spec: dict[str, Any] = {"tolerations": [_OPERAND_TOLERATION, *extra]}
    return schedules_on(spec, node)
