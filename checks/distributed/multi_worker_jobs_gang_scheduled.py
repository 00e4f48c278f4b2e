import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    KUBEFLOW_REPLICA_KEYS,
    VOLCANO_JOB,
    Category,
    FixKind,
    PodTemplate,
    ReplicaGroup,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    containers,
    controller_owner,
    count_field,
    failed,
    passed,
    replica_groups,
    template_spec,
)
from gpu_audit.checks.distributed._common import (
    gpu_pods,
    total_pods,
)

TRAINJOB = "TrainJob.trainer.kubeflow.org"
GANG_TYPES = (*KUBEFLOW_REPLICA_KEYS, VOLCANO_JOB, "Job", TRAINJOB)

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
LOCAL_QUEUE = "LocalQueue.kueue.x-k8s.io"
# The LocalQueue name of Kueue's own examples, offered when the namespace has none.
DEFAULT_QUEUE = "user-queue"
COSCHEDULING_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
COSCHEDULING_PODGROUP = "PodGroup.scheduling.x-k8s.io"
VOLCANO_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
VOLCANO_PODGROUP = "PodGroup.scheduling.volcano.sh"
# Kubernetes >= 1.35 alpha gang scheduling: spec.workloadRef -> Workload (v1alpha1), later
# spec.schedulingGroup -> PodGroup (v1alpha2), both in scheduling.k8s.io.
NATIVE_WORKLOAD = "Workload"
NATIVE_PODGROUP = "PodGroup"

_GANG_FLAG = re.compile(r"^--gang-scheduler-name(?:=(.*))?$")
_MPI_GANG_FLAG = re.compile(r"^--gang-scheduling(?:=(.*))?$")
# Indexed Jobs are gang-relevant only when their pods talk to each other.
_PEER_HINTS = ("MASTER_ADDR", "rdzv", "--master_addr", "--master-addr", "--nnodes")


@dataclass(frozen=True, slots=True)
class Gang:
    """How a job is gang-scheduled: the mechanism, and the minimum group size (None when the
    mechanism always takes the whole job). `missing` is set when the declared group object
    does not exist."""

    how: str
    minimum: int | None = None
    missing: str = ""


