from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    count_field,
    failed,
    passed,
    pod_requests_gpu,
    runs_on_spot,
    templates_of,
)
from gpu_audit.checks.distributed._common import (
    KUBEFLOW_TYPES,
    TRAINING_TYPES,
    TrainingJob,
    crash_looping,
    gpu_training_jobs,
    is_finished,
    managing_owner,
    pods_of,
    restart_count,
    was_disrupted,
)

_RESTARTING = frozenset({"OnFailure", "Always", "ExitCode"})
# A podFailurePolicy needs pods that fail rather than restart in place.
_NEVER_RESTART = (
    "\ntemplate:\n  spec:\n    restartPolicy: Never   # podFailurePolicy rejects OnFailure"
)
# Failed pods plus container restarts from which a job still running counts as churning: the
# catalogue's CrashLoopBackOff escalation starts at 5 restarts; 3 failures already show a loop.
_CHURN = 3
_DEFAULT_BACKOFF_LIMIT = 6
# A JobSet's replicated Jobs are batch/v1 Jobs (replicas x parallelism pods each), retried
# backoffLimit times each, and the JobSet restarts failurePolicy.maxRestarts times (default 0:
# the first failed Job fails the JobSet): its retries are bounded, its runtime only by the Job
# templates' (or pods') activeDeadlineSeconds (jobset.sigs.k8s.io/docs/overview/, "Failure
# Policy"; the JobSet API has no deadline of its own).
JOBSET = "JobSet.jobset.x-k8s.io"


@check(
    id="GPU-DIST-004",
    title="GPU training jobs bound their runtime and retries, and disruptions do not burn retries",
    category=Category.DISTRIBUTED,
    severity=Severity.LOW,
    requires=((*TRAINING_TYPES, JOBSET),),
    rationale="""
        A hung NCCL collective or a crash loop keeps every GPU of a job busy until someone
        notices: batch/v1 Jobs retry 6 times by default but have no deadline, and Kubeflow
        jobs have none unless runPolicy.activeDeadlineSeconds is set. On spot capacity,
        each interruption also consumes one retry unless a pod failure policy ignores
        disruptions.
    """,
    detection="""
        Jobs, CronJobs, PyTorchJobs, MPIJobs, Volcano Jobs and JobSets with GPU pod templates:
        no activeDeadlineSeconds on the Job (runPolicy for Kubeflow, or on every GPU pod
        template, the only bound Volcano offers; for a JobSet, on each GPU replicated Job's
        template or its pods, as JobSets have no deadline of their own and bound retries by
        failurePolicy.maxRestarts); Kubeflow jobs whose replicas restart (OnFailure,
        Always, ExitCode) without runPolicy.backoffLimit; batch/v1 Jobs that can run on spot
        nodes without a podFailurePolicy rule ignoring DisruptionTarget. Each fails low, as
        hygiene, unless the input shows it biting (see Severity). Jobs whose controller is in
        the input (a JobSet's Jobs, an MPIJob's launcher) are not judged on their own: the
        controller's template sets these fields.
        Serving Deployments are out of scope; suspended (Kueue) jobs are still judged.
    """,
    severity_evidence="""
        Low without evidence: a job with no deadline or retry bound is only at risk. Medium when
        the input shows the gap biting: the job is still running after 3 or more pod failures
        or container restarts (CrashLoopBackOff) and nothing bounds it (no deadline; for
        Kubeflow, no backoffLimit either); or, on spot nodes, backoffLimit 0 (the first
        reclaim fails the Job) or a failed pod with a DisruptionTarget condition (a
        disruption was already counted as a failure).
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # batch Job (a CronJob: the same under spec.jobTemplate.spec):
        spec:
          activeDeadlineSeconds: 86400
          # on spot nodes, so that interruptions do not count against backoffLimit:
          podFailurePolicy:
            rules:
              - action: Ignore
                onPodConditions: [{type: DisruptionTarget}]
          podReplacementPolicy: Failed   # the only value a podFailurePolicy allows
          template:
            spec:
              restartPolicy: Never   # podFailurePolicy rejects OnFailure
        ---
        # PyTorchJob / MPIJob:
        spec:
          runPolicy:
            activeDeadlineSeconds: 86400
            backoffLimit: 3
        ---
        # Volcano Job, on its GPU task templates:
        spec:
          tasks:
            - template:
                spec:
                  activeDeadlineSeconds: 86400
        ---
        # JobSet, on the Job template of each GPU replicated job:
        spec:
          replicatedJobs:
            - name: <replicated-job>
              template:
                spec:
                  activeDeadlineSeconds: 86400
    """,
    references=(
        "https://kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup",
        "https://kubernetes.io/docs/tasks/job/pod-failure-policy/",
        "https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions",
        "https://github.com/kelos-dev/kelos/issues/522",
        "https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-replacement-policy",
        "https://github.com/kubeflow/training-operator/blob/6523d8d2b7a27f1140a05971843cc4da7523694f/sdk/python/docs/V1RunPolicy.md",
        "https://jobset.sigs.k8s.io/docs/overview/",
    ),
)
def gpu_jobs_bound_retries_and_runtime(snapshot: Snapshot) -> Iterator[Result]:
    for job in (*gpu_training_jobs(snapshot), *_gpu_jobsets(snapshot)):
        evidence = _evidence(snapshot, job)
        problems = list(_problems(job, evidence))
        if not problems:
            yield passed(job.resource, "has a runtime bound and bounded retries")
            continue
        worst = max(problems, key=lambda p: p[0].rank)
        yield failed(
            job.resource,
            "; ".join(p[1] for p in problems),
            path=worst[2],
            severity=None if worst[0] is Severity.LOW else worst[0],
            fix={"problem": worst[1], "snippet": worst[3]},
        )


