import json
from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    KUBEFLOW_REPLICA_KEYS,
    MULTI_POD_JOB_TYPES,
    Category,
    FixKind,
    ReplicaGroup,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    controller_owner,
    failed,
    finished_as,
    format_quantity,
    is_gpu_resource,
    owned_pods,
    passed,
    pod_is_active,
    replica_groups,
    templates_of,
    top_owner,
)
from gpu_audit.checks.cost._common import pod_gpus

# What the operators default an unset runPolicy.cleanPodPolicy to: SetDefaults_PyTorchJob and
# mpi-operator v2beta1 set None (finished jobs keep their pods), SetDefaults_TFJob sets Running.
_DEFAULT_CLEAN_POD_POLICY = {
    "PyTorchJob.kubeflow.org": "None",
    "MPIJob.kubeflow.org": "None",
    "TFJob.kubeflow.org": "Running",
}
# Replica types that do not exit when the job is done: mpi-operator's workers run sshd until
# they are deleted (the launcher's mpirun reaches them over ssh), TensorFlow parameter servers
# and evaluators serve until they are killed. Other replicas exit with the training script.
_WAITING_REPLICAS = {
    "MPIJob.kubeflow.org": frozenset({"worker"}),
    "TFJob.kubeflow.org": frozenset({"ps", "evaluator"}),
}


@check(
    id="GPU-COST-002",
    title="Finished training jobs release their GPUs",
    category=Category.COST,
    severity=Severity.HIGH,
    requires=(MULTI_POD_JOB_TYPES,),
    rationale="""
        GPU pods that keep running after their job is done hold whole GPUs with zero progress,
        often for days: Kubeflow workers or parameter servers left Running because
        cleanPodPolicy is None (the PyTorchJob and MPIJob default), MPI workers idling after
        the launcher failed, or a batch pod kept Running by a sidecar that is not a native
        sidecar, so the Job never completes.
    """,
    detection="""
        batch/v1 Jobs, PyTorchJobs, TFJobs, MPIJobs and Volcano Jobs with GPU templates. Live:
        a job that has finished (Complete/Failed, Succeeded/Failed, or a terminal Volcano phase)
        fails high while Pods it controls are still Pending or Running with GPU requests (pods
        being deleted are not counted); a running batch Job fails high when, in one of its
        Running pods, every GPU container has terminated while another regular container still
        runs. Static: a Kubeflow job with more than one replica type whose effective
        cleanPodPolicy is None (explicit, or unset on PyTorchJob and MPIJob; TFJob defaults to
        Running) fails. Terminal pods hold no node resources and are never counted.
    """,
    severity_evidence="""
        High when the input shows GPUs held: a finished job's Pending or Running GPU pods, or a
        batch Job pod whose GPU containers ended while a sidecar runs. A cleanPodPolicy of None
        is medium when a GPU replica type never exits by itself (MPIJob workers run sshd until
        deleted; TFJob PS and Evaluator serve until killed), low otherwise (PyTorchJob workers
        end with the training script; only a hung one is left behind).
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # PyTorchJob / TFJob / MPIJob whose pods are kept after it finishes (cleanPodPolicy None,
        # or unset on PyTorchJob and MPIJob):
        spec:
          runPolicy:
            cleanPodPolicy: Running
            ttlSecondsAfterFinished: 3600
        ---
        # batch Job kept Running by a sidecar after its GPU containers finished: make the sidecar a
        # native one (a CronJob: under spec.jobTemplate.spec.template.spec). A Job's pod template
        # cannot change: recreate the Job with this.
        spec:
          template:
            spec:
              containers:
                - name: <sidecar>
                  $patch: delete   # moved to initContainers
              initContainers:   # a native sidecar stops when the main containers finish
                - {name: <sidecar>, image: <sidecar-image>, restartPolicy: Always}   # and its other fields as they are
        # a finished job whose pods still hold GPUs: delete those pods
        #   Kubeflow job: kubectl delete pod -n <namespace> -l training.kubeflow.org/job-name=<name> --field-selector=status.phase=Running
        #     and keep it from recurring: kubectl patch pytorchjob.kubeflow.org/<name> -n <namespace> --type=merge -p '{"spec":{"runPolicy":{"cleanPodPolicy":"Running","ttlSecondsAfterFinished":3600}}}'
        #   batch Job: kubectl delete pod -n <namespace> -l batch.kubernetes.io/job-name=<name> --field-selector=status.phase=Running
        #   Volcano Job: kubectl delete -n <namespace> jobs.batch.volcano.sh <name>
    """,
    references=(
        "https://github.com/kubeflow/training-operator/blob/5fa872ff10ed31b3996e0135602c991a4610a4a2/pkg/apis/kubeflow.org/v1/pytorch_defaults.go",
        "https://github.com/kubeflow/training-operator/blob/c3ed7818a0c1cf03a4255d199068a5e7ea8e0615/pkg/apis/kubeflow.org/v1/tensorflow_defaults.go",
        "https://github.com/kubeflow/mpi-operator/blob/0b32af39c362408a3c64003419ed3e2271d1eb77/pkg/apis/kubeflow/v2beta1/default.go",
        "https://github.com/kubeflow/trainer/issues/774",
        "https://github.com/kubeflow/trainer/issues/1982",
        "https://github.com/kubeflow/mpi-operator/blob/master/examples/v2beta1/pi/pi.yaml",
        "https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/",
    ),
)
def finished_jobs_release_gpus(snapshot: Snapshot) -> Iterator[Result]:
    for job in snapshot.of(*MULTI_POD_JOB_TYPES):
        if job.ref.kind != "Job" and controller_owner(snapshot, job) is not None:
            continue
        groups = replica_groups(job)
        if not any(g.gpu for g in groups):
            continue
        result = _leftovers(snapshot, job) or _sidecar_keeps_alive(snapshot, job)
        if result is None and job.ref.kind in KUBEFLOW_REPLICA_KEYS:
            result = _clean_pod_policy(job, groups)
        if result is not None:
            yield result


