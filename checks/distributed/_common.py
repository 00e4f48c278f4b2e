"""Helpers shared by the distributed-training checks: training jobs and their replica counts.
Replica groups and spot placement come from `gpu_audit.api`."""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpu_audit.api import (
    ObjRef,
    PodTemplate,
    ReplicaGroup,
    Resource,
    Snapshot,
    as_list,
    as_mapping,
    controller_owner,
    gpu_quantities,
    has_resource_status,
    is_gpu_resource,
    pod_is_active,
    quantities,
    template_spec,
    templates_of,
)

# Kinds whose pods run to completion; serving Deployments are never training jobs.
TRAINING_TYPES = (
    "Job",
    "CronJob",
    "PyTorchJob.kubeflow.org",
    "MPIJob.kubeflow.org",
    "Job.batch.volcano.sh",
)
KUBEFLOW_TYPES = frozenset({"PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org"})


@dataclass(frozen=True, slots=True)
class TrainingJob:
    """A job object with its pod templates; `templates` are the GPU ones."""

    resource: Resource
    templates: tuple[PodTemplate, ...]

    @property
    def kind(self) -> str:
        return self.resource.ref.kind

    @property
    def job_spec(self) -> dict[str, object]:
        """The batch/v1 JobSpec (a CronJob's jobTemplate.spec), else the object's spec."""
        spec = self.resource.spec
        if self.kind == "CronJob":
            return dict(template_spec(spec, "jobTemplate"))
        return dict(spec)

    @property
    def job_spec_path(self) -> str:
        return "spec.jobTemplate.spec" if self.kind == "CronJob" else "spec"


def gpu_training_jobs(snapshot: Snapshot) -> Iterator[TrainingJob]:
    """Training jobs with at least one GPU template, counted once at their top controller
    (a Job created by a CronJob in the input is reported as the CronJob). Jobs whose controller
    is in the input but is not a training kind (a JobSet's Jobs) are left to that controller."""
    for resource in snapshot.of(*TRAINING_TYPES):
        if managing_owner(snapshot, resource) is not None:
            continue
        templates = tuple(t for t in templates_of(resource) if t.requests_gpu)
        if templates:
            yield TrainingJob(resource, templates)


def total_pods(groups: tuple[ReplicaGroup, ...]) -> int:
    return sum(g.replicas for g in groups)


def gpu_pods(groups: tuple[ReplicaGroup, ...]) -> int:
    return sum(g.replicas for g in groups if g.gpu)


# --------------------------------------------------------------------------- owners and pods


def managing_owner(snapshot: Snapshot, resource: Resource) -> Resource | None:
    """The controller of `resource` when it is in the input, whatever its kind: the kinds
    gpu-audit reads pod templates of, and the others (a JobSet of its Jobs, a LeaderWorkerSet
    of its StatefulSets), looked up by the ownerReference's kind and API group."""
    known = controller_owner(snapshot, resource)
    if known is not None:
        return known
    for ref in map(as_mapping, as_list(resource.metadata.get("ownerReferences"))):
        if ref.get("controller") is not True:
            continue
        kind, api_version = str(ref.get("kind", "")), str(ref.get("apiVersion", ""))
        name = str(ref.get("name", ""))
        group = api_version.split("/", 1)[0] if "/" in api_version else ""
        for type_ in (f"{kind}.{group}", kind) if group else (kind,):
            found = snapshot.get(type_, resource.ref.namespace, name)
            if found is not None:
                return found
        return None
    return None


def top_managing_owner(snapshot: Snapshot, resource: Resource) -> Resource:
    """The top-most controller of `resource` in the input, whatever its kind (itself if none)."""
    seen = {resource.ref}
    current = resource
    while (owner := managing_owner(snapshot, current)) is not None and owner.ref not in seen:
        seen.add(owner.ref)
        current = owner
    return current


