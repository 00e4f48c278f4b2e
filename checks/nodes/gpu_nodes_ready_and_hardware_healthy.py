from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_hosts,
    is_joining,
    node_taints,
    passed,
    pod_requests_gpu,
    pods_on_node,
)

# Vendor conditions that report GPU hardware health (EKS node monitoring agent).
_HARDWARE_CONDITIONS = ("AcceleratedHardwareReady",)
# Planned maintenance: Karpenter consolidation, the operator's driver upgrade controller.
_MAINTENANCE_TAINTS = frozenset({"karpenter.sh/disrupted"})
_UPGRADE_LABEL = "nvidia.com/gpu-driver-upgrade-state"


@check(
    id="GPU-NODE-006",
    title="GPU nodes are Ready, hardware-healthy, and not left cordoned while idle",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=("Node",),
    rationale="""
        A NotReady GPU node, or one whose accelerated hardware reports unhealthy, is lost GPU
        capacity: pending GPU pods pile up while the instance still bills. Kubelet does not
        evict pods from a GPU that became unhealthy. A GPU node cordoned with no GPU pod left
        on it is pure cost.
    """,
    detection="""
        Live (nodes with status.conditions): Ready not True fails high, except while the node
        still carries join-time taints (uninitialized, karpenter.sh/unregistered); a
        AcceleratedHardwareReady=False condition fails high; absent optional conditions are not
        findings. With Pods in the input, a cordoned GPU node running no GPU pod fails,
        unless Karpenter is disrupting it or the GPU Operator's driver upgrade is in progress.
        The check has no clock, so the catalogue's 15-minute and 24-hour guards are not applied:
        a node seen in a transient state is reported.
    """,
    severity_evidence="""
        High for a NotReady node or one whose hardware condition reports unhealthy: its GPUs
        are gone. A cordoned GPU node with no GPU pod on it is medium only while GPU pods in
        the input wait unscheduled (capacity withheld from work that needs it); otherwise it
        is low, a cost that may be a retirement in progress.
    """,
    remediation="""
        kubectl describe node $name
        # then either: kubectl uncordon $name   (maintenance done)
        # or retire it: kubectl drain $name --ignore-daemonsets --delete-emptydir-data
        #   && kubectl delete node $name   (and terminate the instance)
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/reference/node/node-status/",
        "https://docs.aws.amazon.com/eks/latest/userguide/node-health.html",
        "https://github.com/kubernetes/kubernetes/issues/60388",
    ),
)
def gpu_nodes_ready_and_hardware_healthy(snapshot: Snapshot) -> Iterator[Result]:
    for node in gpu_hosts(snapshot):
        conditions = _conditions(node)
        if "Ready" not in conditions:
            continue  # a manifest, not a live node
        problems = list(_problems(snapshot, node, conditions))
        if not problems:
            yield passed(node, _healthy_message(node, conditions), path="status.conditions")
        for message, severity, path in problems:
            yield failed(node, message, path=path, severity=severity)


def _conditions(node: Resource) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in map(as_mapping, as_list(node.status.get("conditions")))}


def _problems(
    snapshot: Snapshot, node: Resource, conditions: Mapping[str, Mapping[str, Any]]
) -> Iterator[tuple[str, Severity | None, str]]:
    ready = conditions["Ready"]
    if ready.get("status") != "True" and not is_joining(node):
        reason = ready.get("reason") or ready.get("status")
        yield f"is NotReady ({reason}): its GPUs are lost capacity", None, "status.conditions"
    for name in _HARDWARE_CONDITIONS:
        cond = conditions.get(name)
        if cond is not None and cond.get("status") == "False":
            detail = f"{cond.get('reason', '')} {cond.get('message', '')}".strip()
            yield f"{name}=False: {detail or 'GPU hardware unhealthy'}", None, "status.conditions"
    cordoned = node.spec.get("unschedulable") is True
    if (
        cordoned
        and snapshot.has("Pod")
        and not _runs_gpu_pods(snapshot, node)
        and not _in_maintenance(node)
    ):
        waiting = snapshot.derived("nodes.pending_gpu_pods", _pending_gpu_pods)
        if waiting:
            shown = ", ".join(waiting[:3]) + (
                f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
            )
            yield (
                f"is cordoned with no GPU pod on it while {len(waiting)} GPU pod(s) wait "
                f"unscheduled ({shown}): its GPUs are withheld from work that needs them",
                Severity.MEDIUM,
                "spec.unschedulable",
            )
        else:
            yield (
                "is cordoned with no GPU pod on it: the instance bills for nothing (unless "
                "it is being retired right now)",
                Severity.LOW,
                "spec.unschedulable",
            )


def _healthy_message(node: Resource, conditions: Mapping[str, Mapping[str, Any]]) -> str:
    if conditions["Ready"].get("status") != "True":
        return "is NotReady while still joining the cluster"
    if node.spec.get("unschedulable") is True:
        return "is Ready; cordoned while GPU pods drain or maintenance runs"
    return "is Ready and schedulable"


def _in_maintenance(node: Resource) -> bool:
    if _UPGRADE_LABEL in node.labels:
        return True
    return any(t.key in _MAINTENANCE_TAINTS for t in node_taints(node))


def _pending_gpu_pods(snapshot: Snapshot) -> list[str]:
    """namespace/name of the GPU pods that wait for a node (Pending, not bound)."""
    return [
        f"{pod.ref.namespace}/{pod.ref.name}"
        for pod in snapshot.of("Pod")
        if pod.status.get("phase") == "Pending"
        and not pod.spec.get("nodeName")
        and not pod.metadata.get("deletionTimestamp")
        and pod_requests_gpu(pod)
    ]


def _runs_gpu_pods(snapshot: Snapshot, node: Resource) -> bool:
    """Whether a pod bound to the node, neither Succeeded nor Failed, requests GPUs."""
    return any(
        pod.status.get("phase") not in ("Succeeded", "Failed") and pod_requests_gpu(pod)
        for pod in pods_on_node(snapshot, node.ref.name)
    )
