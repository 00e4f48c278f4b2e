from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    format_quantity,
    gpu_hosts,
    gpu_quantities,
    has_resource_status,
    is_bootstrapping,
    is_transient_taint,
    node_is_schedulable,
    node_taints,
    passed,
)
from gpu_audit.checks.cost._common import cloud_billed, pod_gpus, tenants


@check(
    id="GPU-COST-001",
    title="GPU nodes are kept busy by GPU pods, not by CPU-only tenants",
    category=Category.COST,
    severity=Severity.MEDIUM,
    requires=("Node", "Pod"),
    rationale="""
        A GPU node is billed at GPU prices whatever runs on it. When its only tenants request
        no GPU, the cluster pays for GPUs to run CPU work, and those pods keep autoscalers from
        removing the node; scaling GPU pods down does not stop the charges while anything else
        holds the node. A GPU node that no pod uses at all is the same cost with nothing gained.
    """,
    detection="""
        Ready, schedulable GPU nodes with live status showing allocatable GPUs (whole, shared or
        MIG units, so time-sliced replicas count as advertised), that are not draining
        (lifecycle taints such as karpenter.sh/disrupted) or still joining. Tenants are the
        bound, non-terminal Pods on the node other than DaemonSet and static pods. Fails when
        there are tenants and none requests a GPU, and when there are no tenants (unrequested
        now: a single dump cannot tell how long, so compare with a later scan). "Unused" means
        unrequested, not low utilisation, which needs DCGM metrics. The taint that keeps CPU
        pods off GPU nodes is GPU-NODE-005's.
    """,
    severity_evidence="""
        Medium when CPU-only tenants hold a GPU node that is billed by the hour and can be
        released: a cloud node (spec.providerID aws://, gce://, azure://, ...) or one of a
        Karpenter NodePool or managed node group; the CPU pods are what keeps it. Low on other
        nodes (on-premises GPUs cost the same whether CPU pods use them or not), and low for a
        node with no tenant at all (one dump cannot tell for how long).
    """,
    remediation="""
        # $kind $name: $problem
        kubectl $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # CPU-only tenants on a GPU node: keep CPU pods off it, then move them
        kubectl taint nodes <node> nvidia.com/gpu=present:NoSchedule --overwrite
        kubectl drain <node> --ignore-daemonsets --delete-emptydir-data   # move the CPU pods off; the autoscaler can then remove the node
        # no pod uses the GPU node (compare with a later scan first): drain it, then let the
        # autoscaler (or you) remove the idle node
        kubectl drain <node> --ignore-daemonsets
    """,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#example-use-cases",
        "https://github.com/kubernetes/kubernetes/issues/25908",
        "https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/",
    ),
)
def gpu_nodes_kept_busy_by_gpu_pods(snapshot: Snapshot) -> Iterator[Result]:
    for node in gpu_hosts(snapshot):
        units = sum(gpu_quantities(node, "allocatable").values(), Decimal(0))
        if not has_resource_status(node) or units <= 0 or not _in_service(node):
            continue  # no live status, device plugin not ready, or leaving: other checks
        pods = tenants(snapshot, node.ref.name)
        requested = sum((pod_gpus(p) for p in pods), Decimal(0))
        yield _verdict(node, pods, requested, units)


def _in_service(node: Resource) -> bool:
    if not node_is_schedulable(node) or is_bootstrapping(node):
        return False
    return not any(is_transient_taint(t) and t.effect == "NoSchedule" for t in node_taints(node))


def _verdict(node: Resource, pods: list[Resource], requested: Decimal, units: Decimal) -> Result:
    total = format_quantity(units)
    if pods and requested == 0:
        names = ", ".join(str(p.ref) for p in pods[:3])
        more = f" and {len(pods) - 3} more" if len(pods) > 3 else ""
        billed = cloud_billed(node)
        consequence = (
            f"they keep the GPU node ({billed}) and its bill alive"
            if billed
            else "no sign that the node is billed by the hour or could be released"
        )
        return failed(
            node,
            f"has {total} allocatable GPUs but only CPU pods: {names}{more}; {consequence}",
            severity=Severity.MEDIUM if billed else Severity.LOW,
            fix={
                "problem": "CPU-only tenants on a GPU node",
                "command": f"taint nodes {node.ref.name} nvidia.com/gpu=present:NoSchedule "
                f"--overwrite\nkubectl drain {node.ref.name} --ignore-daemonsets "
                "--delete-emptydir-data   # move the CPU pods off; the autoscaler can then "
                "remove the node",
            },
        )
    if not pods:
        return failed(
            node,
            f"has {total} allocatable GPUs and no pod requests any of them (at the time of "
            "the dump; compare with a later scan before removing it)",
            severity=Severity.LOW,
            fix={
                "problem": "no pod uses the GPU node",
                "command": f"drain {node.ref.name} --ignore-daemonsets   # then let the "
                "autoscaler (or you) remove the idle node",
            },
        )
    return passed(
        node, f"has {format_quantity(requested)} of {total} GPU units requested by its pods"
    )
