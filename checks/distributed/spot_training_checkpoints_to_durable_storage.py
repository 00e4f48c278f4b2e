from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    Category,
    Container,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    passed,
    runs_on_spot,
)
from gpu_audit.checks.distributed._common import (
    TRAINING_TYPES,
    gpu_training_jobs,
    pods_of,
    was_disrupted,
)

# Volume sources whose data outlives the pod and the node: claims, network file systems and
# CSI drivers (FSx, EFS, Filestore, object-store FUSE drivers). emptyDir, hostPath and generic
# ephemeral volumes are lost with a reclaimed spot node.
_DURABLE_SOURCES = frozenset(
    {
        "persistentVolumeClaim",
        "csi",
        "nfs",
        "awsElasticBlockStore",
        "gcePersistentDisk",
        "azureDisk",
        "azureFile",
        "cephfs",
        "rbd",
        "glusterfs",
        "iscsi",
        "fc",
        "cinder",
        "portworxVolume",
    }
)
_OBJECT_STORE_PREFIXES = ("s3://", "gs://", "abfs://", "abfss://", "az://", "wasbs://")
_MIN_GRACE_SECONDS = 60
_DEFAULT_GRACE_SECONDS = 30


@check(
    id="GPU-DIST-005",
    title="Training pods on spot GPU capacity checkpoint to durable storage and get time to do it",
    category=Category.DISTRIBUTED,
    severity=Severity.MEDIUM,
    requires=(TRAINING_TYPES,),
    remediation_root="pod_spec",
    rationale="""
        Spot GPUs are reclaimed with about two minutes' notice on AWS (less elsewhere). A job
        that keeps its state in the container filesystem or an emptyDir restarts from step 0 at
        every reclaim, so cheap spot capacity ends up costing more than on-demand; and with the
        default 30 s grace period, even a job that checkpoints on SIGTERM is killed mid-write.
    """,
    detection="""
        GPU pod templates of Jobs, CronJobs, PyTorchJobs, MPIJobs and Volcano Jobs that pin or
        opt in to spot/preemptible nodes (Karpenter, EKS, GKE, AKS capacity labels in
        nodeSelector or required node affinity, or a spot taint toleration). Fails when no
        GPU container mounts a writable durable volume (PVC, CSI, NFS or another network
        disk; emptyDir, hostPath and generic ephemeral volumes do not count) and no argument or
        env value points at an object store (s3://, gs://, abfs://, az://; a heuristic); and,
        with durable storage, when terminationGracePeriodSeconds is below 60 (default 30).
        Templates that can reach spot only through a NodePool that allows it are not
        evaluated; serving Deployments are GPU-COST-004's.
    """,
    severity_evidence="""
        Medium when a job on spot capacity can only checkpoint to ephemeral storage: the spot
        opt-in is the evidence that a reclaim will restart it from step 0. High when a pod of
        the job in the input already carries a DisruptionTarget condition (a reclaim or
        eviction hit it and its progress was lost). A grace period under 60 s with durable
        checkpoints is low (only the progress since the last checkpoint is at risk), medium
        with that disruption evidence.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # <kind> <namespace>/<name>: checkpoints only to ephemeral storage on spot GPUs
        terminationGracePeriodSeconds: 120   # flush the last checkpoint on SIGTERM (when it is under 60s)
        containers:
          - name: <container>
            volumeMounts:
              - {name: checkpoints, mountPath: /checkpoints}
        volumes:
          - name: checkpoints
            persistentVolumeClaim: {claimName: checkpoints}   # RWX (FSx, EFS, Filestore) or an object-store CSI
        # with durable storage but a grace period too short to checkpoint, only:
        #   terminationGracePeriodSeconds: 120   # AWS gives about 2 minutes
    """,
    references=(
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html",
        "https://github.com/aws/karpenter-provider-aws/blob/main/designs/interruption-handling.md",
        "https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination",
        "https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions",
        "https://kubernetes.io/docs/concepts/storage/ephemeral-volumes/",
    ),
)
def spot_training_checkpoints_to_durable_storage(snapshot: Snapshot) -> Iterator[Result]:
    for job in gpu_training_jobs(snapshot):
        disrupted = sum(1 for p in pods_of(snapshot, job.resource) if was_disrupted(p))
        for template in job.templates:
            if runs_on_spot(template):
                yield _judge(template, disrupted)


