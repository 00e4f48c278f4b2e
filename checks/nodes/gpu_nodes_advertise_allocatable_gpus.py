from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    CLUSTER_POLICY,
    COMPUTE_DOMAIN_DRIVER,
    Category,
    FixKind,
    ObjRef,
    PodTemplate,
    QuantityError,
    RelatedRef,
    RelatedRole,
    Resource,
    Result,
    Severity,
    Snapshot,
    StackDaemonSet,
    Taint,
    active_cluster_policy,
    agent_pods_by_node,
    as_list,
    as_mapping,
    builtin_device_plugin,
    check,
    clusterpolicy_placement_fix,
    component_enabled,
    daemonset_not_ready_fix,
    daemonset_placement_fix,
    daemonset_untolerated_taints,
    event_note,
    event_regarding,
    event_time,
    failed,
    format_quantity,
    gets_gpus_through_dra,
    gpu_hosts,
    gpu_quantities,
    gpu_selection_keys,
    gpu_stack_daemonsets,
    has_resource_status,
    image_repository,
    is_bootstrapping,
    node_devices,
    operator_deployed,
    parse_quantity,
    passed,
    pod_is_ready,
    pod_templates,
    policy_operand_runs_on,
    relate,
    stack_agent_runs_on,
    templates_of,
)
from gpu_audit.checks.nodes._common import dra_gpu_nodes

_VM_MODES = ("vm-passthrough", "vm-vgpu")


