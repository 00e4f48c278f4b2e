import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    argv,
    as_list,
    as_mapping,
    check,
    failed,
    format_quantity,
    gpu_pod_templates,
    image_repository,
    passed,
    replica_groups,
    replicated_job_pods,
    templates_of,
)
from gpu_audit.checks.workloads._common import (
    gpu_count,
    volume,
)

SHM = "/dev/shm"
# Image repositories of frameworks that use /dev/shm: PyTorch DataLoader workers, NCCL's SHM
# transport between ranks on one node, vLLM/SGLang tensor-parallel workers, Triton's Python
# backend. A plain TensorRT or CUDA image is not among them.
_TORCH_IMAGE = re.compile(
    r"(pytorch|torch|nemo|megatron|deepspeed|vllm|sglang|tensorrt-llm|tritonserver|nccl)"
)
_TORCH_COMMAND = re.compile(
    r"(torchrun|torch\.distributed|accelerate\s+launch|deepspeed|\bvllm\b|sglang)"
)
# Distributed training kinds: every replica runs NCCL ranks.
_DISTRIBUTED_KINDS = frozenset({"PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org"})
# Job kinds whose pods together make one job (replica_groups counts their pods).
_MULTI_POD_KINDS = frozenset(
    {"PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org", "Job.batch.volcano.sh", "Job"}
)

# Command-line options that start more than one GPU process in the pod, by what they start.
# Tensor/pipeline parallel model servers also pass tensors through torch shared memory
# (vLLM's docs: "particularly for tensor parallel inference"), not only through NCCL.
_PARALLEL_OPTIONS = (
    "--tensor-parallel-size",
    "--tensor_parallel_size",
    "-tp",
    "--tp",
    "--tp-size",
    "--tp_size",
    "--pipeline-parallel-size",
    "--pipeline_parallel_size",
    "-pp",
)
_PROCESS_OPTIONS = (
    "--nproc_per_node",
    "--nproc-per-node",
    "--num-shard",
    "--num_shard",
    "--num_gpus",
    "--num-gpus",
    "--num_processes",
    "--num-processes",
)
_NNODES = re.compile(r"(?:^|\s)--nnodes(?:=|\s+)['\"]?(\d+)(?::(\d+))?")
# What shows that a multi-pod job talks NCCL: the NCCL library named on the command line or in
# the image (nccl-tests), launchers of GPU data-parallel training, Horovod.
_NCCL_WORDS = re.compile(
    r"(nccl|torchrun|torch\.distributed\.(run|launch)|deepspeed|accelerate\s+launch|horovod|"
    r"megatron|nemo|_perf\b)",
    re.IGNORECASE,
)


def _option_value(command: str, options: tuple[str, ...]) -> int:
    """The largest integer given to any of `options` on the command line (0 when absent)."""
    names = "|".join(re.escape(o) for o in options)
    found = re.findall(rf"(?:^|\s)(?:{names})(?:=|\s+)['\"]?(\d+)", command)
    return max((int(v) for v in found), default=0)


@dataclass(frozen=True, slots=True)
class Evidence:
    """What in the pod template shows that something uses more than 64 MiB of /dev/shm."""

    severity: Severity
    reason: str
    parallel_server: bool = False  # tensor/pipeline parallel: torch shm, with or without NCCL


