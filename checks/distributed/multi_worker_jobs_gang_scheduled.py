import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import yaml

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
    count_field,
    failed,
    is_gpu_resource,
    passed,
    pod_requests_gpu,
    relate,
    replica_groups,
    template_spec,
    templates_of,
)
from gpu_audit.checks.distributed._common import (
    cluster_gpus,
    gpu_pods,
    is_scheduled,
    is_unschedulable,
    job_gpus,
    launch_tokens,
    managing_owner,
    pod_gpus,
    pods_of,
    total_pods,
)

TRAINJOB = "TrainJob.trainer.kubeflow.org"
JOBSET = "JobSet.jobset.x-k8s.io"
LEADER_WORKER_SET = "LeaderWorkerSet.leaderworkerset.x-k8s.io"
GANG_TYPES = (*KUBEFLOW_REPLICA_KEYS, VOLCANO_JOB, "Job", JOBSET, TRAINJOB, LEADER_WORKER_SET)
# The LWS controller's configuration (lws-manager-config, key controller_manager_config.yaml):
# gangSchedulingManagement.schedulerProvider makes it create one PodGroup per group
# (kubernetes-sigs/lws docs/examples/sample/gang-scheduling/README.md, KEP-407).
LWS_CONFIG_KEY = "controller_manager_config.yaml"
LWS_CONFIG_API = "config.lws.x-k8s.io/"

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


_NNODES_RANGE = re.compile(r"^(\d+):(\d+)$")
_WAIT_FOR_WORKERS = "WaitForWorkersReady"


@dataclass(frozen=True, slots=True)
class Gang:
    """How a job is gang-scheduled: the mechanism, and the minimum group size (None when the
    mechanism always takes the whole job). `missing` is set when the declared group object
    does not exist. `operator_group` is set when the operator creates the group (its flag),
    `ignored` when the job asks for a group its operator will not create."""

    how: str
    minimum: int | None = None
    missing: str = ""
    operator_group: bool = False
    ignored: str = ""


@dataclass(frozen=True, slots=True)
class Placement:
    """What the job's GPU pods in the input show: scheduled, and Pending as unschedulable."""

    scheduled: int = 0
    unschedulable: int = 0

    @property
    def partial(self) -> bool:
        return self.scheduled > 0 and self.unschedulable > 0

    def describe(self) -> str:
        if self.partial:
            return (
                f"{self.scheduled} GPU pod{'s' if self.scheduled > 1 else ''} placed and "
                f"holding GPUs while {self.unschedulable} stay{'s' if self.unschedulable == 1 else ''}"
                " unschedulable"
            )
        if self.unschedulable:
            return (
                f"{self.unschedulable} GPU pod{'s' if self.unschedulable > 1 else ''} unschedulable"
            )
        return ""


