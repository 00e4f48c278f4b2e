import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from gpu_audit.api import (
    CLUSTER_QUEUE,
    COHORT,
    KUEUE_QUEUED_TYPES,
    KUEUE_WORKLOAD,
    LOCAL_QUEUE,
    WORKLOAD_PRIORITY_CLASS,
    BlockerKind,
    Category,
    FixKind,
    FlavorQuota,
    ObjRef,
    PodTemplate,
    RelatedRef,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_mapping,
    check,
    classify,
    cohort_name,
    cohort_root,
    failed,
    flavor_quotas,
    flavor_usage,
    format_quantity,
    is_finished,
    is_gpu_resource,
    passed,
    podset_templates,
    queued_workloads,
    relate,
    templates_of,
    top_owner,
    workload_blocker,
    workload_cluster_queue,
    workload_gpus,
    workload_owner,
    workload_priority,
)

# Kinds Kueue queues that serve (a model server in them makes them serving) and that run batch.
_SERVING_KINDS = frozenset(
    {"Deployment", "StatefulSet", "ReplicaSet", "Pod", "LeaderWorkerSet.leaderworkerset.x-k8s.io"}
)
_BATCH_KINDS = frozenset(
    {
        "Job",
        "CronJob",
        "JobSet.jobset.x-k8s.io",
        "PyTorchJob.kubeflow.org",
        "MPIJob.kubeflow.org",
        "TFJob.kubeflow.org",
        "TrainJob.trainer.kubeflow.org",
    }
)
_PATH = "spec.preemption.reclaimWithinCohort"


@dataclass(slots=True)
class _Member:
    """A GPU workload of a ClusterQueue: the job (or its Workload when the job is not in the
    input), serving or batch, its Kueue priority and whether a Workload of it waits for quota."""

    resource: Resource
    role: str
    priority: int | None
    pending: list[Resource] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Lending:
    """One GPU quota of the serving ClusterQueue that batch queues of its cohort may borrow."""

    quota: FlavorQuota
    borrowers: tuple[tuple[Resource, Decimal], ...]  # batch ClusterQueue, GPUs it borrows now
    used: Decimal  # what the serving ClusterQueue uses of it now


