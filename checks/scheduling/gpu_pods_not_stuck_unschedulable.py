from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import (
    Category,
    FixKind,
    ObjRef,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    controller_owner,
    event_note,
    event_regarding,
    event_time,
    failed,
    gets_gpus_through_dra,
    passed,
    relate,
    templates_of,
    top_owner,
)
from gpu_audit.checks.scheduling._common import fits_some_node

_DEFAULT_SCHEDULER = "default-scheduler"
# Pod -> gang: Volcano (annotation, both spellings), scheduler-plugins coscheduling (label).
_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
_POD_GROUPS = ("PodGroup.scheduling.volcano.sh", "PodGroup.scheduling.x-k8s.io")
_SPARK_APPLICATION = "SparkApplication.sparkoperator.k8s.io"
# Owners whose pods are workers of one job: some Running and some Pending is partial placement.
# A SparkApplication's driver waits for its executors while it holds what it requested
# (the spark-operator's Volcano integration gang-schedules the two for that reason).
_GANG_KINDS = frozenset(
    {
        "PyTorchJob.kubeflow.org",
        "MPIJob.kubeflow.org",
        "Job.batch.volcano.sh",
        "Job",
        _SPARK_APPLICATION,
    }
)
_MESSAGE_CHARS = 300
# Scheduler message fragments that name a shortage of free capacity (the node could hold the
# pod once other pods leave) rather than a rule that keeps the pod off the node.
_CAPACITY = ("insufficient ", "too many pods")
# Scheduler message fragment -> what it means, and the check that looks at the cause. The DRA
# ones are the scheduler's DynamicResources plugin's (pkg/scheduler/framework/plugins/
# dynamicresources/dynamicresources.go: "cannot allocate all claims", "resourceclaim not
# available on the node", `resourceclaim "<name>" not found`).
_CAUSES = (
    (
        "cannot allocate all claims",
        "no eligible node has free devices for its ResourceClaims (DRA; whether any published "
        "device matches them: GPU-SCHED-009)",
    ),
    (
        "resourceclaim",
        "a ResourceClaim it names is missing or not available on the node (DRA: GPU-SCHED-008)",
    ),
    ("insufficient nvidia.com/", "not enough free GPUs on any eligible node (GPU-SCHED-006)"),
    ("insufficient amd.com/gpu", "not enough free GPUs on any eligible node (GPU-SCHED-006)"),
    ("untolerated taint", "a taint the pod does not tolerate (GPU-SCHED-001)"),
    ("that the pod didn't tolerate", "a taint the pod does not tolerate (GPU-SCHED-001)"),
    ("didn't match pod's node affinity", "node selector or affinity (GPU-SCHED-002)"),
    ("didn't match node selector", "node selector or affinity (GPU-SCHED-002)"),
    ("anti-affinity", "pod anti-affinity (GPU-SCHED-004)"),
    ("topology spread", "topology spread constraints (GPU-SCHED-004)"),
    ("unbound immediate persistentvolumeclaims", "an unbound PVC (GPU-STO-005)"),
    ("volume node affinity conflict", "a zonal volume in another zone"),
    ("insufficient", "CPU, memory or another resource is short"),
)


@dataclass(frozen=True, slots=True)
class _Event:
    reason: str
    message: str
    time: str  # RFC 3339; sorts chronologically as text