def has_controller(resource: Resource) -> bool:
    """Whether an ownerReference marks a controller of `resource` (in the input or not)."""
    return any(
        as_mapping(ref).get("controller") is True
        for ref in as_list(resource.metadata.get("ownerReferences"))
    )


def pods_of(snapshot: Snapshot, resource: Resource) -> tuple[Resource, ...]:
    """The Pods in the input whose top-most controller is `resource` (a job's pods, also those
    created through a child Job, a launcher Job or a JobSet's Jobs)."""
    index = snapshot.derived("distributed.pods_by_top_owner", _pods_by_top_owner)
    return index.get(resource.ref, ())


def _pods_by_top_owner(snapshot: Snapshot) -> Mapping[ObjRef, tuple[Resource, ...]]:
    out: dict[ObjRef, list[Resource]] = defaultdict(list)
    for pod in snapshot.of("Pod"):
        top = top_managing_owner(snapshot, pod)
        if top.ref != pod.ref:
            out[top.ref].append(pod)
    return {ref: tuple(pods) for ref, pods in out.items()}


def is_scheduled(pod: Resource) -> bool:
    return bool(pod.spec.get("nodeName")) and pod_is_active(pod)


def is_unschedulable(pod: Resource) -> bool:
    """Pending with PodScheduled False/Unschedulable (the scheduler tried and gave up)."""
    if pod.spec.get("nodeName") or not pod_is_active(pod):
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in map(as_mapping, as_list(pod.status.get("conditions")))
    )


def was_disrupted(pod: Resource) -> bool:
    """The pod carries a DisruptionTarget condition: evicted, preempted or drained (a spot
    reclaim drains the node), not failed by its own code."""
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in map(as_mapping, as_list(pod.status.get("conditions")))
    )


def restart_count(pod: Resource) -> int:
    total = 0
    for status in map(as_mapping, as_list(pod.status.get("containerStatuses"))):
        count = status.get("restartCount")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            total += count
    return total


def crash_looping(pod: Resource) -> bool:
    return any(
        as_mapping(as_mapping(s.get("state")).get("waiting")).get("reason") == "CrashLoopBackOff"
        for s in map(as_mapping, as_list(pod.status.get("containerStatuses")))
    )


def is_finished(job: Resource) -> bool:
    """A Complete/Succeeded/Failed condition (batch, Kubeflow and JobSet jobs)."""
    return any(
        c.get("type") in ("Complete", "Succeeded", "Failed") and c.get("status") == "True"
        for c in map(as_mapping, as_list(job.status.get("conditions")))
    )


# --------------------------------------------------------------------------- GPU counts


def pod_gpus(template: PodTemplate) -> int:
    """GPUs (any GPU resource) one pod of the template requests, as a whole number."""
    total = 0
    for container in template.containers():
        if container.init and not container.is_sidecar:
            continue
        wanted = quantities({**container.limits, **container.requests})
        total += int(sum((v for k, v in wanted.items() if is_gpu_resource(k)), 0))
    return total


def job_gpus(groups: tuple[ReplicaGroup, ...]) -> int:
    return sum(g.replicas * pod_gpus(g.template) for g in groups)


def cluster_gpus(snapshot: Snapshot) -> int | None:
    """GPUs the nodes in the input can allocate (all GPU resources); None without node status."""
    nodes = [n for n in snapshot.of("Node") if has_resource_status(n)]
    if not nodes:
        return None
    return int(sum((sum(gpu_quantities(n, "allocatable").values(), 0) for n in nodes), 0))


# --------------------------------------------------------------------------- launch commands


def launch_tokens(template: PodTemplate) -> list[str]:
    """Shell words of every container's command and args (also inside sh -c strings)."""
    out: list[str] = []
    for container in template.containers():
        for part in as_list(container.raw.get("command")) + as_list(container.raw.get("args")):
            try:
                out.extend(shlex.split(str(part)))
            except ValueError:
                out.extend(str(part).split())
    return out
