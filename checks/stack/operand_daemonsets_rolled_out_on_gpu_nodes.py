from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import (
    DEPLOY_PREFIX,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_list,
    as_mapping,
    check,
    controller_owner,
    failed,
    gpu_nodes,
    is_operator_operand,
    node_is_ready,
    node_is_schedulable,
    operand_label,
    operator_node_labels,
    passed,
    pod_spec,
    untolerated_taints,
)
from gpu_audit.checks.stack._common import (
    PodFailure,
    pod_failure,
)

# Start order of the stack: a broken layer leaves every later one waiting in Init.
_LAYER = {"driver": 0, "container-toolkit": 1, "operator-validator": 2}
# Without these the node advertises no usable GPU.
_CRITICAL = frozenset({"driver", "container-toolkit", "device-plugin"})
_COUNTERS = ("numberReady", "numberAvailable", "updatedNumberScheduled")


@dataclass(frozen=True, slots=True)
class Operand:
    daemonset: Resource
    name: str  # the deploy-label suffix: driver, device-plugin, dcgm-exporter, ...

    @property
    def critical(self) -> bool:
        return self.name in _CRITICAL

    def severity(self, all_down: bool) -> Severity:
        """Critical only when a layer without which no GPU is advertised fails on every GPU
        node: then no GPU work runs anywhere. One broken node of several is high."""
        return Severity.CRITICAL if self.critical and all_down else Severity.HIGH

    @property
    def layer(self) -> int:
        return _LAYER.get(self.name, len(_LAYER))


Broken = tuple[str, str, PodFailure]  # node, pod, failure


def _operands(snapshot: Snapshot) -> list[Operand]:
    """Live operand DaemonSets (objects without status are manifests: not applicable)."""
    out = []
    for ds in snapshot.of("DaemonSet"):
        if "status" not in ds.raw or not is_operator_operand(ds):
            continue
        label = operand_label(ds)
        out.append(Operand(ds, label[len(DEPLOY_PREFIX) :] if label else ds.ref.name))
    return out


def _usable(node: Resource | None) -> bool:
    """NotReady and cordoned nodes are GPU-NODE-006's findings, not this check's."""
    return node is None or (node_is_ready(node) is not False and node_is_schedulable(node))


def _broken_pods(snapshot: Snapshot, daemonset: Resource) -> Iterator[tuple[Resource, PodFailure]]:
    for pod in snapshot.in_namespace("Pod", daemonset.ref.namespace):
        owner = controller_owner(snapshot, pod)
        if owner is None or owner.ref != daemonset.ref:
            continue
        node_name = str(as_mapping(pod.raw.get("spec")).get("nodeName", ""))
        node = snapshot.get("Node", "", node_name) if node_name else None
        if not _usable(node) or _preinstalled_driver(daemonset, node):
            continue
        reason = pod_failure(pod)
        if reason:
            yield pod, reason


def _preinstalled_driver(daemonset: Resource, node: Resource | None) -> bool:
    """A driver pod on a node with its own driver is GPU-STACK-002's finding."""
    return (
        node is not None
        and operand_label(daemonset) == DEPLOY_PREFIX + "driver"
        and node.labels.get(DEPLOY_PREFIX + "driver") == "pre-installed"
    )


def _excluded_nodes(snapshot: Snapshot, operand: Operand) -> list[tuple[Resource, str]]:
    """Ready GPU nodes labelled for the operand whose taints its pods do not tolerate."""
    label = operand_label(operand.daemonset)
    if label is None:
        return []
    out = []
    for node in gpu_nodes(snapshot):
        if not _usable(node) or operator_node_labels(node).get(label) != "true":
            continue
        taints = untolerated_taints(pod_spec(operand.daemonset), node)
        if taints:
            out.append((node, ", ".join(str(t) for t in taints)))
    return out


def _counters(daemonset: Resource) -> tuple[int, dict[str, int]]:
    status = daemonset.status

    def number(key: str) -> int:
        value = status.get(key)
        return value if isinstance(value, int) else 0

    return number("desiredNumberScheduled"), {k: number(k) for k in _COUNTERS}