@check(
    id="GPU-DIST-001",
    title="Multi-worker GPU training jobs are gang-scheduled",
    category=Category.DISTRIBUTED,
    severity=Severity.HIGH,
    requires=(GANG_TYPES,),
    rationale="""
        The default scheduler places the pods of a multi-node job one by one. When GPUs run
        short, several jobs each get some workers Running, holding their GPUs while they wait
        in NCCL or rendezvous init for peers that stay Pending: a deadlock that burns GPU-hours
        and never progresses. Gang scheduling (Kueue, Volcano, scheduler-plugins Coscheduling,
        or the native PodGroup) starts all workers of a job or none.
    """,
    detection="""
        PyTorchJobs, TFJobs, MPIJobs, Volcano Jobs, TrainJobs and Indexed batch Jobs whose pods
        talk to each other (MASTER_ADDR, rdzv, --nnodes or a subdomain), with two or more pods
        and at least one GPU pod. A job is gang-scheduled when it carries a Kueue queue-name
        label (its LocalQueue must exist when LocalQueues are in the input); when it is a
        Volcano Job (minAvailable defaults to every pod); when the training-operator (or, for
        MPIJob v2beta1, the mpi-operator) runs with --gang-scheduler-name (--gang-scheduling),
        or, if the operator Deployment is not in the input, when runPolicy.schedulingPolicy is
        set; when its pod templates name a Coscheduling or Volcano PodGroup, or a native
        Workload (spec.workloadRef) or PodGroup (spec.schedulingGroup); or, for a TrainJob,
        when its runtime sets podGroupPolicy. A named group object that is missing fails high;
        a minimum below the number of GPU pods fails medium (partial gang), one above the
        number of pods fails high (the group never completes). Single-pod jobs pass over.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # PyTorchJob / TFJob / MPIJob: start the training-operator with --gang-scheduler-name=volcano
        # (or scheduler-plugins) and set the group size:
        spec:
          runPolicy:
            schedulingPolicy:
              minAvailable: <pods-in-the-job>
        ---
        # or let Kueue admit the whole job at once through a LocalQueue of <namespace>
        # (Kueue suspends a job when it is created: set the label in the manifest):
        metadata:
          labels:
            kueue.x-k8s.io/queue-name: <local-queue>
        ---
        # Volcano Job:
        spec:
          minAvailable: <pods-in-the-job>
        ---
        # TrainJob, in the referenced (Cluster)TrainingRuntime:
        spec:
          podGroupPolicy:
            coscheduling:
              scheduleTimeoutSeconds: 600
        ---
        # indexed batch Job whose pods talk to each other: a Coscheduling PodGroup, and the pod
        # template labelled scheduling.x-k8s.io/pod-group: <name>
        apiVersion: scheduling.x-k8s.io/v1alpha1
        kind: PodGroup
        metadata:
          name: <name>
          namespace: <namespace>
        spec:
          minMember: <pods-in-the-job>
          scheduleTimeoutSeconds: 600
        # a group minimum above the pod count, or below the GPU pod count: set it to the pod count
        # (minAvailable of the Volcano Job or runPolicy.schedulingPolicy, minMember of the PodGroup)
    """,
    references=(
        "https://github.com/kubeflow/trainer/issues/165",
        "https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/job-scheduling/",
        "https://github.com/kubeflow/training-operator/blob/d734904de4cb6cb215dc24bfe820dde2e872fd72/pkg/controller.v1/common/job.go",
        "https://www.kubeflow.org/docs/components/trainer/operator-guides/job-scheduling/overview/",
        "https://github.com/kubernetes-sigs/scheduler-plugins/blob/master/pkg/coscheduling/README.md",
        "https://github.com/volcano-sh/volcano/blob/master/pkg/webhooks/admission/jobs/mutate/mutate_job.go",
        "https://kubernetes.io/docs/concepts/workloads/pods/scheduling-group/",
    ),
)
def multi_worker_jobs_gang_scheduled(snapshot: Snapshot) -> Iterator[Result]:
    for job in snapshot.of(*GANG_TYPES):
        if controller_owner(snapshot, job) is not None:
            continue  # a launcher Job of an MPIJob, a Job of a CronJob: judged with its owner
        if job.ref.kind == TRAINJOB:
            result = _judge_trainjob(snapshot, job)
            if result is not None:
                yield result
            continue
        groups = replica_groups(job)
        if job.ref.kind == "Job" and not _talks_to_peers(job, groups):
            continue
        total, gpus = total_pods(groups), gpu_pods(groups)
        if total < 2 or gpus == 0:
            continue
        gang = _gang(snapshot, job, groups, total)
        yield _verdict(job, gang, total, gpus, _queue_for(snapshot, job))


def _talks_to_peers(job: Resource, groups: tuple[ReplicaGroup, ...]) -> bool:
    if job.spec.get("completionMode") != "Indexed":
        return False
    for group in groups:
        if group.template.spec.get("subdomain"):
            return True
        for container in group.template.containers():
            text = " ".join(
                [str(p) for p in as_list(container.raw.get("command"))]
                + [str(p) for p in as_list(container.raw.get("args"))]
                + list(container.env())
            )
            if any(hint in text for hint in _PEER_HINTS):
                return True
    return False


def _queue_for(snapshot: Snapshot, job: Resource) -> str:
    """A LocalQueue of the job's namespace for the Kueue alternative, "" when none is known."""
    names = sorted(
        q.ref.name for q in snapshot.of(LOCAL_QUEUE) if q.ref.namespace == job.ref.namespace
    )
    return names[0] if names else ""


