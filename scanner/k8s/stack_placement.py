"""Where the GPU stack's node agents must and can run: which DaemonSets are the stack's agents
(device plugin, driver, container toolkit, GFD, DCGM, dcgm-exporter, NFD worker, MIG manager)
and what each is for, which nodes are meant for GPUs (also before any GPU label or capacity
shows), and whether a DaemonSet's node selection is aimed at GPU nodes.

Whether a DaemonSet's pod lands on a node is `daemonset_schedules_on` (scheduling.py). Checks
use these through `gpu_audit.api`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_audit.k8s.gpu_hosts import GPU_NODE_LABELS, is_gpu_host
from gpu_audit.k8s.gpu_operator import (
    _with_labels,
    command_line,
    device_plugin_daemonsets,
    is_operator_operand,
    operator_node_labels,
    pod_spec,
)
from gpu_audit.k8s.images import image_registry_and_path
from gpu_audit.k8s.karpenter import GPU_COUNT_LABELS, _is_gpu_instance_type
from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.pods import templates_of
from gpu_audit.k8s.scheduling import (
    SCHEDULING_EFFECTS,
    Taint,
    daemonset_schedules_on,
    node_taints,
)
from gpu_audit.k8s.selectors import expression_matches
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

# --------------------------------------------------------------------------- roles

DEVICE_PLUGIN = "device-plugin"
DRIVER = "driver"
CONTAINER_TOOLKIT = "container-toolkit"
GFD = "gpu-feature-discovery"
DCGM = "dcgm"
DCGM_EXPORTER = "dcgm-exporter"
NFD_WORKER = "nfd-worker"
MIG_MANAGER = "mig-manager"

# Without these a node advertises no usable GPU at all.
ESSENTIAL_STACK_ROLES = (DEVICE_PLUGIN, DRIVER, CONTAINER_TOOLKIT)

# Image repositories (matched on the path without the registry host, or as its last parts
# behind a mirror prefix) -> role. The k8s-device-plugin image also runs GFD and the MPS
# control daemon, and the NFD image its master and gc: those are told apart by the command.
_ROLE_IMAGES: tuple[tuple[str, str], ...] = (
    ("nvidia/k8s/dcgm-exporter", DCGM_EXPORTER),
    ("nvidia/cloud-native/dcgm", DCGM),
    ("nvidia/cloud-native/k8s-mig-manager", MIG_MANAGER),
    ("nvidia/driver", DRIVER),
    ("nvidia/k8s/container-toolkit", CONTAINER_TOOLKIT),
    ("nvidia/gpu-feature-discovery", GFD),
)
_PLUGIN_IMAGE = "nvidia/k8s-device-plugin"
_NFD_IMAGE = "nfd/node-feature-discovery"


@dataclass(frozen=True, slots=True)
class StackDaemonSet:
    """A DaemonSet of the GPU stack: what it is for, and whether the GPU Operator owns it
    (then the ClusterPolicy, not the DaemonSet, is the object to change)."""

    daemonset: Resource
    role: str
    operand: bool

    @property
    def spec(self) -> Mapping[str, Any]:
        return pod_spec(self.daemonset)


def _path_matches(image: str, repository: str) -> bool:
    path = image_registry_and_path(image)[1]
    return path == repository or path.endswith("/" + repository)


def _role_of(daemonset: Resource, plugins: frozenset[object]) -> str | None:
    mains = [c for t in templates_of(daemonset) for c in t.containers(include_init=False)]
    if not mains:
        return None
    if daemonset.ref in plugins:
        images = " ".join(c.image.lower() for c in mains)
        # device_plugin_daemonsets also matches AMD's rocm/k8s-device-plugin.
        if "nvidia" in images or "hami" in images or not images.strip():
            return DEVICE_PLUGIN
        return None
    for container in mains:
        for repository, role in _ROLE_IMAGES:
            if _path_matches(container.image, repository):
                return role
    for container in mains:
        command = command_line(container.raw)
        name = daemonset.ref.name
        if _path_matches(container.image, _PLUGIN_IMAGE) and (
            "gpu-feature-discovery" in command or (not command and "feature-discovery" in name)
        ):
            return GFD
        if _path_matches(container.image, _NFD_IMAGE) and (
            "nfd-worker" in command or (not command and "worker" in name)
        ):
            return NFD_WORKER
    return None


def gpu_stack_daemonsets(snapshot: Snapshot) -> tuple[StackDaemonSet, ...]:
    """The DaemonSets of the GPU stack in the input, with their role: NVIDIA device plugins
    (NVIDIA's, GKE's, HAMi), drivers, container toolkits, GFD, DCGM, dcgm-exporter, NFD
    workers and MIG managers, whether deployed by a chart, a static manifest or the GPU
    Operator. The validator, the MPS control daemon and NFD's master/gc are not node agents
    of this kind."""

    def compute(snap: Snapshot) -> tuple[StackDaemonSet, ...]:
        plugins = frozenset(ds.ref for ds in device_plugin_daemonsets(snap))
        out = []
        for ds in snap.of("DaemonSet"):
            role = _role_of(ds, plugins)
            if role is not None:
                out.append(StackDaemonSet(ds, role, is_operator_operand(ds)))
        return tuple(out)

    return snapshot.derived("stack_placement.gpu_stack_daemonsets", compute)


# --------------------------------------------------------------------------- GPU-ish names

_NEGATIONS = frozenset({"no", "non", "not", "without"})


def names_gpu(text: str) -> bool:
    """Whether a label or taint key or value names GPUs (`nvidia.com/gpu`, `sku=gpu`,
    `gpu-pool`, `accelerator=nvidia`, `gpuGroup`), and not their absence (`no-gpu`)."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", text.lower()) if t]
    if any(t in _NEGATIONS for t in tokens):
        return False
    return any(t.startswith("gpu") or t == "nvidia" for t in tokens)


