"""GPU-WL-004: severities that the fixture test cannot see."""

from __future__ import annotations

from pathlib import Path

from gpu_audit.checks.workloads.no_visible_devices_env_without_gpu_request import (
    no_visible_devices_env_without_gpu_request as check,
)
from gpu_audit.engine import run_check
from gpu_audit.model import Severity
from gpu_audit.sources.files import load_files

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checks" / "GPU-WL-004"


def _severities(name: str) -> dict[str, Severity]:
    run = run_check(check, load_files([str(FIXTURES / name)]))
    return {str(f.result.ref): f.severity for f in run.findings}


def test_unmitigated_non_gpu_containers_are_high() -> None:
    assert _severities("fail-cpu-pod-sees-all-gpus.yaml") == {
        "DaemonSet monitoring/nvidia-dcgm-exporter": Severity.HIGH,
        "Pod research/notebook": Severity.HIGH,
    }


def test_gpu_container_hard_coding_the_variable_is_medium() -> None:
    assert _severities("fail-gpu-container-hard-codes-devices.yaml") == {
        "StatefulSet serving/llm": Severity.MEDIUM
    }


def test_toolkit_mitigation_lowers_severity() -> None:
    assert _severities("fail-mitigated-cluster-is-low.yaml") == {
        "Deployment data/etl": Severity.LOW,
        "Deployment serving/llm": Severity.LOW,
    }