def _verdict(job: Resource, gang: Gang | None, total: int, gpus: int, queue: str) -> Result:
    if gang is None:
        return failed(
            job,
            f"runs {total} pods ({gpus} with GPUs) without gang scheduling: under GPU "
            "pressure jobs get partly placed and deadlock holding GPUs",
            fix={"problem": "not gang-scheduled", "snippet": _gang_snippet(job, total, queue)},
        )
    if gang.missing:
        return failed(
            job,
            f"is meant to be gang-scheduled by {gang.how}, but {gang.missing}",
            fix={"problem": gang.missing, "snippet": _gang_snippet(job, total, queue)},
        )
    if gang.minimum is not None and gang.minimum > total:
        return failed(
            job,
            f"is gang-scheduled by {gang.how} with a minimum of {gang.minimum}, more than its "
            f"{total} pods: the group is never complete and no pod starts",
            fix={
                "problem": "group minimum above the pod count",
                "snippet": _min_snippet(job, total),
            },
        )
    if gang.minimum is not None and gang.minimum < gpus:
        return failed(
            job,
            f"is gang-scheduled by {gang.how} with a minimum of {gang.minimum}, below its "
            f"{gpus} GPU pods: a partial gang still starts and waits for the rest",
            severity=Severity.MEDIUM,
            fix={"problem": "partial gang", "snippet": _min_snippet(job, total)},
        )
    return passed(job, f"is gang-scheduled by {gang.how}")


def _gang(
    snapshot: Snapshot, job: Resource, groups: tuple[ReplicaGroup, ...], total: int
) -> Gang | None:
    namespace = job.ref.namespace
    queue = job.labels.get(KUEUE_QUEUE) or _template_label(groups, KUEUE_QUEUE)
    if queue:
        if snapshot.has(LOCAL_QUEUE) and snapshot.get(LOCAL_QUEUE, namespace, queue) is None:
            return Gang(
                f"Kueue queue {queue}",
                missing=f"LocalQueue {queue} does not exist in {namespace}: the job stays suspended",
            )
        return Gang(f"Kueue queue {queue} (whole-job admission)")
    if job.ref.kind == VOLCANO_JOB:
        minimum = count_field(job.spec.get("minAvailable"), 0) or None
        return Gang("its Volcano PodGroup", minimum)
    run_policy = as_mapping(job.spec.get("runPolicy"))
    policy = as_mapping(run_policy.get("schedulingPolicy"))
    policy_min = policy.get("minAvailable")
    minimum = count_field(policy_min, 0) if policy_min is not None else None
    if job.ref.kind in KUBEFLOW_REPLICA_KEYS:
        operator = _operator_gang_flag(snapshot, job)
        if operator is not None:
            name, flag = operator
            if flag:
                return Gang(f"{name} --gang-scheduler={flag}", minimum)
            if policy:
                return Gang(
                    "runPolicy.schedulingPolicy",
                    missing=f"{name} runs without a gang-scheduler flag, so the policy is ignored",
                )
        elif policy:
            return Gang("runPolicy.schedulingPolicy (operator flags not in the input)", minimum)
    return _pod_group(snapshot, namespace, groups)


def _template_label(groups: tuple[ReplicaGroup, ...], key: str) -> str:
    values = {g.template.labels.get(key, "") for g in groups}
    return values.pop() if len(values) == 1 else ""


def _template_annotation(groups: tuple[ReplicaGroup, ...], keys: tuple[str, ...]) -> str:
    values = {
        next((g.template.annotations[k] for k in keys if k in g.template.annotations), "")
        for g in groups
    }
    return values.pop() if len(values) == 1 else ""


