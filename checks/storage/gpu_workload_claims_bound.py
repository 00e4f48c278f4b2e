from __future__ import annotations

from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    event_note,
    event_regarding,
    event_time,
    failed,
    passed,
)

from ._common import claim_consumers, claim_storage_class


@check(
    id="GPU-STO-005",
    title="PersistentVolumeClaims used by GPU workloads are Bound",
    category=Category.STORAGE,
    severity=Severity.HIGH,
    requires=("PersistentVolumeClaim", "StorageClass", WORKLOAD_TYPES),
    rationale="""
        A pod whose claim stays Pending never starts: the GPU job waits while GPU nodes,
        possibly autoscaled up for it, sit idle and billed. The cause is usually a
        StorageClass name that does not exist, no default class, `storageClassName: ""`
        without a matching PV, or a provisioner that is not installed.
    """,
    detection="""
        Live only: claims with status.phase. Pending claims fail with the most likely cause
        (unknown StorageClass, no default class, "" without a PV, else the last
        ProvisioningFailed event, else "waiting for the provisioner"): high when a GPU pod
        template mounts the claim, low otherwise. Bound claims used by GPU workloads pass.
        Not flagged: WaitForFirstConsumer claims with no pod yet (they bind when one is
        scheduled) and manifests without status. Claim age is not judged: checks have no clock,
        so a claim created seconds ago is reported too.
    """,
    severity_evidence="""
        High when a GPU pod template mounts the Pending claim (the GPU work cannot start);
        low when only CPU workloads, or none in the input, use it.
    """,
    remediation="""
        kubectl -n $namespace describe persistentvolumeclaim $name
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/concepts/storage/persistent-volumes/#lifecycle-of-a-volume-and-claim",
        "https://kubernetes.io/docs/concepts/storage/storage-classes/#volume-binding-mode",
    ),
)
def gpu_workload_claims_bound(snapshot: Snapshot) -> Iterator[Result]:
    consumers = claim_consumers(snapshot)
    for pvc in snapshot.of("PersistentVolumeClaim"):
        phase = pvc.status.get("phase")
        if not phase:
            continue  # static manifest: no status to judge
        users = consumers.get((pvc.ref.namespace, pvc.ref.name), [])
        gpu = any(t.requests_gpu for t in users)
        if phase == "Bound":
            if gpu:
                yield passed(pvc, "is Bound")
            continue
        if phase != "Pending":
            continue
        sc = claim_storage_class(snapshot, pvc)
        if (
            not users
            and sc is not None
            and sc.raw.get("volumeBindingMode") == "WaitForFirstConsumer"
        ):
            continue  # binds when its first pod is scheduled
        reason = _reason(snapshot, pvc, sc)
        who = ", ".join(sorted({str(t.owner.ref) for t in users})) or "no workload in the input"
        yield failed(
            pvc,
            f"is Pending: {reason}; used by {who}",
            path="status.phase",
            severity=None if gpu else Severity.LOW,
        )


def _reason(snapshot: Snapshot, pvc: Resource, sc: Resource | None) -> str:
    name = pvc.spec.get("storageClassName")
    if name == "":
        return 'storageClassName "" needs a pre-created PV and none is bound'
    if name is None and sc is None:
        return "no storageClassName and no default StorageClass"
    if sc is None:
        return f"StorageClass {name} does not exist"
    events = [
        e
        for e in snapshot.in_namespace("Event", pvc.ref.namespace)
        if event_regarding(e).get("name") == pvc.ref.name
        and event_regarding(e).get("kind") == "PersistentVolumeClaim"
        and e.raw.get("reason") == "ProvisioningFailed"
    ]
    if events:
        # The newest one (ties: the last in the input): events are not listed in time order.
        newest = sorted(events, key=event_time)[-1]
        message = " ".join(event_note(newest).split())
        return f"ProvisioningFailed: {message[:200]}"
    return f"waiting for provisioner {sc.raw.get('provisioner', '')}"
