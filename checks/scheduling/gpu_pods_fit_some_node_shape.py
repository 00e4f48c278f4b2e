from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal

from gpu_audit.api import (
    NODEPOOL,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    check,
    effective_pod_request,
    failed,
    format_quantity,
    gpu_pod_templates,
    is_gpu_resource,
    nodepool_gpu_scope,
    nodepool_requirements,
    nodepool_taints,
    passed,
    quantities,
)
from gpu_audit.checks.scheduling._common import (
    autoscaler_present,
    blocking_taints,
    eligible_nodes,
    first_fitting_node,
    node_allocatable,
    nodepool_may_satisfy,
    resources_short,
)

_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"


@check(
    id="GPU-SCHED-006",
    title="Every GPU pod's request fits on at least one eligible node shape",
    category=Category.SCHEDULING,
    severity=Severity.HIGH,
    requires=("Node", WORKLOAD_TYPES),
    rationale="""
        A pod is placed on one node. A pod asking for 16 GPUs when the biggest node has 8, or
        8 GPUs plus more memory than any 8-GPU node has, can never run: no waiting, preemption
        or autoscaling helps, and the scheduler only says "Insufficient nvidia.com/gpu".
        Multi-node training must be split into worker pods that each fit one node.
    """,
    detection="""
        Live (Nodes with status.allocatable): the effective pod request (max of each init
        container and the sum of containers and sidecars, plus overhead), for every resource it
        names, compared with the allocatable of each node that passes the pod's selectors,
        required affinity and taints. The resource names requested are compared as is, so MIG
        and shared-GPU requests are checked against those resources. When no node fits, a
        Karpenter NodePool that may launch a matching GPU node and whose limits and
        instance-gpu-count allow the request counts as a fit; a cluster-autoscaler in the input
        lowers the finding to medium. Templates with no eligible node at all are left to
        GPU-SCHED-001/002, and so are GPU templates whose eligible nodes advertise no GPU
        resource at all (a device plugin fault of the nodes, which the node checks and
        GPU-SCHED-005 report, not a request too large); manifests without node status are not
        evaluated.
    """,
    severity_evidence="""
        High when it fails: the node status in the input shows the request is larger than the
        largest eligible node can allocate, so no waiting, preemption or scale-up places it.
        Medium when a cluster-autoscaler is in the input (a node group it scales from zero may
        be larger than any node seen).
    """,
    remediation="""
        # $kind $namespace/$name needs $short in one pod; the largest eligible node,
        # $largest, has less. Lower the request, or split the work into worker pods that each
        # fit one node and gang-schedule them (see GPU-DIST-001). Requests that fit:
        $containers
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # <kind> <namespace>/<name> needs more in one pod than the largest eligible node has.
        # Lower the request, or split the work into worker pods that each fit one node and
        # gang-schedule them (see GPU-DIST-001). Requests that fit, largest requests first
        # (requests and limits together where the container sets both):
        containers:
          - name: <container>
            resources:
              requests: {<resource>: <what-fits>}
              limits: {<resource>: <what-fits>}
    """,
    references=(
        "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/",
        "https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/",
        "https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/",
    ),
    remediation_root="pod_spec",
)
def gpu_pods_fit_some_node_shape(snapshot: Snapshot) -> Iterator[Result]:
    scaler = autoscaler_present(snapshot)
    for template in gpu_pod_templates(snapshot):
        if template.owner.status.get("phase") in ("Succeeded", "Failed"):
            continue  # finished pods hold nothing and will not be scheduled again
        request = effective_pod_request(template)
        nodes = eligible_nodes(snapshot, template)
        pools = [p for p in snapshot.of(NODEPOOL) if _pool_eligible(template, p)]
        if not nodes and not pools:
            continue
        result = _verdict(snapshot, template, request, nodes, pools, scaler)
        if result is not None:
            yield result


def _pool_eligible(template: PodTemplate, pool: Resource) -> bool:
    return (
        nodepool_gpu_scope(pool) != "none"
        and nodepool_may_satisfy(template.spec, pool)
        and not blocking_taints(template, nodepool_taints(pool))
    )


def _pool_can_fit(pool: Resource, request: Mapping[str, Decimal]) -> bool:
    limits = quantities(pool.spec.get("limits"))
    if any(name in limits and limits[name] < want for name, want in request.items()):
        return False
    gpus = sum((v for k, v in request.items() if is_gpu_resource(k)), Decimal(0))
    for req in nodepool_requirements(pool):
        if str(req.get("key")) != _GPU_COUNT:
            continue
        values = [str(v) for v in as_list(req.get("values"))]
        numbers = [int(v) for v in values if v.isdigit()]
        if str(req.get("operator")) == "In" and numbers and max(numbers) < gpus:
            return False
        if str(req.get("operator")) == "Lt" and numbers and numbers[0] <= gpus:
            return False
    return True


