"""Inputs the fuzzer (tests/fuzz, `make fuzz`) found to break checks, kept as plain tests."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_audit.model import CheckStatus
from tests.builders import (
    Doc,
    config_map,
    container,
    daemonset,
    gpu_node,
    job,
    pod_spec,
    run_check_on,
)

DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"


def _plugin_daemonset(volume_name: Any) -> Doc:
    """The device plugin with its config-manager sidecar, one volume named `volume_name`."""
    plugin = container(
        DEVICE_PLUGIN_IMAGE,
        name="nvidia-device-plugin-ctr",
        gpus=None,
        command=["nvidia-device-plugin"],
        env=[{"name": "CONFIG_FILE", "value": "/config/config.yaml"}],
    )
    sidecar = container(
        DEVICE_PLUGIN_IMAGE,
        name="nvidia-device-plugin-sidecar",
        gpus=None,
        command=["config-manager"],
        env=[{"name": "DEFAULT_CONFIG", "value": "default"}],
        volumeMounts=[
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": volume_name, "mountPath": "/weird"},
        ],
    )
    volumes = [
        {"name": volume_name, "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
        {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}},
        {"name": "available-configs", "configMap": {"name": "nvdp-configs"}},
    ]
    return daemonset(
        "nvdp-nvidia-device-plugin",
        pod_spec(plugin, sidecar, volumes=volumes),
        namespace="nvidia-device-plugin",
        labels={"app.kubernetes.io/name": "nvidia-device-plugin"},
    )


NODE = gpu_node(
    "gpu-t4-3",
    labels={
        "nvidia.com/gpu.product": "Tesla-T4",
        "nvidia.com/device-plugin.config": "one-replica",
    },
)
CONFIG_MAP = config_map("nvdp-configs", "nvidia-device-plugin")


@pytest.mark.parametrize(
    "check_id", ["GPU-SHARE-001", "GPU-SHARE-002", "GPU-SHARE-003", "GPU-MON-005"]
)
def test_a_volume_named_by_a_mapping_is_not_a_crash(check_id: str) -> None:
    """A volume or mount named `{k: leaf}` made SHARE-001/002/003 and MON-005 raise TypeError
    (unhashable dict) when they looked the name up in a set of volume names."""
    run = run_check_on(check_id, [CONFIG_MAP, _plugin_daemonset({"k": "leaf"}), NODE])
    assert run.status is not CheckStatus.ERROR, run.error_detail


@pytest.mark.parametrize("check_id", ["GPU-DIST-004", "GPU-DIST-005"])
def test_a_toleration_key_that_is_a_list_is_not_a_crash(check_id: str) -> None:
    """`tolerations[].key: []` made DIST-004 and DIST-005 raise TypeError (unhashable list)
    when they looked the key up among the spot taints."""
    toleration = {"key": [], "operator": "Exists", "effect": "NoSchedule"}
    evaluation = job("eval", pod_spec(container("x:1", name="eval"), tolerations=[toleration]))
    run = run_check_on(check_id, [evaluation])
    assert run.status is not CheckStatus.ERROR, run.error_detail
