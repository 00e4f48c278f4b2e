from collections.abc import Iterator

from gpu_audit.api import (
    Category,
    FixKind,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    passed,
    runs_on_spot,
)
from gpu_audit.checks.distributed._common import (
    KUBEFLOW_TYPES,
    TRAINING_TYPES,
    TrainingJob,
    gpu_training_jobs,
)

_RESTARTING = frozenset({"OnFailure", "Always", "ExitCode"})
# A podFailurePolicy needs pods that fail rather than restart in place.
_NEVER_RESTART = (
    "\ntemplate:\n  spec:\n    restartPolicy: Never   # podFailurePolicy rejects OnFailure"
)


@check(
    id="GPU-DIST-004",
    title="GPU training jobs bound their runtime and retries, and disruptions do not burn retries",
    category=Category.DISTRIBUTED,
    severity=Severity.MEDIUM,
    requires=(TRAINING_TYPES,),
    rationale="""
        A hung NCCL collective or a crash loop keeps every GPU of a job busy until someone
        notices: batch/v1 Jobs retry 6 times by default but have no deadline, and Kubeflow
        jobs have none unless runPolicy.activeDeadlineSeconds is set. On spot capacity,
        each interruption also consumes one retry unless a pod failure policy ignores
        disruptions.
    """,
    detection="""
        Jobs, CronJobs, PyTorchJobs, MPIJobs and Volcano Jobs with GPU pod templates: no
        activeDeadlineSeconds on the Job (runPolicy for Kubeflow, or on every GPU pod template,
        the only bound Volcano offers) fails medium. Kubeflow jobs whose replicas restart
        (OnFailure, Always, ExitCode) without runPolicy.backoffLimit fail low. batch/v1 Jobs
        that can run on spot nodes without a podFailurePolicy rule ignoring DisruptionTarget
        fail low. Serving Deployments are out of scope; suspended (Kueue) jobs are still judged.
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
    """,
    references=(
        "https://kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup",
        "https://kubernetes.io/docs/tasks/job/pod-failure-policy/",
        "https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-replacement-policy",
        "https://github.com/kubeflow/training-operator/blob/6523d8d2b7a27f1140a05971843cc4da7523694f/sdk/python/docs/V1RunPolicy.md",
    ),
)
def gpu_jobs_bound_retries_and_runtime(snapshot: Snapshot) -> Iterator[Result]:
    for job in gpu_training_jobs(snapshot):
        problems = list(_problems(job))
        if not problems:
            yield passed(job.resource, "has a runtime bound and bounded retries")
            continue
        worst = max(problems, key=lambda p: p[0].rank)
        yield failed(
            job.resource,
            "; ".join(p[1] for p in problems),
            path=worst[2],
            severity=None if worst[0] is Severity.MEDIUM else worst[0],
            fix={"problem": worst[1], "snippet": worst[3]},
        )


Problem = tuple[Severity, str, str, str]


def _problems(job: TrainingJob) -> Iterator[Problem]:
    if job.kind in KUBEFLOW_TYPES:
        yield from _kubeflow_problems(job)
        return
    if job.kind == "Job.batch.volcano.sh":
        if not _every_pod_has_deadline(job):
            yield (
                Severity.MEDIUM,
                "no activeDeadlineSeconds on its GPU task templates: a hung job holds its GPUs",
                "spec.tasks",
                "spec:\n  tasks:\n    - template:\n        spec:\n"
                "          activeDeadlineSeconds: 86400",
            )
        return
    spec = job.job_spec
    base = job.job_spec_path
    if spec.get("activeDeadlineSeconds") is None and not _every_pod_has_deadline(job):
        yield (
            Severity.MEDIUM,
            "no activeDeadlineSeconds: a hung job holds its GPUs until someone notices",
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
        yield (
            Severity.LOW,
            "runs on spot nodes but each interruption counts against backoffLimit",
            f"{base}.podFailurePolicy",
            _job_snippet(job, policy),
        )


def _kubeflow_problems(job: TrainingJob) -> Iterator[Problem]:
    run_policy = as_mapping(job.resource.spec.get("runPolicy"))
    if run_policy.get("activeDeadlineSeconds") is None and not _every_pod_has_deadline(job):
        yield (
            Severity.MEDIUM,
            "no runPolicy.activeDeadlineSeconds: a hung job holds its GPUs until someone notices",
            "spec.runPolicy.activeDeadlineSeconds",
            "spec:\n  runPolicy:\n    activeDeadlineSeconds: 86400\n    backoffLimit: 3",
        )
    key = "pytorchReplicaSpecs" if job.kind.startswith("PyTorchJob") else "mpiReplicaSpecs"
    restarting = [
        str(name)
        for name, replica in as_mapping(job.resource.spec.get(key)).items()
        if str(as_mapping(replica).get("restartPolicy", "")) in _RESTARTING
    ]
    if restarting and run_policy.get("backoffLimit") is None:
        yield (
            Severity.LOW,
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
