import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    CLUSTER_QUEUE,
    NODEPOOL,
    RESOURCE_FLAVOR,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    admission_checks,
    as_mapping,
    check,
    failed,
    flavor_nodes,
    flavor_quotas,
    format_quantity,
    has_resource_status,
    is_gpu_resource,
    node_gpus,
    nodepool_gpu_scope,
    passed,
    relate,
)


@check(
    id="GPU-QUOTA-007",
    title="Kueue GPU quotas do not exceed the GPUs of the nodes each flavor selects",
    category=Category.QUOTA,
    severity=Severity.MEDIUM,
    requires=(CLUSTER_QUEUE, RESOURCE_FLAVOR, "Node"),
    rationale="""
        Kueue admits workloads against quota, not against nodes (outside Topology-Aware
        Scheduling): nominalQuota "should represent the resources in the cluster available for
        running jobs". A GPU quota larger than the GPUs of the nodes a flavor's nodeLabels
        select admits jobs whose pods then stay Pending, holding quota (and, for gang jobs,
        the GPUs of their running pods) that jobs in other queues of the cohort could use.
    """,
    detection="""
        For each ClusterQueue, each flavor of its resourceGroups and each GPU resource it
        gives a nominalQuota for: the quota is compared with the sum of that resource in the
        allocatable (or capacity) of the Nodes the ResourceFlavor's nodeLabels select (all
        Nodes for an empty flavor; for nvidia.com/gpu, at least GPU Feature Discovery's
        nvidia.com/gpu.count). Not judged: flavors with no ResourceFlavor in the input
        (Kueue reports FlavorNotFound), Topology-Aware (topologyName) flavors, whose capacity
        Kueue checks itself, selected Nodes without status, ClusterQueues with admission
        checks (ProvisioningRequest, MultiKueue), and clusters whose input shows an
        autoscaler that adds nodes (a Karpenter NodePool that may launch GPU nodes, a
        cluster-autoscaler Deployment or its status ConfigMap): there the quota is meant to
        count nodes that do not exist yet.
    """,
    severity_evidence="""
        Medium: the input holds the Nodes the flavor selects and no autoscaler, so the
        admitted surplus cannot be placed. The quota is sized for the GPUs the nodes have, or
        the quota is passed over when capacity comes on demand.
    """,
    remediation="""
        # $kind $name: $problem
        # (or give the flavor the nodes its quota counts on: more nodes with its nodeLabels,
        # or an autoscaler that adds them)
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # size the flavor's GPU quota to the GPUs of the nodes its nodeLabels select
        kubectl patch clusterqueue <name> --type=json -p '[{"op": "replace", "path": "/spec/resourceGroups/<group>/flavors/<flavor>/resources/<resource>/nominalQuota", "value": <gpus>}]'
    """,
    references=(
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#flavors-and-resources",
        "https://kueue.sigs.k8s.io/docs/concepts/resource_flavor/",
        "https://kueue.sigs.k8s.io/docs/overview/",
        "https://kueue.sigs.k8s.io/docs/concepts/admission_check/provisioning_request/",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/apis/kueue/v1beta2/clusterqueue_types.go",
    ),
)
def kueue_gpu_quotas_fit_flavor_nodes(snapshot: Snapshot) -> Iterator[Result]:
    autoscaler = _autoscaler(snapshot)
    for cluster_queue in snapshot.of(CLUSTER_QUEUE):
        checked = {
            flavor: f"admission checks {', '.join(names)}"
            for flavor, names in admission_checks(cluster_queue).items()
        }
        for quota in flavor_quotas(cluster_queue):
            resource_flavor = snapshot.get(RESOURCE_FLAVOR, "", quota.flavor)
            if resource_flavor is None or not is_gpu_resource(quota.resource):
                continue
            if quota.nominal is None or quota.nominal <= 0:
                continue
            yield _judge(
                snapshot,
                cluster_queue,
                resource_flavor,
                quota.resource,
                quota.nominal,
                f"{quota.path}.nominalQuota",
                checked.get(quota.flavor) or autoscaler,
            )


def _judge(
    snapshot: Snapshot,
    cluster_queue: Resource,
    flavor: Resource,
    resource: str,
    quota: Decimal,
    path: str,
    on_demand: str,
) -> Result:
    what = f"flavor {flavor.ref.name} quota {format_quantity(quota)} {resource}"
    if flavor.spec.get("topologyName"):
        return passed(
            cluster_queue, f"{what}: Topology-Aware flavor, Kueue checks node capacity", path=path
        )
    if on_demand:
        return passed(cluster_queue, f"{what}: capacity comes on demand ({on_demand})", path=path)
    labels = flavor.spec.get("nodeLabels")
    nodes = flavor_nodes(snapshot, flavor)
    if any(not has_resource_status(n) for n in nodes):
        return passed(
            cluster_queue, f"{what}: node capacity unknown (Nodes without status)", path=path
        )
    available = sum((node_gpus(n, resource) for n in nodes), Decimal(0))
    selection = _selection(labels)
    if quota <= available:
        return passed(
            cluster_queue,
            f"{what} fits the {format_quantity(available)} of the {len(nodes)} node(s) {selection}",
            path=path,
        )
    surplus = format_quantity(quota - available)
    if nodes:
        have = (
            f"the {format_quantity(available)} {resource} of the {len(nodes)} node(s) {selection}"
        )
    else:
        have = f"the GPUs of its nodes: no Node of the input is {selection}"
    problem = (
        f"{what} exceeds {have}: Kueue admits workloads for {surplus} GPUs that do not "
        "exist, whose pods stay Pending holding the quota"
    )
    return failed(
        cluster_queue,
        problem,
        path=path,
        fix={"problem": problem, "command": _command(cluster_queue, path, available)},
        related=[relate(flavor, "cause")],
    )


def _selection(labels: object) -> str:
    pairs = sorted(as_mapping(labels).items())
    if not pairs:
        return "in the input (an empty flavor selects every node)"
    return "labelled " + ", ".join(f"{k}={v}" for k, v in pairs)


def _autoscaler(snapshot: Snapshot) -> str:
    """An autoscaler the input shows that adds GPU nodes, "" when none."""
    for pool in snapshot.of(NODEPOOL):
        if nodepool_gpu_scope(pool) != "none":
            return f"Karpenter NodePool {pool.ref.name}"
    for deployment in snapshot.of("Deployment"):
        if "cluster-autoscaler" in deployment.ref.name:
            return f"cluster-autoscaler Deployment {deployment.ref.namespace}/{deployment.ref.name}"
    if snapshot.get("ConfigMap", "kube-system", "cluster-autoscaler-status") is not None:
        return "cluster-autoscaler (ConfigMap kube-system/cluster-autoscaler-status)"
    return ""


def _command(cluster_queue: Resource, path: str, available: Decimal) -> str:
    pointer = "/" + path.replace("[", "/").replace("]", "").replace(".", "/")
    value: Any = int(available) if available == available.to_integral_value() else str(available)
    ops: list[Mapping[str, Any]] = [{"op": "replace", "path": pointer, "value": value}]
    command = (
        f"kubectl patch clusterqueue {cluster_queue.ref.name} --type=json -p '{json.dumps(ops)}'"
    )
    if available > 0:
        return command
    return (
        "# no node has the flavor's nodeLabels: if they are wrong, correct the ResourceFlavor;\n"
        f"# until it has nodes, a quota of 0 keeps Kueue from admitting into it\n{command}"
    )