def _pod_group(snapshot: Snapshot, namespace: str, groups: tuple[ReplicaGroup, ...]) -> Gang | None:
    """A PodGroup named on every pod template: Coscheduling, Volcano or native."""
    name = _template_label(groups, COSCHEDULING_LABELS[0]) or _template_label(
        groups, COSCHEDULING_LABELS[1]
    )
    if name:
        return _group_object(
            snapshot,
            COSCHEDULING_PODGROUP,
            namespace,
            name,
            "Coscheduling PodGroup",
            lambda g: g.spec.get("minMember"),
        )
    name = _template_annotation(groups, VOLCANO_GROUP_ANNOTATIONS)
    if name:
        return _group_object(
            snapshot,
            VOLCANO_PODGROUP,
            namespace,
            name,
            "Volcano PodGroup",
            lambda g: g.spec.get("minMember"),
        )
    ref = _native_ref(groups[0].template) if groups else None
    if ref is not None and all(_native_ref(g.template) == ref for g in groups):
        type_, name, pod_group = ref
        if type_ == NATIVE_WORKLOAD:
            return _group_object(
                snapshot,
                NATIVE_WORKLOAD,
                namespace,
                name,
                "Workload",
                lambda w: _workload_min(w, pod_group),
            )
        return _group_object(
            snapshot,
            NATIVE_PODGROUP,
            namespace,
            name,
            "PodGroup",
            lambda g: as_mapping(as_mapping(g.spec.get("schedulingPolicy")).get("gang")).get(
                "minCount"
            ),
        )
    return None


def _native_ref(template: PodTemplate) -> tuple[str, str, str] | None:
    workload = as_mapping(template.spec.get("workloadRef"))
    if workload.get("name"):
        return NATIVE_WORKLOAD, str(workload["name"]), str(workload.get("podGroup", ""))
    group = as_mapping(template.spec.get("schedulingGroup"))
    if group.get("podGroupName"):
        return NATIVE_PODGROUP, str(group["podGroupName"]), ""
    return None


def _workload_min(workload: Resource, pod_group: str) -> object:
    for group in map(as_mapping, as_list(workload.spec.get("podGroups"))):
        if not pod_group or group.get("name") == pod_group:
            gang = as_mapping(as_mapping(group.get("policy")).get("gang"))
            return gang.get("minCount") if gang else None
    return None


def _group_object(
    snapshot: Snapshot,
    type_: str,
    namespace: str,
    name: str,
    label: str,
    minimum_of: Callable[[Resource], object],
) -> Gang:
    found = snapshot.get(type_, namespace, name)
    how = f"{label} {name}"
    if found is None:
        if snapshot.has(type_):
            return Gang(how, missing=f"{label} {name} does not exist in {namespace}")
        return Gang(f"{how} (not in the input)")
    raw = minimum_of(found)
    if raw is None and type_ in (NATIVE_WORKLOAD, NATIVE_PODGROUP):
        return Gang(how, missing=f"{label} {name} has no gang policy")
    return Gang(how, count_field(raw, 0) if raw is not None else None)


def _operator_gang_flag(snapshot: Snapshot, job: Resource) -> tuple[str, str] | None:
    """(operator Deployment, gang scheduler name or "") for the operator that runs the job,
    None when that operator is not in the input."""
    mpi_v2 = job.ref.kind.startswith("MPIJob") and job.api_version.endswith("v2beta1")
    # The same operator runs every job of its kind: look it up once per snapshot.
    return snapshot.derived(
        ("distributed.operator_gang_flag", mpi_v2), lambda s: _find_operator(s, mpi_v2)
    )


def _find_operator(snapshot: Snapshot, mpi_v2: bool) -> tuple[str, str] | None:
    image_part = "mpi-operator" if mpi_v2 else "training-operator"
    pattern = _MPI_GANG_FLAG if mpi_v2 else _GANG_FLAG
    for deployment in snapshot.of("Deployment"):
        for container in containers(deployment):
            if image_part not in str(container.get("image", "")):
                continue
            tokens = [
                str(t) for t in as_list(container.get("command")) + as_list(container.get("args"))
            ]
            flag = ""
            for index, token in enumerate(tokens):
                match = pattern.match(token)
                if match:
                    flag = match.group(1) or (tokens[index + 1] if index + 1 < len(tokens) else "")
            return f"Deployment {deployment.ref.namespace}/{deployment.ref.name}", flag
    return None


