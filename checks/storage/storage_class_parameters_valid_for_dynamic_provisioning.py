from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    passed,
    str_map,
)

from ._common import claim_storage_class

FSX = "fsx.csi.aws.com"
EFS = "efs.csi.aws.com"
_PROVISIONER_KEYS = "csi.storage.k8s.io/"
_STATIC_KEYS = {
    "volumehandle",
    "dnsname",
    "mountname",
    "filesystemid",
    "volumeid",
    "fsid",
}
_EFS_PV_KEYS = {"volumehandle", "dnsname", "mountname"}
_SUBDIR_KEYS = {"dnsname", "mountname", "basedir"}
_PERSISTENT_ONLY = (
    "perUnitStorageThroughput",
    "kmsKeyId",
    "driveCacheType",
    "efaEnabled",
    "metadataConfigurationMode",
    "metadataIops",
)
_PERSISTENT_2_ONLY = ("efaEnabled", "metadataConfigurationMode", "metadataIops")
_THROUGHPUT = {
    "PERSISTENT_1": {"50", "100", "200", "12", "40"},
    "PERSISTENT_2": {"125", "250", "500", "1000"},
}

# (message, severity, parameter keys the fix drops)
Problem = tuple[str, Severity, tuple[str, ...]]


@check(
    id="GPU-STO-003",
    title="FSx for Lustre and other CSI StorageClasses carry only valid dynamic-provisioning parameters",
    category=Category.STORAGE,
    severity=Severity.MEDIUM,
    requires=("StorageClass",),
    rationale="""
        A StorageClass creates new volumes. Static-volume fields (volumeHandle, dnsname,
        mountname, an FSx fileSystemId) in it do not mount the existing dataset: older FSx
        driver releases ignore unknown keys and create a brand-new, empty, billed file system,
        current ones reject the claim, which stays Pending.
        PERSISTENT-only options on a SCRATCH deployment type, or throughput values the
        deployment type does not offer, make CreateFileSystem fail and leave every dataset
        claim Pending while GPU jobs wait.
    """,
    detection="""
        FSx StorageClasses with dnsname use subdirectory provisioning (current drivers): only
        dnsname, mountname and basedir are valid there. Otherwise (new file systems):
        static-volume keys (high), missing subnetId or securityGroupIds,
        PERSISTENT-only parameters (perUnitStorageThroughput, kmsKeyId, driveCacheType,
        efaEnabled, metadata*) or HDD/INTELLIGENT_TIERING storage with SCRATCH_1/SCRATCH_2
        (the default is SCRATCH_1), PERSISTENT_2-only options on PERSISTENT_1, HDD without
        driveCacheType, per-unit throughput outside the deployment type's values (medium),
        automatic backups on scratch or retention above 90 days. EFS: PV fields volumeHandle/
        dnsname/mountname (low); fileSystemId with provisioningMode efs-ap is valid. Other
        drivers: volumeHandle (low). Keys prefixed csi.storage.k8s.io/ are always allowed.
    """,
    severity_evidence="""
        Each problem has the severity of what it does to the claims of the class (static-volume
        keys in an FSx class: high, a failing CreateFileSystem: medium, keys a driver ignores:
        low). When the input holds PersistentVolumeClaims and none provisions from the class
        (by name, or as the default class), every problem is low: no claim waits on it yet.
    """,
    remediation="""
        # $kind $name: $problem
        # StorageClass parameters are immutable: `replace --force` deletes the class and
        # creates it again with only provisioning parameters (bound claims keep their volumes;
        # an existing file system is mounted through a PersistentVolume instead; for
        # throughput, KMS or backups choose a PERSISTENT deploymentType).
        kubectl replace --force -f - <<'EOF'
        apiVersion: storage.k8s.io/v1
        kind: StorageClass
        metadata:
          name: $name
        provisioner: $provisioner
        parameters: $parameters$kept
        EOF
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # StorageClass <name>: parameters that are not dynamic-provisioning parameters.
        # StorageClass parameters are immutable: `replace --force` deletes the class and
        # creates it again with only provisioning parameters (bound claims keep their volumes;
        # an existing file system is mounted through a PersistentVolume instead; for
        # throughput, KMS or backups choose a PERSISTENT deploymentType).
        kubectl replace --force -f - <<'EOF'
        apiVersion: storage.k8s.io/v1
        kind: StorageClass
        metadata:
          name: <name>
        provisioner: <provisioner>
        parameters: {<the valid parameters>}   # FSx for Lustre: with subnetId and securityGroupIds
        reclaimPolicy: <as-it-is>              # and volumeBindingMode, allowVolumeExpansion, mountOptions as they are
        EOF
    """,
    references=(
        "https://github.com/kubernetes-sigs/aws-fsx-csi-driver/blob/master/examples/kubernetes/dynamic_provisioning/README.md",
        "https://github.com/kubernetes-sigs/aws-fsx-csi-driver/blob/master/examples/kubernetes/static_provisioning/README.md",
        "https://github.com/kubernetes-sigs/aws-efs-csi-driver/blob/master/docs/README.md",
        "https://kubernetes.io/docs/reference/kubectl/generated/kubectl_replace/",
    ),
)
def storage_class_parameters_valid_for_dynamic_provisioning(
    snapshot: Snapshot,
) -> Iterator[Result]:
    unused = _used_classes(snapshot)
    for sc in snapshot.of("StorageClass"):
        provisioner = str(sc.raw.get("provisioner", ""))
        params = {
            k: v
            for k, v in str_map(sc.raw.get("parameters")).items()
            if not k.startswith(_PROVISIONER_KEYS)
        }
        if provisioner == FSX and "dnsname" in params:
            problems = _fsx_subdirectory(params)
        elif provisioner == FSX:
            problems = [*_fsx_static(params), *_fsx_deployment(params)]
        elif provisioner == EFS:
            problems = _static_keys(params, _EFS_PV_KEYS, "PersistentVolume fields")
        elif "volumehandle" in {k.lower() for k in params}:
            problems = _static_keys(params, {"volumehandle"}, "a PersistentVolume field")
        else:
            continue
        if problems and unused(sc):
            problems = [
                (f"{text} (no claim in the input uses this class)", Severity.LOW, keys)
                for text, _, keys in problems
            ]
        yield from _results(sc, provisioner, params, problems)


