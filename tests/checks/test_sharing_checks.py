"""GPU sharing checks (GPU-SHARE-006/007) on cases the fixtures do not cover."""

from __future__ import annotations

import pytest

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    GPU,
    Doc,
    cluster_policy,
    config_map,
    container,
    gpu_node,
    pod,
    pod_spec,
    run_check_on,
    verdicts,
    verdicts_of,
)

# --------------------------------------------------------------------------- GPU-SHARE-006

SLICED_4 = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"


def _device_plugin_policy(default_config: str) -> Doc:
    """A ClusterPolicy whose device plugin reads the ConfigMap dp-config of gpu-operator."""
    return cluster_policy(
        devicePlugin={"config": {"name": "dp-config", "default": default_config}},
        status={"namespace": "gpu-operator"},
    )


def _dp_config(**configs: str) -> Doc:
    return config_map("dp-config", "gpu-operator", configs)


def test_renamed_node_may_still_list_gpu_zero() -> None:
    renamed = SLICED_4.replace("timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n")
    node = gpu_node(
        "gpu-1",
        labels={
            "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/gpu.product": "NVIDIA-A10G",
        },
        capacity={GPU: "0", "nvidia.com/gpu.shared": "8"},
    )
    objects = [_device_plugin_policy("any"), _dp_config(any=renamed), node]
    assert verdicts_of("GPU-SHARE-006", objects) == [("Node gpu-1", Outcome.PASS, None)]


def test_old_gfd_without_strategy_label_and_unshared_zero_replicas() -> None:
    node = gpu_node("gpu-1", labels={"nvidia.com/gpu.replicas": "0"})
    objects = [_device_plugin_policy("plain"), _dp_config(plain="version: v1\n"), node]
    assert verdicts_of("GPU-SHARE-006", objects) == [("Node gpu-1", Outcome.PASS, None)]


def test_shared_config_but_unshared_node_and_rejected_config_skipped() -> None:
    stale = gpu_node(
        "gpu-1",
        labels={
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/gpu.product": "Tesla-T4",
        },
    )
    broken = gpu_node(
        "gpu-2",
        labels={"nvidia.com/device-plugin.config": "broken", "nvidia.com/gpu.replicas": "1"},
    )
    bad = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1}\n"
    run = run_check_on(
        "GPU-SHARE-006",
        [_device_plugin_policy("any"), _dp_config(any=SLICED_4, broken=bad), stale, broken],
    )
    assert verdicts(run) == [("Node gpu-1", Outcome.FAIL, Severity.MEDIUM)]
    message = run.findings[0].result.message
    assert "sharing-strategy=none (config: time-slicing)" in message
    assert "needs the -SHARED suffix" in message


def test_mig_mixed_compares_profile_replicas() -> None:
    config = (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/mig-1g.10gb, replicas: 2}\n"
    )
    node = gpu_node(
        "gpu-1",
        labels={
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/mig-1g.10gb.replicas": "3",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        },
    )
    run = run_check_on(
        "GPU-SHARE-006", [_device_plugin_policy("mig"), _dp_config(mig=config), node]
    )
    assert verdicts(run) == [("Node gpu-1", Outcome.FAIL, Severity.MEDIUM)]
    assert "nvidia.com/mig-1g.10gb.replicas=3 (config: 2)" in run.findings[0].result.message


# --------------------------------------------------------------------------- GPU-SHARE-007

SLICED_NODE = gpu_node(
    "t4-1",
    labels={"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
    capacity={GPU: "4"},
)


def _vllm_pod(args: list[str], node_name: str | None = None) -> Doc:
    """A one-GPU vLLM pod `llm` in namespace serving."""
    vllm = container("vllm/vllm-openai:v0.9.2", name="vllm", args=args)
    return pod("llm", pod_spec(vllm), namespace="serving", node_name=node_name)


@pytest.mark.parametrize(
    ("args", "outcome", "severity"),
    [
        (["--gpu-memory-utilization", "0.2"], Outcome.PASS, None),  # fits a quarter of the GPU
        (["--gpu-memory-utilization=0.3"], Outcome.FAIL, Severity.MEDIUM),
        ([], Outcome.FAIL, Severity.MEDIUM),  # default 0.9
    ],
)
def test_vllm_threshold_against_replica_share(
    args: list[str], outcome: Outcome, severity: Severity | None
) -> None:
    run = run_check_on("GPU-SHARE-007", [SLICED_NODE, _vllm_pod(args)])
    assert verdicts(run) == [("Pod serving/llm", outcome, severity)]


def test_pod_bound_to_unshared_node_passes() -> None:
    whole = gpu_node("h100-1", labels={"nvidia.com/gpu.replicas": "1"})
    objects = [SLICED_NODE, whole, _vllm_pod([], node_name="h100-1")]
    assert verdicts_of("GPU-SHARE-007", objects) == [("Pod serving/llm", Outcome.PASS, None)]
