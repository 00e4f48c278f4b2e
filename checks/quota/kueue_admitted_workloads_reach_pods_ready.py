import json
from collections.abc import Iterator

from gpu_audit.api import (
    KUEUE_QUEUED_TYPES,
    KUEUE_WORKLOAD,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    condition_is,
    evictions,
    failed,
    is_finished,
    passed,
    relate,
    requeue_count,
    top_owner,
    workload_condition,
    workload_gpus,
    workload_owner,
)

# Pod states that do not pass with time: the pod cannot be placed, pulled or kept running.
_STUCK = frozenset(
    {
        "Unschedulable",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
_KUBECTL_WORKLOAD = "workload.kueue.x-k8s.io"


@check(
    id="GPU-QUOTA-009",
    title="Workloads Kueue admits reach PodsReady",
    category=Category.QUOTA,
    severity=Severity.HIGH,
    requires=(KUEUE_WORKLOAD, (KUEUE_WORKLOAD, *KUEUE_QUEUED_TYPES)),  # jobs: read when present
    rationale="""
        An admitted Workload holds its ClusterQueue's GPU quota from admission on, whether
        or not its pods run. With waitForPodsReady, Kueue evicts a Workload whose pods are
        not all ready within the timeout, re-queues it with backoff (status.requeueState.count)
        and, after requeuingStrategy.backoffLimitCount re-queues, deactivates it for good.
        A job whose pods can never become ready (an image that cannot be pulled, a GPU
        request no node can place, a crash at start) thus loops: admitted, holding GPU quota
        others wait for, evicted, queued again, until Kueue gives up on it.
    """,
    detection="""
        Workloads (kueue.x-k8s.io) that are Admitted=True, not finished, with PodsReady=False
        (Kueue sets PodsReady only when waitForPodsReady is enabled; a Workload without the
        condition is not judged), and Workloads Kueue deactivated for exceeding the re-queue
        limit (Evicted reason DeactivatedDueToRequeuingLimitExceeded, or that eviction in
        status.schedulingStats). The reason comes from the status (PodsReadyTimeout
        evictions, requeueState.count, WaitForStart or WaitForRecovery) and from the job's
        pods in the input (Unschedulable, image pull errors, CrashLoopBackOff). The finding is
        on the Workload's job (its controlling ownerReference), the Workload related.
    """,
    severity_evidence="""
        High for a GPU Workload whose status shows it already timed out (PodsReadyTimeout
        evictions or requeueState.count) or that Kueue deactivated: it loops or never runs
        again. Medium when it has not timed out yet but its pods in the input are stuck
        (Unschedulable, image pull errors, CrashLoopBackOff). Info when nothing shows its
        pods are stuck: they may be starting. Low for the same without GPUs.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # see why its pods are not ready (events of the job and its pods), fix the job
        kubectl -n <namespace> describe <kind> <name>
        # a Workload Kueue deactivated after too many re-queues runs again only when reactivated
        kubectl -n <namespace> patch workload.kueue.x-k8s.io <workload> --type=merge -p '{"spec": {"active": true}}'
    """,
    references=(
        "https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/",
        "https://kueue.sigs.k8s.io/docs/concepts/workload/#active",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/apis/kueue/v1beta2/workload_types.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/controller/core/workload_controller.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/controller/jobframework/reconciler.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/workload/evict/evict.go",
    ),
)
def kueue_admitted_workloads_reach_pods_ready(snapshot: Snapshot) -> Iterator[Result]:
    for workload in snapshot.of(KUEUE_WORKLOAD):
        if is_finished(workload):
            continue
        deactivated = _deactivated(workload)
        if deactivated:
            yield _finding(snapshot, workload, Severity.HIGH, deactivated, reactivate=True)
            continue
        if not condition_is(workload, "Admitted", "True"):
            continue
        ready = workload_condition(workload, "PodsReady")
        if ready is None:
            continue  # waitForPodsReady is off: Kueue does not track readiness
        if ready.get("status") == "True":
            yield passed(workload, "is admitted and its pods are ready", path="status.conditions")
            continue
        timeouts = _timeouts(workload)
        stuck = _stuck_pods(snapshot, workload_owner(snapshot, workload))
        waiting = "since a pod failed" if ready.get("reason") == "WaitForRecovery" else "yet"
        if timeouts:
            severity = Severity.HIGH
            why = (
                f"is admitted, holding its quota, but its pods are not all ready {waiting}, and "
                f"it already timed out {timeouts} time{'s' if timeouts != 1 else ''} "
                "(evicted for PodsReadyTimeout and re-queued): it loops without running"
            )
        elif stuck:
            severity = Severity.MEDIUM
            why = (
                f"is admitted, holding its quota, but its pods are not all ready {waiting}: "
                f"{stuck}; waitForPodsReady will evict and re-queue it"
            )
        else:
            severity = Severity.INFO
            why = f"is admitted and its pods are not all ready {waiting} (they may be starting)"
        if stuck and timeouts:
            why = f"{why}: {stuck}"
        yield _finding(snapshot, workload, severity, why, reactivate=False)


def _deactivated(workload: Resource) -> str:
    """Why Kueue deactivated the Workload for good after re-queuing it, "" when it did not."""
    if workload.spec.get("active") is not False:
        return ""
    evicted = workload_condition(workload, "Evicted")
    reason = str((evicted or {}).get("reason", ""))
    count = evictions(workload).get(("Deactivated", "RequeuingLimitExceeded"), 0)
    if reason != "DeactivatedDueToRequeuingLimitExceeded" and not count:
        return ""
    timeouts = _timeouts(workload)
    after = f" after {timeouts} PodsReady timeouts" if timeouts else ""
    return (
        f"was deactivated by Kueue{after} (exceeding the maximum number of re-queuing "
        "retries): its pods never became ready, and it never runs again until reactivated"
    )


def _timeouts(workload: Resource) -> int:
    counted = sum(
        n for (reason, _), n in evictions(workload).items() if reason == "PodsReadyTimeout"
    )
    return max(counted, requeue_count(workload))


def _stuck_pods(snapshot: Snapshot, owner: Resource) -> str:
    """The job's pods of the input that are stuck, described; "" when none is."""
    found = []
    for pod in snapshot.in_namespace("Pod", owner.ref.namespace):
        if top_owner(snapshot, pod).ref != owner.ref:
            continue
        state = _stuck_state(pod)
        if state:
            found.append(f"pod {pod.ref.name} {state}")
    shown = "; ".join(sorted(found)[:3])
    return shown + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def _stuck_state(pod: Resource) -> str:
    for condition in map(as_mapping, as_list(pod.status.get("conditions"))):
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return f"Unschedulable: {condition.get('message', '')}".rstrip(": ")
    statuses = [
        *as_list(pod.status.get("initContainerStatuses")),
        *as_list(pod.status.get("containerStatuses")),
    ]
    for status in map(as_mapping, statuses):
        waiting = as_mapping(as_mapping(status.get("state")).get("waiting"))
        reason = str(waiting.get("reason", ""))
        if reason in _STUCK:
            return f"container {status.get('name', '')} {reason}"
    return ""


def _finding(
    snapshot: Snapshot, workload: Resource, severity: Severity, why: str, *, reactivate: bool
) -> Result:
    owner = workload_owner(snapshot, workload)
    if not workload_gpus(workload) and severity is not Severity.INFO:
        severity = Severity.LOW
    problem = f"has Workload {workload.ref.name}, which {why}"
    kind, _, group = owner.ref.kind.partition(".")
    resource = f"{kind.lower()}.{group}" if group else kind.lower()
    namespace = workload.ref.namespace
    lines = [
        "# see why its pods are not ready (the job's and its pods' events), and fix the job",
        f"kubectl -n {namespace} describe {resource} {owner.ref.name}",
    ]
    if reactivate:
        patch = json.dumps({"spec": {"active": True}})
        lines += [
            "# then let Kueue admit it again",
            f"kubectl -n {namespace} patch {_KUBECTL_WORKLOAD} {workload.ref.name} "
            f"--type=merge -p '{patch}'",
        ]
    return failed(
        owner,
        problem,
        severity=severity,
        fix={"problem": problem, "command": "\n".join(lines)},
        related=[relate(workload, "symptom")] if owner.ref != workload.ref else [],
    )
