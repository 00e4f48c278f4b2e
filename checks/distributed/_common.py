"""Helpers shared by the distributed-training checks: training jobs and their replica counts.
Replica groups and spot placement come from `gpu_audit.api`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    PodTemplate,
    ReplicaGroup,
    Resource,
    Snapshot,
    controller_owner,
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
    (a Job created by a CronJob in the input is reported as the CronJob)."""
    for resource in snapshot.of(*TRAINING_TYPES):
        if controller_owner(snapshot, resource) is not None:
            continue
        templates = tuple(t for t in templates_of(resource) if t.requests_gpu)
        if templates:
            yield TrainingJob(resource, templates)


def total_pods(groups: tuple[ReplicaGroup, ...]) -> int:
    return sum(g.replicas for g in groups)


def gpu_pods(groups: tuple[ReplicaGroup, ...]) -> int:
    return sum(g.replicas for g in groups if g.gpu)
