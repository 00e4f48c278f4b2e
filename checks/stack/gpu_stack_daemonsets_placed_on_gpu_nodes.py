from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_audit.api import (
    DCGM_EXPORTER,
    ESSENTIAL_STACK_ROLES,
    NODEPOOL,
    PLATFORM_LABELS,
    Category,
    FixKind,
    ObjRef,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    StackDaemonSet,
    Taint,
    active_cluster_policy,
    as_list,
    as_mapping,
    avoids_gpu_nodes,
    builtin_device_plugin,
    check,
    component_enabled,
    controller_owner,
    daemonset_pod_tolerations,
    daemonset_schedules_on,
    daemonset_untolerated_taints,
    env_value,
    failed,
    gpu_bound_nodes,
    gpu_selection_keys,
    gpu_stack_daemonsets,
    is_gpu_bound_node,
    is_gpu_label,
    is_gpu_taint,
    is_transient_taint,
    nfd_pci_labelled,
    node_affinity_matches,
    node_selection,
    nodepool_gpu_scope,
    nodepool_taints,
    nodepool_template_labels,
    passed,
    pod_templates,
    policy_operand_runs_on,
    selection_may_match,
    stack_agent_runs_on,
    str_map,
    templates_of,
    tolerates,
)

_SHOWN = 3

# What a node misses when the agent of each role cannot run there.
_ROLES: Mapping[str, tuple[str, str]] = {
    "device-plugin": (
        "the NVIDIA device plugin",
        "they advertise no nvidia.com/gpu and GPU pods cannot be scheduled there",
    ),
    "driver": ("the NVIDIA driver", "no driver is installed there and the GPUs are unusable"),
    "container-toolkit": (
        "the NVIDIA container toolkit",
        "the container runtime there is not set up for GPUs and GPU containers cannot start",
    ),
    "gpu-feature-discovery": (
        "GPU feature discovery",
        "they get no nvidia.com/gpu.* labels, so pods selecting a GPU model do not land there",
    ),
    "dcgm": ("the DCGM host engine", "no DCGM telemetry is collected there"),
    "dcgm-exporter": ("dcgm-exporter", "no GPU metrics are collected from them"),
    "nfd-worker": (
        "the NFD worker",
        "they never get NFD's feature labels (feature.node.kubernetes.io/pci-10de.present)",
    ),
    "mig-manager": ("the MIG manager", "MIG configuration changes are never applied there"),
}
# The ClusterPolicy component and deploy label of each role the GPU Operator deploys.
_POLICY_OPERANDS: Mapping[str, tuple[str, str]] = {
    "device-plugin": ("devicePlugin", "device-plugin"),
    "driver": ("driver", "driver"),
    "container-toolkit": ("toolkit", "container-toolkit"),
    "gpu-feature-discovery": ("gfd", "gpu-feature-discovery"),
    "dcgm": ("dcgm", "dcgm"),
    "dcgm-exporter": ("dcgmExporter", "dcgm-exporter"),
    "mig-manager": ("migManager", "mig-manager"),
}
# Agents that fail to start on a node without NVIDIA GPUs (NVML or DCGM cannot initialise).
# The device plugin and GFD only when their fail-on-init-error option is left at true.
_FAILS_WITHOUT_GPU = frozenset(
    {"device-plugin", "gpu-feature-discovery", "driver", "dcgm", "dcgm-exporter", "mig-manager"}
)
_FAIL_ON_INIT_ENV = ("FAIL_ON_INIT_ERROR", "GFD_FAIL_ON_INIT_ERROR")
_FAIL_ON_INIT_OFF = "--fail-on-init-error=false"

# The taints the platforms document for GPU nodes, assumed when the input shows none.
_GKE_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
_AKS_TAINT = Taint("sku", "gpu", "NoSchedule")


@dataclass(frozen=True, slots=True)
class Target:
    """A GPU node, or a Karpenter NodePool standing for the GPU nodes it launches while none
    of them is in the input (then `taints` and `labels` are the pool's)."""

    resource: Resource
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_pool(self) -> bool:
        return self.resource.ref.kind == NODEPOOL

    @property
    def name(self) -> str:
        return f"NodePool {self.resource.ref.name}" if self.is_pool else self.resource.ref.name


@dataclass(frozen=True, slots=True)
class Blocked:
    """A GPU node or NodePool the DaemonSet cannot run on: the taints it does not tolerate,
    or the selection that leaves it out (`label_key` is the nodeSelector key, "" for the
    required node affinity)."""

    target: Target
    taints: tuple[Taint, ...] = ()
    selection: str = ""
    label_key: str = ""

    def describe(self) -> str:
        why = self.selection or ", ".join(str(t) for t in self.taints)
        return f"{self.target.name} ({why})"