Problem = tuple[Severity, str, str, str]


@dataclass(frozen=True, slots=True)
class _Evidence:
    """What the job's status and pods in the input show: failures so far, disruptions."""

    failures: int  # failed pods and container restarts
    disrupted_failures: int  # failed pods with a DisruptionTarget condition
    running: bool

    @property
    def churning(self) -> bool:
        return self.running and self.failures >= _CHURN


def _evidence(snapshot: Snapshot, job: TrainingJob) -> _Evidence:
    pods = [p for p in pods_of(snapshot, job.resource) if pod_requests_gpu(p)]
    failed_pods = [p for p in pods if p.status.get("phase") == "Failed"]
    failures = max(_status_failures(job.resource), len(failed_pods))
    failures += sum(restart_count(p) for p in pods)
    if any(crash_looping(p) for p in pods):
        failures = max(failures, _CHURN)
    running = not is_finished(job.resource) and (
        any(p.status.get("phase") in ("Running", "Pending") for p in pods)
        or _status_active(job.resource)
    )
    return _Evidence(failures, sum(1 for p in failed_pods if was_disrupted(p)), running)


def _status_failures(job: Resource) -> int:
    """status.failed of a batch Job, or the sum of replicaStatuses[*].failed (Kubeflow)."""
    total = count_field(job.status.get("failed"), 0)
    for replica in as_mapping(job.status.get("replicaStatuses")).values():
        total += count_field(as_mapping(replica).get("failed"), 0)
    return total


def _status_active(job: Resource) -> bool:
    if count_field(job.status.get("active"), 0) > 0:
        return True
    return any(
        count_field(as_mapping(r).get("active"), 0) > 0
        for r in as_mapping(job.status.get("replicaStatuses")).values()
    )


def _churn_note(evidence: _Evidence) -> str:
    return f"; it has failed or restarted {evidence.failures} times and is still holding its GPUs"


def _gpu_jobsets(snapshot: Snapshot) -> Iterator[TrainingJob]:
    """JobSets with GPU pod templates, but those a controller in the input renders (the
    JobSet of a TrainJob: its runtime writes the template)."""
    for jobset in snapshot.of(JOBSET):
        if managing_owner(snapshot, jobset) is not None:
            continue
        templates = tuple(t for t in templates_of(jobset) if t.requests_gpu)
        if templates:
            yield TrainingJob(jobset, templates)


def _jobset_problems(job: TrainingJob, evidence: _Evidence) -> Iterator[Problem]:
    replicated = [as_mapping(r) for r in as_list(job.resource.spec.get("replicatedJobs"))]
    names = [str(r.get("name", "")) for r in replicated]
    unbounded = []
    for template in job.templates:
        if template.replica_type not in names or template.spec.get("activeDeadlineSeconds"):
            continue
        index = names.index(template.replica_type)
        job_spec = as_mapping(as_mapping(replicated[index].get("template")).get("spec"))
        if job_spec.get("activeDeadlineSeconds") is None:
            unbounded.append((index, template.replica_type))
    if not unbounded:
        return
    churn = evidence.churning
    index, name = unbounded[0]
    shown = ", ".join(n for _, n in unbounded)
    yield (
        Severity.MEDIUM if churn else Severity.LOW,
        f"no activeDeadlineSeconds on the Jobs of replicated job{'s' if len(unbounded) > 1 else ''} "
        f"{shown}: a hung job holds its GPUs until someone notices"
        + (_churn_note(evidence) if churn else ""),
        f"spec.replicatedJobs[{index}].template.spec.activeDeadlineSeconds",
        "# in each GPU replicated job (a merge patch replaces the whole list: edit the manifest)\n"
        f"spec:\n  replicatedJobs:\n    - name: {name}\n      template:\n        spec:\n"
        "          activeDeadlineSeconds: 86400",
    )


