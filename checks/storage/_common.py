"""StorageClass resolution, driver capabilities and model-weight estimates shared by the
storage checks."""

from __future__ import annotations

from collections import defaultdict

from gpu_audit.api import (
    PodTemplate,
    Resource,
    Snapshot,
    as_list,
    as_mapping,
    pod_templates,
)

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)

# Shipped as data, from the kubernetes-csi drivers list ("Supported Access Modes").
RWX_FILESYSTEM = frozenset(
    {
        "efs.csi.aws.com",
        "fsx.csi.aws.com",
        "file.csi.azure.com",
        "cephfs.csi.ceph.com",
        "filestore.csi.storage.gke.io",
        "com.google.csi.filestore",
        "nfs.csi.k8s.io",
        "blob.csi.azure.com",
        "gcsfuse.csi.storage.gke.io",
        "s3.csi.aws.com",
        "beegfs.csi.netapp.com",
        "exa.csi.ddn.com",
        "spectrumscale.csi.ibm.com",
        "csi.juicefs.com",
        "driver.longhorn.io",
        "kubernetes.io/nfs",
    }
)
SINGLE_NODE = frozenset(
    {
        "ebs.csi.aws.com",
        "pd.csi.storage.gke.io",
        "disk.csi.azure.com",
        "rbd.csi.ceph.com",
        "rancher.io/local-path",
        "kubernetes.io/no-provisioner",
        "topolvm.io",
        "local.csi.openebs.io",
        "kubernetes.io/aws-ebs",
        "kubernetes.io/gce-pd",
        "kubernetes.io/azure-disk",
    }
)
# In-tree PV sources, named like the provisioner that would have created them.
_IN_TREE_SOURCES = {
    "awsElasticBlockStore": "kubernetes.io/aws-ebs",
    "gcePersistentDisk": "kubernetes.io/gce-pd",
    "azureDisk": "kubernetes.io/azure-disk",
    "nfs": "kubernetes.io/nfs",
    "local": "kubernetes.io/no-provisioner",
}


def default_storage_class(snapshot: Snapshot) -> Resource | None:
    """The default StorageClass; with several, the API server picks the newest, which is not
    knowable offline, so the first by name stands in."""
    for sc in snapshot.of("StorageClass"):
        if any(sc.annotations.get(a, "").lower() == "true" for a in DEFAULT_CLASS_ANNOTATIONS):
            return sc
    return None


def claim_storage_class(snapshot: Snapshot, pvc: Resource) -> Resource | None:
    """The StorageClass a claim provisions from: its storageClassName, else the default.
    `""` means "no class, bind a pre-created PV", so None."""
    name = pvc.spec.get("storageClassName")
    if name is None:
        return default_storage_class(snapshot)
    if name == "":
        return None
    return snapshot.get("StorageClass", "", str(name))


def claim_consumers(snapshot: Snapshot) -> dict[tuple[str, str], list[PodTemplate]]:
    """(namespace, claim name) -> the pod templates that mount the claim."""
    found: dict[tuple[str, str], list[PodTemplate]] = defaultdict(list)
    for template in pod_templates(snapshot):
        for volume in map(as_mapping, as_list(template.spec.get("volumes"))):
            claim = as_mapping(volume.get("persistentVolumeClaim")).get("claimName")
            if claim:
                found[(template.owner.ref.namespace, str(claim))].append(template)
    return found


def pv_driver(pv: Resource) -> str:
    csi = as_mapping(pv.spec.get("csi"))
    if csi:
        return str(csi.get("driver", ""))
    for key, driver in _IN_TREE_SOURCES.items():
        if key in pv.spec:
            return driver
    return ""


def claim_driver(snapshot: Snapshot, pvc: Resource) -> tuple[str, Resource | None]:
    """The driver behind a claim (from its bound PV first), and the StorageClass if used."""
    volume = pvc.spec.get("volumeName")
    if volume:
        pv = snapshot.get("PersistentVolume", "", str(volume))
        if pv is not None:
            return pv_driver(pv), None
    sc = claim_storage_class(snapshot, pvc)
    return (str(sc.raw.get("provisioner", "")), sc) if sc is not None else ("", None)
