import difflib
import json
from collections.abc import Iterator
from typing import Any

import yaml

from gpu_audit.api import (
    CLUSTER_QUEUE,
    KUEUE_QUEUED_TYPES,
    LOCAL_QUEUE,
    QUEUE_NAME_LABEL,
    Category,
    FixKind,
    QueuedWorkload,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    label_selector_matches,
    namespace_labels,
    passed,
    queued_workloads,
    workload_gpus,
)


@check(
    id="GPU-QUOTA-004",
    title="Kueue queue-name labels name a LocalQueue of the workload's namespace",
    category=Category.QUOTA,
    severity=Severity.HIGH,
    requires=(KUEUE_QUEUED_TYPES, (LOCAL_QUEUE, CLUSTER_QUEUE)),
    rationale="""
        Kueue creates every labelled job suspended (pods gated) and admits it through the
        LocalQueue its kueue.x-k8s.io/queue-name label names, in the job's own namespace. When
        no such LocalQueue exists the Workload stays Inadmissible ("LocalQueue <name> doesn't
        exist") and the job never starts; nothing else in the cluster reports it.
    """,
    detection="""
        Jobs, CronJobs (the label on spec.jobTemplate), JobSets, LeaderWorkerSets,
        PyTorchJobs, MPIJobs, TFJobs, TrainJobs, RayJobs, RayClusters, RayServices,
        AppWrappers (GPUs of the objects they wrap), Deployments, StatefulSets and Pods (plain,
        or of a ReplicaSet or StatefulSet not in the input) whose kueue.x-k8s.io/queue-name label
        names no LocalQueue of their namespace, when the input holds Kueue objects
        (LocalQueues or ClusterQueues: Kueue is installed). Objects owned by a controller in
        the input are judged through it. When Kueue's manager configuration
        (controller_manager_config.yaml in a ConfigMap) is in the input, kinds whose
        integration it does not enable are skipped: Kueue ignores their label.
    """,
    severity_evidence="""
        High when the workload requests GPUs (GPU work never starts); low when it requests
        none (not GPU work).
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # name an existing LocalQueue of the namespace (a job can change queues while suspended)
        kubectl -n <namespace> label <kind> <name> kueue.x-k8s.io/queue-name=<local-queue> --overwrite
        # or create the LocalQueue the label names, pointing at a ClusterQueue that admits the namespace
        kubectl apply -f - <<'EOF'
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: LocalQueue
        metadata:
          name: <queue-name>
          namespace: <namespace>
        spec:
          clusterQueue: <cluster-queue>
        EOF
    """,
    references=(
        "https://kueue.sigs.k8s.io/docs/tasks/troubleshooting/troubleshooting_jobs/#misconfigured-localqueues-or-clusterqueues",
        "https://kueue.sigs.k8s.io/docs/concepts/local_queue/",
        "https://kueue.sigs.k8s.io/docs/tasks/run/jobs/",
        "https://kueue.sigs.k8s.io/docs/tasks/run/rayjobs/",
        "https://kueue.sigs.k8s.io/docs/tasks/run/appwrappers/",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/pkg/controller/core/workload_controller.go",
        "https://github.com/kubernetes-sigs/kueue/blob/ff69552e79ad21652c36caa97038382e55625cf7/config/components/manager/controller_manager_config.yaml",
    ),
)
def kueue_queue_labels_name_local_queues(snapshot: Snapshot) -> Iterator[Result]:
    for queued in queued_workloads(snapshot):
        resource, queue = queued.resource, queued.queue
        if queued.local_queue is not None:
            yield passed(resource, f"is queued to LocalQueue {queue}", path=queued.path)
            continue
        gpu = bool(workload_gpus(resource))
        what = "its GPU pods never start" if gpu else "it never starts (it requests no GPU)"
        problem = (
            f"label {QUEUE_NAME_LABEL}={queue} names no LocalQueue of namespace "
            f'{resource.ref.namespace}: Kueue never admits it (its Workload: "LocalQueue '
            f"{queue} doesn't exist\"), so {what}"
        )
        yield failed(
            resource,
            problem,
            path=queued.path,
            severity=Severity.HIGH if gpu else Severity.LOW,
            fix={"problem": problem, "command": _command(snapshot, queued)},
        )


def _kueue_api_version(snapshot: Snapshot) -> str:
    for resource in snapshot.of(LOCAL_QUEUE, CLUSTER_QUEUE):
        return resource.api_version
    return "kueue.x-k8s.io/v1beta2"


# kubectl resource names (singular, with the group for custom resources).
_KUBECTL = {
    "JobSet.jobset.x-k8s.io": "jobset.jobset.x-k8s.io",
    "LeaderWorkerSet.leaderworkerset.x-k8s.io": "leaderworkerset.leaderworkerset.x-k8s.io",
    "PyTorchJob.kubeflow.org": "pytorchjob.kubeflow.org",
    "MPIJob.kubeflow.org": "mpijob.kubeflow.org",
    "TFJob.kubeflow.org": "tfjob.kubeflow.org",
    "TrainJob.trainer.kubeflow.org": "trainjob.trainer.kubeflow.org",
}


def _command(snapshot: Snapshot, queued: QueuedWorkload) -> str:
    resource, queue = queued.resource, queued.queue
    namespace = resource.ref.namespace
    local_queues = sorted(q.ref.name for q in snapshot.in_namespace(LOCAL_QUEUE, namespace))
    if local_queues:
        closest = difflib.get_close_matches(queue, local_queues, n=1, cutoff=0.0)
        target = closest[0] if closest else local_queues[0]
        kind = _KUBECTL.get(resource.ref.kind, resource.ref.kind.lower())
        if resource.ref.kind == "CronJob":
            labels = {QUEUE_NAME_LABEL: target}
            patch = {"spec": {"jobTemplate": {"metadata": {"labels": labels}}}}
            return (
                f"kubectl -n {namespace} patch cronjob {resource.ref.name} --type=merge "
                f"-p '{json.dumps(patch)}'"
            )
        return (
            f"kubectl -n {namespace} label {kind} {resource.ref.name} "
            f"{QUEUE_NAME_LABEL}={target} --overwrite"
        )
    manifest: dict[str, Any] = {
        "apiVersion": _kueue_api_version(snapshot),
        "kind": "LocalQueue",
        "metadata": {"name": queue, "namespace": namespace},
        "spec": {"clusterQueue": _admitting_cluster_queue(snapshot, namespace)},
    }
    body = yaml.safe_dump(manifest, sort_keys=False).rstrip("\n")
    return f"kubectl apply -f - <<'EOF'\n{body}\nEOF"


def _admitting_cluster_queue(snapshot: Snapshot, namespace: str) -> str:
    """A ClusterQueue whose namespaceSelector admits the namespace (a nil selector admits
    none), else the first one, else Kueue's example name."""
    labels = namespace_labels(snapshot, namespace)
    queues = snapshot.of(CLUSTER_QUEUE)
    for cluster_queue in queues:
        selector = cluster_queue.spec.get("namespaceSelector")
        if selector is not None and label_selector_matches(selector, labels):
            return cluster_queue.ref.name
    return queues[0].ref.name if queues else "cluster-queue"