@check(
    id="GPU-NODE-001",
    title="Every GPU node advertises allocatable GPU resources",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=("Node",),
    rationale="""
        The scheduler only places GPU pods on nodes whose status.allocatable lists GPUs. A GPU
        node without them (device plugin disabled, not placed on the node, not Ready there,
        paused by the MIG manager, an invalid MIG layout, or every GPU marked unhealthy after
        XID errors) is an expensive instance that takes no GPU pod. When no GPU node
        advertises GPUs, no GPU pod in the cluster can run.
    """,
    detection="""
        Live (nodes with status): every GPU node identified by labels, not by capacity (GFD/NFD
        labels, cloud accelerator labels), must have a positive allocatable nvidia.com/gpu,
        nvidia.com/gpu.shared or nvidia.com/mig-* resource. Passes too for nodes whose GPUs are
        published by the NVIDIA DRA driver (a gpu.nvidia.com ResourceSlice with devices) and, for
        vm-passthrough/vm-vgpu nodes, any positive nvidia.com/* resource. Causes on the node
        itself are reported on the node: disabled by label, paused for a MIG change, MIG-INVALID
        product, capacity > 0 with allocatable 0 (unhealthy GPUs). When no device plugin has
        registered, the cause is looked for in the input and reported once, with the nodes as
        related symptoms: on the device-plugin DaemonSet that cannot be placed on them
        (untolerated taints, nodeSelector/affinity; on the ClusterPolicy when the GPU Operator
        renders it) or whose pod there is not Ready; on the ClusterPolicy when its
        device-plugin operand (not in the input) would not tolerate their taints; on the NVIDIA
        DRA driver's DaemonSet when it publishes only ComputeDomain devices on them (its GPU
        allocation off) while pods claim NVIDIA GPUs through DRA, which no device plugin
        serves; on the DaemonSet to install when the input has DaemonSets but no NVIDIA device
        plugin, no ClusterPolicy deploying one and no platform plugin (GKE, Bottlerocket, EKS
        Auto Mode).
        Otherwise the node is reported. Nodes that are NotReady or still carry join-time taints
        are skipped (the check has no clock for the catalogue's 10-minute guard).
    """,
    severity_evidence="""
        High: a GPU node that takes no GPU pod; critical when no evaluated GPU node advertises
        GPUs (no GPU pod in the cluster can run). Medium when the device plugin is disabled on
        the node by a label, which may be deliberate.
    """,
    remediation="""
        # $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # a GPU node advertises no GPUs: see whether a device-plugin pod runs there, and why not
        kubectl get pods -A -o wide -l app=nvidia-device-plugin-daemonset --field-selector spec.nodeName=<node>
        # the device-plugin DaemonSet does not tolerate the GPU nodes' taint: add the toleration
        kubectl -n <namespace> patch daemonset <daemonset> --type=json -p '[{"op": "add", "path": "/spec/template/spec/tolerations/-", "value": {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}]'
        # a GPU Operator operand: the tolerations come from the ClusterPolicy
        kubectl patch clusterpolicy <clusterpolicy> --type=merge -p '{"spec": {"daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}'
        # the device-plugin pod on the node is not Ready: read its events and logs
        kubectl -n <namespace> describe pod <pod>
        # no NVIDIA device plugin at all: install it (the chart tolerates nvidia.com/gpu)
        helm upgrade -i nvdp nvidia-device-plugin --repo https://nvidia.github.io/k8s-device-plugin --namespace nvidia-device-plugin --create-namespace
    """,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/issues/58",
        "https://github.com/kubernetes/kubernetes/pull/57266",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html",
        "https://github.com/NVIDIA/k8s-device-plugin#deployment-via-helm",
        "https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#taints-and-tolerations",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/338",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/438",
    ),
)
def gpu_nodes_advertise_allocatable_gpus(snapshot: Snapshot) -> Iterator[Result]:
    dra = dra_gpu_nodes(snapshot)
    nodes = [n for n in gpu_hosts(snapshot) if has_resource_status(n) and not is_bootstrapping(n)]
    verdicts = {n.ref.name: _problem(n, n.ref.name in dra) for n in nodes}
    # Every node short of GPUs: no GPU pod can run anywhere.
    cluster_wide = bool(nodes) and all(v is not None for v in verdicts.values())
    causes: dict[ObjRef, _Cause] = {}
    for node in nodes:
        problem = verdicts[node.ref.name]
        if problem is None:
            yield passed(node, f"advertises {_advertised(node)}", path="status.allocatable")
            continue
        message, severity, hint = problem
        if cluster_wide and severity is Severity.HIGH:
            severity = Severity.CRITICAL
        found = _unregistered_cause(snapshot, node) if hint == _NO_PLUGIN else None
        if found is not None:
            cause = causes.setdefault(found.target.ref, found)
            cause.nodes.append((node, found.why))
            cause.seen_taints.extend(found.taints)
            cause.severity = max(cause.severity, severity, key=lambda s: s.rank)
            continue
        if cluster_wide:
            message += "; no GPU node in the input advertises GPUs"
        yield failed(
            node,
            message,
            path="status.allocatable",
            severity=severity,
            fix={
                "summary": f"Node {node.ref.name}: {hint}",
                "command": "kubectl get pods -A -o wide -l app=nvidia-device-plugin-daemonset "
                f"--field-selector spec.nodeName={node.ref.name}",
            },
        )
    for cause in sorted(causes.values(), key=lambda c: c.target.ref.sort_key):
        yield cause.result(cluster_wide)


_DEVICE_PLUGIN = "device-plugin"  # the stack role, and the operand's deploy-label suffix
# Labels of NFD (the NVIDIA PCI device) and GFD/the GPU Operator that a plugin may select on.
_LABELLER_PREFIXES = ("feature.node.kubernetes.io/", "nvidia.com/")
_NO_PLUGIN = "no plugin pod on the node: check the operator's nodeSelector and the NFD/GFD labels"
_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# The labels that select the operator's device plugin: its deploy label and NFD's NVIDIA PCI one.
_PLUGIN_LABELS = (
    "nvidia.com/gpu.deploy.device-plugin",
    "feature.node.kubernetes.io/pci-10de.present",
)