def _used_classes(snapshot: Snapshot) -> Callable[[Resource], bool]:
    """A test of whether the input shows that no claim provisions from a class: claims are in
    the input and none names it, or takes it as the default."""
    claims = snapshot.of("PersistentVolumeClaim")
    used = {sc.ref.name for pvc in claims if (sc := claim_storage_class(snapshot, pvc)) is not None}
    return lambda sc: bool(claims) and sc.ref.name not in used


def _results(
    sc: Resource, provisioner: str, params: Mapping[str, str], problems: list[Problem]
) -> Iterator[Result]:
    if not problems:
        yield passed(sc, f"{provisioner} parameters are valid for dynamic provisioning")
        return
    cleaned = dict(params)
    for _, _, keys in problems:
        for key in keys:
            cleaned.pop(key, None)
    if provisioner == FSX:
        cleaned.setdefault("subnetId", "subnet-REPLACE-ME")
        cleaned.setdefault("securityGroupIds", "sg-REPLACE-ME")
    for problem, severity, _ in problems:
        yield failed(
            sc,
            problem,
            path="parameters",
            severity=severity if severity is not Severity.MEDIUM else None,
            fix={
                "problem": problem,
                "provisioner": provisioner,
                "parameters": json.dumps(cleaned, sort_keys=True),
                "kept": "".join(
                    f"\n{key}: {json.dumps(sc.raw[key])}" for key in _KEPT if key in sc.raw
                ),
            },
        )


# The rest of the class, recreated as it is.
_KEPT = ("reclaimPolicy", "volumeBindingMode", "allowVolumeExpansion", "mountOptions")


def _static_keys(params: Mapping[str, str], keys: set[str], what: str) -> list[Problem]:
    bad = sorted(k for k in params if k.lower() in keys)
    if not bad:
        return []
    return [(f"{', '.join(bad)} are {what}, not StorageClass parameters", Severity.LOW, tuple(bad))]