@check(
    id="GPU-QUOTA-010",
    title="Serving ClusterQueues can reclaim the GPU quota batch queues of their cohort borrow",
    category=Category.QUOTA,
    severity=Severity.MEDIUM,
    requires=(
        CLUSTER_QUEUE,
        (LOCAL_QUEUE, KUEUE_WORKLOAD),
        (*KUEUE_QUEUED_TYPES, KUEUE_WORKLOAD),
        # read when present: priorities and cohort trees
        (CLUSTER_QUEUE, WORKLOAD_PRIORITY_CLASS, COHORT, "PriorityClass"),
    ),
    rationale="""
        ClusterQueues of a cohort borrow each other's unused nominal quota. While a serving
        queue is idle, batch queues of its cohort borrow its GPUs, and their jobs keep them
        until they finish: a serving workload that arrives later fits in its own nominal
        quota but finds it used. Only preemption takes it back, and by default none happens:
        reclaimWithinCohort Never (the default) lets a pending workload preempt nothing in
        other queues, LowerPriority only workloads of lower priority, so batch jobs at the
        serving workloads' priority or above (a WorkloadPriorityClass, or no priority at all)
        keep the GPUs and serving scale-outs wait for hours-long training runs.
    """,
    detection="""
        ClusterQueues that serve GPU work: a model server (SRV-CLASSIFY) run by a
        Deployment, StatefulSet, LeaderWorkerSet or Pod queued to them (its queue-name label's
        LocalQueue, or its Workload's ClusterQueue). For each GPU quota of theirs that they
        lend (nominalQuota above zero, lendingLimit not zero), the other ClusterQueues of the
        same cohort tree (spec.cohortName or v1beta1 spec.cohort, up Cohort spec.parentName)
        that define the same flavor and resource, may borrow it (borrowingLimit not zero)
        and run batch GPU work (Jobs, JobSets, Kubeflow jobs, TrainJobs) or show borrowed
        quota in their status. It fails unless spec.preemption.reclaimWithinCohort is Any,
        or LowerPriority with every serving workload's Kueue priority (WorkloadPriorityClass
        label, else PriorityClass, else the globalDefault, else 0; a Workload's
        spec.priority) above every borrowing batch workload's.
    """,
    severity_evidence="""
        High when a serving Workload of the queue waits for quota (QuotaReserved=False,
        insufficient unused quota) while a batch queue of its cohort borrows the GPUs; medium
        when the status shows the lending now (a batch queue's flavorsUsage borrows the GPU
        while the serving queue uses less than its nominal quota). Low when only the
        configuration allows it, or when priorities the comparison needs are not in the input.
    """,
    remediation="""
        # $kind $name: $problem
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # let serving workloads preempt the batch work that borrows the queue's nominal quota
        kubectl patch clusterqueue <serving-cluster-queue> --type=merge -p '{"spec": {"preemption": {"reclaimWithinCohort": "Any"}}}'
        # or keep reclaimWithinCohort: LowerPriority and rank serving above batch with a
        # WorkloadPriorityClass (label kueue.x-k8s.io/priority-class on the serving workloads),
        # or lend none of the GPUs: lendingLimit: 0 on the serving queue's GPU quota
    """,
    references=(
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#preemption",
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#lendinglimit",
        "https://kueue.sigs.k8s.io/docs/concepts/preemption/",
        "https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/",
        "https://kueue.sigs.k8s.io/docs/concepts/cohort/",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/scheduler/preemption/classical/hierarchical_preemption.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/scheduler/preemption/common/preemption_policy.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/util/priority/priority.go",
    ),
)
def kueue_cohorts_let_serving_reclaim_gpu_quota(snapshot: Snapshot) -> Iterator[Result]:
    members = _members(snapshot)
    queues = snapshot.of(CLUSTER_QUEUE)
    for serving_queue in queues:
        own = members.get(serving_queue.ref.name, [])
        serving = [m for m in own if m.role == "serving"]
        if not serving:
            continue
        cohort = cohort_name(serving_queue)
        if not cohort:
            yield passed(serving_queue, "is in no cohort: no other queue borrows its GPU quota")
            continue
        root = cohort_root(snapshot, cohort)
        others = [
            q
            for q in queues
            if q.ref != serving_queue.ref
            and cohort_name(q)
            and cohort_root(snapshot, cohort_name(q)) == root
        ]
        lendings = _lendings(serving_queue, others, members)
        if not lendings:
            yield passed(
                serving_queue,
                f"lends no GPU quota that a batch queue of cohort {root} may borrow",
                path="spec.resourceGroups",
            )
            continue
        policy = str(as_mapping(serving_queue.spec.get("preemption")).get("reclaimWithinCohort"))
        policy = policy if policy in ("Any", "LowerPriority") else "Never"
        batch = [
            m
            for lending in lendings
            for queue, _ in lending.borrowers
            for m in members.get(queue.ref.name, [])
            if m.role == "batch"
        ]
        if policy == "Any":
            yield passed(
                serving_queue,
                "reclaimWithinCohort Any: its serving workloads preempt batch work that "
                "borrows its GPU quota",
                path=_PATH,
            )
            continue
        ranked = _ranked(serving, batch)
        if policy == "LowerPriority" and ranked is True:
            yield passed(
                serving_queue,
                "reclaimWithinCohort LowerPriority, and every serving workload outranks the "
                "batch workloads that may borrow its GPU quota",
                path=_PATH,
            )
            continue
        yield _finding(serving_queue, root, policy, ranked, serving, batch, lendings)


def _members(snapshot: Snapshot) -> dict[str, list[_Member]]:
    """GPU workloads by ClusterQueue, each job once (its Workloads folded into it)."""
    by_ref: dict[ObjRef, tuple[str, _Member]] = {}
    for queued in queued_workloads(snapshot):
        if queued.cluster_queue and workload_gpus(queued.resource):
            resource = queued.resource
            role = _role(resource.ref.kind, templates_of(resource))
            priority = workload_priority(snapshot, resource)
            by_ref[resource.ref] = (queued.cluster_queue, _Member(resource, role, priority))
    for workload in snapshot.of(KUEUE_WORKLOAD):
        queue = workload_cluster_queue(snapshot, workload)
        if is_finished(workload) or not queue or not workload_gpus(workload):
            continue
        owner = workload_owner(snapshot, workload)
        top = top_owner(snapshot, owner)
        found = by_ref.get(top.ref)
        if found is None:
            templates = [t for t, _ in podset_templates(workload)]
            member = _Member(top, _role(top.ref.kind, templates), None)
            found = by_ref[top.ref] = (queue, member)
        member = found[1]
        member.priority = workload_priority(snapshot, workload)
        blocker = workload_blocker(workload)
        if blocker is not None and blocker.kind is BlockerKind.WAITS_FOR_QUOTA:
            member.pending.append(workload)
    out: dict[str, list[_Member]] = {}
    for queue, member in by_ref.values():
        out.setdefault(queue, []).append(member)
    return out


def _role(kind: str, templates: Iterable[PodTemplate]) -> str:
    if kind in _BATCH_KINDS:
        return "batch"
    if kind in _SERVING_KINDS and any(
        classify(c) is not None for t in templates for c in t.containers(include_init=False)
    ):
        return "serving"
    return ""