@dataclass
class _Cause:
    """One object that keeps the device plugin off (or broken on) GPU nodes: `why` is what
    it does to the node it was found for; the caller collects every node it explains, each
    with its own `why`, in `nodes`."""

    target: Resource
    what: str  # the sentence after the object's name, before the nodes
    fix: Callable[[Sequence[Taint]], dict[str, str]]  # from the taints of every node
    why: str
    taints: tuple[Taint, ...] = ()  # what keeps it off the node it was found for
    related: list[RelatedRef] = field(default_factory=list)
    nodes: list[tuple[Resource, str]] = field(default_factory=list)
    severity: Severity = Severity.HIGH
    seen_taints: list[Taint] = field(default_factory=list)

    def result(self, cluster_wide: bool) -> Result:
        nodes = self.nodes
        sep = "; " if any(why for _, why in nodes) else ", "
        shown = sep.join(f"{n.ref.name} ({why})" if why else n.ref.name for n, why in nodes[:3])
        more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
        tail = "; no GPU node in the input advertises GPUs" if cluster_wide else ""
        count = f"{len(nodes)} GPU node{'s' if len(nodes) != 1 else ''}"
        return failed(
            self.target,
            f"{self.what}, so {count} advertise{'s' if len(nodes) == 1 else ''} no allocatable "
            f"GPUs: {shown}{more}{tail}",
            path=_path(self.target),
            severity=self.severity,
            fix=self.fix(list(dict.fromkeys(self.seen_taints))),
            related=[*(relate(n, RelatedRole.SYMPTOM) for n, _ in nodes), *self.related],
        )


def _path(target: Resource) -> str:
    if target.ref.kind == CLUSTER_POLICY:
        return "spec.daemonsets.tolerations"
    return "spec.template.spec"


def _unregistered_cause(snapshot: Snapshot, node: Resource) -> _Cause | None:
    """Why no device plugin has registered GPUs on the node, as an object to change, when
    the input shows it; None when it does not."""
    plugins = [d for d in gpu_stack_daemonsets(snapshot) if d.role == _DEVICE_PLUGIN]
    placed = [d for d in plugins if stack_agent_runs_on(d, node)]
    if placed:
        return _not_ready(snapshot, node, placed)
    if builtin_device_plugin(node):
        return None  # the platform's own plugin: nothing in the input to change
    if plugins:
        return _not_placed(snapshot, node, plugins)
    policy = active_cluster_policy(snapshot)
    if policy is not None and component_enabled(policy, "devicePlugin"):
        if policy_operand_runs_on(policy, node, _DEVICE_PLUGIN):
            return None  # the operator deploys it there; its DaemonSet is not in the input
        return _policy_taints(policy, node)
    if not snapshot.has("DaemonSet") or _operator_may_deploy(snapshot):
        return None  # the input cannot tell whether a plugin is meant to be there
    return _dra_driver_without_gpus(snapshot, node) or _missing_plugin(node)


def _dra_driver_without_gpus(snapshot: Snapshot, node: Resource) -> _Cause | None:
    """The NVIDIA DRA driver that publishes the node's ComputeDomain devices but none of its
    GPUs (its chart's GPU allocation is off), while pods claim NVIDIA GPUs through DRA: a
    device plugin would not serve those claims. Without such pods, ComputeDomains beside a
    device plugin is a documented setup, and the missing plugin is the finding."""
    if not node_devices(snapshot, COMPUTE_DOMAIN_DRIVER).get(node.ref.name):
        return None
    claimants, driver = snapshot.derived(
        "nodes.dra_claimants_and_driver", _dra_claimants_and_driver
    )
    if not claimants or driver is None:
        return None
    daemonset, chart = driver
    release = daemonset.annotations.get("meta.helm.sh/release-name") or chart.split("/")[-1]
    names = ", ".join(str(t.owner.ref) for t in claimants[:3])
    claim = "claims" if len(claimants) == 1 else "claim"
    return _Cause(
        daemonset,
        "runs the NVIDIA DRA driver without its GPU allocation: it publishes ComputeDomain "
        f"devices ({COMPUTE_DOMAIN_DRIVER}) but no GPU, and {_workloads(len(claimants))} "
        f"({names}) {claim} NVIDIA GPUs through DRA, which a device plugin would not serve",
        _fixed(
            {
                "summary": "enable the DRA driver's GPU allocation (its chart's "
                "resources.gpus.enabled, and gpuResourcesEnabledOverride, the chart's guard "
                "against a device plugin serving the same GPUs)",
                "command": f"helm upgrade {release} {chart} --namespace "
                f"{daemonset.ref.namespace} --reuse-values --set resources.gpus.enabled=true "
                "--set gpuResourcesEnabledOverride=true",
            }
        ),
        "",
        related=[relate(t.owner, RelatedRole.SYMPTOM) for t in claimants[:3]],
    )


