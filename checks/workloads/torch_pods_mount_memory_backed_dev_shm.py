import re
from collections.abc import Iterator, Mapping
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
    as_list,
    as_mapping,
    check,
    failed,
    gpu_pod_templates,
    image_repository,
    passed,
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


@check(
    id="GPU-WL-003",
    title="PyTorch and NCCL GPU pods mount a memory-backed emptyDir at /dev/shm",
    category=Category.WORKLOADS,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        A container gets a 64 MiB /dev/shm from the runtime. PyTorch DataLoader workers then
        die with "Bus error ... insufficient shared memory (shm)", and NCCL >= 2.7 fails with
        "posix_fallocate failed: No space left on device" when ranks on one node use its SHM
        transport. Kubernetes has no --shm-size: the fix is an emptyDir with medium: Memory
        mounted at /dev/shm.
    """,
    detection="""
        GPU containers that are PyTorch/NCCL-like (image repository of PyTorch, NeMo,
        Megatron, DeepSpeed, vLLM, SGLang, TensorRT-LLM, Triton or NCCL; command or args with
        torchrun, torch.distributed, accelerate launch, deepspeed, vllm or sglang; any
        container of a PyTorchJob or MPIJob) or that hold two or more GPUs. Passes when
        /dev/shm is an emptyDir with medium: Memory, a hostPath, or the pod uses hostIPC;
        fails when /dev/shm is missing (high for multi-GPU containers and distributed jobs) or
        is a disk-backed emptyDir. NCCL_SHM_DISABLE=1 lowers the finding to info: NCCL then
        avoids /dev/shm, only DataLoader workers still need it. Other single-GPU containers are
        not evaluated. The sizeLimit of the volume is GPU-STO-004's concern.
    """,
    remediation="""
        # $kind $namespace/$name, container $container: memory-backed /dev/shm
        volumes:
          - name: $volume
            emptyDir:
              medium: Memory
              sizeLimit: 16Gi  # counts against the pod's memory limits; size to the loaders
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
        "https://github.com/pytorch/pytorch/issues/16979",
    ),
    remediation_root="pod_spec",
)
def torch_pods_mount_memory_backed_dev_shm(snapshot: Snapshot) -> Iterator[Result]:
    for template in gpu_pod_templates(snapshot):
        distributed = template.owner.ref.kind in _DISTRIBUTED_KINDS
        for container in template.gpu_containers():
            if container.init and not container.is_sidecar:
                continue  # init containers finish before the workload starts
            multi_gpu = gpu_count(container) >= 2
            if distributed or multi_gpu or _is_torch_like(container):
                yield _verdict(template, container, high=distributed or multi_gpu)


def _is_torch_like(container: Container) -> bool:
    if _TORCH_IMAGE.search(image_repository(container.image)):
        return True
    words = [
        str(w)
        for w in (*as_list(container.raw.get("command")), *as_list(container.raw.get("args")))
    ]
    return bool(_TORCH_COMMAND.search(" ".join(words)))


def _verdict(template: PodTemplate, container: Container, *, high: bool) -> Result:
    if template.spec.get("hostIPC") is True:
        return passed(container, "shares the host's IPC namespace and /dev/shm (hostIPC)")
    mount = _shm_mount(container)
    source = volume(template, str(mount.get("name", ""))) if mount else {}
    empty_dir = source.get("emptyDir")
    if isinstance(empty_dir, Mapping) and as_mapping(empty_dir).get("medium") == "Memory":
        return passed(container, f"mounts memory-backed emptyDir {source['name']} at {SHM}")
    if isinstance(source.get("hostPath"), Mapping):
        return passed(container, f"mounts the node's {SHM} through hostPath {source['name']}")
    fix = {"container": container.name, "volume": _volume_name(template, source)}
    if isinstance(empty_dir, Mapping):
        problem = f"mounts disk-backed emptyDir {source['name']} at {SHM} (medium: Memory missing)"
    elif source:
        problem = f"mounts volume {source['name']} at {SHM}, which is not a memory-backed emptyDir"
    else:
        problem = f"has the runtime's 64 MiB {SHM}: no memory-backed emptyDir is mounted there"
    severity = Severity.HIGH if high else None
    if _nccl_shm_disabled(container):
        severity = Severity.INFO
        problem += "; NCCL_SHM_DISABLE=1 keeps NCCL off it, DataLoader workers still need it"
    return failed(container, problem, severity=severity, fix=fix)


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
