"""API faults between `gpu-audit scan` and a real kube-apiserver (tests/live/fault_proxy.py).

For each fault the scan either retries and completes with the findings of a fault-free scan,
or completes partially: the checks that read what could not be listed are not evaluated, the
report says it is incomplete and the exit code is 3. It never runs past `--timeout` (plus the
time to start Python and render), which each scan is held to by its subprocess timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.registry import load_checks
from tests.live.fault_proxy import FaultProxy, running_proxy
from tests.live.harness import ControlPlane, KubeRequest, delete_namespace

NAMESPACE = "gpu-audit-faults"
PODS = 5
PAGE_SIZE = 2  # so that Pods take three pages and 410 has continue tokens to expire
PODS_PATH = f"/namespaces/{NAMESPACE}/pods"
TIMEOUT_S = 60.0
SHORT_TIMEOUT_S = 8.0
# Starting Python, importing the checks and rendering, on a loaded 2-core machine.
GRACE_S = 25.0


@dataclass(frozen=True)
class Scan:
    exit_code: int
    report: dict[str, Any]
    elapsed: float
    stderr: str

    @property
    def namespace_findings(self) -> list[tuple[str, str, str, str]]:
        return sorted(
            (f["check_id"], f["resource"]["kind"], f["resource"]["name"], f["message"])
            for f in self.report["findings"]
            if f["resource"]["namespace"] == NAMESPACE
        )

    @property
    def statuses(self) -> dict[str, str]:
        return {c["id"]: c["status"] for c in self.report["checks"]}


def _gpu_pod(index: int) -> dict[str, Any]:
    container = {
        "name": "train",
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "securityContext": {"privileged": index % 2 == 0},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"gpu-{index}", "namespace": NAMESPACE},
        "spec": {"containers": [container]},
    }


@pytest.fixture(scope="module")
def seeded(kube_request: KubeRequest) -> Iterator[None]:
    status, body = kube_request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    assert status in (201, 409), body
    for index in range(PODS):
        status, body = kube_request("POST", f"/api/v1{PODS_PATH}", _gpu_pod(index))
        assert status in (201, 409), body
    yield
    for index in range(PODS):
        kube_request("DELETE", f"/api/v1{PODS_PATH}/gpu-{index}")
    delete_namespace(kube_request, NAMESPACE)


@pytest.fixture(scope="module")
def proxy(control_plane: ControlPlane, seeded: None) -> Iterator[FaultProxy]:
    with running_proxy(control_plane.server, control_plane.ca_file) as running:
        yield running


@pytest.fixture
def faults(proxy: FaultProxy) -> Iterator[FaultProxy]:
    proxy.clear()
    yield proxy
    proxy.clear()


@pytest.fixture(scope="module")
def kubeconfig(
    proxy: FaultProxy, control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "proxy",
                "cluster": {"server": proxy.server, "certificate-authority": control_plane.ca_file},
            }
        ],
        "users": [{"name": "admin", "user": {"token": control_plane.admin_token}}],
        "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "admin"}}],
        "current-context": "proxy",
    }
    path = tmp_path_factory.mktemp("fault-proxy") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


def scan(kubeconfig: str, tmp_path: Path, timeout: float = TIMEOUT_S) -> Scan:
    out = tmp_path / f"report-{time.monotonic_ns()}.json"
    command = [
        sys.executable, "-m", "gpu_audit", "scan", "--no-plugins", "-q",
        "--kubeconfig", kubeconfig, "--namespace", NAMESPACE,
        "--page-size", str(PAGE_SIZE), "--timeout", str(timeout),
        "--format", "json", "--output-file", str(out),
    ]  # fmt: skip
    started = time.monotonic()
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout + GRACE_S, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the scan ran past --timeout {timeout:.0f}s + {GRACE_S:.0f}s")
    elapsed = time.monotonic() - started
    assert proc.returncode in (0, 1, 3), f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return Scan(proc.returncode, json.loads(out.read_text()), elapsed, proc.stderr)


@pytest.fixture(scope="module")
def baseline(kubeconfig: str, proxy: FaultProxy, tmp_path_factory: pytest.TempPathFactory) -> Scan:
    proxy.clear()
    result = scan(kubeconfig, tmp_path_factory.mktemp("baseline"))
    # Gaps that are no fault of the API (a check for a kind the scanner cannot list yet) are
    # allowed here, and then expected the same in every faulty scan.
    assert "Pod" not in gap_types(result), result.report["source"]["gaps"]
    assert result.namespace_findings, "the seeded pods must give findings to compare"
    # The pods really came in pages, so the 410 cases have continue tokens to expire.
    assert sum("continue=" in r for r in proxy.requests if PODS_PATH in r) >= 2, proxy.requests
    return result


def gap_types(result: Scan) -> list[str]:
    return [g["type"] for g in result.report["source"]["gaps"]]


def assert_same_as_baseline(result: Scan, baseline: Scan) -> None:
    assert result.report["source"]["gaps"] == baseline.report["source"]["gaps"]
    assert result.report["complete"] == baseline.report["complete"]
    assert result.exit_code == baseline.exit_code
    assert result.namespace_findings == baseline.namespace_findings
    assert result.statuses == baseline.statuses


def pod_checks() -> set[str]:
    """Checks that cannot be evaluated without Pods: some requirement has no other kind."""
    return {
        check.id
        for check in load_checks(plugins=False).values()
        for entry in check.requires
        if ((entry,) if isinstance(entry, str) else tuple(entry)) == ("Pod",)
    }


def assert_partial_without_pods(result: Scan, baseline: Scan, reason: str) -> None:
    assert result.exit_code == 3, result.stderr
    assert not result.report["complete"]
    gaps = result.report["source"]["gaps"]
    (pod_gap,) = [g for g in gaps if g["type"] == "Pod"]
    assert [g for g in gaps if g["type"] != "Pod"] == baseline.report["source"]["gaps"]
    assert reason in pod_gap["reason"], gaps
    checks = {c["id"]: c for c in result.report["checks"]}
    affected = pod_checks()
    assert affected, "some checks read Pods only"
    for check_id in affected:
        assert checks[check_id]["status"] == "not_evaluated", checks[check_id]
        assert pod_gap["reason"] in checks[check_id]["reason"]
    assert not any(
        f["resource"]["kind"] == "Pod" and f["check_id"] in affected
        for f in result.report["findings"]
    )


@pytest.mark.parametrize("fault", ["429", "500", "503"])
def test_throttling_and_server_errors_are_retried(
    fault: str, faults: FaultProxy, kubeconfig: str, baseline: Scan, tmp_path: Path
) -> None:
    rule = faults.add(fault, PODS_PATH, times=2, retry_after=2)
    result = scan(kubeconfig, tmp_path)
    assert rule.fired == 2
    assert_same_as_baseline(result, baseline)
    if fault == "429":  # Retry-After is honoured: two waits of 2 s
        assert result.elapsed >= 4.0


def test_a_connection_reset_mid_body_is_retried(
    faults: FaultProxy, kubeconfig: str, baseline: Scan, tmp_path: Path
) -> None:
    rule = faults.add("reset", PODS_PATH, times=1)
    result = scan(kubeconfig, tmp_path)
    assert rule.fired == 1
    assert_same_as_baseline(result, baseline)


def test_an_expired_continue_token_restarts_the_list(
    faults: FaultProxy, kubeconfig: str, baseline: Scan, tmp_path: Path
) -> None:
    rule = faults.add("410", PODS_PATH, times=1)
    result = scan(kubeconfig, tmp_path)
    assert rule.fired == 1
    # The list started again from the first page: the pods are neither lost nor doubled.
    first_pages = [r for r in faults.requests if PODS_PATH in r and "continue=" not in r]
    assert len(first_pages) == 2, faults.requests
    assert_same_as_baseline(result, baseline)
    assert result.report["source"]["types"].get("Pod") == baseline.report["source"]["types"]["Pod"]


def test_a_continue_token_that_keeps_expiring_is_a_gap(
    faults: FaultProxy, kubeconfig: str, baseline: Scan, tmp_path: Path
) -> None:
    faults.add("410", PODS_PATH, times=None)
    assert_partial_without_pods(scan(kubeconfig, tmp_path), baseline, "kept expiring (410 Gone)")


def test_a_server_error_that_persists_ends_at_the_deadline(
    faults: FaultProxy, kubeconfig: str, baseline: Scan, tmp_path: Path
) -> None:
    faults.add("503", PODS_PATH, times=None)
    result = scan(kubeconfig, tmp_path, timeout=SHORT_TIMEOUT_S)
    assert_partial_without_pods(result, baseline, "(HTTP 503)")
    assert result.elapsed < SHORT_TIMEOUT_S + GRACE_S


def test_a_stalled_request_ends_at_the_deadline(
    faults: FaultProxy, kubeconfig: str, baseline: Scan, tmp_path: Path
) -> None:
    faults.add("stall", PODS_PATH, times=None)
    result = scan(kubeconfig, tmp_path, timeout=SHORT_TIMEOUT_S)
    assert_partial_without_pods(result, baseline, "listing pods")
    # The stall held the scan until the deadline, and not past it.
    assert SHORT_TIMEOUT_S <= result.elapsed < SHORT_TIMEOUT_S + GRACE_S