def _dra_claimants_and_driver(
    snapshot: Snapshot,
) -> tuple[tuple[PodTemplate, ...], tuple[Resource, str] | None]:
    """The pod templates that claim NVIDIA GPUs through DRA, and the NVIDIA DRA driver's
    DaemonSet with its Helm chart (the same for every node: found once per snapshot)."""
    claimants = tuple(t for t in pod_templates(snapshot) if gets_gpus_through_dra(snapshot, t))
    driver = next(
        (
            (ds, chart)
            for ds in snapshot.of("DaemonSet")
            for template in templates_of(ds)
            for container in template.containers()
            for image, chart in _DRA_DRIVER_CHARTS.items()
            if image_repository(container.image).endswith(image)
        ),
        None,
    )
    return claimants, driver


def _operator_may_deploy(snapshot: Snapshot) -> bool:
    """The GPU Operator runs, or its ClusterPolicy could not be read: its device plugin may
    be on the way, so its absence is not the finding's object."""
    if any(gap.type == CLUSTER_POLICY and not gap.api_absent for gap in snapshot.gaps):
        return True
    return operator_deployed(snapshot)


def _owner_related(snapshot: Snapshot, agent: StackDaemonSet) -> list[RelatedRef]:
    policy = active_cluster_policy(snapshot) if agent.operand else None
    return [relate(policy, RelatedRole.OWNER)] if policy is not None else []


def _not_placed(snapshot: Snapshot, node: Resource, plugins: list[StackDaemonSet]) -> _Cause | None:
    # The plugin meant for these nodes: one that runs on some GPU node, else the first.
    gpu = gpu_hosts(snapshot)
    agent = next((d for d in plugins if any(stack_agent_runs_on(d, n) for n in gpu)), plugins[0])
    taints = daemonset_untolerated_taints(agent.spec, node)
    if not taints and any(
        key not in node.labels and key.startswith(_LABELLER_PREFIXES)
        for key in gpu_selection_keys(agent.spec)
    ):
        # It selects labels NFD or GFD put on GPU nodes, and they have not labelled this one:
        # the labeller is what to fix (GPU-STACK-012), not the plugin; the node is reported.
        return None
    why = (
        f"does not tolerate {', '.join(str(t) for t in taints)}"
        if taints
        else "its nodeSelector/affinity leaves the node out"
    )
    ds = agent.daemonset
    policy = active_cluster_policy(snapshot) if agent.operand else None
    if policy is not None:
        # The operator renders the DaemonSet: a change to it would be reverted.
        return _Cause(
            policy,
            f"renders device-plugin DaemonSet {ds.ref.namespace}/{ds.ref.name}, which cannot "
            "be placed on its GPU nodes",
            lambda ts: _policy_fix(policy, ts, why),
            why,
            taints=taints,
            related=[relate(ds, RelatedRole.CAUSE)],
        )
    return _Cause(
        ds,
        "cannot be placed on the GPU nodes it is meant for",
        lambda ts: _daemonset_fix(ds, agent.spec, ts, why),
        why,
        taints=taints,
        related=_owner_related(snapshot, agent),
    )