@dataclass(slots=True)
class Placement:
    """What one stack DaemonSet's placement looks like against the GPU nodes."""

    targets: int = 0
    gpu_nodes: list[Resource] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    still_running: list[Blocked] = field(default_factory=list)
    cpu_nodes: list[str] = field(default_factory=list)

    @property
    def taints(self) -> list[Taint]:
        return [t for b in [*self.blocked, *self.still_running] for t in b.taints]


@check(
    id="GPU-STACK-012",
    title="GPU-stack DaemonSets can be placed on every GPU node",
    category=Category.STACK,
    severity=Severity.HIGH,
    requires=("DaemonSet",),
    rationale="""
        The GPU stack is a set of DaemonSets: the NVIDIA device plugin, the driver and
        container toolkit, GPU feature discovery, DCGM and dcgm-exporter, the NFD worker and
        the MIG manager. A DaemonSet whose tolerations, nodeSelector or required node affinity
        do not admit a GPU node simply runs no pod there: no event, no error, DESIRED lower
        than the node count. Without the device plugin the node advertises no GPUs and every
        GPU pod stays Pending; without dcgm-exporter monitoring is blind; without the NFD
        worker the PCI label the device plugin and the GPU Operator key on never appears.
        Charts and static manifests tolerate `nvidia.com/gpu` only, while GPU pools are
        tainted with other keys and values (`gpu`, `sku=gpu`, `nvidia.com/gpu=true` against a
        toleration for `value: present`).
    """,
    detection="""
        The stack's DaemonSets are recognised by image and command (GFD and the MPS control
        daemon share the plugin's image, NFD's worker its master's). GPU nodes are GPU hosts,
        GPU instance types, and nodes whose NoSchedule/NoExecute taint names GPUs (so nodes
        whose stack never started count too). Each DaemonSet is placed as the DaemonSet
        controller does (NodeShouldRunDaemonPod): spec.nodeName, nodeSelector and required
        node affinity must match; every NoSchedule/NoExecute taint must be tolerated, with the
        scheduler's matching (Exists, or Equal with the same value; an empty key with Exists
        tolerates everything; an empty effect every effect; tolerationSeconds still
        tolerates), counting the tolerations the DaemonSet controller adds to its pods
        (not-ready and unreachable NoExecute; disk-, memory-, pid-pressure and unschedulable
        NoSchedule; network-unavailable with hostNetwork). PreferNoSchedule and lifecycle
        taints (node.kubernetes.io/*, karpenter.sh/disrupted, cluster-autoscaler's) do not
        block. A DaemonSet that selects GPU labels (nvidia.com/*, NFD's NVIDIA PCI labels,
        cloud accelerator labels, a custom label naming GPUs) is judged on the GPU nodes it
        selects; one with a generic selection on every GPU node, except those its
        kubernetes.io/os or arch selection leaves out. A node another DaemonSet of the same
        role, the ClusterPolicy, or the platform's own plugin (GKE, Bottlerocket, EKS Auto
        Mode) already serves is not counted. Karpenter NodePools that launch GPU nodes stand
        for their nodes while none is in the input; without any GPU node or NodePool the taint
        the platform shown by the input's labels and node selectors documents is assumed, and
        the message says so: AKS sku=gpu:NoSchedule (the taint its GPU guides add to GPU
        pools), GKE nvidia.com/gpu=present:NoSchedule (set automatically on GPU pools of a
        cluster that also has CPU pools); EKS managed node groups and on-premises clusters
        taint GPU nodes only as configured, so nothing is assumed there. Also reported: a
        DaemonSet without GPU selection that lands on CPU nodes where it fails without a GPU
        (device plugin and GFD unless FAIL_ON_INIT_ERROR=false, driver, DCGM, dcgm-exporter,
        MIG manager). GPU Operator operands are GPU-STACK-007's (their fix is the
        ClusterPolicy's daemonsets.tolerations), dcgm-exporter is GPU-MON-001's (which reports
        it with its other causes: not Ready, missing, disabled), and DaemonSets that exclude GPU labels
        (NotIn/DoesNotExist) are left out on purpose.
    """,
    severity_evidence="""
        High when the device plugin, driver or container toolkit cannot run on GPU nodes of
        the input (Nodes or a Karpenter NodePool that declares the taint), and for the NFD
        worker when those nodes lack NFD's PCI label and a device plugin selects on NFD labels
        or a ClusterPolicy relies on them; medium for GFD, DCGM, the NFD worker and the MIG
        manager. Low when the only blocked nodes still run a pod from before the
        taint, when no taint is in the input and a platform's documented GPU taint is assumed,
        and for landing on CPU nodes only.
    """,
    remediation="""
        # $kind $namespace/$name: $summary
        $fragment
    """,
    remediation_root="pod_spec",
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # GPU-stack DaemonSet <namespace>/<name> kept off GPU nodes by their taints: a patch of
        # spec.template.spec. It replaces the whole tolerations list: keep the existing entries.
        tolerations:
          - {key: "<existing-key>", operator: Exists, effect: NoSchedule}
          - {key: "<gpu-taint-key>", operator: Exists, effect: <gpu-taint-effect>}
        # when it also lands on CPU nodes where it cannot start, keep it on the GPU nodes:
        nodeSelector:
          <gpu-node-label>: "<value>"
    """,
    references=(
        "https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#taints-and-tolerations",
        "https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/",
        "https://github.com/NVIDIA/dcgm-exporter/issues/731",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/1934",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/421",
        "https://github.com/NVIDIA/k8s-device-plugin#configuration-option-details",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/gpus",
        "https://learn.microsoft.com/en-us/azure/aks/use-node-taints",
        "https://docs.aws.amazon.com/eks/latest/userguide/node-taints-managed-node-groups.html",
        "https://karpenter.sh/docs/concepts/nodepools/",
    ),
)
def gpu_stack_daemonsets_placed_on_gpu_nodes(snapshot: Snapshot) -> Iterator[Result]:
    stack = gpu_stack_daemonsets(snapshot)
    if not stack:
        return
    targets = [Target(n, labels=dict(n.labels)) for n in gpu_bound_nodes(snapshot)]
    targets.extend(_pool_targets(snapshot))
    cpu_nodes = [n for n in snapshot.of("Node") if not is_gpu_bound_node(n)]
    running = _running_pods(snapshot)
    for agent in stack:
        if agent.operand or avoids_gpu_nodes(agent.spec):
            continue  # operands: GPU-STACK-007 (the ClusterPolicy is the object to change)
        if agent.role == DCGM_EXPORTER:
            continue  # GPU-MON-001 reports where the exporter cannot run, with its other causes
        template = templates_of(agent.daemonset)[0]
        if targets:
            found = _placement(snapshot, agent, stack, targets, running)
            if _fails_without_gpu(agent, template):
                found.cpu_nodes = [
                    n.ref.name for n in cpu_nodes if daemonset_schedules_on(agent.spec, n)
                ]
            yield from _verdict(snapshot, agent, template, found)
        else:
            yield from _judge_assumed(snapshot, agent, template)


# --------------------------------------------------------------------------- targets


def _pool_targets(snapshot: Snapshot) -> list[Target]:
    """NodePools that launch GPU nodes, while none of their nodes is in the input."""
    with_nodes = {n.labels.get("karpenter.sh/nodepool", "") for n in snapshot.of("Node")}
    out = []
    for pool in snapshot.of(NODEPOOL):
        if pool.ref.name in with_nodes:
            continue
        taints = tuple(t for t in nodepool_taints(pool) if t.effect in ("NoSchedule", "NoExecute"))
        scope = nodepool_gpu_scope(pool)
        if scope == "only" or (scope == "maybe" and any(is_gpu_taint(t) for t in taints)):
            labels = {**nodepool_template_labels(pool), "karpenter.sh/nodepool": pool.ref.name}
            out.append(Target(pool, taints, labels))
    return out


def _running_pods(snapshot: Snapshot) -> dict[ObjRef, set[str]]:
    """DaemonSet -> the nodes where one of its pods is running."""
    out: dict[ObjRef, set[str]] = {}
    for pod in snapshot.of("Pod"):
        if pod.status.get("phase") != "Running":
            continue
        owner = controller_owner(snapshot, pod)
        node = str(as_mapping(pod.raw.get("spec")).get("nodeName", ""))
        if owner is not None and owner.ref.kind == "DaemonSet" and node:
            out.setdefault(owner.ref, set()).add(node)
    return out


# --------------------------------------------------------------------------- placement


def _placement(
    snapshot: Snapshot,
    agent: StackDaemonSet,
    stack: Sequence[StackDaemonSet],
    targets: Sequence[Target],
    running: Mapping[ObjRef, set[str]],
) -> Placement:
    spec = agent.spec
    aimed = bool(gpu_selection_keys(spec))
    on_nodes = running.get(agent.daemonset.ref, set())
    found = Placement()
    for target in targets:
        if target.is_pool:
            if selection_may_match(spec, target.labels):
                found.targets += 1
                taints = _blocking(daemonset_pod_tolerations(spec), target.taints)
                if taints:
                    found.blocked.append(Blocked(target, taints))
            continue
        node = target.resource
        if _platform_excluded(spec, node):
            continue
        selection, key = _selection_blocker(spec, node)
        if selection and aimed:
            continue  # aimed at other GPU nodes, or waiting for a label the stack sets
        found.targets += 1
        found.gpu_nodes.append(node)
        taints = () if selection else _blocking_on(spec, node)
        if not (selection or taints) or _served_elsewhere(snapshot, agent, stack, node):
            continue
        blocked = Blocked(target, taints, selection, key)
        if taints and node.ref.name in on_nodes:
            found.still_running.append(blocked)  # NoSchedule does not evict it
        else:
            found.blocked.append(blocked)
    return found


def _blocking(tolerations: Sequence[Any], taints: Sequence[Taint]) -> tuple[Taint, ...]:
    return tuple(t for t in taints if not tolerates(tolerations, t) and not is_transient_taint(t))


def _blocking_on(spec: Mapping[str, Any], node: Resource) -> tuple[Taint, ...]:
    return tuple(t for t in daemonset_untolerated_taints(spec, node) if not is_transient_taint(t))


def _selection_blocker(spec: Mapping[str, Any], node: Resource) -> tuple[str, str]:
    """Why the nodeSelector or required node affinity leaves the node out, and the
    nodeSelector key at fault; ("", "") when they admit it."""
    for key, value in str_map(spec.get("nodeSelector")).items():
        have = node.labels.get(key)
        if have != value:
            found = "no such label" if have is None else f"it has {have!r}"
            return f"nodeSelector {key}={value}: {found}", key
    node_name = str(spec.get("nodeName") or "")
    if node_name and node_name != node.ref.name:
        return f"spec.nodeName {node_name}", ""
    if not node_affinity_matches(spec, node):
        return "its required node affinity", ""
    return "", ""


def _platform_excluded(spec: Mapping[str, Any], node: Resource) -> bool:
    """Left out by an OS or architecture selection (nodeSelector or required node affinity):
    the image's platform, not a placement mistake."""
    selector = str_map(spec.get("nodeSelector"))
    if any(node.labels.get(k) != v for k, v in selector.items() if k in PLATFORM_LABELS):
        return True
    if node_affinity_matches(spec, node):
        return False
    return node_affinity_matches(_without_platform_terms(spec), node)


def _without_platform_terms(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec with the OS/architecture expressions taken out of its required terms."""
    affinity = as_mapping(spec.get("affinity"))
    node_affinity = as_mapping(affinity.get("nodeAffinity"))
    required = as_mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = []
    for term in map(as_mapping, as_list(required.get("nodeSelectorTerms"))):
        kept = [
            e
            for e in map(as_mapping, as_list(term.get("matchExpressions")))
            if str(e.get("key", "")) not in PLATFORM_LABELS
        ]
        if kept or term.get("matchFields"):
            terms.append({**term, "matchExpressions": kept})
    if not terms:
        return {k: v for k, v in spec.items() if k != "affinity"}
    required = {**required, "nodeSelectorTerms": terms}
    node_affinity = {**node_affinity, "requiredDuringSchedulingIgnoredDuringExecution": required}
    return {**spec, "affinity": {**affinity, "nodeAffinity": node_affinity}}


def _served_elsewhere(
    snapshot: Snapshot, agent: StackDaemonSet, stack: Sequence[StackDaemonSet], node: Resource
) -> bool:
    """Another agent of the same role already runs on the node: another DaemonSet, the
    platform's own device plugin, or the GPU Operator's operand not in the input."""
    same = [s for s in stack if s.role == agent.role and s.daemonset.ref != agent.daemonset.ref]
    if any(stack_agent_runs_on(s, node) for s in same):
        return True
    if agent.role == "device-plugin" and builtin_device_plugin(node):
        return True
    policy = active_cluster_policy(snapshot)
    operand = _POLICY_OPERANDS.get(agent.role)
    if policy is None or operand is None or any(s.operand for s in same):
        return False
    component, label = operand
    return component_enabled(policy, component) and policy_operand_runs_on(policy, node, label)


def _fails_without_gpu(agent: StackDaemonSet, template: PodTemplate) -> bool:
    """An agent without GPU node selection that fails on a node without GPUs: not the
    device plugin or GFD set to keep running (fail-on-init-error=false)."""
    if gpu_selection_keys(agent.spec) or agent.role not in _FAILS_WITHOUT_GPU:
        return False
    for container in template.containers(include_init=False):
        if any((env_value(container, e) or "").lower() == "false" for e in _FAIL_ON_INIT_ENV):
            return False
        argv = [str(a) for a in as_list(container.raw.get("command"))]
        argv += [str(a) for a in as_list(container.raw.get("args"))]
        if _FAIL_ON_INIT_OFF in argv:
            return False
    return True


# --------------------------------------------------------------------------- findings


def _verdict(
    snapshot: Snapshot, agent: StackDaemonSet, template: PodTemplate, found: Placement
) -> Iterator[Result]:
    path = f"{template.path}.tolerations"
    if found.blocked or found.still_running or found.cpu_nodes:
        yield _finding(snapshot, agent, template, found)
    elif found.targets:
        yield passed(
            template,
            f"can run on all {found.targets} GPU node(s) or NodePool(s) it should serve",
            path=path,
        )


def _severity(snapshot: Snapshot, agent: StackDaemonSet, found: Placement) -> tuple[Severity, str]:
    if not found.blocked:
        return Severity.LOW, ""
    if agent.role in ESSENTIAL_STACK_ROLES:
        return Severity.HIGH, ""
    if agent.role == "nfd-worker":
        dependents = _nfd_dependents(snapshot)
        unlabelled = any(
            b.target.is_pool or not nfd_pci_labelled(b.target.resource) for b in found.blocked
        )
        if dependents and unlabelled:
            verb = "wait" if " and " in dependents else "waits"
            return Severity.HIGH, (
                f"; {dependents} {verb} for that label, so no GPU is advertised there"
            )
    return Severity.MEDIUM, ""


def _nfd_dependents(snapshot: Snapshot) -> str:
    """What keys on NFD's labels: device plugins or GFD selecting them, or the GPU Operator."""
    names = [
        f"DaemonSet {s.daemonset.ref.namespace}/{s.daemonset.ref.name}"
        for s in gpu_stack_daemonsets(snapshot)
        if s.role in ("device-plugin", "gpu-feature-discovery")
        and not s.operand
        and any(k.startswith("feature.node.kubernetes.io/") for k in gpu_selection_keys(s.spec))
    ]
    policy = active_cluster_policy(snapshot)
    if policy is not None:
        names.append(f"the GPU Operator (ClusterPolicy {policy.ref.name})")
    if len(names) > 2:
        return f"{names[0]}, {names[1]} and others"
    return " and ".join(names)


def _shown(items: Sequence[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _finding(
    snapshot: Snapshot, agent: StackDaemonSet, template: PodTemplate, found: Placement
) -> Result:
    name, consequence = _ROLES[agent.role]
    severity, extra = _severity(snapshot, agent, found)
    parts = []
    if found.blocked:
        parts.append(
            f"cannot run on {len(found.blocked)} of the {found.targets} GPU node(s) or "
            f"NodePool(s) it should serve: {_shown([b.describe() for b in found.blocked])}; "
            f"{consequence}{extra}"
        )
    if found.still_running:
        shown = _shown([b.describe() for b in found.still_running])
        parts.append(
            f"still runs a pod from before the taint on {shown}, but would not be placed "
            "there again (a replaced node or a deleted pod gets none)"
        )
    if found.cpu_nodes:
        parts.append(
            f"has no GPU node selection and lands on {len(found.cpu_nodes)} CPU node(s) "
            f"({_shown(found.cpu_nodes)}), where it fails to start without a GPU"
        )
    taints = found.taints
    return failed(
        template,
        f"({name}) " + "; it ".join(parts),
        path=f"{template.path}.tolerations" if taints else f"{template.path}.nodeSelector",
        severity=severity,
        fix={
            "summary": _summary(taints, found),
            "fragment": _fragment(agent.spec, taints, found),
        },
    )


def _summary(taints: Sequence[Taint], found: Placement) -> str:
    wanted = []
    if taints:
        wanted.append("tolerate " + ", ".join(dict.fromkeys(str(t) for t in taints)))
    if any(b.selection for b in found.blocked):
        wanted.append("select the GPU nodes it leaves out")
    if found.cpu_nodes:
        wanted.append("keep it off the CPU nodes")
    return "; ".join(wanted)


def _fragment(spec: Mapping[str, Any], taints: Sequence[Taint], found: Placement) -> str:
    """A pod-spec fragment: the tolerations list (replaced whole by a patch, so the existing
    entries are kept) and the nodeSelector keys to drop or add."""
    lines: list[str] = []
    if any(b.selection and not b.label_key for b in found.blocked):
        lines.append("# its required node affinity leaves GPU nodes out: add a term selecting them")
    if taints:
        lines.append("tolerations:")
        for tol in map(as_mapping, as_list(spec.get("tolerations"))):
            fields = ", ".join(f"{k}: {_scalar(v)}" for k, v in tol.items())
            lines.append(f"  - {{{fields}}}")
        for key, effect in dict.fromkeys((t.key, t.effect) for t in taints):
            lines.append(f"  - {{key: {_scalar(key)}, operator: Exists, effect: {effect}}}")
    dropped = list(dict.fromkeys(b.label_key for b in found.blocked if b.label_key))
    if dropped or found.cpu_nodes:
        lines.append("nodeSelector:")
        lines.extend(f"  {_scalar(key)}: null   # leaves GPU nodes out" for key in dropped)
        if found.cpu_nodes:
            key, value = _common_gpu_label(found.gpu_nodes)
            lines.append(f"  {_scalar(key)}: {_scalar(value)}   # GPU nodes only")
    return "\n".join(lines)


_PREFERRED_LABELS = (
    "nvidia.com/gpu.present",
    "feature.node.kubernetes.io/pci-10de.present",
    "cloud.google.com/gke-accelerator",
    "kubernetes.azure.com/accelerator",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
)


def _common_gpu_label(nodes: Sequence[Resource]) -> tuple[str, str]:
    """A GPU label every given GPU node carries with the same value."""
    if nodes:
        shared = dict(nodes[0].labels)
        for node in nodes[1:]:
            shared = {k: v for k, v in shared.items() if node.labels.get(k) == v}
        for key in _PREFERRED_LABELS:
            if key in shared:
                return key, shared[key]
        for key, value in sorted(shared.items()):
            if is_gpu_label(key, [value]):
                return key, value
    return "nvidia.com/gpu.present", "true"


def _scalar(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------- no GPU node in input

_AKS_PREFIX = "kubernetes.azure.com/"
_GKE_PREFIX = "cloud.google.com/gke-"


def _platform(snapshot: Snapshot) -> str:
    """The managed platform the input shows (labels of its objects, node selection of its pod
    templates): "aks", "gke", or "" when none or another (EKS and on-premises clusters put no
    taint on GPU nodes by themselves)."""

    def compute(snap: Snapshot) -> str:
        keys = {k for r in snap.all() for k in r.labels}
        keys.update(k for t in pod_templates(snap) for k, _, _ in node_selection(t.spec))
        if any(k.startswith(_AKS_PREFIX) for k in keys):
            return "aks"
        if any(k.startswith(_GKE_PREFIX) for k in keys):
            return "gke"
        return ""

    return snapshot.derived("GPU-STACK-012.platform", compute)


def _judge_assumed(
    snapshot: Snapshot, agent: StackDaemonSet, template: PodTemplate
) -> Iterator[Result]:
    """No GPU node or GPU NodePool in the input: judge against the GPU taint of the platform
    the input shows, at low severity, and say which taint was assumed. Nothing to judge
    against on other platforms."""
    platform = _platform(snapshot)
    if platform == "aks":
        taint, why = _AKS_TAINT, "the taint AKS documents for GPU node pools"
    elif platform == "gke":
        taint, why = _GKE_TAINT, "the taint GKE sets on GPU node pools next to CPU pools"
    else:
        return
    path = f"{template.path}.tolerations"
    if tolerates(daemonset_pod_tolerations(agent.spec), taint):
        yield passed(template, f"tolerates {taint} ({why}; no GPU node in the input)", path=path)
        return
    name, consequence = _ROLES[agent.role]
    yield failed(
        template,
        f"({name}) does not tolerate {taint}: no GPU Node or NodePool in the input shows the "
        f"GPU nodes' taints, so this assumes {why}; if they carry it, {consequence}",
        path=path,
        severity=Severity.LOW,
        fix={
            "summary": f"tolerate {taint} (assumed: no GPU node in the input)",
            "fragment": _fragment(agent.spec, [taint], Placement()),
        },
    )