@check(
    id="GPU-STACK-007",
    title="Every GPU Operator operand DaemonSet is rolled out and ready on every GPU node",
    category=Category.STACK,
    severity=Severity.HIGH,
    requires=("DaemonSet",),
    rationale="""
        Each operand is one layer of the node's GPU stack: driver, container toolkit,
        validator, then device plugin, GFD, DCGM and the exporter. A pod that crash-loops or
        cannot pull its image leaves that layer missing, and every later operand on the node
        waits in Init on the validator's markers. Without the driver, toolkit or device plugin
        the node advertises no GPUs at all. An operand whose tolerations miss a custom GPU
        taint never gets a pod on that node, and nothing reports it.
    """,
    detection="""
        Live only: operand DaemonSets (owned by the ClusterPolicy or pinned by a
        nvidia.com/gpu.deploy.<operand> selector) that carry status. Fails on clock-free
        evidence: a pod of the DaemonSet in CrashLoopBackOff, ImagePullBackOff or another
        stuck waiting state, an init container that exited non-zero, 3+ restarts,
        Unschedulable, phase Failed; and on GPU nodes carrying the operand's deploy label
        whose taints its pods do not tolerate. Per node only the earliest failing layer is
        reported (driver, then toolkit, then validator, then the rest). Passes when ready,
        available and updated counts equal desiredNumberScheduled. Not flagged: pods that are
        merely pending or initialising (no clock to tell a slow driver build from a stuck
        one), pods on NotReady or cordoned nodes (GPU-NODE-006), driver pods on nodes
        labelled driver=pre-installed (GPU-STACK-002), and manifests without status.
        The severity depends on how many GPU nodes are left without a working stack.
    """,
    severity_evidence="""
        Critical only when the driver, toolkit or device-plugin layer fails (or gets no pod) on
        every usable GPU node in the input (without Node objects: on every node its DaemonSet
        targets), so no GPU work can run at all; the same failure on some GPU nodes while
        others work is high, as is any other operand (GFD, DCGM, exporter, validator).
    """,
    remediation="""
        # $subject: $summary
        $body
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # an operand DaemonSet not ready on GPU nodes: find the first failing layer on the node
        kubectl -n <namespace> get pods -o wide --field-selector spec.nodeName=<node>
        kubectl -n <namespace> describe pod <pod>
        kubectl -n <namespace> logs <pod> -c <container> --previous
        # no pod on GPU nodes whose taints it does not tolerate: a merge patch that keeps the
        # existing tolerations (the list is replaced) and tolerates each taint, on the DaemonSet
        # (spec.template.spec.tolerations) or, for GPU Operator operands, the ClusterPolicy:
        #   spec:
        #     daemonsets:
        #       tolerations:
        #         - {key: "<existing-key>", operator: "Exists", effect: "NoSchedule"}
        #         - {key: "<taint-key>", operator: Exists, effect: <taint-effect>}
    """,
    references=(
        "https://github.com/NVIDIA/gpu-operator/issues/1374",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/troubleshooting.html",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html",
    ),
)
def operand_daemonsets_rolled_out_on_gpu_nodes(snapshot: Snapshot) -> Iterator[Result]:
    operands = _operands(snapshot)
    failures = _failing_pods(snapshot, operands)
    policy = active_cluster_policy(snapshot)
    excluded_by = {str(o.daemonset.ref): _excluded_nodes(snapshot, o) for o in operands}
    all_down = _every_gpu_node_down(snapshot, operands, failures, excluded_by)
    untolerated: dict[str, list[tuple[Operand, str]]] = {}
    for operand in operands:
        excluded = excluded_by[str(operand.daemonset.ref)]
        for node, taints in excluded:
            untolerated.setdefault(node.ref.name, []).append((operand, taints))
        broken = failures.get(str(operand.daemonset.ref), [])
        if broken:
            yield _crash_finding(operand, broken, all_down)
        elif excluded and policy is None:
            yield _taint_finding(operand.daemonset, operand, excluded, all_down)
        elif _rolled_out(operand.daemonset) and not excluded:
            desired, _ = _counters(operand.daemonset)
            yield passed(operand.daemonset, f"is ready on all {desired} node(s) it targets")
    if policy is not None and untolerated:
        yield _policy_taint_finding(policy, untolerated, all_down)


def _every_gpu_node_down(
    snapshot: Snapshot,
    operands: list[Operand],
    failures: Mapping[str, list[Broken]],
    excluded_by: Mapping[str, list[tuple[Resource, str]]],
) -> bool:
    """Whether a driver, toolkit or device-plugin failure (or missing pod) covers every usable
    GPU node in the input; without Node objects, whether it covers every node a failing
    critical DaemonSet targets."""
    down: set[str] = set()
    for operand in operands:
        if not operand.critical:
            continue
        key = str(operand.daemonset.ref)
        down.update(node for node, _, _ in failures.get(key, []) if node)
        down.update(node.ref.name for node, _ in excluded_by.get(key, []))
    usable = {n.ref.name for n in gpu_nodes(snapshot) if _usable(n)}
    if usable:
        return usable <= down
    for operand in operands:
        broken = failures.get(str(operand.daemonset.ref), [])
        desired, _ = _counters(operand.daemonset)
        if operand.critical and broken and len(broken) >= desired:
            return True
    return False


def _rolled_out(daemonset: Resource) -> bool:
    desired, counters = _counters(daemonset)
    generation = daemonset.metadata.get("generation")
    observed = daemonset.status.get("observedGeneration")
    current = not isinstance(generation, int) or observed == generation
    return current and all(v >= desired for v in counters.values())


