import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    CLUSTER_QUEUE,
    KUEUE_QUEUED_TYPES,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
    Category,
    FixKind,
    QueuedWorkload,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    covered_resources,
    failed,
    flavor_nodes,
    format_quantity,
    kueue_configuration,
    node_gpus,
    passed,
    queued_workloads,
    relate,
    resource_groups,
    workload_gpus,
)


@dataclass(frozen=True, slots=True)
class _Queued:
    queued: QueuedWorkload
    gpus: Mapping[str, Decimal]  # GPU resources the workload's pods request together


@dataclass(slots=True)
class _QuotaRules:
    """Kueue's `resources` configuration: what it checks against quota."""

    ignore_undeclared: bool = False
    excluded: tuple[str, ...] = ()
    transformations: dict[str, tuple[bool, tuple[str, ...]]] = field(default_factory=dict)

    def quota_resources(self, resource: str) -> tuple[str, ...]:
        """The resources Kueue checks for a request of `resource`: itself, unless excluded
        or replaced by a transformation, plus the transformation's outputs."""
        if any(resource.startswith(prefix) for prefix in self.excluded):
            return ()
        replace, outputs = self.transformations.get(resource, (False, ()))
        return (*(() if replace else (resource,)), *outputs)


@check(
    id="GPU-QUOTA-006",
    title="Kueue ClusterQueues cover the GPU resources their queued workloads request",
    category=Category.QUOTA,
    severity=Severity.HIGH,
    requires=(CLUSTER_QUEUE, LOCAL_QUEUE, KUEUE_QUEUED_TYPES),
    rationale="""
        Kueue admits a workload only when it can assign a flavor to every resource its pods
        request, from the ClusterQueue's resourceGroups. A GPU resource that is in no
        coveredResources of the ClusterQueue makes the workload inadmissible ("couldn't
        assign flavors to pod set ...: resource nvidia.com/gpu unavailable in ClusterQueue"):
        the job stays suspended forever while the GPUs sit idle, however much quota the
        ClusterQueue has for cpu and memory.
    """,
    detection="""
        For each ClusterQueue, the workloads queued to it: objects whose
        kueue.x-k8s.io/queue-name label names a LocalQueue of their namespace whose
        spec.clusterQueue is this ClusterQueue (Jobs, CronJobs, JobSets, LeaderWorkerSets,
        PyTorchJobs, MPIJobs, TFJobs, Deployments, StatefulSets, Pods; a TrainJob by its
        spec.trainer.resourcesPerNode). Every GPU resource their pods request (nvidia.com/gpu,
        MIG and shared resources, amd.com/gpu) must be in the
        coveredResources of one of its resourceGroups. When Kueue's manager configuration is
        in the input, resources.quotaCheckStrategy IgnoreUndeclared, excludeResourcePrefixes
        and transformations (Replace, outputs) are applied as Kueue applies them.
    """,
    severity_evidence="""
        High: a workload in the input requests the uncovered GPU resource through this
        ClusterQueue, so it can never be admitted. A ClusterQueue no GPU workload of the input
        is queued to is not judged.
    """,
    references=(
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#resource-groups",
        "https://kueue.sigs.k8s.io/docs/tasks/troubleshooting/troubleshooting_jobs/#does-my-clusterqueue-have-the-resource-requests-that-the-job-requires",
        "https://kueue.sigs.k8s.io/docs/tasks/manage/administer_cluster_quotas/#change-quota-check-strategy-for-admission",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/scheduler/flavorassigner/flavorassigner.go",
        "https://github.com/kubernetes-sigs/kueue/issues/4848",
    ),
    remediation="""
        # $kind $name: $problem
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # add the GPU resource to a resource group: every flavor of the group needs a quota for it
        # (quota: the GPUs of the nodes each flavor's nodeLabels select)
        kubectl patch clusterqueue <name> --type=json -p '[{"op": "add", "path": "/spec/resourceGroups/0/coveredResources/-", "value": "nvidia.com/gpu"}, {"op": "add", "path": "/spec/resourceGroups/0/flavors/0/resources/-", "value": {"name": "nvidia.com/gpu", "nominalQuota": <gpus>}}]'
    """,
)
def kueue_cluster_queues_cover_gpu_requests(snapshot: Snapshot) -> Iterator[Result]:
    rules = _quota_rules(snapshot)
    by_cluster_queue: dict[str, list[_Queued]] = {}
    for queued in queued_workloads(snapshot):
        gpus = workload_gpus(queued.resource)
        if queued.local_queue is not None and gpus:  # no LocalQueue: GPU-QUOTA-004
            by_cluster_queue.setdefault(queued.cluster_queue, []).append(_Queued(queued, gpus))
    for cluster_queue in snapshot.of(CLUSTER_QUEUE):
        entries = by_cluster_queue.get(cluster_queue.ref.name)
        if not entries:
            continue
        covered = covered_resources(cluster_queue)
        missing: dict[str, list[_Queued]] = {}
        ignored: set[str] = set()
        for entry in entries:
            for resource in entry.gpus:
                needed = rules.quota_resources(resource)
                if not needed:
                    ignored.add(resource)
                for name in needed:
                    if name in covered:
                        continue
                    if rules.ignore_undeclared:
                        ignored.add(name)
                    else:
                        missing.setdefault(name, []).append(entry)
        if not missing:
            found = sorted({r for e in entries for r in e.gpus} - ignored)
            parts = [f"covers {', '.join(found)}"] if found else []
            if ignored:
                parts.append(
                    f"{', '.join(sorted(ignored))} left out of admission by Kueue's "
                    "configuration (resources.quotaCheckStrategy, excludeResourcePrefixes "
                    "or transformations)"
                )
            yield passed(
                cluster_queue,
                f"{'; '.join(parts)} for its {len(entries)} queued GPU workload(s)",
                path="spec.resourceGroups",
            )
            continue
        victims = sorted(
            {e.queued.resource.ref for users in missing.values() for e in users},
            key=lambda r: r.sort_key,
        )
        listed = ", ".join(str(v) for v in victims[:3]) + (
            f" and {len(victims) - 3} more" if len(victims) > 3 else ""
        )
        problem = (
            f"has {', '.join(sorted(missing))} in no resourceGroup, so Kueue cannot assign a "
            f'flavor to it ("resource {sorted(missing)[0]} unavailable in ClusterQueue") and '
            f"{len(victims)} queued GPU workload{'s' if len(victims) != 1 else ''} can never be "
            f"admitted: {listed}"
        )
        related = [relate(e.queued.resource, "symptom") for e in entries] + [
            relate(e.queued.local_queue, "symptom") for e in entries if e.queued.local_queue
        ]
        yield failed(
            cluster_queue,
            problem,
            path="spec.resourceGroups",
            fix={"problem": problem, "command": _command(snapshot, cluster_queue, missing)},
            related=related,
        )


