import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    CLUSTER_QUEUE,
    KUEUE_QUEUED_TYPES,
    KUEUE_WORKLOAD,
    LOCAL_QUEUE,
    Blocker,
    BlockerKind,
    Category,
    FixKind,
    ObjRef,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    condition_is,
    evictions,
    failed,
    flavor_quotas,
    format_quantity,
    parse_quantity,
    passed,
    queued_workloads,
    relate,
    requeue_count,
    workload_blocker,
    workload_cluster_queue,
    workload_gpus,
    workload_owner,
)

# Causes GPU-QUOTA-004/005/006 report from the spec when the Workload's job is in the input.
_STATIC = frozenset(
    {
        BlockerKind.LOCAL_QUEUE_MISSING,
        BlockerKind.CLUSTER_QUEUE_MISSING,
        BlockerKind.UNCOVERED_RESOURCE,
    }
)
# Causes that are the ClusterQueue's (its quotas and flavors), reported on it.
_QUEUE_SIDE = frozenset(
    {
        BlockerKind.WAITS_FOR_QUOTA,
        BlockerKind.EXCEEDS_QUOTA,
        BlockerKind.UNCOVERED_RESOURCE,
        BlockerKind.FLAVOR_NOT_FOUND,
        BlockerKind.QUEUE_INACTIVE,
    }
)
# Held on purpose, or not yet looked at: nothing to change.
_BY_DESIGN = {
    BlockerKind.QUEUE_STOPPED: "its queue is stopped (stopPolicy): held on purpose",
    BlockerKind.WAITS_FOR_PODS_READY: (
        "waits for admitted workloads to reach PodsReady (waitForPodsReady.blockAdmission: "
        "sequential admission by design)"
    ),
    BlockerKind.EVALUATING: "is pending evaluation (or gated on purpose)",
}
_EXCEEDS = re.compile(
    r"insufficient quota for (\S+) in flavor (\S+), previously considered podsets requests "
    r"\(([^)]*)\) \+ current podset request \(([^)]*)\) > maximum capacity \(([^)]*)\)"
)
_MORE_NEEDED = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\S+) more needed")


@dataclass(frozen=True, slots=True)
class _Held:
    workload: Resource
    owner: Resource
    blocker: Blocker
    severity: Severity
    why: str


