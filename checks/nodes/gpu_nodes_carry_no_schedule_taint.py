import json
from collections.abc import Iterator

from gpu_audit.api import (
    NODEPOOL,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    Taint,
    check,
    dedicating_taints,
    failed,
    is_gpu_host,
    node_taints,
    nodepool_gpu_scope,
    nodepool_taints,
    owner_kinds,
    passed,
    pod_is_active,
    pod_requests_gpu,
    pods_on_node,
    relate,
)

# Key == resource name, so ExtendedResourceToleration adds the toleration to GPU pods.
_SUGGESTED = Taint("nvidia.com/gpu", "present", "NoSchedule")
_KARPENTER_POOL = "karpenter.sh/nodepool"
_MIRROR = "kubernetes.io/config.mirror"
_SHOWN = 3


@check(
    id="GPU-NODE-005",
    title="GPU nodes and GPU-only node pools carry a NoSchedule taint",
    category=Category.NODES,
    severity=Severity.MEDIUM,
    requires=(("Node", NODEPOOL),),
    rationale="""
        Without a taint, ordinary CPU pods are scheduled onto expensive GPU nodes. They use up
        the node's CPU and memory, so GPU pods later fail with "Insufficient cpu" on a node with
        free GPUs, and they keep the autoscaler from removing the node, which keeps billing.
        A taint whose key is the GPU resource name (nvidia.com/gpu:NoSchedule) keeps them off
        while the ExtendedResourceToleration admission plugin tolerates it for GPU pods.
    """,
    detection="""
        Every GPU node (GFD/NFD labels, GPU capacity, or cloud accelerator labels) and every
        Karpenter NodePool whose requirements allow only GPU instance types: passes with any
        NoSchedule or NoExecute taint other than lifecycle taints (node.kubernetes.io/*,
        node.cloudprovider.kubernetes.io/*, karpenter.sh/disrupted, cluster-autoscaler's), since
        any dedicating taint keeps CPU pods off, not only nvidia.com/gpu. A PreferNoSchedule taint
        only half-works and fails like no taint. Karpenter startupTaints are removed
        after boot and do not count. When the input has no non-GPU node or NodePool (a GPU-only
        cluster, e.g. a GKE cluster that never auto-tainted its GPU pools) the finding is info.
        NodePools that may launch both CPU and GPU instances are not evaluated. Occupants are
        the input's active Pods bound to the node (a NodePool's: to its nodes, by the
        karpenter.sh/nodepool label) that request no GPU, other than DaemonSet and static
        (mirror) pods, which run on every node whatever its taints.
    """,
    severity_evidence="""
        Medium only when the input shows non-GPU pods occupying the untainted (or only
        PreferNoSchedule-tainted) GPU node or the nodes of the GPU-only NodePool, which is
        the evidence that CPU work takes its CPU and memory and keeps it from scaling down;
        without such pods it is low (untainted, or soft taint), and info in a GPU-only cluster.
    """,
    remediation="""
        kubectl $command
        # GPU pods tolerate a taint keyed nvidia.com/gpu automatically where the
        # ExtendedResourceToleration admission plugin runs (EKS >= 1.19, GKE, AKS); elsewhere
        # add to their pod spec: tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        kubectl taint nodes <node> nvidia.com/gpu=present:NoSchedule --overwrite
        # a Karpenter NodePool: add the taint to its node template (JSON patch "add" replaces the
        # list: keep its existing taints in it)
        kubectl patch nodepools.karpenter.sh <name> --type=json -p '[{"op":"add","path":"/spec/template/spec/taints","value":[<existing taints>,{"key":"nvidia.com/gpu","effect":"NoSchedule"}]}]'
        # GPU pods tolerate a taint keyed nvidia.com/gpu automatically where the
        # ExtendedResourceToleration admission plugin runs (EKS >= 1.19, GKE, AKS); elsewhere
        # add to their pod spec: tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    """,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/",
        "https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#extendedresourcetoleration",
        "https://github.com/kubernetes/kubernetes/pull/55839",
        "https://karpenter.sh/docs/concepts/nodepools/",
    ),
)
def gpu_nodes_carry_no_schedule_taint(snapshot: Snapshot) -> Iterator[Result]:
    nodes = snapshot.of("Node")
    pools = snapshot.of(NODEPOOL)
    gpu_pools = [p for p in pools if nodepool_gpu_scope(p) == "only"]
    gpu_only_cluster = all(is_gpu_host(n) for n in nodes) and len(gpu_pools) == len(pools)
    for node in nodes:
        if is_gpu_host(node):
            here = _cpu_pods(snapshot, node.ref.name)
            yield _verdict(node, node_taints(node), gpu_only_cluster, _node_command(node), here)
    for pool in gpu_pools:
        taints = nodepool_taints(pool)
        members = [n.ref.name for n in nodes if n.labels.get(_KARPENTER_POOL) == pool.ref.name]
        here = [p for name in members for p in _cpu_pods(snapshot, name)]
        yield _verdict(pool, taints, gpu_only_cluster, _nodepool_command(pool, taints), here)