def _daemonset_fix(
    ds: Resource, spec: Mapping[str, Any], taints: Sequence[Taint], why: str
) -> dict[str, str]:
    return daemonset_placement_fix(
        ds, spec, taints, why, "label the GPU nodes or widen its nodeSelector/affinity"
    )


def _policy_fix(policy: Resource, taints: Sequence[Taint], why: str) -> dict[str, str]:
    hint = "check the nodes' nvidia.com/gpu.deploy.* labels and the operator's NFD labels"
    return clusterpolicy_placement_fix(policy, taints, why, "device plugin", _PLUGIN_LABELS, hint)


def _policy_taints(policy: Resource, node: Resource) -> _Cause:
    extra = as_list(as_mapping(policy.spec.get("daemonsets")).get("tolerations"))
    taints = daemonset_untolerated_taints({"tolerations": [_GPU_TOLERATION, *extra]}, node)
    why = f"does not tolerate {', '.join(str(t) for t in taints)}" if taints else ""
    return _Cause(
        policy,
        "deploys the device plugin with tolerations that keep it off its GPU nodes",
        lambda ts: _policy_fix(policy, ts, why),
        why,
        taints=taints,
    )


def _missing_plugin(node: Resource) -> _Cause:
    # The object to create: the name and namespace of NVIDIA's Helm chart for the plugin.
    raw = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": _CHART_DAEMONSET, "namespace": _CHART_NAMESPACE},
    }
    target = Resource(
        ObjRef("DaemonSet", _CHART_NAMESPACE, _CHART_DAEMONSET), "apps/v1", raw, node.source
    )
    return _Cause(
        target,
        "does not exist (the input has no NVIDIA device-plugin DaemonSet, no GPU Operator "
        "ClusterPolicy deploying one and no platform plugin)",
        _fixed(
            {
                "summary": "install the NVIDIA device plugin (its chart tolerates nvidia.com/gpu)",
                "command": "helm upgrade -i nvdp nvidia-device-plugin "
                "--repo https://nvidia.github.io/k8s-device-plugin "
                f"--namespace {_CHART_NAMESPACE} --create-namespace",
            }
        ),
        "",
    )


_CHART_NAMESPACE = "nvidia-device-plugin"
_CHART_DAEMONSET = "nvdp-nvidia-device-plugin"
# The NVIDIA DRA driver's image (one for the GPU and the ComputeDomain kubelet plugins) -> its
# Helm chart: NVIDIA's (nvcr.io), and the kubernetes-sigs project's (registry.k8s.io).
_DRA_DRIVER_CHARTS = {
    "k8s-dra-driver-gpu": "nvidia-dra-driver-gpu --repo https://helm.ngc.nvidia.com/nvidia",
    "dra-driver-nvidia-gpu": "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu",
}


def _workloads(count: int) -> str:
    return f"{count} workload{'s' if count != 1 else ''}"


def _not_ready(snapshot: Snapshot, node: Resource, placed: list[StackDaemonSet]) -> _Cause | None:
    """The placed plugin whose pod on the node is missing or not Ready, when live pods show it."""
    index = agent_pods_by_node(snapshot)
    for agent in placed:
        by_node = index.get(agent.daemonset.ref)
        if by_node is None:
            continue  # no live pod of it in the input: cannot tell
        pods = sorted(by_node.get(node.ref.name, []), key=lambda p: p.ref.sort_key)
        if any(pod_is_ready(p) for p in pods):
            return None  # running and Ready, yet nothing registered: not visible here
        ds = agent.daemonset
        why = (
            f"pod {pods[0].ref.name} not Ready{_pod_reason(snapshot, pods[0])}"
            if pods
            else "no pod of it there"
        )
        return _Cause(
            ds,
            "has no Ready pod on GPU nodes it is placed on",
            _fixed(daemonset_not_ready_fix(ds, pods)),
            why,
            related=_owner_related(snapshot, agent),
        )
    return None