@check(
    id="GPU-QUOTA-008",
    title="Pending Kueue Workloads have a queue, quota and flavor that can admit them",
    category=Category.QUOTA,
    severity=Severity.HIGH,
    requires=(
        KUEUE_WORKLOAD,
        # read when present: the queues a finding names, the jobs GPU-QUOTA-004/005/006 judge
        (KUEUE_WORKLOAD, CLUSTER_QUEUE, LOCAL_QUEUE, *KUEUE_QUEUED_TYPES),
    ),
    rationale="""
        Kueue keeps a job suspended until its Workload reserves quota, and says why it does
        not in the Workload's QuotaReserved=False condition: a request larger than the
        ClusterQueue can ever give ("insufficient quota ... > maximum capacity"), a flavor
        with no ResourceFlavor, a queue Kueue marks inactive, taints or node affinity no
        flavor satisfies. Those jobs never start until the configuration changes, while
        nothing but the Workload's status says so. A Workload that waits for quota others
        use is a queue at work, unless its status shows it already ran and was evicted.
    """,
    detection="""
        Every Workload (kueue.x-k8s.io) that is active, not finished and has
        QuotaReserved=False, classified by its reason and message as Kueue's flavor assigner
        and workload controller write them (for a Workload with several pod sets, one that
        can never fit decides). The finding is on the object to change: the ClusterQueue
        (from status.admission, else its LocalQueue's spec.clusterQueue) when the cause is
        its quota, a flavor or its inactivity; the LocalQueue when its ClusterQueue is
        missing; the Workload's job (its controlling ownerReference, named even when the job
        is not in the input) when its LocalQueue is missing or its pods fit no flavor.
        Workloads held on purpose (a stopped queue, waitForPodsReady.blockAdmission,
        admission gates, pending evaluation) pass. A missing LocalQueue or ClusterQueue or
        an uncovered resource is left to GPU-QUOTA-004/005/006 when the Workload's job is in
        the input: they report it from the spec.
    """,
    severity_evidence="""
        High for a GPU Workload that only a configuration change can admit (it never starts);
        low for the same without GPUs. A GPU Workload waiting for quota others use is info
        (a full queue), medium when its status shows it already ran and lost its GPUs
        (schedulingStats.evictions, requeueState.count, an Evicted or Preempted condition):
        the status has no clock, so eviction history is the evidence that waiting costs work.
    """,
    remediation="""
        # $target: $problem
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # a request above what the ClusterQueue can give, or quota in use: raise the flavor's
        # nominalQuota (or let the ClusterQueue borrow in a cohort)
        kubectl patch clusterqueue <name> --type=json -p '[{"op": "replace", "path": "/spec/resourceGroups/<g>/flavors/<f>/resources/<r>/nominalQuota", "value": <quota>}]'
        # a flavor with no ResourceFlavor: create it (with the nodeLabels of its nodes)
        kubectl apply -f - <<'EOF'
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ResourceFlavor
        metadata:
          name: <flavor>
        EOF
        # pods that fit no flavor (taints, node affinity), a LocalQueue or ClusterQueue that is
        # missing or inactive: read the Workload's condition and fix the job or the queue
        kubectl -n <namespace> describe workload.kueue.x-k8s.io <workload>
    """,
    references=(
        "https://kueue.sigs.k8s.io/docs/tasks/troubleshooting/troubleshooting_jobs/",
        "https://kueue.sigs.k8s.io/docs/concepts/workload/",
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#flavors-and-borrowing-semantics",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/apis/kueue/v1beta2/workload_types.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/scheduler/flavorassigner/flavorassigner.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/controller/core/workload_controller.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/scheduler/scheduler.go",
    ),
)
def kueue_pending_workloads_can_be_admitted(snapshot: Snapshot) -> Iterator[Result]:
    judged = {q.resource.ref for q in queued_workloads(snapshot)}
    held: dict[ObjRef, tuple[Resource, list[_Held]]] = {}
    for workload in snapshot.of(KUEUE_WORKLOAD):
        blocker = workload_blocker(workload)
        if blocker is None:
            if condition_is(workload, "QuotaReserved", "True"):
                yield passed(workload, "has reserved quota", path="status.conditions")
            continue
        owner = workload_owner(snapshot, workload)
        if blocker.kind in _STATIC and owner.ref in judged:
            continue
        if blocker.kind in _BY_DESIGN:
            yield passed(workload, _BY_DESIGN[blocker.kind], path="status.conditions")
            continue
        target = _target(snapshot, workload, owner, blocker)
        entry = _held(workload, owner, blocker)
        held.setdefault(target.ref, (target, []))[1].append(entry)
    for target, entries in held.values():
        yield _finding(target, entries)


def _target(snapshot: Snapshot, workload: Resource, owner: Resource, blocker: Blocker) -> Resource:
    if blocker.kind in _QUEUE_SIDE:
        name = workload_cluster_queue(snapshot, workload)
        found = snapshot.get(CLUSTER_QUEUE, "", name) if name else None
        return found or owner
    if blocker.kind is BlockerKind.CLUSTER_QUEUE_MISSING:
        queue = str(workload.spec.get("queueName") or "")
        return snapshot.get(LOCAL_QUEUE, workload.ref.namespace, queue) or owner
    return owner


def _held(workload: Resource, owner: Resource, blocker: Blocker) -> _Held:
    gpu = bool(workload_gpus(workload))
    if blocker.permanent:
        severity = Severity.HIGH if gpu else Severity.LOW
        return _Held(workload, owner, blocker, severity, "never admitted as configured")
    if blocker.kind is BlockerKind.WAITS_FOR_QUOTA:
        history = _history(workload)
        if history and gpu:
            return _Held(workload, owner, blocker, Severity.MEDIUM, f"waits again after {history}")
        severity = Severity.INFO if gpu else Severity.LOW
        return _Held(workload, owner, blocker, severity, "waits for quota in use")
    return _Held(workload, owner, blocker, Severity.LOW, "pending")


def _history(workload: Resource) -> str:
    """Evidence in the status that the Workload already ran and lost its quota."""
    counts: dict[str, int] = {}
    for (reason, _), count in evictions(workload).items():
        counts[reason] = counts.get(reason, 0) + count
    if not counts and requeue_count(workload):
        counts["PodsReadyTimeout"] = requeue_count(workload)
    if not counts and (
        condition_is(workload, "Evicted", "True") or condition_is(workload, "Preempted", "True")
    ):
        counts["an eviction"] = 1
    if not counts:
        return ""
    total = sum(counts.values())
    parts = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))
    return f"{total} eviction{'s' if total != 1 else ''} ({parts})"