def is_gpu_taint(taint: Taint) -> bool:
    """A taint that dedicates a node to GPU work (its key or value names GPUs)."""
    return names_gpu(taint.key) or names_gpu(taint.value)


# --------------------------------------------------------------------------- GPU nodes

_INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")


def is_gpu_bound_node(node: Resource) -> bool:
    """A node meant for NVIDIA GPUs, even before the stack has labelled it or advertised any
    capacity: `is_gpu_host`, a GPU instance type (AWS p/g, Azure NC/ND/NV, GCP a2/a3/g2), or a
    NoSchedule/NoExecute taint that names GPUs (`nvidia.com/gpu`, `sku=gpu`, `gpu`)."""
    if is_gpu_host(node):
        return True
    labels = node.labels
    if any(_is_gpu_instance_type(labels.get(key, "")) for key in _INSTANCE_TYPE_LABELS):
        return True
    return any(t.effect in SCHEDULING_EFFECTS and is_gpu_taint(t) for t in node_taints(node))


def gpu_bound_nodes(snapshot: Snapshot) -> tuple[Resource, ...]:
    """The nodes of the input that `is_gpu_bound_node` accepts."""
    return tuple(n for n in snapshot.of("Node") if is_gpu_bound_node(n))


# --------------------------------------------------------------------------- node selection

_GPU_LABEL_KEYS = frozenset(
    {
        "cloud.google.com/gke-accelerator",
        "kubernetes.azure.com/accelerator",
        *GPU_COUNT_LABELS,
    }
)
_GPU_LABEL_PREFIXES = (
    "nvidia.com/",
    "karpenter.k8s.aws/instance-gpu",
    "karpenter.azure.com/sku-gpu",
    "eks.amazonaws.com/instance-gpu",
)
_POSITIVE = frozenset({"In", "Exists", "Gt"})
# Labels set by the kubelet from the node's OS and CPU: selecting on them follows the image's
# platform, a deliberate restriction rather than a placement mistake.
PLATFORM_LABELS = (
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
)


def is_gpu_label(key: str, values: Sequence[str] = ()) -> bool:
    """A node label (with the values selected) that only GPU nodes carry: NVIDIA's
    (nvidia.com/*, from GFD or the GPU Operator), NFD's NVIDIA PCI labels, the clouds'
    accelerator and GPU-count labels, GPU instance types, or a custom one naming GPUs."""
    if key in _GPU_LABEL_KEYS or key.startswith(_GPU_LABEL_PREFIXES):
        return True
    if key.startswith("feature.node.kubernetes.io/"):
        return "10de" in key or any("nvidia" in v.lower() for v in values)
    if key in _INSTANCE_TYPE_LABELS:
        return bool(values) and all(_is_gpu_instance_type(v) for v in values)
    return names_gpu(key) or any(names_gpu(v) for v in values)