def _leftovers(snapshot: Snapshot, job: Resource) -> Result | None:
    state = finished_as(job)
    if not state:
        return None
    holding = [
        (p, g) for p in owned_pods(snapshot, job) if pod_is_active(p) and (g := pod_gpus(p)) > 0
    ]
    if not holding:
        return passed(job, f"finished ({state}) and no pod of it holds GPUs")
    gpus = format_quantity(sum((g for _, g in holding), Decimal(0)))
    names = ", ".join(p.ref.name for p, _ in holding[:3])
    more = f" and {len(holding) - 3} more" if len(holding) > 3 else ""
    return failed(
        job,
        f"finished ({state}) but its pods {names}{more} still hold {gpus} GPUs",
        path="status.conditions",
        fix={"problem": "finished job still holds GPUs", "snippet": _cleanup_snippet(job)},
    )


def _sidecar_keeps_alive(snapshot: Snapshot, job: Resource) -> Result | None:
    if job.ref.kind != "Job":
        return None
    for pod in owned_pods(snapshot, job):
        if pod.status.get("phase") != "Running":
            continue
        gpu_names = {
            str(c.get("name"))
            for c in map(as_mapping, as_list(pod.spec.get("containers")))
            if any(
                is_gpu_resource(str(r))
                for section in ("limits", "requests")
                for r in as_mapping(as_mapping(c.get("resources")).get(section))
            )
        }
        states = {
            str(s.get("name")): as_mapping(s.get("state"))
            for s in map(as_mapping, as_list(pod.status.get("containerStatuses")))
        }
        if not gpu_names or not all("terminated" in states.get(n, {}) for n in gpu_names):
            continue
        running = sorted(n for n, s in states.items() if n not in gpu_names and "running" in s)
        if running:
            owner = top_owner(snapshot, job)
            return failed(
                owner,
                f"pod {pod.ref.name}: its GPU containers finished but {', '.join(running)} "
                "still runs, so the pod keeps its GPUs and the Job never completes",
                fix={
                    "problem": f"sidecar {running[0]} keeps the GPU pod alive",
                    "snippet": _sidecar_snippet(owner, running[0]),
                },
            )
    return None


