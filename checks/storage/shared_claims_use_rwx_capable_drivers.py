from __future__ import annotations

from collections.abc import Iterator

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
    failed,
    passed,
    str_map,
)

from ._common import RWX_FILESYSTEM, SINGLE_NODE, claim_consumers, claim_driver


@check(
    id="GPU-STO-001",
    title="ReadWriteMany claims use a StorageClass or driver that can provide RWX",
    category=Category.STORAGE,
    severity=Severity.HIGH,
    requires=("PersistentVolumeClaim", ("StorageClass", "PersistentVolume")),
    rationale="""
        Multi-node training and serving replicas share datasets, model caches and checkpoints
        through ReadWriteMany volumes. A block-storage driver (EBS, GCE PD, Azure Disk, Ceph
        RBD, local paths) provides single-node file systems only: the claim never provisions
        (ProvisioningFailed), or pods on a second node hang in ContainerCreating with
        Multi-Attach errors while their GPUs sit idle.
    """,
    detection="""
        PersistentVolumeClaims whose accessModes include ReadWriteMany: the driver is the bound
        PV's (spec.volumeName) or the StorageClass provisioner (storageClassName, else the
        default class). Drivers known to offer shared file systems (EFS, FSx, Azure Files,
        CephFS, Filestore, NFS, ...) pass; single-node drivers fail, except volumeMode Block on
        a multi-attach-capable class (EBS io1/io2, Azure Disk maxShares > 1, GCE PD). Not
        evaluated: drivers in neither list, claims whose class is not in the input, and
        storageClassName "" claims without a PV. ReadOnlyMany is not this check.
    """,
    severity_evidence="""
        High when a GPU pod template mounts the claim (its pods hang unprovisioned or in
        Multi-Attach errors while their GPUs sit idle); medium when no workload in the input
        mounts it (the claim is broken, its user unknown); low when only CPU workloads do.
    """,
    remediation="""
        # $kind $namespace/$name: RWX is requested from $driver; use a shared file system.
        # A claim's storage class cannot change: create a new claim, point the workloads'
        # claimName at $name-shared (copy the data over if the old claim is Bound), then
        # kubectl delete pvc $name -n $namespace
        apiVersion: storage.k8s.io/v1
        kind: StorageClass
        metadata:
          name: efs-shared
        provisioner: efs.csi.aws.com
        parameters:
          provisioningMode: efs-ap
          fileSystemId: fs-0123456789abcdef0   # your EFS file system
          directoryPerms: "700"
        ---
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata:
          name: $name-shared
          namespace: $namespace
        spec:
          accessModes: [ReadWriteMany]
          storageClassName: efs-shared
          resources:
            requests:
              storage: $storage
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://kubernetes.io/docs/concepts/storage/persistent-volumes/#access-modes",
        "https://github.com/kubernetes-csi/docs/blob/master/book/src/drivers.md",
    ),
)
def shared_claims_use_rwx_capable_drivers(snapshot: Snapshot) -> Iterator[Result]:
    consumers = claim_consumers(snapshot)
    for pvc in snapshot.of("PersistentVolumeClaim"):
        if "ReadWriteMany" not in [str(m) for m in as_list(pvc.spec.get("accessModes"))]:
            continue
        driver, sc = claim_driver(snapshot, pvc)
        if driver in RWX_FILESYSTEM:
            yield passed(pvc, f"ReadWriteMany from {driver}, a shared file system")
        elif driver in SINGLE_NODE:
            if pvc.spec.get("volumeMode") == "Block" and _multi_attach(driver, sc):
                yield passed(pvc, f"ReadWriteMany block volume from multi-attach {driver}")
                continue
            requests = as_mapping(as_mapping(pvc.spec.get("resources")).get("requests"))
            storage = str(requests.get("storage", "100Gi"))
            users = consumers.get((pvc.ref.namespace, pvc.ref.name), [])
            gpu = sorted({str(t.owner.ref) for t in users if t.requests_gpu})
            if gpu:
                severity, who = Severity.HIGH, f"; GPU workloads mount it: {', '.join(gpu[:3])}"
            elif users:
                severity, who = Severity.LOW, "; only CPU workloads mount it"
            else:
                severity, who = Severity.MEDIUM, "; no workload in the input mounts it"
            yield failed(
                pvc,
                f"ReadWriteMany requested from {driver}, which provides single-node volumes "
                f"only{who}",
                path="spec.accessModes",
                severity=severity,
                fix={"driver": driver, "storage": storage},
            )


def _multi_attach(driver: str, sc: Resource | None) -> bool:
    params = str_map(sc.raw.get("parameters")) if sc is not None else {}
    if driver == "ebs.csi.aws.com":
        return params.get("type", "").lower() in ("io1", "io2")
    if driver == "disk.csi.azure.com":
        shares = params.get("maxShares", params.get("maxshares", "1"))
        return shares.isdigit() and int(shares) > 1
    return driver == "pd.csi.storage.gke.io"
