"""GPU workload checks (GPU-WL-003) on cases the fixtures do not cover."""

from __future__ import annotations

import yaml

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    VLLM_IMAGE,
    container,
    deployment,
    pod_spec,
    run_check_on,
    verdicts,
    verdicts_of,
)

SHM_MOUNT = [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_shm_nccl_disabled_is_info() -> None:
    nccl_off = container(env=[{"name": "NCCL_SHM_DISABLE", "value": "1"}])
    assert verdicts_of("GPU-WL-003", [deployment("train", pod_spec(nccl_off))]) == [
        ("Deployment ml/train", Outcome.FAIL, Severity.INFO)
    ]


def test_shm_from_another_volume_type_gets_a_free_volume_name() -> None:
    spec = pod_spec(
        container(VLLM_IMAGE, volumeMounts=SHM_MOUNT),
        volumes=[{"name": "dshm", "configMap": {"name": "x"}}],
    )
    run = run_check_on("GPU-WL-003", [deployment("llm", spec)])
    # One GPU, one process: no evidence that anything uses more than 64 MiB (low).
    assert verdicts(run) == [("Deployment ml/llm", Outcome.FAIL, Severity.LOW)]
    assert "not a memory-backed emptyDir" in run.results[0].message
    patch = yaml.safe_load(run.findings[0].remediation)
    volumes = patch["spec"]["template"]["spec"]["volumes"]
    assert volumes == [
        {"name": "dshm-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    ]


def test_shm_host_path_and_host_ipc_pass() -> None:
    host_path = pod_spec(
        container("pytorch/pytorch:2.4.1-cuda12.1-cudnn9-runtime", volumeMounts=SHM_MOUNT),
        volumes=[{"name": "dshm", "hostPath": {"path": "/dev/shm"}}],
    )
    host_ipc = pod_spec(container("nvcr.io/nvidia/nemo:24.07"), hostIPC=True)
    objects = [deployment("a", host_path), deployment("b", host_ipc)]
    assert verdicts_of("GPU-WL-003", objects) == [
        ("Deployment ml/a", Outcome.PASS, None),
        ("Deployment ml/b", Outcome.PASS, None),
    ]


def test_shm_torch_command_in_a_generic_image_and_multi_gpu_are_evaluated() -> None:
    torchrun = pod_spec(container("registry.corp/ml/trainer:1.0", command=["torchrun"]))
    multi_gpu = pod_spec(container("registry.corp/ml/solver:1.0", gpus=2))
    single = pod_spec(container("registry.corp/ml/solver:1.0"))  # not torch-like, one GPU: skipped
    objects = [deployment("t", torchrun), deployment("m", multi_gpu), deployment("s", single)]
    assert verdicts_of("GPU-WL-003", objects) == [
        ("Deployment ml/m", Outcome.FAIL, Severity.HIGH),
        ("Deployment ml/t", Outcome.FAIL, Severity.LOW),  # torchrun with one process, one GPU
    ]


def test_shm_severity_follows_processes_and_pods() -> None:
    """More than one GPU process in the pod is high; a multi-pod NCCL job with one rank per
    pod, NCCL variables or DataLoader workers alone are not evidence (low)."""
    nproc = pod_spec(container(command=["torchrun", "--nproc-per-node", "4", "train.py"], gpus=4))
    tgi = pod_spec(
        container(
            "ghcr.io/huggingface/text-generation-inference:2.4.0",
            gpus=2,
            env=[{"name": "NUM_SHARD", "value": "2"}],
        )
    )
    nccl_env = pod_spec(
        container(env=[{"name": "NCCL_DEBUG", "value": "INFO"}], args=["--num-workers", "16"])
    )
    elastic = pod_spec(container(command=["torchrun", "--nnodes=2:4", "train.py"]))
    single_node = pod_spec(container(command=["torchrun", "--nnodes=1:4", "train.py"]))
    objects = [
        deployment("nproc", nproc),
        deployment("tgi", tgi),
        deployment("nccl-env", nccl_env),
        deployment("elastic", elastic),
        deployment("single-node", single_node),
    ]
    assert verdicts_of("GPU-WL-003", objects) == [
        # at least 2 torchrun nodes, one GPU and one rank each: no rank shares its /dev/shm
        ("Deployment ml/elastic", Outcome.FAIL, Severity.LOW),
        ("Deployment ml/nccl-env", Outcome.FAIL, Severity.LOW),
        ("Deployment ml/nproc", Outcome.FAIL, Severity.HIGH),
        ("Deployment ml/single-node", Outcome.FAIL, Severity.LOW),  # may run on one node
        ("Deployment ml/tgi", Outcome.FAIL, Severity.HIGH),
    ]


def test_shm_tensor_parallel_server_stays_high_with_nccl_shm_disabled() -> None:
    env = [{"name": "NCCL_SHM_DISABLE", "value": "1"}]
    tp = pod_spec(container(VLLM_IMAGE, gpus=4, args=["--tp", "4"], env=env))
    ddp = pod_spec(container(gpus=4, command=["torchrun", "--nproc_per_node=4"], env=env))
    assert verdicts_of("GPU-WL-003", [deployment("tp", tp), deployment("ddp", ddp)]) == [
        ("Deployment ml/ddp", Outcome.FAIL, Severity.INFO),
        ("Deployment ml/tp", Outcome.FAIL, Severity.HIGH),
    ]