@check(
    id="GPU-WL-003",
    title="PyTorch and NCCL GPU pods mount a memory-backed emptyDir at /dev/shm",
    category=Category.WORKLOADS,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        A container gets a 64 MiB /dev/shm from the runtime. NCCL >= 2.7 fails with
        "posix_fallocate failed: No space left on device" / "Error while creating shared memory
        segment" when ranks on one node use its SHM transport, and tensor-parallel model
        servers (vLLM) pass tensors between their GPU processes through it; PyTorch DataLoader
        workers with large batches die with "Bus error ... insufficient shared memory (shm)".
        Kubernetes has no --shm-size: the fix is an emptyDir with medium: Memory mounted at
        /dev/shm.
    """,
    detection="""
        GPU containers that are PyTorch/NCCL-like (image repository of PyTorch, NeMo,
        Megatron, DeepSpeed, vLLM, SGLang, TensorRT-LLM, Triton or NCCL; command or args with
        torchrun, torch.distributed, accelerate launch, deepspeed, vllm or sglang; any
        container of a PyTorchJob or MPIJob) or whose pod holds two or more GPUs. Passes when
        /dev/shm is an emptyDir with medium: Memory, a hostPath, or the pod uses hostIPC;
        fails when /dev/shm is missing or is a disk-backed emptyDir. Other single-GPU
        containers are not evaluated. The sizeLimit of the volume is GPU-STO-004's concern.
    """,
    severity_evidence="""
        High when the pod runs several GPU processes that share /dev/shm: two or more GPUs in
        the pod, or a command line that starts more than one process (torchrun
        --nproc_per_node, --tensor-parallel-size/--tp, --pipeline-parallel-size, TGI
        --num-shard, deepspeed --num_gpus, accelerate --num_processes > 1). Otherwise low:
        one GPU and one process (a notebook, a TP=1 vLLM, a single Triton model) shows no user
        of more than 64 MiB; DataLoader workers and NCCL variables alone are not evidence. Low
        too for a multi-pod NCCL job with one GPU and one process per pod (a PyTorchJob,
        MPIJob, Volcano or batch Job, a TrainJob over several nodes, torchrun --nnodes > 1):
        each pod has its own IPC namespace, so NCCL's SHM transport never joins ranks of two
        pods, and the catalogue's "high for multi-node training pods" has no source behind it
        (the reports are of several GPUs in one container). NCCL_SHM_DISABLE=1 lowers it to
        info except for tensor/pipeline-parallel servers, which share tensors through torch
        shared memory.
    """,
    remediation="""
        # $kind $namespace/$name, container $container: memory-backed /dev/shm
        volumes:
          - name: $volume
            emptyDir:
              medium: Memory
              $size_line
        containers:
          - name: $container
            volumeMounts:
              - name: $volume
                mountPath: /dev/shm
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/concepts/storage/volumes/#emptydir",
        "https://github.com/NVIDIA/nccl/issues/525",
        "https://github.com/NVIDIA/nccl/issues/342",
        "https://github.com/pytorch/torchtitan/issues/853",
        "https://docs.vllm.ai/en/v0.4.2/serving/deploying_with_docker.html",
        "https://github.com/pytorch/pytorch/issues/16979",
    ),
    remediation_root="pod_spec",
)
def torch_pods_mount_memory_backed_dev_shm(snapshot: Snapshot) -> Iterator[Result]:
    for template in gpu_pod_templates(snapshot):
        distributed = template.owner.ref.kind in _DISTRIBUTED_KINDS
        evidence = _evidence(snapshot, template)
        apps = [c for c in template.gpu_containers() if not c.init or c.is_sidecar]
        for container in apps:  # init containers finish before the workload starts
            if distributed or evidence.severity is not Severity.LOW or _is_torch_like(container):
                yield _verdict(template, container, evidence)


def _is_torch_like(container: Container) -> bool:
    if _TORCH_IMAGE.search(image_repository(container.image)):
        return True
    return bool(_TORCH_COMMAND.search(" ".join(argv(container))))


def _running(template: PodTemplate) -> list[Container]:
    """The containers that run alongside each other: app containers and native sidecars."""
    return [c for c in template.containers() if not c.init or c.is_sidecar]


def _evidence(snapshot: Snapshot, template: PodTemplate) -> Evidence:
    gpus = sum((gpu_count(c) for c in _running(template)), Decimal(0))
    parallel, processes, starter = 0, 0, ""
    for container in _running(template):
        command = " ".join(argv(container))
        parallel = max(parallel, _option_value(command, _PARALLEL_OPTIONS))
        started = max(parallel, _option_value(command, _PROCESS_OPTIONS), _num_shard(container))
        if started > processes:
            processes, starter = started, container.name
    if processes > 1:
        return Evidence(
            Severity.HIGH,
            f"container {starter} starts {processes} GPU processes that share {SHM}",
            parallel_server=parallel > 1,
        )
    if gpus >= 2:
        return Evidence(
            Severity.HIGH,
            f"the pod holds {format_quantity(gpus)} GPUs, whose processes share {SHM}",
        )
    pods = _job_gpu_pods(snapshot, template)
    if pods > 1 and _speaks_nccl(template):
        # Each pod has its own IPC namespace: NCCL's SHM transport joins the ranks of one pod,
        # and ranks in other pods are reached over the network (NVIDIA/nccl#525, #290: the
        # failures are several GPUs in one container).
        return Evidence(
            Severity.LOW,
            f"{pods} GPU pods of one NCCL job, one GPU and one process each: ranks in other "
            f"pods are reached over the network, not through {SHM}, so nothing here shows a "
            "user of more than 64 MiB of it",
        )
    return Evidence(
        Severity.LOW,
        "one GPU and one process: nothing here shows a user of more than 64 MiB of it "
        "(only DataLoader workers with large batches would need more)",
    )


def _num_shard(container: Container) -> int:
    """TGI's NUM_SHARD environment variable, the same as --num-shard."""
    value = str(as_mapping(container.env().get("NUM_SHARD")).get("value", "")).strip()
    return int(value) if value.isdigit() else 0


