"""Helpers shared by the distributed-training checks: training jobs, spot placement."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    PodTemplate,
    Resource,
    Snapshot,
    as_list,
    as_mapping,
    controller_owner,
    str_map,
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

# Node labels (and the values) that mark spot / preemptible capacity, per provider.
SPOT_LABELS: dict[str, frozenset[str]] = {
    "karpenter.sh/capacity-type": frozenset({"spot"}),
    "eks.amazonaws.com/capacityType": frozenset({"SPOT"}),
    "cloud.google.com/gke-spot": frozenset({"true"}),
    "cloud.google.com/gke-preemptible": frozenset({"true"}),
    "kubernetes.azure.com/scalesetpriority": frozenset({"spot"}),
}
# Taints only spot nodes carry: tolerating one is an opt-in to spot capacity.
SPOT_TAINT_KEYS = frozenset(
    {
        "kubernetes.azure.com/scalesetpriority",
        "cloud.google.com/gke-spot",
        "cloud.google.com/gke-preemptible",
    }
)


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
            return dict(as_mapping(as_mapping(spec.get("jobTemplate")).get("spec")))
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


def _required_terms(template: PodTemplate) -> list[dict[str, object]]:
    affinity = as_mapping(as_mapping(template.spec.get("affinity")).get("nodeAffinity"))
    required = as_mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    return [dict(as_mapping(t)) for t in as_list(required.get("nodeSelectorTerms"))]


def _expression_allows_spot(expr: dict[str, object]) -> bool:
    wanted = SPOT_LABELS.get(str(expr.get("key", "")))
    if wanted is None or expr.get("operator") != "In":
        return False
    return any(str(v) in wanted for v in as_list(expr.get("values")))


def runs_on_spot(template: PodTemplate) -> bool:
    """Whether the template pins or opts in to spot/preemptible nodes."""
    selector = str_map(template.spec.get("nodeSelector"))
    if any(selector.get(k) in v for k, v in SPOT_LABELS.items()):
        return True
    for term in _required_terms(template):
        expressions = [dict(as_mapping(e)) for e in as_list(term.get("matchExpressions"))]
        if any(_expression_allows_spot(e) for e in expressions):
            return True
    return any(
        as_mapping(t).get("key") in SPOT_TAINT_KEYS
        for t in as_list(template.spec.get("tolerations"))
    )
