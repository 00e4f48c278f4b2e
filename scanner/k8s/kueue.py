"""Kueue: which objects it queues, what they ask of their ClusterQueue, how its quotas, cohorts and
priorities work, and what a Workload's status says about why it waits.

Everything here is read the way Kueue reads it, at kubernetes-sigs/kueue
ff69552e79ad21652c36caa97038382e55625cf7 (the commit of the CRDs in ../shared/crds):

- A job is queued by the `kueue.x-k8s.io/queue-name` label naming a LocalQueue of its namespace
  (site/content/en/docs/concepts/local_queue.md); Kueue manages only the kinds whose integration
  `integrations.frameworks` of its manager configuration enables (an empty list defaults to
  batch/job, apis/config/v1beta2/defaults.go). A Pod is queued as a pod only when it is plain or
  belongs to a ReplicaSet or StatefulSet (the pod-based deployment and statefulset integrations);
  a Pod of a Job is admitted through its Job.
- Kueue admits all pods of a workload at once (pkg/controller/jobframework, PodSets): a Job's
  parallelism, a StatefulSet's replicas, every replica of a JobSet or Kubeflow job, one
  LeaderWorkerSet group; a Deployment's pods one by one. A RayCluster's (and the cluster a
  RayJob or RayService embeds) are its head and each worker group's replicas x numOfHosts
  (pkg/controller/jobs/raycluster/common.go BuildPodSets), plus a RayJob's submitter
  (pkg/controller/jobs/rayjob); an AppWrapper's are those of the objects it wraps
  (pkg/controller/jobs/appwrapper; site/content/en/docs/tasks/run/appwrappers.md: "combining
  the resource needs of each wrapper component").
- The integrations (FrameworkName of each pkg/controller/jobs/* controller) include ray.io/rayjob,
  ray.io/raycluster, ray.io/rayservice and workload.codeflare.dev/appwrapper, all enabled in
  the shipped configuration; their queue-name label is in metadata.labels
  (site/content/en/docs/tasks/run/rayjobs.md, rayclusters.md, appwrappers.md).
- ClusterQueue quotas per flavor and resource: nominalQuota, borrowingLimit, lendingLimit
  (apis/kueue/v1beta2/clusterqueue_types.go); v1beta2 names the cohort `spec.cohortName`,
  v1beta1 `spec.cohort`. Cohorts form trees through Cohort `spec.parentName`
  (apis/kueue/v1beta2/cohort_types.go): queues of one tree borrow each other's unused quota.
- A Workload's priority: the WorkloadPriorityClass its job's `kueue.x-k8s.io/priority-class`
  label names, else the PriorityClass of the first pod set that names one, else the lowest
  globalDefault PriorityClass, else 0 (pkg/controller/jobframework/reconciler.go ExtractPriority,
  pkg/util/priority/priority.go); a Workload object carries it in `spec.priority`.
- Why a Workload waits: its `QuotaReserved=False` condition, whose message is the flavor
  assigner's per pod set ("couldn't assign flavors to pod set main: insufficient unused quota
  for nvidia.com/gpu in flavor a100, 4 more needed", pkg/scheduler/flavorassigner/
  flavorassigner.go) or the workload controller's ("LocalQueue x doesn't exist",
  pkg/controller/core/workload_controller.go); the reasons are the constants of
  apis/kueue/v1beta2/workload_types.go.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any

import yaml

from gpu_audit.k8s.gpu_hosts import gpu_quantities
from gpu_audit.k8s.gpu_resources import NVIDIA_GPU, is_gpu_resource
from gpu_audit.k8s.kinds import resource_type
from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.pods import (
    PodTemplate,
    controller_owner,
    effective_pod_request,
    pod_template_at,
    templates_of,
)
from gpu_audit.k8s.quantities import QuantityError, parse_quantity, quantities
from gpu_audit.k8s.selectors import map_selector_matches
from gpu_audit.k8s.training_jobs import replica_groups
from gpu_audit.model import ObjRef, Resource
from gpu_audit.snapshot import Snapshot

LOCAL_QUEUE = "LocalQueue.kueue.x-k8s.io"
CLUSTER_QUEUE = "ClusterQueue.kueue.x-k8s.io"
RESOURCE_FLAVOR = "ResourceFlavor.kueue.x-k8s.io"
KUEUE_WORKLOAD = "Workload.kueue.x-k8s.io"
WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass.kueue.x-k8s.io"
COHORT = "Cohort.kueue.x-k8s.io"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GFD_GPU_COUNT = "nvidia.com/gpu.count"  # GPU Feature Discovery's count of a node's GPUs
# The ConfigMap key Kueue's manifests mount as the manager's configuration
# (config/components/manager/controller_manager_config.yaml).
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
APPWRAPPER = "AppWrapper.workload.codeflare.dev"
_RAY_TYPES = frozenset({"RayJob.ray.io", "RayCluster.ray.io", "RayService.ray.io"})
_RAY_WORKER_GROUP = re.compile(r"\.workerGroupSpecs\[(\d+)\]\.")
# The kinds Kueue admits that gpu-audit reads, with Kueue's integration (framework) name.
KUEUE_FRAMEWORKS: Mapping[str, str] = {
    "Job": "batch/job",
    "CronJob": "batch/job",  # the label sits on spec.jobTemplate and reaches every Job
    "Pod": "pod",
    "Deployment": "deployment",
    "StatefulSet": "statefulset",
    "JobSet.jobset.x-k8s.io": "jobset.x-k8s.io/jobset",
    "LeaderWorkerSet.leaderworkerset.x-k8s.io": "leaderworkerset.x-k8s.io/leaderworkerset",
    "PyTorchJob.kubeflow.org": "kubeflow.org/pytorchjob",
    "MPIJob.kubeflow.org": "kubeflow.org/mpijob",
    "TFJob.kubeflow.org": "kubeflow.org/tfjob",
    "TrainJob.trainer.kubeflow.org": "trainer.kubeflow.org/trainjob",
    "RayJob.ray.io": "ray.io/rayjob",
    "RayCluster.ray.io": "ray.io/raycluster",
    "RayService.ray.io": "ray.io/rayservice",
    APPWRAPPER: "workload.codeflare.dev/appwrapper",
}
KUEUE_QUEUED_TYPES = tuple(KUEUE_FRAMEWORKS)
# Controllers whose pods the pod-based integrations (deployment, statefulset, LWS) queue as
# pods; a Pod owned by anything else (a Job) is admitted through its owner.
_POD_GROUP_OWNERS = frozenset({"ReplicaSet", "StatefulSet"})


# --------------------------------------------------------------------------- configuration


def kueue_configuration(snapshot: Snapshot) -> Mapping[str, Any] | None:
    """Kueue's manager configuration (`kind: Configuration`, config.kueue.x-k8s.io) from the
    first ConfigMap of the input that holds it, None when none does."""
    return snapshot.derived(("kueue", "configuration"), _configuration)


def _configuration(snapshot: Snapshot) -> Mapping[str, Any] | None:
    for config_map in snapshot.of("ConfigMap"):
        text = str_map(config_map.raw.get("data")).get(KUEUE_CONFIG_KEY)
        if not text:
            continue
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if not isinstance(config, Mapping) or config.get("kind") != "Configuration":
            continue
        if str(config.get("apiVersion", "")).startswith("config.kueue.x-k8s.io/"):
            return config
    return None


def enabled_frameworks(snapshot: Snapshot) -> frozenset[str] | None:
    """`integrations.frameworks` of Kueue's configuration; None when it is not in the input
    (then every integration counts as enabled: a queue-name label's author meant it)."""
    config = kueue_configuration(snapshot)
    if config is None:
        return None
    frameworks = as_list(as_mapping(config.get("integrations")).get("frameworks"))
    return frozenset(str(f) for f in frameworks) or frozenset({"batch/job"})


# --------------------------------------------------------------------------- queued objects


def queue_name(resource: Resource) -> tuple[str, str]:
    """The LocalQueue an object is queued to and the path of the label ("", path when none).
    A CronJob's label is on spec.jobTemplate, which every Job it creates copies."""
    if resource.ref.kind == "CronJob":
        job = as_mapping(resource.spec.get("jobTemplate"))
        labels = str_map(as_mapping(job.get("metadata")).get("labels"))
        return labels.get(
            QUEUE_NAME_LABEL, ""
        ), f"spec.jobTemplate.metadata.labels[{QUEUE_NAME_LABEL}]"
    return resource.labels.get(QUEUE_NAME_LABEL, ""), f"metadata.labels[{QUEUE_NAME_LABEL}]"


@dataclass(frozen=True, slots=True)
class QueuedWorkload:
    """A top-level object Kueue queues: its queue-name label and the LocalQueue it names (None
    when the input has no such LocalQueue)."""

    resource: Resource
    queue: str
    path: str
    local_queue: Resource | None

    @property
    def cluster_queue(self) -> str:
        """The ClusterQueue its LocalQueue points at, "" when unknown."""
        if self.local_queue is None:
            return ""
        return str(self.local_queue.spec.get("clusterQueue") or "")


def queued_workloads(snapshot: Snapshot) -> tuple[QueuedWorkload, ...]:
    """Every object Kueue queues, once: labelled, top-level (an object whose controller is in
    the input is queued through it; a Pod only when queued as a pod) and of an integration
    Kueue's configuration enables."""
    return snapshot.derived(("kueue", "queued"), _queued)


def _queued(snapshot: Snapshot) -> tuple[QueuedWorkload, ...]:
    frameworks = enabled_frameworks(snapshot)
    out = []
    for resource in snapshot.of(*KUEUE_QUEUED_TYPES):
        queue, path = queue_name(resource)
        if not queue or not _queued_itself(snapshot, resource):
            continue
        if frameworks is not None and KUEUE_FRAMEWORKS[resource.ref.kind] not in frameworks:
            continue
        local_queue = snapshot.get(LOCAL_QUEUE, resource.ref.namespace, queue)
        out.append(QueuedWorkload(resource, queue, path, local_queue))
    return tuple(out)


def _queued_itself(snapshot: Snapshot, resource: Resource) -> bool:
    if controller_owner(snapshot, resource) is not None:
        return False
    if resource.ref.kind != "Pod":
        return True
    controllers = [
        str(ref.get("kind", ""))
        for ref in map(as_mapping, as_list(resource.metadata.get("ownerReferences")))
        if ref.get("controller") is True
    ]
    return all(kind in _POD_GROUP_OWNERS for kind in controllers)


def admitted_pods(template: PodTemplate) -> int:
    """The pods of one template that Kueue admits together: a Job's parallelism, a
    StatefulSet's replicas, a replicated job's replicas x parallelism, a Kubeflow replica
    type's replicas, one LeaderWorkerSet group; a Deployment's pods are admitted one by one."""
    owner = template.owner
    spec = owner.spec
    kind = owner.ref.kind
    if kind == "Job":
        return _count(spec.get("parallelism"))
    if kind == "CronJob":
        job = as_mapping(as_mapping(spec.get("jobTemplate")).get("spec"))
        return _count(job.get("parallelism"))
    if kind == "StatefulSet":
        return _count(spec.get("replicas"))
    if kind == "JobSet.jobset.x-k8s.io":
        for replicated in map(as_mapping, as_list(spec.get("replicatedJobs"))):
            if replicated.get("name") == template.replica_type:
                job = as_mapping(as_mapping(replicated.get("template")).get("spec"))
                return _count(replicated.get("replicas")) * _count(job.get("parallelism"))
        return 1
    if kind in _RAY_TYPES:
        return _ray_group_pods(template)
    if kind == "LeaderWorkerSet.leaderworkerset.x-k8s.io":
        group = as_mapping(spec.get("leaderWorkerTemplate"))
        size = _count(group.get("size"))
        if "leaderTemplate" not in group:  # the worker template makes the leader too
            return size
        return 1 if template.replica_type == "leader" else size - 1
    if template.replica_type:
        key = next((k for k in spec if str(k).endswith("ReplicaSpecs")), "")
        replica = as_mapping(as_mapping(spec.get(key)).get(template.replica_type))
        return _count(replica.get("replicas"))
    return 1


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _ray_group_pods(template: PodTemplate) -> int:
    """The head and the submitter are one pod; a worker group is its replicas (1 when unset)
    times numOfHosts (raycluster.BuildPodSets)."""
    match = _RAY_WORKER_GROUP.search(template.path)
    if match is None:
        return 1
    spec = template.owner.spec
    cluster = as_mapping(spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec)
    groups = as_list(cluster.get("workerGroupSpecs"))
    index = int(match.group(1))
    group = as_mapping(groups[index]) if index < len(groups) else {}
    replicas = group.get("replicas")
    count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
    hosts = group.get("numOfHosts")
    if isinstance(hosts, int) and not isinstance(hosts, bool) and hosts > 1:
        count *= hosts
    return max(count, 0)


def _sum(requests: Iterator[dict[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for request in requests:
        for name, amount in request.items():
            total[name] = total.get(name, Decimal(0)) + amount
    return total


def _wrapped(appwrapper: Resource) -> list[Resource]:
    """The objects an AppWrapper's spec.components[].template hold, as objects of their own in
    the AppWrapper's namespace."""
    out = []
    for index, component in enumerate(map(as_mapping, as_list(appwrapper.spec.get("components")))):
        obj = as_mapping(component.get("template"))
        if not obj.get("kind"):
            continue
        type_ = resource_type(str(obj.get("apiVersion", "")), str(obj["kind"]))
        name = str(as_mapping(obj.get("metadata")).get("name") or f"component-{index}")
        ref = ObjRef(type_, appwrapper.ref.namespace, name)
        out.append(Resource(ref, str(obj.get("apiVersion", "")), obj, appwrapper.source))
    return out


def podset_templates(workload: Resource) -> tuple[tuple[PodTemplate, int], ...]:
    """A Workload object's pod sets: each template with its count."""
    out = []
    for index, podset in enumerate(map(as_mapping, as_list(workload.spec.get("podSets")))):
        name = str(podset.get("name", ""))
        found = pod_template_at(
            workload, podset.get("template"), f"spec.podSets[{index}].template", name
        )
        if found is not None:
            out.append((found, _count(podset.get("count"))))
    return tuple(out)


def workload_requests(resource: Resource) -> dict[str, Decimal]:
    """What the pods Kueue admits together request, per resource (the effective pod request
    times the pods of each template): a job's templates (TFJob replicas through the training
    job walk), a TrainJob's spec.trainer.resourcesPerNode times numNodes, a Workload object's
    pod sets times their counts."""
    if resource.ref.kind == APPWRAPPER:
        return _sum(workload_requests(wrapped) for wrapped in _wrapped(resource))
    if resource.ref.kind == KUEUE_WORKLOAD:
        pods_of = list(podset_templates(resource))
    else:
        pods_of = [(t, admitted_pods(t)) for t in templates_of(resource)]
        pods_of += [(g.template, g.replicas) for g in replica_groups(resource)]
    total: dict[str, Decimal] = {}
    seen: set[str] = set()
    for template, pods in pods_of:
        if template.path in seen:  # a kind both walks know
            continue
        seen.add(template.path)
        for name, amount in effective_pod_request(template).items():
            total[name] = total.get(name, Decimal(0)) + amount * pods
    trainer = as_mapping(resource.spec.get("trainer"))
    per_node = as_mapping(trainer.get("resourcesPerNode"))
    nodes = _count(trainer.get("numNodes"))
    for name, amount in {
        **quantities(per_node.get("limits")),
        **quantities(per_node.get("requests")),
    }.items():
        if amount > 0:
            total[name] = total.get(name, Decimal(0)) + amount * nodes
    return total


def workload_gpus(resource: Resource) -> dict[str, Decimal]:
    """The GPU resources of `workload_requests`, those above zero."""
    return {n: v for n, v in workload_requests(resource).items() if is_gpu_resource(n) and v > 0}


# --------------------------------------------------------------------------- ClusterQueues


def resource_groups(cluster_queue: Resource) -> list[Mapping[str, Any]]:
    return [as_mapping(g) for g in as_list(cluster_queue.spec.get("resourceGroups"))]


def covered_resources(cluster_queue: Resource) -> frozenset[str]:
    """Every resource some resource group of the ClusterQueue covers."""
    return frozenset(
        str(r) for g in resource_groups(cluster_queue) for r in as_list(g.get("coveredResources"))
    )


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One resource of one flavor of a ClusterQueue (or Cohort) resource group. A quota field
    that is absent or not a quantity is None: no borrowingLimit or lendingLimit means no limit."""

    group: int
    flavor_index: int
    flavor: str
    resource_index: int
    resource: str
    nominal: Decimal | None
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None

    @property
    def path(self) -> str:
        return (
            f"spec.resourceGroups[{self.group}].flavors[{self.flavor_index}]"
            f".resources[{self.resource_index}]"
        )


def flavor_quotas(queue: Resource) -> tuple[FlavorQuota, ...]:
    """Every quota of a ClusterQueue's (or Cohort's) resource groups, in spec order."""
    out = []
    for g, group in enumerate(resource_groups(queue)):
        for f, flavor in enumerate(map(as_mapping, as_list(group.get("flavors")))):
            for r, entry in enumerate(map(as_mapping, as_list(flavor.get("resources")))):
                out.append(
                    FlavorQuota(
                        g,
                        f,
                        str(flavor.get("name", "")),
                        r,
                        str(entry.get("name", "")),
                        _quantity(entry.get("nominalQuota")),
                        _quantity(entry.get("borrowingLimit")),
                        _quantity(entry.get("lendingLimit")),
                    )
                )
    return tuple(out)


def _quantity(value: object) -> Decimal | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


@dataclass(frozen=True, slots=True)
class FlavorUsage:
    """What a ClusterQueue's status says it uses of one flavor's resource: `total` including
    `borrowed`, the part above its nominal quota."""

    total: Decimal
    borrowed: Decimal


def flavor_usage(cluster_queue: Resource) -> dict[tuple[str, str], FlavorUsage]:
    """status.flavorsUsage (what admitted workloads use) by (flavor, resource); the quota
    reservations (status.flavorsReservation) when no usage is reported."""
    status = cluster_queue.status
    entries = as_list(status.get("flavorsUsage")) or as_list(status.get("flavorsReservation"))
    out: dict[tuple[str, str], FlavorUsage] = {}
    for flavor in map(as_mapping, entries):
        for entry in map(as_mapping, as_list(flavor.get("resources"))):
            out[(str(flavor.get("name", "")), str(entry.get("name", "")))] = FlavorUsage(
                _quantity(entry.get("total")) or Decimal(0),
                _quantity(entry.get("borrowed")) or Decimal(0),
            )
    return out


def flavor_nodes(snapshot: Snapshot, flavor: Resource) -> list[Resource]:
    """The Nodes of the input a ResourceFlavor's nodeLabels select (every Node for a flavor
    without labels)."""
    labels = flavor.spec.get("nodeLabels")
    return [n for n in snapshot.of("Node") if map_selector_matches(labels, n.labels)]


def admission_checks(cluster_queue: Resource) -> dict[str, tuple[str, ...]]:
    """The admission checks (ProvisioningRequest, MultiKueue...) a workload admitted to each
    flavor of the ClusterQueue waits for: flavor name -> check names. v1beta1
    spec.admissionChecks apply to every flavor, spec.admissionChecksStrategy rules to their
    onFlavors (every flavor when empty) (apis/kueue/v1beta2/clusterqueue_types.go)."""
    spec = cluster_queue.spec
    flavors = list(dict.fromkeys(q.flavor for q in flavor_quotas(cluster_queue)))
    out: dict[str, set[str]] = {}
    for name in map(str, as_list(spec.get("admissionChecks"))):
        for flavor in flavors:
            out.setdefault(flavor, set()).add(name)
    strategy = as_mapping(spec.get("admissionChecksStrategy"))
    for rule in map(as_mapping, as_list(strategy.get("admissionChecks"))):
        on = [str(f) for f in as_list(rule.get("onFlavors"))] or flavors
        for flavor in on:
            out.setdefault(flavor, set()).add(str(rule.get("name", "")))
    return {f: tuple(sorted(names)) for f, names in out.items()}


def node_gpus(node: Resource, resource: str) -> Decimal:
    """What a Node gives of a GPU resource for a flavor's quota: the larger of its allocatable
    and capacity, and for nvidia.com/gpu at least GPU Feature Discovery's nvidia.com/gpu.count
    label (the GPUs it has even while its device plugin is down, another check's finding)."""
    found = max(
        gpu_quantities(node, "allocatable").get(resource, Decimal(0)),
        gpu_quantities(node, "capacity").get(resource, Decimal(0)),
    )
    if resource == NVIDIA_GPU:
        count = _quantity(node.labels.get(GFD_GPU_COUNT))
        if count is not None and count > found:
            return count
    return found


def cohort_name(cluster_queue: Resource) -> str:
    """The cohort a ClusterQueue belongs to: spec.cohortName (v1beta2) or spec.cohort
    (v1beta1), "" for none."""
    spec = cluster_queue.spec
    return str(spec.get("cohortName") or spec.get("cohort") or "")


def cohort_root(snapshot: Snapshot, name: str) -> str:
    """The root of the cohort tree `name` belongs to, following Cohort spec.parentName through
    the Cohorts of the input (a parent that is not in the input ends the walk)."""
    seen = {name}
    current = name
    while True:
        cohort = snapshot.get(COHORT, "", current)
        parent = str(cohort.spec.get("parentName") or "") if cohort is not None else ""
        if not parent or parent in seen:
            return current
        seen.add(parent)
        current = parent


# --------------------------------------------------------------------------- priorities


def workload_priority(snapshot: Snapshot, resource: Resource) -> int | None:
    """The priority Kueue gives a queued object (None when its WorkloadPriorityClass or
    PriorityClass is not in the input), or a Workload object's spec.priority."""
    if resource.ref.kind == KUEUE_WORKLOAD:
        return _int(resource.spec.get("priority")) or 0
    label = resource.labels.get(KUEUE_PRIORITY_LABEL)
    if label:
        found = snapshot.get(WORKLOAD_PRIORITY_CLASS, "", label)
        return None if found is None else _int(found.raw.get("value")) or 0
    name = next(
        (str(n) for t in templates_of(resource) if (n := t.spec.get("priorityClassName"))), ""
    )
    if name:
        found = snapshot.get("PriorityClass", "", name)
        return None if found is None else _int(found.raw.get("value")) or 0
    defaults = [
        _int(c.raw.get("value")) or 0
        for c in snapshot.of("PriorityClass")
        if c.raw.get("globalDefault") is True
    ]
    return min(defaults, default=0)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------- Workload objects


def workload_condition(workload: Resource, type_: str) -> Mapping[str, Any] | None:
    """The status condition of that type, None when absent."""
    for condition in map(as_mapping, as_list(workload.status.get("conditions"))):
        if condition.get("type") == type_:
            return condition
    return None


def condition_is(workload: Resource, type_: str, status: str) -> bool:
    condition = workload_condition(workload, type_)
    return condition is not None and condition.get("status") == status


def is_finished(workload: Resource) -> bool:
    return condition_is(workload, "Finished", "True")


def evictions(workload: Resource) -> dict[tuple[str, str], int]:
    """status.schedulingStats.evictions: (reason, underlyingCause) -> how many times."""
    out: dict[tuple[str, str], int] = {}
    stats = as_mapping(workload.status.get("schedulingStats"))
    for entry in map(as_mapping, as_list(stats.get("evictions"))):
        count = _int(entry.get("count")) or 0
        if count > 0:
            key = (str(entry.get("reason", "")), str(entry.get("underlyingCause", "")))
            out[key] = out.get(key, 0) + count
    return out


def requeue_count(workload: Resource) -> int:
    """status.requeueState.count: how many times Kueue re-queued the Workload after evicting
    it for not reaching PodsReady in time."""
    return _int(as_mapping(workload.status.get("requeueState")).get("count")) or 0


def workload_cluster_queue(snapshot: Snapshot, workload: Resource) -> str:
    """The ClusterQueue of a Workload: the one that admitted it, else the one its LocalQueue
    (spec.queueName) points at; "" when neither is known."""
    admitted = str(as_mapping(workload.status.get("admission")).get("clusterQueue") or "")
    if admitted:
        return admitted
    local_queue = snapshot.get(
        LOCAL_QUEUE, workload.ref.namespace, str(workload.spec.get("queueName") or "")
    )
    return "" if local_queue is None else str(local_queue.spec.get("clusterQueue") or "")


def workload_owner(snapshot: Snapshot, workload: Resource) -> Resource:
    """The job a Workload was created for (its controlling ownerReference): the object of the
    input, else a stand-in built from the reference, else the Workload itself."""
    for ref in map(as_mapping, as_list(workload.metadata.get("ownerReferences"))):
        if ref.get("controller") is not True:
            continue
        api_version, kind = str(ref.get("apiVersion", "")), str(ref.get("kind", ""))
        name = str(ref.get("name", ""))
        if not name or not kind:
            continue
        type_ = resource_type(api_version, kind)
        found = snapshot.get(type_, workload.ref.namespace, name)
        if found is not None:
            return found
        raw = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": workload.ref.namespace},
        }
        return Resource(
            ObjRef(type_, workload.ref.namespace, name), api_version, raw, workload.source
        )
    return workload


class BlockerKind(Enum):
    """Why a Workload waits, from its QuotaReserved=False condition."""

    WAITS_FOR_QUOTA = "waits for quota"  # insufficient unused quota: fits once usage goes down
    EXCEEDS_QUOTA = (
        "exceeds quota"  # more than the ClusterQueue can ever give (nominal + borrowing)
    )
    UNCOVERED_RESOURCE = "uncovered resource"  # a resource no resource group covers
    FLAVOR_NOT_FOUND = "flavor not found"  # a flavor the ClusterQueue names has no ResourceFlavor
    NO_MATCHING_FLAVOR = "no matching flavor"  # taints or node affinity no flavor satisfies
    LOCAL_QUEUE_MISSING = "LocalQueue missing"
    CLUSTER_QUEUE_MISSING = "ClusterQueue missing"
    QUEUE_INACTIVE = "queue inactive"  # Kueue marks the queue inactive (its status says why)
    QUEUE_STOPPED = "queue stopped"  # stopPolicy: held on purpose
    WAITS_FOR_PODS_READY = "waits for PodsReady"  # waitForPodsReady.blockAdmission
    EVALUATING = "evaluating"  # not yet considered by the scheduler, or gated on purpose
    OTHER = "other"


# Causes that change only when the configuration changes, strongest first.
_PERMANENT = (
    BlockerKind.LOCAL_QUEUE_MISSING,
    BlockerKind.CLUSTER_QUEUE_MISSING,
    BlockerKind.QUEUE_INACTIVE,
    BlockerKind.UNCOVERED_RESOURCE,
    BlockerKind.FLAVOR_NOT_FOUND,
    BlockerKind.EXCEEDS_QUOTA,
    BlockerKind.NO_MATCHING_FLAVOR,
)
# Flavor assigner messages (pkg/scheduler/flavorassigner/flavorassigner.go).
_FRAGMENTS = (
    ("insufficient unused quota for ", BlockerKind.WAITS_FOR_QUOTA),
    ("insufficient quota for ", BlockerKind.EXCEEDS_QUOTA),
    (" unavailable in ClusterQueue", BlockerKind.UNCOVERED_RESOURCE),
    (" not found", BlockerKind.FLAVOR_NOT_FOUND),
    ("untolerated taint ", BlockerKind.NO_MATCHING_FLAVOR),
    ("doesn't match node affinity", BlockerKind.NO_MATCHING_FLAVOR),
)
# Granular QuotaReserved reasons (feature gate UnadmittedWorkloadsObservability) that say it
# all, and the gated or held states that are nobody's mistake.
_REASONS = {
    "WaitingForQuota": BlockerKind.WAITS_FOR_QUOTA,
    "WaitingForPreemptedWorkloads": BlockerKind.WAITS_FOR_QUOTA,
    "ExceedsMaxQuota": BlockerKind.EXCEEDS_QUOTA,
    "NoMatchingFlavor": BlockerKind.NO_MATCHING_FLAVOR,
    "WaitingForPodsReady": BlockerKind.WAITS_FOR_PODS_READY,
    "Waiting": BlockerKind.WAITS_FOR_PODS_READY,
    "PendingEvaluation": BlockerKind.EVALUATING,
    "AdmissionGated": BlockerKind.EVALUATING,
    "OnHold": BlockerKind.EVALUATING,
}


@dataclass(frozen=True, slots=True)
class Blocker:
    """Why Kueue holds a Workload back, from its QuotaReserved=False condition."""

    kind: BlockerKind
    reason: str
    message: str

    @property
    def permanent(self) -> bool:
        """Only a change of configuration (queues, quotas, flavors, the job) lets it in."""
        return self.kind in _PERMANENT


def workload_blocker(workload: Resource) -> Blocker | None:
    """Why a pending Workload waits; None when it is not pending (quota reserved, finished,
    deactivated) or says nothing."""
    if is_finished(workload) or workload.spec.get("active") is False:
        return None
    condition = workload_condition(workload, "QuotaReserved")
    if condition is None or condition.get("status") != "False":
        return None
    reason = str(condition.get("reason", ""))
    message = str(condition.get("message", ""))
    return Blocker(_blocker_kind(reason, message), reason, message)


def _blocker_kind(reason: str, message: str) -> BlockerKind:
    if message.startswith(("LocalQueue ", "ClusterQueue ")):
        if message.endswith(" is stopped"):
            return BlockerKind.QUEUE_STOPPED
        if message.endswith(" is inactive"):
            return BlockerKind.QUEUE_INACTIVE
        if message.startswith("LocalQueue "):
            return BlockerKind.LOCAL_QUEUE_MISSING
        return BlockerKind.CLUSTER_QUEUE_MISSING
    if "waiting for all admitted workloads to be in PodsReady" in message:
        return BlockerKind.WAITS_FOR_PODS_READY
    podsets = [_podset_kind(part) for part in message.split("; ") if part]
    permanent = [k for k in podsets if k in _PERMANENT]
    if permanent:
        return min(permanent, key=_PERMANENT.index)
    if BlockerKind.WAITS_FOR_QUOTA in podsets:
        return BlockerKind.WAITS_FOR_QUOTA
    return _REASONS.get(reason, BlockerKind.OTHER)


def _podset_kind(part: str) -> BlockerKind:
    """One pod set's verdict: it waits when any flavor would fit once quota frees up, else the
    strongest reason none fits."""
    found = [kind for text, kind in _FRAGMENTS if text in part]
    if BlockerKind.WAITS_FOR_QUOTA in found:
        return BlockerKind.WAITS_FOR_QUOTA
    return min(found, key=_PERMANENT.index) if found else BlockerKind.OTHER


def workloads_of(snapshot: Snapshot, owner: Resource) -> Iterator[Resource]:
    """The Workload objects whose controlling ownerReference is `owner`."""
    for workload in snapshot.in_namespace(KUEUE_WORKLOAD, owner.ref.namespace):
        if workload_owner(snapshot, workload).ref == owner.ref:
            yield workload