def _fsx_subdirectory(params: Mapping[str, str]) -> list[Problem]:
    """Current drivers provision subdirectories of an existing file system when `dnsname` is
    set; then only dnsname, mountname and basedir belong in the class."""
    bad = sorted(k for k in params if k not in _SUBDIR_KEYS)
    problems: list[Problem] = []
    if bad:
        problems.append(
            (
                f"{', '.join(bad)} are not valid with dnsname (subdirectory provisioning of an "
                "existing file system takes only dnsname, mountname and basedir)",
                Severity.MEDIUM,
                tuple(bad),
            )
        )
    if "mountname" not in params:
        problems.append(
            ("subdirectory provisioning (dnsname) also needs mountname", Severity.MEDIUM, ())
        )
    return problems


def _fsx_static(params: Mapping[str, str]) -> list[Problem]:
    problems: list[Problem] = []
    bad = sorted(k for k in params if k.lower() in _STATIC_KEYS)
    if bad:
        problems.append(
            (
                f"static-volume keys {', '.join(bad)} in a file-system-provisioning "
                "StorageClass: older drivers ignore them and create a new, empty, billed file "
                "system, current ones reject the claim; mount an existing file system with a "
                "PersistentVolume (or subdirectory provisioning: dnsname + mountname)",
                Severity.HIGH,
                tuple(bad),
            )
        )
    missing = [k for k in ("subnetId", "securityGroupIds") if not params.get(k)]
    if missing:
        problems.append(
            (f"FSx dynamic provisioning requires {', '.join(missing)}", Severity.MEDIUM, ())
        )
    return problems


def _fsx_deployment(params: Mapping[str, str]) -> list[Problem]:
    deployment = params.get("deploymentType", "SCRATCH_1").upper()
    storage = params.get("storageType", "SSD").upper()
    problems: list[Problem] = []
    if deployment.startswith("SCRATCH"):
        bad = [k for k in _PERSISTENT_ONLY if k in params]
        if bad:
            problems.append(
                (
                    f"{', '.join(bad)} are PERSISTENT-only but deploymentType is {deployment}",
                    Severity.MEDIUM,
                    tuple(bad),
                )
            )
        if storage in ("HDD", "INTELLIGENT_TIERING"):
            problems.append(
                (
                    f"storageType {storage} is not valid with {deployment}",
                    Severity.MEDIUM,
                    ("storageType",),
                )
            )
        if _backups_requested(params):
            problems.append(
                (
                    f"automatic backups are not supported on {deployment} file systems",
                    Severity.LOW,
                    ("automaticBackupRetentionDays", "dailyAutomaticBackupStartTime"),
                )
            )
    if deployment == "PERSISTENT_1":
        bad = [k for k in _PERSISTENT_2_ONLY if k in params]
        if bad:
            problems.append(
                (f"{', '.join(bad)} are PERSISTENT_2-only", Severity.MEDIUM, tuple(bad))
            )
    if storage == "HDD" and "driveCacheType" not in params:
        problems.append(("storageType HDD requires driveCacheType", Severity.MEDIUM, ()))
    throughput = params.get("perUnitStorageThroughput")
    allowed = _THROUGHPUT.get(deployment)
    if throughput is not None and allowed is not None and throughput not in allowed:
        problems.append(
            (
                f"perUnitStorageThroughput {throughput} is not one of {sorted(allowed, key=int)} "
                f"for {deployment}",
                Severity.MEDIUM,
                (),
            )
        )
    retention = params.get("automaticBackupRetentionDays", "")
    if retention.isdigit() and int(retention) > 90:
        problems.append(("automaticBackupRetentionDays is capped at 90", Severity.MEDIUM, ()))
    return problems


def _backups_requested(params: Mapping[str, str]) -> bool:
    retention = params.get("automaticBackupRetentionDays", "0")
    return (retention.isdigit() and int(retention) > 0) or "dailyAutomaticBackupStartTime" in params