def _problems(job: TrainingJob, evidence: _Evidence) -> Iterator[Problem]:
    if job.kind == JOBSET:
        yield from _jobset_problems(job, evidence)
        return
    if job.kind in KUBEFLOW_TYPES:
        yield from _kubeflow_problems(job, evidence)
        return
    if job.kind == "Job.batch.volcano.sh":
        if not _every_pod_has_deadline(job):
            churn = evidence.churning
            yield (
                Severity.MEDIUM if churn else Severity.LOW,
                "no activeDeadlineSeconds on its GPU task templates: a hung job holds its GPUs"
                + (_churn_note(evidence) if churn else ""),
                "spec.tasks",
                "spec:\n  tasks:\n    - template:\n        spec:\n"
                "          activeDeadlineSeconds: 86400",
            )
        return
    spec = job.job_spec
    base = job.job_spec_path
    if spec.get("activeDeadlineSeconds") is None and not _every_pod_has_deadline(job):
        churn = evidence.churning
        yield (
            Severity.MEDIUM if churn else Severity.LOW,
            "no activeDeadlineSeconds: a hung job holds its GPUs until someone notices"
            + (_churn_note(evidence) if churn else ""),
            f"{base}.activeDeadlineSeconds",
            _job_snippet(job, "activeDeadlineSeconds: 86400"),
        )
    if any(runs_on_spot(t) for t in job.templates) and not _ignores_disruptions(spec):
        policy = (
            "podFailurePolicy:\n  rules:\n    - action: Ignore\n"
            "      onPodConditions: [{type: DisruptionTarget}]\n"
            "podReplacementPolicy: Failed   # the only value a podFailurePolicy allows"
        )
        if any(t.spec.get("restartPolicy") == "OnFailure" for t in job.templates):
            policy += _NEVER_RESTART
        limit = count_field(spec.get("backoffLimit"), _DEFAULT_BACKOFF_LIMIT)
        message = "runs on spot nodes but each interruption counts against backoffLimit"
        severity = Severity.LOW
        if evidence.disrupted_failures:
            severity = Severity.MEDIUM
            message += (
                f" ({evidence.disrupted_failures} disrupted pod"
                f"{'s' if evidence.disrupted_failures > 1 else ''} already counted as failed)"
            )
        elif limit == 0 and job.kind == "Job":
            severity = Severity.MEDIUM
            message += " (backoffLimit 0: the first reclaim fails the whole Job)"
        yield (severity, message, f"{base}.podFailurePolicy", _job_snippet(job, policy))


def _kubeflow_problems(job: TrainingJob, evidence: _Evidence) -> Iterator[Problem]:
    run_policy = as_mapping(job.resource.spec.get("runPolicy"))
    key = "pytorchReplicaSpecs" if job.kind.startswith("PyTorchJob") else "mpiReplicaSpecs"
    restarting = [
        str(name)
        for name, replica in as_mapping(job.resource.spec.get(key)).items()
        if str(as_mapping(replica).get("restartPolicy", "")) in _RESTARTING
    ]
    unbounded_retries = bool(restarting) and run_policy.get("backoffLimit") is None
    no_deadline = run_policy.get("activeDeadlineSeconds") is None and not _every_pod_has_deadline(
        job
    )
    # Kubeflow retries forever without backoffLimit: churn with neither bound is medium.
    churn = evidence.churning and no_deadline and unbounded_retries
    if no_deadline:
        yield (
            Severity.MEDIUM if churn else Severity.LOW,
            "no runPolicy.activeDeadlineSeconds: a hung job holds its GPUs until someone notices"
            + (_churn_note(evidence) if churn else ""),
            "spec.runPolicy.activeDeadlineSeconds",
            "spec:\n  runPolicy:\n    activeDeadlineSeconds: 86400\n    backoffLimit: 3",
        )
    if unbounded_retries:
        yield (
            Severity.MEDIUM if churn else Severity.LOW,
            f"replicas {', '.join(sorted(restarting))} restart without runPolicy.backoffLimit",
            "spec.runPolicy.backoffLimit",
            "spec:\n  runPolicy:\n    backoffLimit: 3",
        )


def _every_pod_has_deadline(job: TrainingJob) -> bool:
    return all(t.spec.get("activeDeadlineSeconds") is not None for t in job.templates)


def _ignores_disruptions(job_spec: dict[str, object]) -> bool:
    rules = as_list(as_mapping(job_spec.get("podFailurePolicy")).get("rules"))
    return any(
        as_mapping(rule).get("action") == "Ignore"
        and any(
            as_mapping(c).get("type") == "DisruptionTarget"
            for c in as_list(as_mapping(rule).get("onPodConditions"))
        )
        for rule in rules
    )


def _job_snippet(job: TrainingJob, body: str) -> str:
    """`body` (YAML under the JobSpec) nested at the right place for a Job or a CronJob."""
    if job.kind == "CronJob":
        indented = "\n".join("      " + line for line in body.splitlines())
        return f"spec:\n  jobTemplate:\n    spec:\n{indented}"
    indented = "\n".join("  " + line for line in body.splitlines())
    return f"spec:\n{indented}"
