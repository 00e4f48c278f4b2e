import re
import shlex
from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
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
    format_quantity,
    passed,
    pod_templates,
)
from gpu_audit.checks.distributed._common import has_controller

_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
# Controllers that start one pod per node and hand each its rank and rendezvous address.
_MULTI_POD_KINDS = frozenset(
    {
        "PyTorchJob.kubeflow.org",
        "MPIJob.kubeflow.org",
        "Job.batch.volcano.sh",
        "JobSet.jobset.x-k8s.io",
        "LeaderWorkerSet.leaderworkerset.x-k8s.io",
    }
)
# Rendezvous backends served by a store outside the pods (an etcd cluster): the agents of
# identical replicas join it and get their ranks from it, no pod needs to be the host.
_EXTERNAL_RDZV = frozenset({"etcd", "etcd-v2"})
_VARIABLE = re.compile(r"^\$\(?\{?([A-Za-z_][A-Za-z0-9_]*)\)?\}?$")


@check(
    id="GPU-DIST-002",
    title="Multi-node torchrun is not run inside a single Pod or Deployment replica",
    category=Category.DISTRIBUTED,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        torchrun --nnodes=N waits for N node agents to join its rendezvous. In a single Pod
        nobody else joins, so the job blocks until the rendezvous timeout while holding its
        GPUs; in a Deployment every replica runs the same arguments with no stable node rank
        or master address, so each believes it is node 0.
    """,
    detection="""
        Containers whose command or args launch torchrun or python -m torch.distributed.run /
        launch (also inside sh -c strings): --nnodes N, N:M (the minimum counts) or PET_NNODES,
        resolving $VAR from the container's env and skipping unresolved values. More than one
        node fails unless the template belongs to a PyTorchJob, MPIJob or Volcano Job, an
        Indexed Job with parallelism >= N, or a StatefulSet with replicas >= N. --standalone
        and --nnodes=1 pass, and so do replicas >= N of a Deployment or StatefulSet that
        rendezvous through etcd (--rdzv_backend etcd/etcd-v2: ranks come from the store),
        JobSet and LeaderWorkerSet templates (the controller starts one pod per node), and
        Pods whose controller is not in the input (they are one pod of several).
    """,
    severity_evidence="""
        High whenever it fails: the template itself shows torchrun waiting for N node agents
        that this owner never starts (one pod), or starts with no distinct rank and no shared
        store, so the job blocks in rendezvous holding its GPUs. There is nothing to weigh:
        the launch cannot succeed as written.
    """,
    remediation="""
        # $kind $namespace/$name: run one pod per node under a controller that sets the rank
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata:
          name: $name
          namespace: $namespace
        spec:
          pytorchReplicaSpecs:
            Master:
              replicas: 1
              template:
                spec:
                  containers:
                    - name: pytorch   # the operator sets MASTER_ADDR, WORLD_SIZE, RANK
                      image: $image
                      resources:
                        limits: {$resource: $gpus}
            Worker:
              replicas: $workers
              template:
                spec:
                  containers:
                    - name: pytorch
                      image: $image
                      resources:
                        limits: {$resource: $gpus}
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://docs.pytorch.org/docs/stable/elastic/run.html",
        "https://github.com/kubernetes-sigs/jobset/blob/main/site/static/examples/simple/jobset-with-network.yaml",
        "https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/",
        "https://github.com/kubeflow/training-operator/blob/1417bbc35b6e7840b3ecab1cec17dbf553ad9e85/pkg/controller.v1/pytorch/envvar.go",
    ),
)
def multi_node_torchrun_not_in_a_single_pod(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if template.owner.ref.kind == "Pod" and has_controller(template.owner):
            continue  # one pod of a controller that is not in the input: judged with it
        for container in template.containers():
            nnodes = _nnodes(container)
            if nnodes is not None:
                yield _judge(template, container, nnodes)


def _tokens(container: Container) -> list[str]:
    out: list[str] = []
    for part in as_list(container.raw.get("command")) + as_list(container.raw.get("args")):
        try:
            out.extend(shlex.split(str(part)))
        except ValueError:
            out.extend(str(part).split())
    return out


def _nnodes(container: Container) -> int | None:
    """The minimum node count of a torchrun launch in the container, None if none/unknown."""
    tokens = _tokens(container)
    if not any(t.endswith(_LAUNCHERS) or t in _LAUNCHERS for t in tokens):
        return None
    if "--standalone" in tokens:
        return 1
    raw: str | None = None
    for index, token in enumerate(tokens):
        if token.startswith(("--nnodes=", "--nnodes_", "--nnodes-")) and "=" in token:
            raw = token.split("=", 1)[1]
        elif token == "--nnodes" and index + 1 < len(tokens):
            raw = tokens[index + 1]
    env = {k: str(v.get("value", "")) for k, v in container.env().items() if "value" in v}
    if raw is None:
        raw = env.get("PET_NNODES")
    if raw is None:
        return 1  # torchrun's default is one node
    match = _VARIABLE.match(raw)
    if match:
        raw = env.get(match.group(1))
    try:
        return int(raw.split(":", 1)[0]) if raw else None
    except ValueError:
        return None


def _judge(template: PodTemplate, container: Container, nnodes: int) -> Result:
    if nnodes <= 1:
        return passed(container, "launches torchrun on a single node")
    owner = template.owner
    kind, spec = owner.ref.kind, owner.spec
    if kind in _MULTI_POD_KINDS:
        return passed(container, f"runs {nnodes}-node torchrun under a {kind.split('.')[0]}")
    indexed = kind == "Job" and spec.get("completionMode") == "Indexed"
    if indexed and _count(spec.get("parallelism")) >= nnodes:
        return passed(container, f"runs {nnodes}-node torchrun as an Indexed Job")
    if kind == "StatefulSet" and _count(spec.get("replicas")) >= nnodes:
        return passed(container, f"runs {nnodes}-node torchrun on {nnodes}+ StatefulSet pods")
    backend = _rdzv_backend(container)
    if (
        kind in ("Deployment", "ReplicaSet")
        and backend in _EXTERNAL_RDZV
        and _count(spec.get("replicas")) >= nnodes
    ):
        return passed(
            container, f"runs {nnodes}-node torchrun on {nnodes}+ replicas through {backend}"
        )
    reason = (
        "its replicas share identical args, with no stable node rank or rendezvous host"
        if kind in ("Deployment", "ReplicaSet", "StatefulSet")
        else "a single pod cannot satisfy it"
    )
    return failed(
        container,
        f"launches torchrun --nnodes={nnodes} but {reason}; it blocks in rendezvous holding GPUs",
        fix={
            "image": container.image or "<image>",
            "workers": str(nnodes - 1),
            **_gpu_fix(container),
        },
    )


def _rdzv_backend(container: Container) -> str:
    tokens = _tokens(container)
    for index, token in enumerate(tokens):
        if token.startswith(("--rdzv_backend=", "--rdzv-backend=")):
            return token.split("=", 1)[1]
        if token in ("--rdzv_backend", "--rdzv-backend") and index + 1 < len(tokens):
            return tokens[index + 1]
    return str(as_mapping(container.env().get("PET_RDZV_BACKEND")).get("value", ""))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _gpu_fix(container: Container) -> dict[str, str]:
    """The container's own GPU resource and count, for the per-node pods of the fix."""
    names = container.gpu_resource_names()
    resource = names[0] if names else "nvidia.com/gpu"
    quantity = container.gpu_quantity(resource)
    return {"resource": resource, "gpus": format_quantity(quantity) if quantity else "1"}
