"""Inputs the fuzzer (tests/fuzz, `make fuzz`) found to break checks, kept as plain tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpu_audit.engine import run_check
from gpu_audit.model import CheckStatus
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

CHECKS = load_checks(plugins=False)


def _plugin_daemonset(volume_name: Any) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "nvidia-device-plugin"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvdp-nvidia-device-plugin", "namespace": "nvidia-device-plugin"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                            "command": ["nvidia-device-plugin"],
                            "env": [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}],
                        },
                        {
                            "name": "nvidia-device-plugin-sidecar",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                            "command": ["config-manager"],
                            "env": [{"name": "DEFAULT_CONFIG", "value": "default"}],
                            "volumeMounts": [
                                {"name": "available-configs", "mountPath": "/available-configs"},
                                {"name": volume_name, "mountPath": "/weird"},
                            ],
                        },
                    ],
                    "volumes": [
                        {
                            "name": volume_name,
                            "hostPath": {"path": "/var/lib/kubelet/device-plugins"},
                        },
                        {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}},
                        {"name": "available-configs", "configMap": {"name": "nvdp-configs"}},
                    ],
                },
            },
        },
    }


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-t4-3",
        "labels": {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "Tesla-T4",
            "nvidia.com/device-plugin.config": "one-replica",
        },
    },
}
CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "nvdp-configs", "namespace": "nvidia-device-plugin"},
}


def test_a_volume_named_by_a_mapping_is_not_a_crash(tmp_path: Path) -> None:
    """A volume or mount named `{k: leaf}` made SHARE-001/002/003 and MON-005 raise TypeError
    (unhashable dict) when they looked the name up in a set of volume names."""
    path = tmp_path / "in.yaml"
    objects = [CONFIG_MAP, _plugin_daemonset({"k": "leaf"}), NODE]
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    snapshot = load_files([str(path)])
    for check_id in ("GPU-SHARE-001", "GPU-SHARE-002", "GPU-SHARE-003", "GPU-MON-005"):
        run = run_check(CHECKS[check_id], snapshot)
        assert run.status is not CheckStatus.ERROR, (check_id, run.error_detail)


def test_a_toleration_key_that_is_a_list_is_not_a_crash(tmp_path: Path) -> None:
    """`tolerations[].key: []` made DIST-004 and DIST-005 raise TypeError (unhashable list)
    when they looked the key up among the spot taints."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "eval", "namespace": "ml"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"key": [], "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "eval",
                            "image": "x:1",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ],
                }
            }
        },
    }
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    snapshot = load_files([str(path)])
    for check_id in ("GPU-DIST-004", "GPU-DIST-005"):
        run = run_check(CHECKS[check_id], snapshot)
        assert run.status is not CheckStatus.ERROR, (check_id, run.error_detail)