def _job_gpu_pods(snapshot: Snapshot, template: PodTemplate) -> int:
    """How many GPU pods the template's job runs at once (0 for anything but a job), or the
    fewest nodes torchrun is told to wait for (the minimum of an elastic min:max range). A
    TrainJob's (or training runtime's) trainer runs one pod per node, each with the GPUs of
    resourcesPerNode: numNodes pods, not one pod of numNodes x those GPUs."""
    owner = template.owner
    pods = replicated_job_pods(snapshot, owner, template.replica_type)
    if owner.ref.kind in _MULTI_POD_KINDS:
        pods = sum(g.replicas for g in replica_groups(owner) if g.gpu)
    for container in _running(template):
        match = _NNODES.search(" ".join(argv(container)))
        if match:
            pods = max(pods, int(match.group(1)))
    return pods


def _speaks_nccl(template: PodTemplate) -> bool:
    """Whether any pod of the job shows NCCL: its launcher (an MPIJob's Launcher holds the
    mpirun line), image or NCCL_* environment."""
    for sibling in templates_of(template.owner) or (template,):
        for container in sibling.containers():
            words = " ".join([container.image, *argv(container)])
            if _NCCL_WORDS.search(words) or any(n.startswith("NCCL_") for n in container.env()):
                return True
    return False


def _verdict(template: PodTemplate, container: Container, evidence: Evidence) -> Result:
    if template.spec.get("hostIPC") is True:
        return passed(container, "shares the host's IPC namespace and /dev/shm (hostIPC)")
    mount = _shm_mount(container)
    source = volume(template, str(mount.get("name", ""))) if mount else {}
    empty_dir = source.get("emptyDir")
    if isinstance(empty_dir, Mapping) and as_mapping(empty_dir).get("medium") == "Memory":
        return passed(container, f"mounts memory-backed emptyDir {source['name']} at {SHM}")
    if isinstance(source.get("hostPath"), Mapping):
        return passed(container, f"mounts the node's {SHM} through hostPath {source['name']}")
    fix = {
        "container": container.name,
        "volume": _volume_name(template, source),
        "size_line": _size_line(template),
    }
    if isinstance(empty_dir, Mapping):
        problem = f"mounts disk-backed emptyDir {source['name']} at {SHM} (medium: Memory missing)"
    elif source:
        problem = f"mounts volume {source['name']} at {SHM}, which is not a memory-backed emptyDir"
    else:
        problem = f"has the runtime's 64 MiB {SHM}: no memory-backed emptyDir is mounted there"
    severity = evidence.severity
    problem += f"; {evidence.reason}"
    if _nccl_shm_disabled(container) and not evidence.parallel_server:
        severity = Severity.INFO
        problem += "; NCCL_SHM_DISABLE=1 keeps NCCL off it, DataLoader workers still use it"
    return failed(container, problem, severity=severity, fix=fix)


def _size_line(template: PodTemplate) -> str:
    """The volume's size. A memory-backed emptyDir holds at most the sum of the pod's memory
    limits (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir): when every
    container sets one, the volume is bounded without a sizeLimit, and the fix chooses none.
    Otherwise the size is the reader's choice, given as an example."""
    containers = [c for c in template.containers() if not c.init or c.is_sidecar]
    if containers and all(
        as_mapping(as_mapping(c.raw.get("resources")).get("limits")).get("memory")
        for c in containers
    ):
        return "# no sizeLimit: bounded by the pod's memory limits, which it counts against"
    return "sizeLimit: 16Gi  # counts against the pod's memory limits; size to the loaders"


def _shm_mount(container: Container) -> Mapping[str, Any]:
    for mount in map(as_mapping, as_list(container.raw.get("volumeMounts"))):
        if str(mount.get("mountPath", "")).rstrip("/") == SHM:
            return mount
    return {}


def _volume_name(template: PodTemplate, current: Mapping[str, Any]) -> str:
    """The volume to (re)define: the disk-backed emptyDir already mounted at /dev/shm is
    turned into a memory-backed one; otherwise a new name no other volume uses."""
    if isinstance(current.get("emptyDir"), Mapping):
        return str(current["name"])
    taken = {str(as_mapping(v).get("name", "")) for v in as_list(template.spec.get("volumes"))}
    return next((n for n in ("dshm", "dshm-memory") if n not in taken), "gpu-audit-dshm")


def _nccl_shm_disabled(container: Container) -> bool:
    entry = container.env().get("NCCL_SHM_DISABLE")
    return entry is not None and str(entry.get("value", "")).strip() == "1"
