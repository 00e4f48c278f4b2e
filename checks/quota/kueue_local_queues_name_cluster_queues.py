import difflib
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import yaml

from gpu_audit.api import (
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_mapping,
    check,
    failed,
    format_quantity,
    passed,
    quantities,
    queued_workloads,
    relate,
    workload_gpus,
    workload_requests,
)


@check(
    id="GPU-QUOTA-005",
    title="Kueue LocalQueues point at an existing ClusterQueue",
    category=Category.QUOTA,
    severity=Severity.HIGH,
    requires=(LOCAL_QUEUE, CLUSTER_QUEUE),
    rationale="""
        A LocalQueue only routes workloads to the ClusterQueue in its spec.clusterQueue, which
        holds the quota. When that ClusterQueue does not exist the LocalQueue is inactive and
        every workload submitted to it stays Inadmissible ("ClusterQueue <name> doesn't
        exist"): the jobs never start. spec.clusterQueue cannot be changed, so the fix is to
        create the ClusterQueue or to recreate the LocalQueue.
    """,
    detection="""
        Every LocalQueue whose spec.clusterQueue names no ClusterQueue of the input (the
        ClusterQueues must be in the input: they are cluster-scoped). Its workloads are the
        objects of the namespace whose kueue.x-k8s.io/queue-name label names it (Jobs,
        CronJobs, JobSets, LeaderWorkerSets, Kubeflow jobs, TrainJobs, Deployments,
        StatefulSets, Pods); they are listed as related symptoms.
    """,
    severity_evidence="""
        High when a workload that requests GPUs is queued to the LocalQueue (GPU work never
        starts); low when none of its workloads in the input requests GPUs, or none is there.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # spec.clusterQueue is immutable: recreate the LocalQueue pointing at an existing ClusterQueue
        kubectl replace --force -f - <<'EOF'
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: LocalQueue
        metadata:
          name: <name>
          namespace: <namespace>
        spec:
          clusterQueue: <existing-cluster-queue>
        EOF
        # or, with no ClusterQueue at all, create the one it names, covering what its workloads request
        kubectl apply -f - <<'EOF'
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata:
          name: <cluster-queue>
        spec:
          namespaceSelector: {}
          resourceGroups:
            - coveredResources: [cpu, memory, nvidia.com/gpu]
              flavors:
                - name: default-flavor
                  resources:
                    - {name: cpu, nominalQuota: <cpus>}
                    - {name: memory, nominalQuota: <memory>}
                    - {name: nvidia.com/gpu, nominalQuota: <gpus>}
        EOF
    """,
    references=(
        "https://kueue.sigs.k8s.io/docs/concepts/local_queue/",
        "https://kueue.sigs.k8s.io/docs/tasks/troubleshooting/troubleshooting_queues/",
        "https://kueue.sigs.k8s.io/docs/tasks/troubleshooting/troubleshooting_jobs/#misconfigured-localqueues-or-clusterqueues",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml",
    ),
)
def kueue_local_queues_name_cluster_queues(snapshot: Snapshot) -> Iterator[Result]:
    cluster_queues = sorted(q.ref.name for q in snapshot.of(CLUSTER_QUEUE))
    for local_queue in snapshot.of(LOCAL_QUEUE):
        target = str(local_queue.spec.get("clusterQueue") or "")
        if target in cluster_queues:
            yield passed(local_queue, f"points at ClusterQueue {target}", path="spec.clusterQueue")
            continue
        workloads = [
            q.resource
            for q in queued_workloads(snapshot)
            if q.local_queue is not None and q.local_queue.ref == local_queue.ref
        ]
        gpu = [w for w in workloads if workload_gpus(w)]
        if gpu:
            names = ", ".join(str(w.ref) for w in gpu[:3]) + (
                f" and {len(gpu) - 3} more" if len(gpu) > 3 else ""
            )
            victims = (
                f"{len(gpu)} GPU workload{'s' if len(gpu) != 1 else ''} queued to it "
                f"{'never start' if len(gpu) != 1 else 'never starts'}: {names}"
            )
        elif workloads:
            victims = f"its {len(workloads)} queued workload(s) never start (none requests GPUs)"
        else:
            victims = "no workload in the input is queued to it yet"
        problem = (
            f"spec.clusterQueue {target or '(unset)'} names no ClusterQueue, so Kueue admits "
            f'nothing from it ("ClusterQueue {target} doesn\'t exist"); {victims}'
        )
        yield failed(
            local_queue,
            problem,
            path="spec.clusterQueue",
            severity=Severity.HIGH if gpu else Severity.LOW,
            fix={
                "problem": problem,
                "command": _command(snapshot, local_queue, target, cluster_queues, workloads),
            },
            related=[relate(w, "symptom") for w in workloads],
        )


def _command(
    snapshot: Snapshot,
    local_queue: Resource,
    target: str,
    cluster_queues: list[str],
    workloads: list[Resource],
) -> str:
    if cluster_queues:
        closest = difflib.get_close_matches(target, cluster_queues, n=1, cutoff=0.0)
        fixed = {
            "apiVersion": local_queue.api_version,
            "kind": "LocalQueue",
            "metadata": {"name": local_queue.ref.name, "namespace": local_queue.ref.namespace},
            "spec": {
                **local_queue.spec,
                "clusterQueue": closest[0] if closest else cluster_queues[0],
            },
        }
        body = yaml.safe_dump(_plain(fixed), sort_keys=False).rstrip("\n")
        return (
            "# spec.clusterQueue is immutable: recreate the LocalQueue (its pending workloads\n"
            f"# stay and are queued again), or create ClusterQueue {target or '<name>'} instead\n"
            f"kubectl replace --force -f - <<'EOF'\n{body}\nEOF"
        )
    return _create_cluster_queue(snapshot, local_queue, target or "cluster-queue", workloads)


def _create_cluster_queue(
    snapshot: Snapshot, local_queue: Resource, name: str, workloads: list[Resource]
) -> str:
    """A ClusterQueue covering cpu, memory and what the queued workloads request, with the
    allocatable of the input's Nodes as quota (else the largest workload's request), and
    Kueue's empty default flavor when the input has no ResourceFlavor."""
    demand: dict[str, Decimal] = {"cpu": Decimal(0), "memory": Decimal(0)}
    for workload in workloads:
        for resource, amount in workload_requests(workload).items():
            demand[resource] = max(demand.get(resource, Decimal(0)), amount)
    capacity: dict[str, Decimal] = {}
    for node in snapshot.of("Node"):
        for resource, amount in quantities(as_mapping(node.status.get("allocatable"))).items():
            capacity[resource] = capacity.get(resource, Decimal(0)) + amount
    flavors = snapshot.of(RESOURCE_FLAVOR)
    flavor = flavors[0].ref.name if flavors else "default-flavor"
    covered = sorted(demand)
    resources = [
        {"name": r, "nominalQuota": format_quantity(capacity.get(r) or demand[r])} for r in covered
    ]
    api_version = local_queue.api_version
    documents: list[dict[str, Any]] = []
    if not flavors:
        documents.append(
            {"apiVersion": api_version, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
        )
    documents.append(
        {
            "apiVersion": api_version,
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": covered,
                        "flavors": [{"name": flavor, "resources": resources}],
                    }
                ],
            },
        }
    )
    body = yaml.safe_dump_all(documents, sort_keys=False).rstrip("\n")
    return (
        "# no ClusterQueue exists: create the one it names (quotas from the nodes' allocatable;\n"
        "# set them to what the namespaces it admits may use)\n"
        f"kubectl apply -f - <<'EOF'\n{body}\nEOF"
    )


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