def _pod_reason(snapshot: Snapshot, pod: Resource) -> str:
    """What the pod's status and its latest Warning event say, briefly."""
    reasons = [
        str(as_mapping(as_mapping(s).get("state")).get("waiting", {}).get("reason", ""))
        for key in ("initContainerStatuses", "containerStatuses")
        for s in as_list(pod.status.get(key))
        if isinstance(as_mapping(as_mapping(s).get("state")).get("waiting"), Mapping)
    ]
    warnings = sorted(
        (
            e
            for e in snapshot.of("Event", "Event.events.k8s.io")
            if e.ref.namespace == pod.ref.namespace
            and event_regarding(e).get("name") == pod.ref.name
            and str(e.raw.get("type", "")) == "Warning"
        ),
        key=event_time,
    )
    parts = [r for r in dict.fromkeys(reasons) if r]
    if warnings:
        latest = warnings[-1]
        parts.append(f"{latest.raw.get('reason', 'Warning')}: {event_note(latest)}")
    return f": {'; '.join(parts)}" if parts else ""


def _fixed(fix: dict[str, str]) -> Callable[[Sequence[Taint]], dict[str, str]]:
    """A fix that does not depend on the taints."""
    return lambda _: fix


def _gpu_like(node: Resource) -> dict[str, Decimal]:
    quantities = gpu_quantities(node, "allocatable")
    if node.labels.get("nvidia.com/gpu.workload.config") in _VM_MODES:
        # KubeVirt passthrough/vGPU resources are named after the model (nvidia.com/GA102GL_A10).
        for name, value in as_mapping(node.status.get("allocatable")).items():
            if str(name).startswith("nvidia.com/"):
                try:
                    quantities[str(name)] = parse_quantity(value)
                except QuantityError:
                    continue
    return {k: v for k, v in quantities.items() if v > 0}


def _advertised(node: Resource) -> str:
    quantities = _gpu_like(node)
    if not quantities:
        return "its GPUs through the NVIDIA DRA driver (gpu.nvidia.com ResourceSlice)"
    return ", ".join(f"{k}={format_quantity(v)}" for k, v in sorted(quantities.items()))


def _problem(node: Resource, dra: bool) -> tuple[str, Severity, str] | None:
    """(message, severity, hint) for a GPU node without allocatable GPUs, else None."""
    if _gpu_like(node) or dra:
        return None
    labels = node.labels
    plugin = labels.get("nvidia.com/gpu.deploy.device-plugin", "")
    if "false" in (labels.get("nvidia.com/gpu.deploy.operands"), plugin):
        return (
            "has no allocatable GPUs: the device plugin is disabled by a node label",
            Severity.MEDIUM,
            f"if that was a mistake: kubectl label node {node.ref.name} nvidia.com/gpu.deploy.device-plugin=true --overwrite",
        )
    if plugin.startswith("paused-for-"):
        return (
            f"has no allocatable GPUs: the device plugin is {plugin} (see GPU-NODE-004)",
            Severity.HIGH,
            "check nvidia-mig-manager logs; the deploy labels are reset when the MIG change ends",
        )
    if labels.get("nvidia.com/gpu.product", "").endswith("-MIG-INVALID"):
        return (
            "has no allocatable GPUs: invalid MIG layout for mig.strategy=single (see GPU-NODE-003)",
            Severity.HIGH,
            "use a single-profile nvidia.com/mig.config or the mixed MIG strategy",
        )
    if any(v > 0 for v in gpu_quantities(node, "capacity").values()):
        return (
            "has GPU capacity but 0 allocatable: every GPU is marked unhealthy (XID errors)",
            Severity.HIGH,
            "look for XID errors in the plugin logs and dmesg; drain and reset or replace the GPU",
        )
    return (
        "has no allocatable GPUs: no device plugin has registered GPUs on this node",
        Severity.HIGH,
        _NO_PLUGIN,
    )
