"""Multi-pod training jobs as the DIST and COST checks see them: replica types and counts, the
terminal state of a job, and the Pods a job owns.

Covers Kubeflow's v1 jobs (PyTorchJob, TFJob, MPIJob), Volcano Jobs and batch/v1 Jobs. TFJob is
read here rather than through the shared pod-template walk, which does not list it. Checks use
these through `gpu_audit.api`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
)
from gpu_audit.k8s.pods import (
    PodTemplate,
    pod_template_at,
    templates_of,
)
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

KUBEFLOW_REPLICA_KEYS = {
    "PyTorchJob.kubeflow.org": "pytorchReplicaSpecs",
    "TFJob.kubeflow.org": "tfReplicaSpecs",
    "MPIJob.kubeflow.org": "mpiReplicaSpecs",
}
VOLCANO_JOB = "Job.batch.volcano.sh"
MULTI_POD_JOB_TYPES = (*KUBEFLOW_REPLICA_KEYS, VOLCANO_JOB, "Job")

# Replica counts the operators default an unset `replicas` to: 1 for training-operator v1
# (setDefaultReplicas(spec, 1)); mpi-operator v2beta1 defaults Worker to 0 and Launcher to 1.
_DEFAULT_REPLICAS = {("MPIJob.kubeflow.org", "Worker"): 0}


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """One replica type (Kubeflow), task (Volcano) or the single template of a batch Job."""

    name: str
    replicas: int
    template: PodTemplate

    @property
    def gpu(self) -> bool:
        return self.template.requests_gpu


def count_field(value: object, default: int) -> int:
    """A count as written in a job spec (`replicas`, `minAvailable`, ...): a non-negative
    integer, else `default`."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def replica_groups(job: Resource) -> tuple[ReplicaGroup, ...]:
    kind = job.ref.kind
    spec = job.spec
    key = KUBEFLOW_REPLICA_KEYS.get(kind)
    if key is not None:
        out = []
        for name, raw in sorted(as_mapping(spec.get(key)).items()):
            replica = as_mapping(raw)
            template = pod_template_at(
                job, replica.get("template"), f"spec.{key}.{name}.template", name
            )
            if template is not None:
                default = _DEFAULT_REPLICAS.get((kind, str(name)), 1)
                out.append(
                    ReplicaGroup(str(name), count_field(replica.get("replicas"), default), template)
                )
        return tuple(out)
    if kind == VOLCANO_JOB:
        tasks = [as_mapping(t) for t in as_list(spec.get("tasks"))]
        return tuple(
            ReplicaGroup(t.replica_type, count_field(task.get("replicas"), 1), t)
            for t, task in zip(templates_of(job), tasks, strict=False)
        )
    if kind == "Job":
        parallelism = count_field(spec.get("parallelism"), 1)
        return tuple(ReplicaGroup("", parallelism, t) for t in templates_of(job))
    return ()


def _conditions_true(resource: Resource) -> frozenset[str]:
    return frozenset(
        str(c.get("type", ""))
        for c in map(as_mapping, as_list(resource.status.get("conditions")))
        if c.get("status") == "True"
    )


_FINISHED_CONDITIONS = {
    "Job": frozenset({"Complete", "Failed"}),
    "PyTorchJob.kubeflow.org": frozenset({"Succeeded", "Failed"}),
    "TFJob.kubeflow.org": frozenset({"Succeeded", "Failed"}),
    "MPIJob.kubeflow.org": frozenset({"Succeeded", "Failed"}),
}
_VOLCANO_FINISHED = frozenset({"Completed", "Failed", "Terminated", "Aborted"})


def finished_as(job: Resource) -> str:
    """The terminal condition (or Volcano phase) of a job, "" while it runs or has no status."""
    if job.ref.kind == VOLCANO_JOB:
        phase = str(as_mapping(job.status.get("state")).get("phase", ""))
        return phase if phase in _VOLCANO_FINISHED else ""
    done = _conditions_true(job) & _FINISHED_CONDITIONS.get(job.ref.kind, frozenset())
    return min(done) if done else ""


def _group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def owned_pods(snapshot: Snapshot, job: Resource) -> Iterator[Resource]:
    """Pods whose controlling ownerReference is `job` (same kind, API group and name)."""
    key = (job.ref.namespace, job.ref.kind_name, _group_of(job.api_version), job.ref.name)
    return iter(
        snapshot.derived("training_jobs.pods_by_controller", _pods_by_controller).get(key, ())
    )


def _pods_by_controller(
    snapshot: Snapshot,
) -> dict[tuple[str, str, str, str], tuple[Resource, ...]]:
    """Every pod under each (namespace, kind, API group, name) its controller refs name: one
    pass over the pods instead of one per job."""
    out: dict[tuple[str, str, str, str], list[Resource]] = {}
    for pod in snapshot.of("Pod"):
        keys = {
            (pod.ref.namespace, kind, _group_of(str(ref.get("apiVersion", ""))), name)
            for ref in map(as_mapping, as_list(pod.metadata.get("ownerReferences")))
            if ref.get("controller") is True
            and isinstance(kind := ref.get("kind"), str)
            and isinstance(name := ref.get("name"), str)
        }
        for key in keys:
            out.setdefault(key, []).append(pod)
    return {key: tuple(pods) for key, pods in out.items()}


def pod_is_active(pod: Resource) -> bool:
    """Holds node resources: not Succeeded/Failed and not being deleted."""
    if pod.metadata.get("deletionTimestamp"):
        return False
    return pod.status.get("phase") not in ("Succeeded", "Failed")


def owner_kinds(resource: Resource) -> frozenset[str]:
    """The kinds named in the object's ownerReferences (controller or not)."""
    return frozenset(
        str(ref.get("kind", ""))
        for ref in map(as_mapping, as_list(resource.metadata.get("ownerReferences")))
    )