@check(
    id="GPU-SCHED-005",
    title="No GPU pod is stuck Pending as unschedulable",
    category=Category.SCHEDULING,
    severity=Severity.HIGH,
    requires=("Pod",),
    rationale="""
        A GPU pod the scheduler cannot place waits forever, and its workload looks "deployed"
        to anyone who does not describe the pod. The scheduler's message names the blocker
        (too few free GPUs, an untolerated taint, a selector no node matches, a PVC), which
        points at the check that explains it. For a training job whose other workers are
        already Running, the waiting worker leaves their GPUs held and idle: partial placement
        without gang scheduling.
    """,
    detection="""
        Live (Pods with status): GPU Pods (device-plugin GPUs, or NVIDIA GPUs through DRA
        ResourceClaims) in phase Pending, without spec.nodeName, whose
        PodScheduled condition is False with reason Unschedulable, or that have a
        FailedScheduling event when the condition is missing. Reported once per owning
        controller present in the input (else per Pod, naming its controller), with the
        scheduler's message (the condition's, or the newest FailedScheduling event's), the
        cause it names, and cluster-autoscaler NotTriggerScaleUp events. The finding is on the
        owning workload (the object to change), with the Pending pods related as symptoms.
        Not flagged: SchedulingGated pods (Kueue), pods nominated for a node after preemption
        or by Karpenter (a newer Nominated event), and pods of a non-default scheduler that
        belong to a PodGroup (gang admission pending, reported as passed with the PodGroup
        phase). Owners whose GPU pods are all scheduled pass. The catalogue's 10-30 minute
        grace period is not applied: checks have no clock, and a fresh Unschedulable pod is
        reported as well.
    """,
    severity_evidence="""
        High when the input shows the pod will not be placed by waiting: the scheduler names
        only rules the pod fails (taints, selectors, affinity, volumes), no eligible node in
        the input could hold the request even empty, or the cluster-autoscaler refused to scale
        up; and when workers of the same job already hold GPUs (partial placement: a
        PyTorchJob, MPIJob, Volcano Job or Job, or a SparkApplication whose driver holds a GPU
        while its executors wait), critical when two or more jobs are partially placed at once
        (they deadlock on each other's GPUs). Low when it only waits for capacity other pods
        hold and an eligible node could hold it (a queue, not a fault); medium when that cannot be told (no node status, or
        GPUs through DRA, whose devices GPU-SCHED-009 matches against the ResourceSlices).
    """,
    remediation="""
        kubectl describe pod $pod -n $namespace
        # cause: $cause
        # free GPUs per node: kubectl get nodes -o custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness/",
        "https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/33",
        "https://github.com/kubernetes/autoscaler/issues/2506",
        "https://github.com/kubeflow/trainer/issues/165",
        "https://kubeflow.org/docs/components/spark-operator/user-guide/volcano-integration",
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go",
    ),
)
def gpu_pods_not_stuck_unschedulable(snapshot: Snapshot) -> Iterator[Result]:
    events = _events_by_pod(snapshot)
    stuck: dict[ObjRef, list[tuple[Resource, str]]] = defaultdict(list)
    scheduled: dict[ObjRef, int] = defaultdict(int)
    owners: dict[ObjRef, Resource] = {}
    gang_waits: dict[ObjRef, str] = {}
    for pod in snapshot.of("Pod"):
        templates = templates_of(pod)
        if not templates or not (
            templates[0].requests_gpu or gets_gpus_through_dra(snapshot, templates[0])
        ):
            continue
        owner = top_owner(snapshot, pod)
        owners.setdefault(owner.ref, owner)
        state = _state(snapshot, pod, events.get((pod.ref.namespace, pod.ref.name), []))
        if state is None:
            continue
        kind, detail = state
        if kind == "scheduled":
            scheduled[owner.ref] += 1
        elif kind == "gang":
            gang_waits.setdefault(owner.ref, detail)
        else:
            stuck[owner.ref].append((pod, detail))
    partial = sum(1 for ref in stuck if scheduled[ref] and owners[ref].ref.kind in _GANG_KINDS)
    for ref in sorted(owners, key=lambda r: r.sort_key):
        owner = owners[ref]
        if ref in stuck:
            yield _finding(snapshot, owner, stuck[ref], scheduled[ref], events, partial)
        elif ref in gang_waits:
            yield passed(owner, f"waits for gang admission: {gang_waits[ref]}")
        elif scheduled[ref]:
            yield passed(owner, f"{_pods(scheduled[ref])} scheduled")


def _state(snapshot: Snapshot, pod: Resource, events: list[_Event]) -> tuple[str, str] | None:
    """("scheduled" | "gang" | "stuck", detail), or None when the pod is finished, gated,
    nominated, or carries no scheduling status at all."""
    phase = pod.status.get("phase")
    if phase in ("Succeeded", "Failed"):
        return None
    condition = _pod_scheduled(pod)
    if pod.spec.get("nodeName") or condition.get("status") == "True":
        return ("scheduled", "")
    if condition.get("reason") == "SchedulingGated" or as_list(pod.spec.get("schedulingGates")):
        return None  # Kueue (or another controller) has not released it yet
    if pod.status.get("nominatedNodeName"):
        return None  # preemption freed a node; the scheduler retries there
    failures = [e for e in events if e.reason == "FailedScheduling"]
    nominated = [e for e in events if e.reason == "Nominated"]
    if nominated and (not failures or nominated[-1].time > failures[-1].time):
        return None  # Karpenter launched a node for it
    unschedulable = (
        condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    )
    if not unschedulable and not (not condition and failures):
        return None
    group = _pod_group(pod)
    if group and str(pod.spec.get("schedulerName") or _DEFAULT_SCHEDULER) != _DEFAULT_SCHEDULER:
        return ("gang", _group_phase(snapshot, pod.ref.namespace, group))
    message = str(condition.get("message") or (failures[-1].message if failures else ""))
    return ("stuck", " ".join(message.split()))


def _finding(
    snapshot: Snapshot,
    owner: Resource,
    pods: list[tuple[Resource, str]],
    running: int,
    events: Mapping[tuple[str, str], list[_Event]],
    partial_jobs: int,
) -> Result:
    pod, message = pods[0]
    text = message[:_MESSAGE_CHARS] + ("..." if len(message) > _MESSAGE_CHARS else "")
    cause = _cause(message)
    who = (
        f"{_pods(len(pods))} Pending unschedulable"
        if owner.ref != pod.ref
        else "is Pending unschedulable"
    )
    if owner.ref == pod.ref and (controller := _controller_name(snapshot, pod)):
        who += f" (controlled by {controller})"
    details = [f"{who}: {text or 'no scheduler message'}"]
    scale_up = [
        e.message
        for p, _ in pods
        for e in events.get((p.ref.namespace, p.ref.name), [])
        if e.reason == "NotTriggerScaleUp"
    ]
    if scale_up:
        details.append(f"cluster-autoscaler: {' '.join(scale_up[-1].split())[:_MESSAGE_CHARS]}")
    severity, why = _severity(snapshot, pod, message, scale_up, running, owner, partial_jobs)
    if why:
        details.append(why)
    return failed(
        owner,
        "; ".join(details),
        path="status.conditions",
        severity=severity,
        fix={"pod": pod.ref.name, "cause": cause},
        related=[relate(p, "symptom") for p, _ in pods],
    )


def _severity(
    snapshot: Snapshot,
    pod: Resource,
    message: str,
    scale_up: list[str],
    running: int,
    owner: Resource,
    partial_jobs: int,
) -> tuple[Severity | None, str]:
    """The severity the evidence supports (None: the declared high), and what it is."""
    if running and owner.ref.kind in _GANG_KINDS:
        how = (
            "gang-schedule the driver with its executors: spec.batchScheduler volcano"
            if owner.ref.kind == _SPARK_APPLICATION
            else "gang-schedule it, see GPU-DIST-001"
        )
        held = (
            f"{_pods(running)} of the same job already scheduled and holding GPUs (partial "
            f"placement; {how})"
        )
        if partial_jobs > 1:
            return Severity.CRITICAL, (
                f"{held}; {partial_jobs} jobs are partially placed at once, each holding GPUs "
                "the others wait for: none can start"
            )
        return None, held
    if scale_up:
        return None, ""
    lowered = message.lower()
    templates = templates_of(pod)
    dra = bool(templates) and gets_gpus_through_dra(snapshot, templates[0])
    if not any(fragment in lowered for fragment in _CAPACITY) and not (dra and "claim" in lowered):
        return None, ""  # only rules the pod fails: waiting changes nothing
    if dra:
        # DRA GPUs are not in the node's allocatable: the node-shape fit cannot tell, and
        # "cannot allocate all claims" is a shortage as well as a selector no device matches.
        return Severity.MEDIUM, (
            "its GPUs come through DRA ResourceClaims, allocated from ResourceSlices, so "
            "whether a node could ever hold it is GPU-SCHED-009's judgement, not a "
            "device-plugin shortage"
        )
    fits = fits_some_node(snapshot, templates[0]) if templates else None
    if fits is False:
        return None, "no eligible node in the input could hold it even with nothing else running"
    if fits:
        return Severity.LOW, (
            "it waits for capacity other pods hold; an eligible node could hold it once they "
            "finish (a queue, not a fault)"
        )
    return Severity.MEDIUM, "whether any node could ever hold it is unknown (no node status)"


def _cause(message: str) -> str:
    """Every blocker the scheduler's message names, most specific first."""
    lowered = message.lower()
    meanings = list(dict.fromkeys(m for fragment, m in _CAUSES if fragment in lowered))
    if len(meanings) > 1 and _CAUSES[-1][1] in meanings:
        meanings.remove(_CAUSES[-1][1])  # "insufficient" already explained by a GPU cause
    return "; ".join(meanings) or "see the scheduler's message in the pod's events"


def _pods(count: int) -> str:
    return f"{count} GPU pod" + ("s" if count != 1 else "")


def _controller_name(snapshot: Snapshot, pod: Resource) -> str:
    """The controller named in ownerReferences when it is not in the input."""
    if controller_owner(snapshot, pod) is not None:
        return ""
    for ref in map(as_mapping, as_list(pod.metadata.get("ownerReferences"))):
        if ref.get("controller") is True:
            return f"{ref.get('kind', '')} {ref.get('name', '')}"
    return ""


def _pod_scheduled(pod: Resource) -> Mapping[str, Any]:
    for condition in map(as_mapping, as_list(pod.status.get("conditions"))):
        if condition.get("type") == "PodScheduled":
            return condition
    return {}


def _pod_group(pod: Resource) -> str:
    annotations = pod.annotations
    for key in _GROUP_ANNOTATIONS:
        if annotations.get(key):
            return annotations[key]
    return pod.labels.get(_GROUP_LABEL, "")


def _group_phase(snapshot: Snapshot, namespace: str, name: str) -> str:
    for type_ in _POD_GROUPS:
        group = snapshot.get(type_, namespace, name)
        if group is not None:
            return f"PodGroup {name} is {group.status.get('phase') or 'without status'}"
    return f"PodGroup {name} (not in the input)"


def _events_by_pod(snapshot: Snapshot) -> dict[tuple[str, str], list[_Event]]:
    """Pod events by (namespace, pod name), oldest first; core/v1 and events.k8s.io/v1."""
    out: dict[tuple[str, str], list[_Event]] = defaultdict(list)
    for event in snapshot.of("Event"):
        about = event_regarding(event)
        if about.get("kind") != "Pod":
            continue
        namespace = str(about.get("namespace") or event.ref.namespace)
        out[(namespace, str(about.get("name", "")))].append(
            _Event(str(event.raw.get("reason", "")), event_note(event), event_time(event))
        )
    for found in out.values():
        found.sort(key=lambda e: e.time)
    return out
