from __future__ import annotations

from collections.abc import Iterator

from gpu_audit.api import (
    AdmissionRule,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_mapping,
    check,
    failed,
    passed,
)

PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
# Shared file systems that hold datasets and checkpoints created outside Kubernetes.
SHARED_FS_DRIVERS = frozenset(
    {
        "fsx.csi.aws.com",
        "efs.csi.aws.com",
        "file.csi.azure.com",
        "filestore.csi.storage.gke.io",
        "com.google.csi.filestore",
        "nfs.csi.k8s.io",
    }
)


@check(
    id="GPU-STO-002",
    title="Statically provisioned FSx, EFS and other shared file-system PVs use reclaim policy Retain",
    category=Category.STORAGE,
    severity=Severity.HIGH,
    requires=("PersistentVolume",),
    rationale="""
        A static PV points at a file system Kubernetes did not create: the shared dataset or
        checkpoint store of a GPU fleet. With reclaim policy Delete, deleting the claim hands
        the volume to the deleter; current external-provisioners call the CSI DeleteVolume for
        the volumeHandle (for FSx the file system id, and the driver's IAM policy allows
        fsx:DeleteFileSystem), older ones leave the PV Failed. Recycle is deprecated and not
        supported by CSI drivers.
    """,
    detection="""
        PersistentVolumes of the FSx, EFS, Azure Files, Filestore and NFS CSI drivers that are
        static: no pv.kubernetes.io/provisioned-by annotation, or a name that is not the
        provisioner's pvc-<uid>. Delete and Recycle fail; an unset policy is Retain for
        manually created PVs. Not flagged: dynamically provisioned PVs (pvc-* with
        provisioned-by, including EFS access points), whose Delete is the StorageClass's
        intended lifecycle.
    """,
    severity_evidence="""
        Delete is high: deleting the claim, a routine cleanup, can delete the shared dataset
        or checkpoint store; critical when the PV is already Released (its claim is gone, the
        deleter acts on it now). Recycle is low: CSI drivers do not support it, so the PV
        only ends up Failed and needs a manual fix; no data is lost.
    """,
    remediation="""
        kubectl patch pv $name -p '{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}'
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/concepts/storage/persistent-volumes/#reclaiming",
        "https://github.com/kubernetes-sigs/aws-fsx-csi-driver/blob/master/examples/kubernetes/static_provisioning/README.md",
        "https://github.com/kubernetes-sigs/aws-efs-csi-driver/issues/1207",
    ),
    admission=AdmissionRule(
        scope="object",
        kinds=("PersistentVolume",),
        where=f"""
            object.spec.?csi.?driver.orValue('') in {sorted(SHARED_FS_DRIVERS)}
            && !(object.metadata.?annotations.orValue({{}})[?'{PROVISIONED_BY}'].hasValue()
                 && object.metadata.name.startsWith('pvc-'))
        """,
        valid="""
            !(object.spec.?persistentVolumeReclaimPolicy.orValue('Retain')
              in ['Delete', 'Recycle'])
        """,
        message="a statically provisioned shared file-system PV has reclaim policy Delete (or "
        "Recycle): deleting its claim can delete the file system",
    ),
)
def static_shared_volumes_retained(snapshot: Snapshot) -> Iterator[Result]:
    for pv in snapshot.of("PersistentVolume"):
        driver = str(as_mapping(pv.spec.get("csi")).get("driver", ""))
        if driver not in SHARED_FS_DRIVERS or not _is_static(pv):
            continue
        policy = str(pv.spec.get("persistentVolumeReclaimPolicy") or "Retain")
        path = "spec.persistentVolumeReclaimPolicy"
        if policy == "Delete":
            released = pv.status.get("phase") == "Released"
            handle = as_mapping(pv.spec.get("csi")).get("volumeHandle", "")
            yield failed(
                pv,
                f"static {driver} PV has reclaim policy Delete: deleting its claim can delete "
                f"the file system {handle!s}"
                + ("; its claim is already gone (Released)" if released else ""),
                path=path,
                severity=Severity.CRITICAL if released else Severity.HIGH,
            )
        elif policy == "Recycle":
            yield failed(
                pv,
                f"static {driver} PV has reclaim policy Recycle, deprecated and unsupported by CSI",
                path=path,
                severity=Severity.LOW,
            )
        else:
            yield passed(pv, f"static {driver} PV keeps the file system (reclaim policy {policy})")


def _is_static(pv: Resource) -> bool:
    """Dynamic PVs carry the provisioner's annotation and its pvc-<uid> name, both."""
    return PROVISIONED_BY not in pv.annotations or not pv.ref.name.startswith("pvc-")