def node_selection(spec: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(key, operator, values) of a pod spec's nodeSelector (as In) and of the expressions of
    every required node affinity term."""
    out = [(k, "In", [v]) for k, v in str_map(spec.get("nodeSelector")).items()]
    required = as_mapping(
        as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    for term in map(as_mapping, as_list(required.get("nodeSelectorTerms"))):
        out.extend(
            (
                str(expr.get("key", "")),
                str(expr.get("operator", "")),
                [str(v) for v in as_list(expr.get("values"))],
            )
            for expr in map(as_mapping, as_list(term.get("matchExpressions")))
        )
    return out


def gpu_selection_keys(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The GPU labels a pod spec's nodeSelector or required node affinity selects on
    (In/Exists/Gt): the pod is aimed at (some of) the GPU nodes. Empty when it is not."""
    return tuple(
        dict.fromkeys(
            key
            for key, operator, values in node_selection(spec)
            if operator in _POSITIVE and is_gpu_label(key, values)
        )
    )


def avoids_gpu_nodes(spec: Mapping[str, Any]) -> bool:
    """Whether the selection excludes GPU labels (NotIn/DoesNotExist on a GPU label): the pod
    is kept off GPU nodes on purpose."""
    return any(
        operator in ("NotIn", "DoesNotExist") and is_gpu_label(key, values)
        for key, operator, values in node_selection(spec)
    )


def nfd_pci_labelled(node: Resource) -> bool:
    """Whether NFD has labelled the node as carrying an NVIDIA PCI device."""
    return any(node.labels.get(key) == "true" for key in GPU_NODE_LABELS[1:])


# --------------------------------------------------------------------------- built-in agents

_GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
_GKE_OPT_OUT = "gke-no-default-nvidia-gpu-device-plugin"


def builtin_device_plugin(node: Resource) -> str:
    """The device plugin the platform runs on the node outside any DaemonSet of the input
    ("" when none): Bottlerocket's NVIDIA variants and EKS Auto Mode run it as a host service;
    GKE runs its own plugin on GPU nodes unless they opt out with
    gke-no-default-nvidia-gpu-device-plugin=true."""
    os_image = str(as_mapping(node.status.get("nodeInfo")).get("osImage", ""))
    if os_image.startswith("Bottlerocket"):
        return "Bottlerocket's host device plugin"
    if node.labels.get("eks.amazonaws.com/compute-type") == "auto":
        return "EKS Auto Mode's host device plugin"
    if _GKE_ACCELERATOR in node.labels and node.labels.get(_GKE_OPT_OUT) != "true":
        return "GKE's built-in device plugin"
    return ""


# --------------------------------------------------------------------------- placement


def stack_agent_runs_on(agent: StackDaemonSet, node: Resource) -> bool:
    """Whether the DaemonSet controller places the agent's pod on the node; an operand of the
    GPU Operator with the deploy labels the operator will have set on a GPU node."""
    if agent.operand:
        node = _with_labels(node, operator_node_labels(node))
    return daemonset_schedules_on(agent.spec, node)


def selection_may_match(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a node with at least these labels may pass the pod's nodeSelector and required
    node affinity: labels not in `labels` (a NodePool's nodes get the stack's and the
    cloud's later) are given the benefit of the doubt, so only a definite mismatch says no."""
    for key, value in str_map(spec.get("nodeSelector")).items():
        if key in labels and labels[key] != value:
            return False
    required = as_mapping(
        as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms = [as_mapping(t) for t in as_list(required.get("nodeSelectorTerms"))]
    if not terms:
        return True
    return any(
        all(
            expression_matches(e, labels)
            for e in map(as_mapping, as_list(term.get("matchExpressions")))
            if str(e.get("key", "")) in labels
        )
        for term in terms
    )