def _quota_rules(snapshot: Snapshot) -> _QuotaRules:
    """resources.* of Kueue's manager configuration when a ConfigMap of the input holds it."""
    config = kueue_configuration(snapshot)
    if config is None:
        return _QuotaRules()
    resources = as_mapping(config.get("resources"))
    transformations = {}
    for item in map(as_mapping, as_list(resources.get("transformations"))):
        replace = item.get("strategy") == "Replace"  # the default is Retain
        outputs = tuple(sorted(str(k) for k in as_mapping(item.get("outputs"))))
        transformations[str(item.get("input", ""))] = (replace, outputs)
    return _QuotaRules(
        ignore_undeclared=resources.get("quotaCheckStrategy") == "IgnoreUndeclared",
        excluded=tuple(str(p) for p in as_list(resources.get("excludeResourcePrefixes"))),
        transformations=transformations,
    )


def _command(
    snapshot: Snapshot, cluster_queue: Resource, missing: Mapping[str, list[_Queued]]
) -> str:
    """A JSON patch adding each missing resource to a resource group (the one that covers cpu,
    else the first), with a quota in every flavor of the group: the resource on the nodes
    the flavor's nodeLabels select when Nodes are in the input, else the largest request of
    one queued workload (so that each can be admitted)."""
    groups = resource_groups(cluster_queue)
    index = next(
        (i for i, g in enumerate(groups) if "cpu" in as_list(g.get("coveredResources"))), 0
    )
    ops: list[dict[str, Any]] = []
    notes: list[str] = []
    if not groups:
        existing = snapshot.of(RESOURCE_FLAVOR)
        name = existing[0].ref.name if existing else "default-flavor"
        resources = [
            {"name": r, "nominalQuota": _quota(snapshot, name, r, users)}
            for r, users in sorted(missing.items())
        ]
        group = {
            "coveredResources": sorted(missing),
            "flavors": [{"name": name, "resources": resources}],
        }
        ops.append({"op": "add", "path": "/spec/resourceGroups", "value": [group]})
    else:
        base = f"/spec/resourceGroups/{index}"
        for resource, users in sorted(missing.items()):
            ops.append({"op": "add", "path": f"{base}/coveredResources/-", "value": resource})
            for j, flavor in enumerate(map(as_mapping, as_list(groups[index].get("flavors")))):
                quota = _quota(snapshot, str(flavor.get("name", "")), resource, users)
                ops.append(
                    {
                        "op": "add",
                        "path": f"{base}/flavors/{j}/resources/-",
                        "value": {"name": resource, "nominalQuota": quota},
                    }
                )
                notes.append(f"{flavor.get('name')}: {resource} {quota}")
    header = "# quotas per flavor: " + "; ".join(notes) if notes else ""
    command = (
        f"kubectl patch clusterqueue {cluster_queue.ref.name} --type=json -p '{json.dumps(ops)}'"
    )
    return f"{header}\n{command}" if header else command


def _quota(snapshot: Snapshot, flavor_name: str, resource: str, users: list[_Queued]) -> int | str:
    flavor = snapshot.get(RESOURCE_FLAVOR, "", flavor_name)
    total = Decimal(0)
    if flavor is not None:
        total = sum((node_gpus(n, resource) for n in flavor_nodes(snapshot, flavor)), total)
    if total <= 0:
        total = max((u.gpus.get(resource, Decimal(0)) for u in users), default=Decimal(1))
    return int(total) if total == total.to_integral_value() else format_quantity(total)