def _cpu_pods(snapshot: Snapshot, node_name: str) -> list[Resource]:
    """The active pods bound to the node that request no GPU, without the DaemonSet and
    static pods every node runs."""
    return [
        pod
        for pod in pods_on_node(snapshot, node_name)
        if pod_is_active(pod)
        and "DaemonSet" not in owner_kinds(pod)
        and _MIRROR not in pod.annotations
        and not pod_requests_gpu(pod)
    ]


def _verdict(
    target: Resource,
    taints: tuple[Taint, ...],
    gpu_only: bool,
    command: str,
    occupants: list[Resource],
) -> Result:
    path = "spec.taints" if target.ref.kind == "Node" else "spec.template.spec.taints"
    hard = dedicating_taints(taints)
    if hard:
        return passed(target, f"is tainted {hard[0]}", path=path)
    soft = dedicating_taints(taints, ("PreferNoSchedule",))
    what = "GPU node" if target.ref.kind == "Node" else "GPU-only NodePool"
    fix = {"command": command}
    evidence = _occupied(occupants, "it" if target.ref.kind == "Node" else "its nodes")
    related = [relate(p, "cause") for p in occupants]
    if soft:
        return failed(
            target,
            f"{what} has only the soft taint {soft[0]}: the scheduler still places CPU pods "
            f"there when other nodes are full{evidence or ''}",
            path=path,
            severity=Severity.MEDIUM if evidence else Severity.LOW,
            fix=fix,
            related=related,
        )
    if gpu_only:
        return failed(
            target,
            f"{what} has no NoSchedule taint; the input has no non-GPU nodes, so this only "
            "matters once CPU capacity is added",
            path=path,
            severity=Severity.INFO,
            fix=fix,
        )
    if evidence:
        return failed(
            target,
            f"{what} has no NoSchedule/NoExecute taint{evidence}: CPU work takes CPU and "
            "memory GPU pods need there and keeps the node from scaling down",
            path=path,
            severity=Severity.MEDIUM,
            fix=fix,
            related=related,
        )
    return failed(
        target,
        f"{what} has no NoSchedule/NoExecute taint, so CPU pods may be placed on it; no pod "
        "in the input shows that happening",
        path=path,
        severity=Severity.LOW,
        fix=fix,
    )


def _occupied(occupants: list[Resource], where: str) -> str:
    """ ", and N pod(s) requesting no GPU run on <where> (...)", or "" without occupants."""
    if not occupants:
        return ""
    names = ", ".join(f"{p.ref.namespace}/{p.ref.name}" for p in occupants[:_SHOWN])
    more = f" and {len(occupants) - _SHOWN} more" if len(occupants) > _SHOWN else ""
    pods = (
        "1 pod requesting no GPU runs"
        if len(occupants) == 1
        else (f"{len(occupants)} pods requesting no GPU run")
    )
    return f", and {pods} on {where} ({names}{more})"


def _node_command(node: Resource) -> str:
    return f"taint nodes {node.ref.name} {_SUGGESTED} --overwrite"


def _nodepool_command(pool: Resource, taints: tuple[Taint, ...]) -> str:
    # JSON patch "add" replaces the whole list: keep the existing (soft) taints in it.
    new = Taint(_SUGGESTED.key, "", _SUGGESTED.effect)
    value = [
        {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
        for t in (*taints, new)
    ]
    patch = json.dumps(
        [{"op": "add", "path": "/spec/template/spec/taints", "value": value}],
        separators=(",", ":"),
    )
    return f"patch nodepools.karpenter.sh {pool.ref.name} --type=json -p '{patch}'"