def _lendings(
    serving_queue: Resource, others: list[Resource], members: dict[str, list[_Member]]
) -> list[_Lending]:
    usage = flavor_usage(serving_queue)
    out = []
    for quota in flavor_quotas(serving_queue):
        if not is_gpu_resource(quota.resource) or not quota.nominal or quota.nominal <= 0:
            continue
        if quota.lending_limit is not None and quota.lending_limit <= 0:
            continue
        key = (quota.flavor, quota.resource)
        borrowers = []
        for queue in others:
            theirs = next((q for q in flavor_quotas(queue) if (q.flavor, q.resource) == key), None)
            if theirs is None or (
                theirs.borrowing_limit is not None and theirs.borrowing_limit <= 0
            ):
                continue
            borrowed = (
                flavor_usage(queue)[key].borrowed if key in flavor_usage(queue) else Decimal(0)
            )
            runs_batch = any(m.role == "batch" for m in members.get(queue.ref.name, []))
            if runs_batch or borrowed > 0:
                borrowers.append((queue, borrowed))
        if borrowers:
            used = usage[key].total if key in usage else Decimal(0)
            out.append(_Lending(quota, tuple(borrowers), used))
    return out


def _ranked(serving: list[_Member], batch: list[_Member]) -> bool | None:
    """Whether every serving workload outranks every batch one; None when a priority the
    comparison needs is not known (its class is not in the input, or no batch workload is)."""
    serving_priorities = [m.priority for m in serving]
    batch_priorities = [m.priority for m in batch]
    if not batch_priorities or None in serving_priorities or None in batch_priorities:
        return None
    known_serving = [p for p in serving_priorities if p is not None]
    known_batch = [p for p in batch_priorities if p is not None]
    return min(known_serving) > max(known_batch)


def _finding(
    serving_queue: Resource,
    root: str,
    policy: str,
    ranked: bool | None,
    serving: list[_Member],
    batch: list[_Member],
    lendings: list[_Lending],
) -> Result:
    borrowed_now = sum((b for lending in lendings for _, b in lending.borrowers), Decimal(0))
    lent_now = borrowed_now > 0 and any(
        lending.quota.nominal is not None and lending.used < lending.quota.nominal
        for lending in lendings
    )
    pending = [w for m in serving for w in m.pending]
    if policy == "LowerPriority" and ranked is None:
        severity = Severity.LOW
        evidence = "the priorities to compare are not all in the input"
    elif pending and borrowed_now > 0:
        severity = Severity.HIGH
        evidence = (
            f"{len(pending)} serving Workload{'s wait' if len(pending) != 1 else ' waits'} for quota "
            f"({', '.join(w.ref.name for w in pending[:3])}) while batch queues borrow "
            f"{format_quantity(borrowed_now)} GPUs"
        )
    elif lent_now:
        severity = Severity.MEDIUM
        evidence = f"batch queues borrow {format_quantity(borrowed_now)} GPUs of it now"
    else:
        severity = Severity.LOW
        evidence = "the configuration allows it; nothing in the input shows it lent now"
    if policy == "Never":
        why = "reclaimWithinCohort is Never (the default): serving workloads preempt nothing"
    else:
        highest = max((m.priority for m in batch if m.priority is not None), default=None)
        lowest = min((m.priority for m in serving if m.priority is not None), default=None)
        why = (
            "reclaimWithinCohort is LowerPriority, and serving workloads do not outrank the "
            f"batch ones (serving from {lowest}, batch up to {highest}), so they preempt none"
            if ranked is False
            else "reclaimWithinCohort is LowerPriority and the priorities are unknown"
        )
    quotas = "; ".join(
        f"flavor {lending.quota.flavor} {lending.quota.resource} "
        f"{format_quantity(lending.quota.nominal or Decimal(0))} (uses "
        f"{format_quantity(lending.used)}), borrowable by "
        + ", ".join(
            f"{queue.ref.name}" + (f" (borrows {format_quantity(b)})" if b > 0 else "")
            for queue, b in lending.borrowers
        )
        for lending in lendings
    )
    names = ", ".join(str(m.resource.ref) for m in serving[:3])
    problem = (
        f"serves GPU work ({names}) from quota that batch queues of cohort {root} may borrow "
        f"and keep until their jobs finish: {quotas}; {why}; {evidence}"
    )
    related: list[RelatedRef] = [
        relate(queue, "cause") for lending in lendings for queue, _ in lending.borrowers
    ]
    related += [relate(w, "symptom") for w in pending]
    patch = json.dumps({"spec": {"preemption": {"reclaimWithinCohort": "Any"}}})
    command = (
        "# let serving workloads preempt batch work that borrows this queue's nominal quota\n"
        "# (or rank serving above batch with a WorkloadPriorityClass and LowerPriority, or\n"
        "# lend none of the GPUs: lendingLimit: 0)\n"
        f"kubectl patch clusterqueue {serving_queue.ref.name} --type=merge -p '{patch}'"
    )
    return failed(
        serving_queue,
        problem,
        path=_PATH,
        severity=severity,
        fix={"problem": problem, "command": command},
        related=related,
    )