@dataclass(slots=True)
class Judged:
    """One multi-pod GPU job and what the input says about it."""

    job: Resource
    gang: Gang | None
    total: int
    gpu_pods: int
    gpus: int  # GPUs the whole job requests
    elastic_min: int | None
    placement: Placement
    queue: str
    operator: tuple[str, str] | None = None  # (operator Deployment, gang flag) for Kubeflow
    evidence: list[str] = field(default_factory=list)

    @property
    def ungated(self) -> bool:
        """Placed pod by pod: no gang mechanism, or one its operator ignores."""
        return self.gang is None or bool(self.gang.ignored)


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
        PyTorchJobs, TFJobs, MPIJobs, Volcano Jobs, TrainJobs, JobSets and Indexed batch Jobs
        whose pods talk to each other (MASTER_ADDR, rdzv, --nnodes or a subdomain), with two or
        more pods and at least one GPU pod; LeaderWorkerSets whose groups (a leader and size-1
        workers serving one model) hold GPUs, each group judged as one gang. A job is gang-scheduled when it carries a Kueue
        queue-name label (its LocalQueue must exist when LocalQueues are in the input); when it
        is a Volcano Job (minAvailable defaults to every pod); when the training-operator (or,
        for MPIJob v2beta1, the mpi-operator) runs with --gang-scheduler-name
        (--gang-scheduling), or, if the operator Deployment is not in the input, when
        runPolicy.schedulingPolicy is set; when its pod templates name a Coscheduling or
        Volcano PodGroup, or a native Workload (spec.workloadRef) or PodGroup
        (spec.schedulingGroup); for a TrainJob, when its runtime sets podGroupPolicy; for a
        LeaderWorkerSet, when its pods use schedulerName volcano and the LWS controller
        creates a PodGroup per group (its configuration, when in the input, sets
        gangSchedulingManagement.schedulerProvider: volcano). Fails
        when it is not (a schedulingPolicy the operator ignores counts as none); when a named
        group object is missing; when the group minimum is above the pod count (never
        complete), below the GPU pods of a fixed-size job or below the elastic minimum of an
        elastic one (a partial gang); and when an MPIJob with launcherCreationPolicy
        WaitForWorkersReady has the operator size its group workers + 1 (the launcher is never
        created, kubeflow/mpi-operator#608). A job is elastic with a PyTorchJob elasticPolicy
        minReplicas < maxReplicas or a torchrun --nnodes=MIN:MAX range: it trains with MIN
        pods, so a group of its elastic minimum passes. When the operator is in the input
        without a gang-scheduler flag, Kueue is not in use and none of its jobs is
        gang-scheduled otherwise, its fixed-size jobs placed pod by pod are one finding on the
        operator Deployment (the cause), with the jobs as symptoms. Single-pod jobs pass over;
        a JobSet's or CronJob's Jobs are judged as their owner.
    """,
    severity_evidence="""
        Not gang-scheduled: low without evidence (elastic jobs always low); medium when the
        input shows GPUs short for it (one of its GPU pods unschedulable, or the jobs placed
        pod by pod need more GPUs, with what other pods hold, than the nodes can allocate);
        high when it is already half placed (GPU pods scheduled while others are
        unschedulable). A partial gang is medium, high when half placed. A missing group
        object, a minimum above the pod count and the WaitForWorkersReady launcher deadlock
        are high: the job never starts.
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
        # LeaderWorkerSet: the LWS controller's configuration (lws-manager-config), with Volcano,
        # and the group's pods with schedulerName: volcano:
        gangSchedulingManagement:
          schedulerProvider: volcano
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
        # (minAvailable of the Volcano Job or runPolicy.schedulingPolicy, minMember of the PodGroup);
        # an elastic job: to its elastic minimum (elasticPolicy.minReplicas)
        ---
        # MPIJob with launcherCreationPolicy WaitForWorkersReady: count only the workers
        spec:
          runPolicy:
            schedulingPolicy:
              minAvailable: <workers>
        ---
        # the operator without a gang scheduler (one finding for all its jobs), with Volcano or
        # scheduler-plugins installed (the args list is replaced whole):
        spec:
          template:
            spec:
              containers:
                - name: <container>
                  args: [<existing-args>, --gang-scheduler-name=volcano]   # mpi-operator: --gang-scheduling=volcano
    """,
    references=(
        "https://github.com/kubeflow/trainer/issues/165",
        "https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/job-scheduling/",
        "https://github.com/kubeflow/training-operator/blob/d734904de4cb6cb215dc24bfe820dde2e872fd72/pkg/controller.v1/common/job.go",
        "https://www.kubeflow.org/docs/components/trainer/operator-guides/job-scheduling/overview/",
        "https://github.com/kubernetes-sigs/scheduler-plugins/blob/master/pkg/coscheduling/README.md",
        "https://github.com/volcano-sh/volcano/blob/master/pkg/webhooks/admission/jobs/mutate/mutate_job.go",
        "https://kubernetes.io/docs/concepts/workloads/pods/scheduling-group/",
        "https://github.com/kubeflow/mpi-operator/issues/608",
        "https://github.com/kubeflow/mpi-operator/blob/master/pkg/controller/podgroup.go",
        "https://github.com/kubeflow/training-operator/blob/1417bbc35b6e7840b3ecab1cec17dbf553ad9e85/pkg/controller.v1/pytorch/elastic.go",
        "https://github.com/kubeflow/trainer/issues/1571",
        "https://github.com/kubernetes-sigs/jobset/blob/main/pkg/webhooks/jobset_webhook.go",
        "https://github.com/kubernetes-sigs/lws/blob/main/keps/407-gang-scheduling/README.md",
        "https://github.com/kubernetes-sigs/lws/blob/main/docs/examples/sample/gang-scheduling/README.md",
    ),
)
def multi_worker_jobs_gang_scheduled(snapshot: Snapshot) -> Iterator[Result]:
    judged = list(_judge_all(snapshot))
    contended = _contention(snapshot, judged)
    by_operator = _operator_victims(snapshot, judged)
    grouped = {j.job.ref for victims in by_operator.values() for j in victims}
    for item in judged:
        if item.job.ref not in grouped:
            yield _verdict(item, contended)
    for (operator, flag_name), victims in sorted(by_operator.items()):
        yield _operator_verdict(snapshot, operator, flag_name, victims, contended)


def _judge_all(snapshot: Snapshot) -> Iterator[Judged]:
    for job in snapshot.of(*GANG_TYPES):
        if managing_owner(snapshot, job) is not None:
            continue  # a launcher Job of an MPIJob, a Job of a CronJob or JobSet: not judged alone
        if job.ref.kind == TRAINJOB:
            found = _judge_trainjob(snapshot, job)
            if found is not None:
                yield found
            continue
        if job.ref.kind == LEADER_WORKER_SET:
            found = _judge_leader_worker_set(snapshot, job)
            if found is not None:
                yield found
            continue
        groups = _jobset_groups(job) if job.ref.kind == JOBSET else replica_groups(job)
        if job.ref.kind in ("Job", JOBSET) and not _talks_to_peers(job, groups):
            continue
        total, gpus = total_pods(groups), gpu_pods(groups)
        if total < 2 or gpus == 0:
            continue
        operator = (
            _operator_gang_flag(snapshot, job) if job.ref.kind in KUBEFLOW_REPLICA_KEYS else None
        )
        yield Judged(
            job,
            _gang(snapshot, job, groups, total),
            total,
            gpus,
            job_gpus(groups),
            _elastic_minimum(job, groups),
            _placement(snapshot, job),
            _queue_for(snapshot, job),
            operator,
        )


def _placement(snapshot: Snapshot, job: Resource) -> Placement:
    pods = [p for p in pods_of(snapshot, job) if pod_requests_gpu(p)]
    return Placement(
        sum(1 for p in pods if is_scheduled(p)), sum(1 for p in pods if is_unschedulable(p))
    )


def _elastic_minimum(job: Resource, groups: tuple[ReplicaGroup, ...]) -> int | None:
    """The fewest pods an elastic job trains with, None for a fixed-size job. A PyTorchJob's
    elasticPolicy minReplicas < maxReplicas becomes torchrun --nnodes=min:max (PET_NNODES) for
    its Workers; elsewhere a torchrun --nnodes=MIN:MAX range with MIN < MAX."""
    policy = as_mapping(job.spec.get("elasticPolicy"))
    if job.ref.kind == "PyTorchJob.kubeflow.org" and policy:
        low = count_field(policy.get("minReplicas"), 0)
        high = count_field(policy.get("maxReplicas"), 0)
        if 0 < low < high:
            others = sum(g.replicas for g in groups if g.name != "Worker")
            return low + others
        return None
    for group in groups:
        tokens = launch_tokens(group.template)
        values = [t.split("=", 1)[1] for t in tokens if t.startswith("--nnodes=")]
        values += [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "--nnodes"]
        for container in group.template.containers():
            entry = as_mapping(container.env().get("PET_NNODES"))
            if isinstance(entry.get("value"), str):
                values.append(entry["value"])
        for value in values:
            match = _NNODES_RANGE.match(value.strip())
            if match and 0 < int(match.group(1)) < int(match.group(2)):
                return int(match.group(1))
    return None


def _contention(snapshot: Snapshot, judged: list[Judged]) -> str:
    """Evidence that GPUs are short for the jobs placed pod by pod: what they need whole plus
    what other pods hold exceeds what the nodes can allocate. "" without that evidence."""
    capacity = cluster_gpus(snapshot)
    ungated = [j for j in judged if j.ungated and j.elastic_min is None]
    if capacity is None or not ungated:
        return ""
    mine = {pod.ref for j in ungated for pod in pods_of(snapshot, j.job)}
    held = 0
    for pod in snapshot.of("Pod"):
        if is_scheduled(pod) and pod.ref not in mine:
            templates = templates_of(pod)
            held += pod_gpus(templates[0]) if templates else 0
    demand = sum(j.gpus for j in ungated)
    if demand + held <= capacity:
        return ""
    return (
        f"the {len(ungated)} job{'s' if len(ungated) > 1 else ''} placed pod by pod need "
        f"{demand} GPUs, other pods hold {held}, and the nodes have {capacity}"
    )


def _operator_victims(
    snapshot: Snapshot, judged: list[Judged]
) -> dict[tuple[str, str], list[Judged]]:
    """Fixed-size Kubeflow jobs placed pod by pod because their operator, in the input, runs
    without a gang scheduler, when no job of that operator is gang-scheduled otherwise and
    Kueue is not in use: one cause, reported once on the operator."""
    if snapshot.has(LOCAL_QUEUE):
        return {}
    out: dict[tuple[str, str], list[Judged]] = {}
    covered: set[str] = set()
    for item in judged:
        if item.operator is None or item.operator[1]:
            continue
        if not item.ungated:
            covered.add(item.operator[0])
        elif item.elastic_min is None:
            out.setdefault((item.operator[0], _flag_name(item.job)), []).append(item)
    return {key: victims for key, victims in out.items() if key[0] not in covered}


def _flag_name(job: Resource) -> str:
    mpi_v2 = job.ref.kind.startswith("MPIJob") and job.api_version.endswith("v2beta1")
    return "--gang-scheduling" if mpi_v2 else "--gang-scheduler-name"


def _ungated_severity(item: Judged, contended: str) -> tuple[Severity, str]:
    """Severity of a fixed-size job placed pod by pod, and the evidence that sets it."""
    if item.placement.partial:
        return Severity.HIGH, item.placement.describe()
    if item.placement.unschedulable:
        return Severity.MEDIUM, item.placement.describe()
    if contended:
        return Severity.MEDIUM, contended
    return Severity.LOW, "nothing in the input shows GPUs short for it yet"


def _verdict(item: Judged, contended: str) -> Result:
    job, gang, total, gpus = item.job, item.gang, item.total, item.gpu_pods
    if item.ungated:
        ignored = f" ({gang.ignored})" if gang is not None and gang.ignored else ""
        if item.elastic_min is not None:
            return failed(
                job,
                f"runs {total} pods without gang scheduling{ignored}, but it is elastic (trains "
                f"with {item.elastic_min} to {total} pods): a partial start only slows it",
                severity=Severity.LOW,
                fix={
                    "problem": "not gang-scheduled (elastic)",
                    "snippet": _gang_snippet(job, item.elastic_min, item.queue),
                },
            )
        severity, why = _ungated_severity(item, contended)
        return failed(
            job,
            f"runs {total} pods ({gpus} with GPUs) without gang scheduling{ignored}: under GPU "
            f"pressure jobs get partly placed and deadlock holding GPUs; {why}",
            severity=severity,
            fix={"problem": "not gang-scheduled", "snippet": _gang_snippet(job, total, item.queue)},
        )
    assert gang is not None
    if gang.missing:
        return failed(
            job,
            f"is meant to be gang-scheduled by {gang.how}, but {gang.missing}",
            fix={"problem": gang.missing, "snippet": _gang_snippet(job, total, item.queue)},
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
    waits = _waits_for_launcher(job, gang)
    if waits:
        return failed(
            job,
            waits,
            fix={"problem": "gang waits for the launcher", "snippet": _launcher_snippet(job)},
        )
    needed = item.elastic_min if item.elastic_min is not None else gpus
    if gang.minimum is not None and gang.minimum < needed:
        if item.elastic_min is not None:
            what = f"below the {item.elastic_min} pods its elastic policy needs to train"
        else:
            what = f"below its {gpus} GPU pods"
        placed = item.placement.describe() if item.placement.partial else ""
        return failed(
            job,
            f"is gang-scheduled by {gang.how} with a minimum of {gang.minimum}, {what}: a "
            "partial gang still starts and waits for the rest" + (f"; {placed}" if placed else ""),
            severity=Severity.HIGH if item.placement.partial else Severity.MEDIUM,
            fix={"problem": "partial gang", "snippet": _min_snippet(job, needed)},
        )
    if item.elastic_min is not None and gang.minimum is not None and gang.minimum < total:
        return passed(
            job,
            f"is gang-scheduled by {gang.how} with a minimum of {gang.minimum}, the elastic "
            f"minimum of its {total} pods",
        )
    return passed(job, f"is gang-scheduled by {gang.how}")


def _operator_verdict(
    snapshot: Snapshot, operator: str, flag: str, victims: list[Judged], contended: str
) -> Result:
    rated = [(item, *_ungated_severity(item, contended)) for item in victims]
    worst = max(rated, key=lambda r: r[1].rank)[1]
    shown = "; ".join(f"{item.job.ref} ({why})" for item, _, why in rated[:5])
    more = f"; and {len(rated) - 5} more" if len(rated) > 5 else ""
    deployment = _deployment(snapshot, operator)
    count = len(victims)
    return failed(
        deployment,
        f"runs without {flag}, so its {count} multi-pod GPU job{'s are' if count > 1 else ' is'} "
        f"placed pod by pod and can deadlock holding GPUs: {shown}{more}",
        severity=None if worst is Severity.HIGH else worst,
        fix={
            "problem": f"the operator runs without {flag}",
            "snippet": _operator_snippet(deployment, flag),
        },
        related=[relate(item.job, "symptom") for item in victims],
    )


def _deployment(snapshot: Snapshot, operator: str) -> Resource:
    namespace, name = operator.removeprefix("Deployment ").split("/", 1)
    found = snapshot.get("Deployment", namespace, name)
    assert found is not None  # named by _find_operator from the same snapshot
    return found


def _operator_snippet(deployment: Resource, flag: str) -> str:
    operator = next(
        (
            c
            for c in containers(deployment)
            if "operator" in str(c.get("image", "")) or "manager" in str(c.get("name", ""))
        ),
        {},
    )
    name = str(operator.get("name", "manager"))
    args = [str(a) for a in as_list(operator.get("args"))] + [f"{flag}=volcano"]
    return (
        "# with Volcano (or scheduler-plugins) installed, let the operator create a PodGroup\n"
        "# per job (the args list is replaced whole):\n"
        "spec:\n  template:\n    spec:\n      containers:\n"
        f"        - name: {name}\n          args: {json.dumps(args)}\n"
        "# or admit each job whole through Kueue: label it "
        f"{KUEUE_QUEUE}: <local-queue>"
    )


def _waits_for_launcher(job: Resource, gang: Gang) -> str:
    """An MPIJob (v2beta1) that creates its launcher only when the workers are Ready, in a
    PodGroup the operator sizes workers + 1 unless schedulingPolicy.minAvailable says less:
    the gang scheduler waits for a launcher that is never created (mpi-operator#608)."""
    if not job.ref.kind.startswith("MPIJob") or not gang.operator_group:
        return ""
    if job.spec.get("launcherCreationPolicy") != _WAIT_FOR_WORKERS:
        return ""
    workers = sum(
        count_field(as_mapping(r).get("replicas"), 0)
        for name, r in as_mapping(job.spec.get("mpiReplicaSpecs")).items()
        if name == "Worker"
    )
    minimum = gang.minimum if gang.minimum is not None else workers + 1
    if minimum <= workers:
        return ""
    return (
        f"is gang-scheduled by {gang.how} with a group of {minimum} pods, but its "
        f"launcherCreationPolicy {_WAIT_FOR_WORKERS} creates the launcher only once the "
        f"{workers} workers are Ready: the group never completes and no pod starts"
    )


def _launcher_snippet(job: Resource) -> str:
    workers = sum(
        count_field(as_mapping(r).get("replicas"), 0)
        for name, r in as_mapping(job.spec.get("mpiReplicaSpecs")).items()
        if name == "Worker"
    )
    return (
        "# count only the workers in the group (mpi-operator#608), or create the launcher at start:\n"
        f"spec:\n  runPolicy:\n    schedulingPolicy:\n      minAvailable: {workers}\n"
        "# or:\n# spec:\n#   launcherCreationPolicy: AtStartup"
    )


def _jobset_groups(jobset: Resource) -> tuple[ReplicaGroup, ...]:
    """One group per replicated job: replicas Jobs of `parallelism` pods each."""
    replicated = {
        str(as_mapping(r).get("name", "")): as_mapping(r)
        for r in as_list(jobset.spec.get("replicatedJobs"))
    }
    out = []
    for template in templates_of(jobset):
        raw = replicated.get(template.replica_type, {})
        job_spec = template_spec(raw, "template")
        pods = count_field(job_spec.get("parallelism"), 1)
        out.append(
            ReplicaGroup(
                template.replica_type, count_field(raw.get("replicas"), 1) * pods, template
            )
        )
    return tuple(out)


def _talks_to_peers(job: Resource, groups: tuple[ReplicaGroup, ...]) -> bool:
    # A JobSet's Jobs are Indexed unless it says otherwise (its webhook's default).
    if job.ref.kind != JOBSET and job.spec.get("completionMode") != "Indexed":
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
                return Gang(f"{name} --gang-scheduler={flag}", minimum, operator_group=True)
            found = _pod_group(snapshot, namespace, groups)
            if found is None and policy:
                return Gang(
                    "runPolicy.schedulingPolicy",
                    ignored=f"{name} runs without a gang-scheduler flag, so its "
                    "runPolicy.schedulingPolicy is ignored",
                )
            return found
        if policy:
            return Gang(
                "runPolicy.schedulingPolicy (operator flags not in the input)",
                minimum,
                operator_group=True,
            )
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


def _judge_trainjob(snapshot: Snapshot, job: Resource) -> Judged | None:
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
    per_node = _trainjob_node_gpus(trainer)
    return Judged(
        job,
        gang,
        nodes,
        nodes,
        nodes * per_node,
        None,
        _placement(snapshot, job),
        _queue_for(snapshot, job),
    )


def _judge_leader_worker_set(snapshot: Snapshot, lws: Resource) -> Judged | None:
    """Each replica of a LeaderWorkerSet is a group of `size` pods (a leader and size-1
    workers) that serve one model together: placed pod by pod, groups get their leaders
    Running and their workers Pending, none serving (kubernetes-sigs/lws KEP-407, issue #167).
    The gang is one group; the GPUs at stake are every group's."""
    group = as_mapping(lws.spec.get("leaderWorkerTemplate"))
    size = count_field(group.get("size"), 1)
    replicas = count_field(lws.spec.get("replicas"), 1)
    templates = {t.replica_type: t for t in templates_of(lws)}
    worker = templates.get("worker")
    if size < 2 or worker is None:
        return None
    leader = templates.get("leader", worker)
    groups = (ReplicaGroup("leader", 1, leader), ReplicaGroup("worker", size - 1, worker))
    gpus = gpu_pods(groups)
    if gpus == 0:
        return None
    gang = _gang(snapshot, lws, groups, size) or _lws_controller_gang(snapshot, groups)
    return Judged(
        lws,
        gang,
        size,
        gpus,
        replicas * job_gpus(groups),
        None,
        _placement(snapshot, lws),
        _queue_for(snapshot, lws),
    )


def _lws_controller_gang(snapshot: Snapshot, groups: tuple[ReplicaGroup, ...]) -> Gang | None:
    """The LWS controller's own PodGroups: Volcano (its one provider) gang-schedules a group
    when the controller creates the group's PodGroup (gangSchedulingManagement.schedulerProvider
    in its configuration) and the pods are handed to Volcano (schedulerName: volcano, "Need to
    set the scheduler name to Volcano", docs/examples/sample/gang-scheduling/
    lws-sample-volcano.yaml). Without the configuration in the input, the pods' scheduler says
    it was meant."""
    if not all(g.template.spec.get("schedulerName") == "volcano" for g in groups):
        return None
    for config_map in snapshot.of("ConfigMap"):
        text = str(as_mapping(config_map.raw.get("data")).get(LWS_CONFIG_KEY) or "")
        if LWS_CONFIG_API in text:
            if _lws_scheduler_provider(text) == "volcano":
                return Gang("the LWS controller's Volcano PodGroup per group")
            return None
    return Gang(
        "the LWS controller's Volcano PodGroup per group (schedulerName volcano; the "
        "controller's configuration is not in the input)"
    )


def _lws_scheduler_provider(text: str) -> str:
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return ""
    management = as_mapping(as_mapping(config).get("gangSchedulingManagement"))
    return str(management.get("schedulerProvider") or "")


def _trainjob_node_gpus(trainer: object) -> int:
    resources = as_mapping(as_mapping(trainer).get("resourcesPerNode"))
    wanted = {**as_mapping(resources.get("limits")), **as_mapping(resources.get("requests"))}
    return sum(
        int(str(v)) if str(v).isdigit() else 0 for k, v in wanted.items() if is_gpu_resource(str(k))
    )


def _trainjob_gpus(trainer: object) -> bool:
    resources = as_mapping(as_mapping(trainer).get("resourcesPerNode"))
    names = set(as_mapping(resources.get("limits"))) | set(as_mapping(resources.get("requests")))
    # Container GPUs only, as every other job's (nvidia.com/pgpu goes to a VM, nvswitch is none).
    return any(is_gpu_resource(str(n)) for n in names)


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
    if kind == LEADER_WORKER_SET:
        return (
            "# the LWS controller's configuration (ConfigMap lws-manager-config, key\n"
            "# controller_manager_config.yaml), with Volcano installed:\n"
            "gangSchedulingManagement:\n  schedulerProvider: volcano\n"
            f"# and the group's pods handed to it: schedulerName: volcano\n---\n{kueue}"
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