def _judge(template: PodTemplate, disrupted: int) -> Result:
    trainers = template.gpu_containers()
    durable = [m for c in trainers for m in _durable_mounts(template, c)]
    object_store = any(_mentions_object_store(c) for c in trainers)
    grace = template.spec.get("terminationGracePeriodSeconds", _DEFAULT_GRACE_SECONDS)
    short_grace = isinstance(grace, int) and grace < _MIN_GRACE_SECONDS
    container = trainers[0].name if trainers else "trainer"
    hit = (
        f" ({disrupted} of its pods already disrupted: that progress is lost)" if disrupted else ""
    )
    if not durable and not object_store:
        return failed(
            template,
            "runs on spot GPUs but can only write checkpoints to ephemeral storage: every "
            "reclaim restarts training from the start" + hit,
            severity=Severity.HIGH if disrupted else None,
            fix={
                "problem": "no durable checkpoint volume",
                "snippet": _volume_snippet(container, short_grace),
            },
        )
    if short_grace:
        return failed(
            template,
            f"runs on spot GPUs with terminationGracePeriodSeconds {grace}: too short to "
            "flush a checkpoint after SIGTERM" + hit,
            path=f"{template.path}.terminationGracePeriodSeconds",
            severity=Severity.MEDIUM if disrupted else Severity.LOW,
            fix={
                "problem": "grace period too short to checkpoint",
                "snippet": "terminationGracePeriodSeconds: 120   # AWS gives about 2 minutes",
            },
        )
    where = ", ".join(sorted(durable)) if durable else "an object store"
    return passed(template, f"runs on spot GPUs and checkpoints to {where}")


def _durable_mounts(template: PodTemplate, container: Container) -> list[str]:
    volumes = {
        str(v.get("name", "")): v for v in map(as_mapping, as_list(template.spec.get("volumes")))
    }
    out = []
    for mount in map(as_mapping, as_list(container.raw.get("volumeMounts"))):
        volume = volumes.get(str(mount.get("name", "")))
        if volume is None or mount.get("readOnly") is True:
            continue
        source = next((k for k in volume if k in _DURABLE_SOURCES), "")
        if source and not _read_only(volume[source]):
            out.append(f"{mount.get('mountPath', '')} ({source})")
    return out


def _read_only(source: Any) -> bool:
    return as_mapping(source).get("readOnly") is True


def _mentions_object_store(container: Container) -> bool:
    texts = [
        str(p) for p in as_list(container.raw.get("command")) + as_list(container.raw.get("args"))
    ]
    texts += [str(e.get("value", "")) for e in container.env().values() if _has_value(e)]
    return any(prefix in text for text in texts for prefix in _OBJECT_STORE_PREFIXES)


def _has_value(entry: Mapping[str, Any]) -> bool:
    return isinstance(entry.get("value"), str)


def _volume_snippet(container: str, short_grace: bool) -> str:
    grace = "terminationGracePeriodSeconds: 120   # flush the last checkpoint on SIGTERM\n"
    return (
        (grace if short_grace else "")
        + "containers:\n"
        + f"  - name: {container}\n"
        + "    volumeMounts:\n"
        + "      - {name: checkpoints, mountPath: /checkpoints}\n"
        + "volumes:\n"
        + "  - name: checkpoints\n"
        + "    persistentVolumeClaim: {claimName: checkpoints}   # RWX (FSx, EFS, Filestore) "
        + "or an object-store CSI"
    )
