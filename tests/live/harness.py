"""Types the live tests share: the running control plane and the raw API call.

conftest.py provides them as fixtures; test modules import the types from here (a conftest
module is not importable by name).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

JSON = "application/json"


@dataclass(frozen=True)
class ControlPlane:
    """A running test control plane. All paths are absolute."""

    server: str  # https://127.0.0.1:<port>
    ca_file: str  # PEM of the CA that signed the serving cert
    admin_token: str  # bearer token of user "admin" in group system:masters
    kubeconfig: str  # kubeconfig for the admin token
    bin_dir: str  # directory of the kube-apiserver and etcd binaries


class KubeRequest(Protocol):
    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = JSON,
    ) -> tuple[int, Any]: ...


def run_build_script(script: Path, log: Path, timeout: float) -> tuple[Path | None, str]:
    """Run a scripts/build-*.sh (it builds from the Go module proxy, or finds its cache, and
    prints the directory of the binaries last). Returns (directory, "") or (None, why not)."""
    with log.open("wb") as err:
        try:
            proc = subprocess.run(
                ["bash", str(script)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, f"{script.name} timed out after {timeout:.0f}s"
    if proc.returncode != 0:
        tail = log.read_text("utf-8", "replace")[-1500:]
        return None, f"{script.name} exited {proc.returncode}:\n{tail}"
    lines = proc.stdout.decode().strip().splitlines()
    if not lines:
        return None, f"{script.name} printed no directory"
    return Path(lines[-1]), ""


def delete_namespace(request: KubeRequest, name: str) -> None:
    """Delete a namespace for good: without kube-controller-manager nobody finalizes it, so
    remove the `kubernetes` finalizer ourselves. Its objects must be deleted first: nothing
    else would, and cluster-wide lists would still return them."""
    path = f"/api/v1/namespaces/{name}"
    status, reply = request("DELETE", path)
    if status == 404:
        return
    assert status in (200, 202), f"deleting namespace {name}: HTTP {status}: {reply}"
    status, current = request("GET", path)
    if status == 404:
        return
    current["spec"]["finalizers"] = []
    status, reply = request("PUT", f"{path}/finalize", current)
    assert status in (200, 404), f"finalizing namespace {name}: HTTP {status}: {reply}"
    request("DELETE", path)  # gone now, or answers 404


def apiserver_command(
    bin_dir: Path,
    work: Path,
    *,
    etcd_port: int,
    api_port: int,
    tokens: Path,
    service_ip_range: str,
    extra: Sequence[str] = (),
) -> list[str]:
    """The kube-apiserver of the tests (and of the live benchmark): loopback only, RBAC, a
    static token file, the certificates conftest makes in `work`, no controllers behind it."""
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={api_port}",
        f"--cert-dir={work / 'apiserver-certs'}",
        f"--tls-cert-file={work / 'apiserver.crt'}",
        f"--tls-private-key-file={work / 'apiserver.key'}",
        f"--client-ca-file={work / 'ca.crt'}",
        f"--token-auth-file={tokens}",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={work / 'sa.key'}",
        f"--service-account-signing-key-file={work / 'sa.key'}",
        f"--service-cluster-ip-range={service_ip_range}",
        "--allow-privileged=true",
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--endpoint-reconciler-type=none",
        *extra,
    ]