def _failing_pods(snapshot: Snapshot, operands: list[Operand]) -> dict[str, list[Broken]]:
    """DaemonSet -> (node, pod, failure) for the first broken layer of each node."""
    first: dict[str, tuple[Operand, str, PodFailure]] = {}
    for operand in operands:
        for pod, reason in _broken_pods(snapshot, operand.daemonset):
            node = str(as_mapping(pod.raw.get("spec")).get("nodeName", ""))
            known = first.get(node)
            if known is None or operand.layer < known[0].layer:
                first[node] = (operand, pod.ref.name, reason)
    out: dict[str, list[Broken]] = {}
    for node, (operand, pod_name, reason) in sorted(first.items()):
        out.setdefault(str(operand.daemonset.ref), []).append((node, pod_name, reason))
    return out


def _crash_finding(operand: Operand, broken: list[Broken], all_down: bool) -> Result:
    ds = operand.daemonset
    summary = "; ".join(
        f"{node or 'unscheduled'}: pod {pod} {why.message}" for node, pod, why in broken
    )
    node, pod, why = broken[0]
    container = why.container
    lines = [
        f"kubectl -n {ds.ref.namespace} get pods -o wide --field-selector spec.nodeName={node}",
        f"kubectl -n {ds.ref.namespace} describe pod {pod}",
    ]
    if container:
        lines.append(f"kubectl -n {ds.ref.namespace} logs {pod} -c {container} --previous")
    return failed(
        ds,
        f"is not ready on {len(broken)} GPU node(s): {summary}{_scope(operand, all_down)}",
        path="status.numberReady",
        severity=operand.severity(all_down),
        fix={
            "subject": f"DaemonSet {ds.ref.namespace}/{ds.ref.name}",
            "summary": f"first failing layer on {node or 'its node'}",
            "body": "\n".join(lines),
        },
    )


def _taint_finding(
    daemonset: Resource, operand: Operand, excluded: list[tuple[Resource, str]], all_down: bool
) -> Result:
    nodes = "; ".join(f"{n.ref.name} ({t})" for n, t in excluded)
    tolerations = as_list(pod_spec(daemonset).get("tolerations"))
    return failed(
        daemonset,
        f"has no pod on GPU node(s) labelled for it, whose taints it does not tolerate: {nodes}"
        f"{_scope(operand, all_down)}",
        path="spec.template.spec.tolerations",
        severity=operand.severity(all_down),
        fix={
            "subject": f"DaemonSet {daemonset.ref.namespace}/{daemonset.ref.name}",
            "summary": "tolerate the GPU nodes' taints",
            "body": _tolerations_yaml(
                ["spec", "template", "spec"], tolerations, [t for _, t in excluded]
            ),
        },
    )


def _policy_taint_finding(
    policy: Resource, untolerated: Mapping[str, list[tuple[Operand, str]]], all_down: bool
) -> Result:
    parts = [
        f"{node}: {', '.join(o.daemonset.ref.name for o, _ in found)} ({found[0][1]})"
        for node, found in sorted(untolerated.items())
    ]
    worst = max(
        (o.severity(all_down) for found in untolerated.values() for o, _ in found),
        key=lambda s: s.rank,
    )
    existing = as_list(as_mapping(policy.spec.get("daemonsets")).get("tolerations"))
    taints = [t for found in untolerated.values() for _, t in found]
    return failed(
        policy,
        f"operands get no pod on tainted GPU nodes: {'; '.join(parts)}",
        path="spec.daemonsets.tolerations",
        severity=worst,
        fix={
            "subject": f"ClusterPolicy {policy.ref.name}",
            "summary": "add the GPU nodes' taints to the operator's global tolerations",
            "body": _tolerations_yaml(["spec", "daemonsets"], existing, taints),
        },
    )


def _scope(operand: Operand, all_down: bool) -> str:
    if not operand.critical:
        return ""
    if all_down:
        return "; no GPU node in the input has a working GPU stack"
    return "; other GPU nodes still advertise GPUs"


def _tolerations_yaml(path: list[str], existing: list[Any], taints: list[str]) -> str:
    """A merge patch that keeps the current tolerations (lists are replaced) and adds one
    Exists toleration per untolerated taint key and effect."""
    wanted: dict[tuple[str, str], None] = {}
    for text in taints:
        for taint in text.split(", "):
            key, _, effect = taint.rpartition(":")
            wanted[(key.split("=", 1)[0], effect)] = None
    lines = [f"{'  ' * i}{part}:" for i, part in enumerate(path)]
    indent = "  " * len(path)
    lines.append(f"{indent}tolerations:")
    for tol in map(as_mapping, existing):
        fields = ", ".join(f"{k}: {_scalar(v)}" for k, v in tol.items())
        lines.append(f"{indent}  - {{{fields}}}")
    for key, effect in wanted:
        lines.append(f"{indent}  - {{key: {_scalar(key)}, operator: Exists, effect: {effect}}}")
    return "\n".join(lines)


def _scalar(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