def _clean_pod_policy(job: Resource, groups: tuple[ReplicaGroup, ...]) -> Result:
    run_policy = as_mapping(job.spec.get("runPolicy"))
    policy = str(
        run_policy.get("cleanPodPolicy") or _DEFAULT_CLEAN_POD_POLICY.get(job.ref.kind, "None")
    )
    if policy == "None" and len(groups) > 1:
        where = "set to None" if run_policy.get("cleanPodPolicy") else "unset (defaults to None)"
        waiting = _WAITING_REPLICAS.get(job.ref.kind, frozenset())
        stay = sorted(g.name for g in groups if g.gpu and g.name.lower() in waiting)
        if stay:
            consequence = (
                f"its {', '.join(stay)} GPU pods do not exit by themselves and keep their GPUs "
                "after the job finishes, until someone deletes them"
            )
        else:
            consequence = (
                "a replica still running when the job finishes (a hung worker) keeps its "
                "pod and GPUs"
            )
        return failed(
            job,
            f"has runPolicy.cleanPodPolicy {where}: {consequence}",
            path="spec.runPolicy.cleanPodPolicy",
            severity=Severity.MEDIUM if stay else Severity.LOW,
            fix={"problem": "pods are kept after the job finishes", "snippet": _policy_snippet()},
        )
    return passed(job, f"cleans up its pods when it finishes (cleanPodPolicy {policy})")


_POLICY = {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 3600}


def _policy_snippet() -> str:
    return "spec:\n  runPolicy:\n" + "".join(f"    {k}: {v}\n" for k, v in _POLICY.items()).rstrip()


def _cleanup_snippet(job: Resource) -> str:
    namespace, name = job.ref.namespace, job.ref.name
    if job.ref.kind in KUBEFLOW_REPLICA_KEYS:
        kind, _, group = job.ref.kind.partition(".")
        patch = json.dumps({"spec": {"runPolicy": _POLICY}}, separators=(",", ":"))
        return (
            f"kubectl delete pod -n {namespace} -l training.kubeflow.org/job-name={name} "
            "--field-selector=status.phase=Running\n"
            "# and keep it from recurring:\n"
            f"kubectl patch {kind.lower()}.{group}/{name} -n {namespace} --type=merge -p '{patch}'"
        )
    if job.ref.kind == "Job":
        return (
            f"kubectl delete pod -n {namespace} -l batch.kubernetes.io/job-name={name} "
            "--field-selector=status.phase=Running"
        )
    return f"kubectl delete -n {namespace} jobs.batch.volcano.sh {name}"


def _sidecar_snippet(owner: Resource, container: str) -> str:
    """The container moved from containers to initContainers with restartPolicy Always, as a
    strategic-merge patch: deleted from one list, added whole to the other."""
    path = (
        "spec.jobTemplate.spec.template.spec"
        if owner.ref.kind == "CronJob"
        else "spec.template.spec"
    )
    raw = next(
        (
            c.raw
            for t in templates_of(owner)
            for c in t.containers()
            if not c.init and c.name == container
        ),
        {"name": container},
    )
    sidecar = json.dumps({**raw, "restartPolicy": "Always"}, sort_keys=True)
    keys = path.split(".")
    lines = [f"{'  ' * depth}{key}:" for depth, key in enumerate(keys)]
    pad = "  " * len(keys)
    lines += [
        f"{pad}containers:",
        f"{pad}  - name: {container}",
        f"{pad}    $patch: delete   # moved to initContainers",
        f"{pad}initContainers:   # a native sidecar stops when the main containers finish",
        f"{pad}  - {sidecar}",
    ]
    if owner.ref.kind == "Job":
        lines.insert(0, "# a Job's pod template cannot change: recreate the Job with this")
    return "\n".join(lines)