def _verdict(
    snapshot: Snapshot,
    template: PodTemplate,
    request: Mapping[str, Decimal],
    nodes: Sequence[Resource],
    pools: list[Resource],
    scaler: bool,
) -> Result | None:
    fitting = first_fitting_node(snapshot, template, request)
    if fitting is not None:
        return passed(template, f"fits on node {fitting.ref.name}", path=template.path)
    totals = [_gpu_total(node_allocatable(snapshot, n)) for n in nodes]
    if nodes and pools == [] and not any(totals):
        return None  # the nodes advertise no GPU at all: a node fault, not this pod's shape
    for pool in pools:
        if _pool_can_fit(pool, request):
            return passed(
                template, f"can fit a node NodePool {pool.ref.name} launches", path=template.path
            )
    if not nodes:
        return failed(
            template,
            "no eligible NodePool can launch a node this large (NodePool limits or "
            "instance-gpu-count are below the request)",
            path=template.path,
            fix=_fix(template, request, {}, [], ""),
        )
    largest = nodes[totals.index(max(totals))]  # the first of the largest, as max() picks
    have = node_allocatable(snapshot, largest)
    missing = resources_short(request, have)
    details = ", ".join(
        f"{name} {_fmt(name, request[name])} > {_fmt(name, have.get(name, Decimal(0)))}"
        for name in missing
    )
    return failed(
        template,
        f"fits no eligible node; largest, {largest.ref.name}: {details}",
        path=template.path,
        severity=Severity.MEDIUM if scaler else None,
        fix=_fix(template, request, have, missing, largest.ref.name),
    )


def _gpu_total(quantities: Mapping[str, Decimal]) -> Decimal:
    return sum((v for k, v in quantities.items() if is_gpu_resource(k)), Decimal(0))


def _fmt(name: str, value: Decimal) -> str:
    """Byte quantities in the largest binary unit that divides them, as kubectl shows them."""
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size and value % size == 0:
                return f"{format_quantity(value / size)}{unit}"
    return format_quantity(value)


def _fix(
    template: PodTemplate,
    request: Mapping[str, Decimal],
    have: Mapping[str, Decimal],
    missing: list[str],
    node: str,
) -> dict[str, str]:
    gpu = next((k for k in sorted(request) if is_gpu_resource(k)), "nvidia.com/gpu")
    # No node to compare with (only NodePools too small): one GPU per pod surely fits.
    budgets = {n: have.get(n, Decimal(0)) for n in missing} if have else {gpu: Decimal(1)}
    return {
        "short": ", ".join(f"{n} {_fmt(n, request[n])}" for n in missing or [gpu]),
        "largest": node or "(none launchable)",
        "containers": _lowered(
            template, {n: request.get(n, Decimal(0)) - b for n, b in budgets.items()}
        ),
    }


def _lowered(template: PodTemplate, excess: Mapping[str, Decimal]) -> str:
    """Container patches that take the excess of each resource off the pod, largest requests
    first. Requests and limits are set together where the container has them: a request
    above its limit, or a GPU request unequal to its GPU limit, is invalid."""
    changes: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for resource, over in sorted(excess.items()):
        holders = sorted(
            (c for c in template.containers() if _amount(c, resource) > 0),
            key=lambda c: -_amount(c, resource),
        )
        for container in holders:
            if over <= 0:
                break
            amount = _amount(container, resource)
            lowered = max(amount - over, Decimal(0))
            over -= amount - lowered
            section = "initContainers" if container.init else "containers"
            fields = changes.setdefault((section, container.name), {})
            for part, given in (("requests", container.requests), ("limits", container.limits)):
                if resource in given:
                    fields.setdefault(part, {})[resource] = _fmt(resource, lowered)
    lines: list[str] = []
    for section in ("containers", "initContainers"):
        entries = [(name, fields) for (sec, name), fields in changes.items() if sec == section]
        if entries:
            lines.append(f"{section}:")
        for name, fields in entries:
            lines += [f"  - name: {name}", "    resources:"]
            for part in ("requests", "limits"):
                if part in fields:
                    inner = ", ".join(f"{k}: {v}" for k, v in sorted(fields[part].items()))
                    lines.append(f"      {part}: {{{inner}}}")
    return "\n".join(lines)


def _amount(container: Container, resource: str) -> Decimal:
    return quantities({**container.limits, **container.requests}).get(resource, Decimal(0))