def _finding(target: Resource, entries: list[_Held]) -> Result:
    entries.sort(key=lambda e: (-e.severity.rank, e.workload.ref.sort_key))
    severity = entries[0].severity
    shown = "; ".join(
        f"Workload {e.workload.ref.namespace}/{e.workload.ref.name} of {e.owner.ref} "
        f'{e.why}: "{e.blocker.message or e.blocker.reason}"'
        for e in entries[:3]
    )
    more = f"; and {len(entries) - 3} more" if len(entries) > 3 else ""
    count = len(entries)
    problem = (
        f"has {count} Workload{'s' if count != 1 else ''} Kueue holds back "
        f"({entries[0].blocker.kind.value}): {shown}{more}"
    )
    related = [relate(e.workload, "symptom") for e in entries]
    related += [relate(e.owner, "owner") for e in entries if e.owner.ref != target.ref]
    return failed(
        target,
        problem,
        path="spec.resourceGroups" if target.ref.kind == CLUSTER_QUEUE else "",
        severity=severity,
        fix={"target": str(target.ref), "problem": problem, "command": _command(target, entries)},
        related=related,
    )


def _command(target: Resource, entries: list[_Held]) -> str:
    blocker = entries[0].blocker
    if target.ref.kind == CLUSTER_QUEUE and blocker.kind in (
        BlockerKind.EXCEEDS_QUOTA,
        BlockerKind.WAITS_FOR_QUOTA,
    ):
        patch = _quota_patch(target, [e.blocker.message for e in entries])
        if patch:
            return patch
    if blocker.kind is BlockerKind.FLAVOR_NOT_FOUND:
        flavors = sorted(set(re.findall(r"flavor (\S+) not found", blocker.message)))
        if flavors:
            body = "\n---\n".join(
                f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: {f}"
                for f in flavors
            )
            return (
                "# create the flavor (give it the nodeLabels of the nodes it stands for)\n"
                f"kubectl apply -f - <<'EOF'\n{body}\nEOF"
            )
    workload = entries[0].workload
    return (
        "# read the condition, then change what it names (the job's tolerations or node\n"
        "# affinity against the flavors' nodeTaints and nodeLabels, the queue it names)\n"
        f"kubectl -n {workload.ref.namespace} describe workload.kueue.x-k8s.io "
        f"{workload.ref.name}"
    )


def _quota_patch(cluster_queue: Resource, messages: list[str]) -> str:
    """Raise each flavor's quota by what the messages say is missing: the request above the
    maximum capacity, or the unused quota still needed."""
    needed: dict[tuple[str, str], Decimal] = {}
    for message in messages:
        for resource, flavor, before, request, capacity in _EXCEEDS.findall(message):
            amount = _number(before) + _number(request) - _number(capacity)
            key = (flavor.rstrip(","), resource)
            needed[key] = max(needed.get(key, Decimal(0)), amount)
        for resource, flavor, more in _MORE_NEEDED.findall(message):
            key = (flavor.rstrip(","), resource)
            needed[key] = max(needed.get(key, Decimal(0)), _number(more))
    ops: list[dict[str, Any]] = []
    notes = []
    for quota in flavor_quotas(cluster_queue):
        extra = needed.get((quota.flavor, quota.resource), Decimal(0))
        if extra <= 0 or quota.nominal is None:
            continue
        value = quota.nominal + extra
        pointer = "/" + quota.path.replace("[", "/").replace("]", "").replace(".", "/")
        number: Any = int(value) if value == value.to_integral_value() else format_quantity(value)
        ops.append({"op": "replace", "path": f"{pointer}/nominalQuota", "value": number})
        notes.append(
            f"{quota.flavor} {quota.resource} {format_quantity(quota.nominal)} -> {number}"
        )
    if not ops:
        return ""
    return (
        f"# raise the quota (only if the nodes have it: GPU-QUOTA-007): {'; '.join(notes)}\n"
        f"kubectl patch clusterqueue {cluster_queue.ref.name} --type=json "
        f"-p '{json.dumps(ops)}'"
    )


def _number(text: str) -> Decimal:
    try:
        return parse_quantity(text.strip() or "0")
    except ValueError:
        return Decimal(0)