def _judge_trainjob(snapshot: Snapshot, job: Resource) -> Result | None:
    ref = as_mapping(job.spec.get("runtimeRef"))
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    type_ = f"{kind}.trainer.kubeflow.org"
    namespace = "" if kind == "ClusterTrainingRuntime" else job.ref.namespace
    runtime = snapshot.get(type_, namespace, str(ref.get("name", "")))
    if runtime is None:
        return None  # the runtime decides nodes, GPUs and gang policy: nothing to judge
    trainer = as_mapping(job.spec.get("trainer"))
    ml_policy = as_mapping(runtime.spec.get("mlPolicy"))
    nodes = count_field(trainer.get("numNodes"), count_field(ml_policy.get("numNodes"), 1))
    if nodes < 2 or not (_trainjob_gpus(trainer) or _runtime_gpus(runtime)):
        return None
    if job.labels.get(KUEUE_QUEUE):
        gang: Gang | None = Gang(f"Kueue queue {job.labels[KUEUE_QUEUE]} (whole-job admission)")
    elif as_mapping(runtime.spec.get("podGroupPolicy")):
        gang = Gang(f"the podGroupPolicy of {kind} {runtime.ref.name}")
    else:
        gang = None
    return _verdict(job, gang, nodes, nodes, _queue_for(snapshot, job))


def _trainjob_gpus(trainer: object) -> bool:
    resources = as_mapping(as_mapping(trainer).get("resourcesPerNode"))
    names = set(as_mapping(resources.get("limits"))) | set(as_mapping(resources.get("requests")))
    return any(str(n).startswith(("nvidia.com/", "amd.com/gpu")) for n in names)


def _runtime_gpus(runtime: Resource) -> bool:
    jobset = template_spec(runtime.spec)
    for replicated in map(as_mapping, as_list(jobset.get("replicatedJobs"))):
        pod = template_spec(template_spec(replicated))
        template = PodTemplate(runtime, pod, {}, "spec")
        if template.requests_gpu:
            return True
    return False


def _gang_snippet(job: Resource, total: int, queue: str) -> str:
    where = (
        f"LocalQueue {queue} of {job.ref.namespace}"
        if queue
        else f"a LocalQueue to create in {job.ref.namespace} (none is in the input)"
    )
    kueue = (
        f"# or let Kueue admit the whole job at once, through {where}\n"
        "# (Kueue suspends a job when it is created: set the label in the manifest):\n"
        f"metadata:\n  labels:\n    {KUEUE_QUEUE}: {queue or DEFAULT_QUEUE}"
    )
    kind = job.ref.kind
    if kind in KUBEFLOW_REPLICA_KEYS:
        return (
            "# start the training-operator with --gang-scheduler-name=volcano (or\n"
            "# scheduler-plugins) and set the group size:\n"
            f"spec:\n  runPolicy:\n    schedulingPolicy:\n      minAvailable: {total}\n---\n{kueue}"
        )
    if kind == VOLCANO_JOB:
        return f"spec:\n  minAvailable: {total}"
    if kind == TRAINJOB:
        return (
            "# in the referenced (Cluster)TrainingRuntime:\n"
            "spec:\n  podGroupPolicy:\n    coscheduling:\n      scheduleTimeoutSeconds: 600"
        )
    return (
        "# a Coscheduling PodGroup, and label the pod template with\n"
        f"# scheduling.x-k8s.io/pod-group: {job.ref.name}\n"
        "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n"
        f"metadata:\n  name: {job.ref.name}\n  namespace: {job.ref.namespace}\n"
        f"spec:\n  minMember: {total}\n  scheduleTimeoutSeconds: 600\n---\n{kueue}"
    )


def _min_snippet(job: Resource, total: int) -> str:
    if job.ref.kind == VOLCANO_JOB:
        return f"spec:\n  minAvailable: {total}"
    if job.ref.kind in KUBEFLOW_REPLICA_KEYS:
        return f"spec:\n  runPolicy:\n    schedulingPolicy:\n      minAvailable: {total}"
    return f"# in the PodGroup the job's pods name:\nspec:\n  minMember: {total}"
