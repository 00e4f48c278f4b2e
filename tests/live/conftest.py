"""A real kube-apiserver + etcd for the live tests.

The binaries come from ``GPU_AUDIT_K8S_BIN`` (a directory holding ``kube-apiserver`` and
``etcd``) or else from ``scripts/build-control-plane.sh``, which builds them from the Go module
proxy into a cache outside the repository. When they cannot be had the live tests are skipped,
except under ``CI=true``, where they fail.

Fixtures:

* ``control_plane`` (session): a running etcd + kube-apiserver on 127.0.0.1 with RBAC, a static
  admin token (group ``system:masters``), every CRD of ``../shared/crds`` installed and
  Established, and an admin kubeconfig. Yields a :class:`ControlPlane`.
* ``kube_request``: ``(method, path, body=None, *, token=None, content_type=...) -> (status,
  body)``, a raw HTTPS call as admin (or as ``token``).
* ``mint_service_account_token``: ``(namespace, name) -> token``; creates the namespace and the
  ServiceAccount if needed and mints a token with TokenRequest (no RBAC bindings are made).
* ``kubeconfig_for_token``: ``(token) -> path`` of a kubeconfig for that bearer token.
* ``shared_crds`` / ``shared_crd_names``: the parsed CRDs of ``../shared/crds`` / their names.

No kube-controller-manager or scheduler runs: namespaces never finish deleting, aggregated
ClusterRoles (view/edit/admin) stay empty, Pods stay Pending unless their status is patched.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from tests.live.harness import JSON, ControlPlane, KubeRequest, apiserver_command, run_build_script

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
CRD_DIR = REPO_ROOT.parent / "shared" / "crds"
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-control-plane.sh"

BUILD_TIMEOUT_S = 3600.0
ETCD_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 120.0
CRD_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_CHARS = 4000

MERGE_PATCH = "application/merge-patch+json"


# --------------------------------------------------------------------------- pytest hooks


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: needs a real kube-apiserver + etcd (tests/live)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.live)


# --------------------------------------------------------------------------- HTTP


def api_request(
    server: str,
    ca_file: str,
    token: str | None,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = JSON,
    timeout: float = 30.0,
) -> tuple[int, Any]:
    """One HTTPS call to the apiserver; returns (status, decoded JSON or text)."""
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    req = urllib.request.Request(server + path, data=data, method=method)
    req.add_header("Accept", JSON)
    if data is not None:
        req.add_header("Content-Type", content_type)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=ca_file)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            status = int(resp.status)
            raw: bytes = resp.read()
            ctype = str(resp.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as err:
        status = err.code
        raw = err.read()
        ctype = str(err.headers.get("Content-Type", ""))
    text = raw.decode("utf-8", "replace")
    if ctype.startswith(JSON) and text:
        return status, json.loads(text)
    return status, text


def _expect(status: int, body: Any, ok: tuple[int, ...], what: str) -> None:
    if status not in ok:
        pytest.fail(f"{what}: HTTP {status}: {str(body)[:LOG_TAIL_CHARS]}", pytrace=False)


# --------------------------------------------------------------------------- binaries


def _unavailable(reason: str) -> NoReturn:
    """Skip the live tests, or fail them under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"live control plane unavailable (CI=true, so failing): {reason}", pytrace=False
        )
    pytest.skip(f"live control plane unavailable: {reason}")


def _tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return "<no log>"
    return text[-chars:]


def _check_bin_dir(bin_dir: Path) -> str | None:
    for name in ("kube-apiserver", "etcd"):
        exe = bin_dir / name
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            return f"{exe} is missing or not executable"
    return None


def _find_bin_dir(log_dir: Path) -> Path:
    env = os.environ.get("GPU_AUDIT_K8S_BIN")
    if env:
        given = Path(env).resolve()
        problem = _check_bin_dir(given)
        if problem:
            _unavailable(f"GPU_AUDIT_K8S_BIN={env}: {problem}")
        return given
    if shutil.which("bash") is None:
        _unavailable("bash is not installed, cannot run scripts/build-control-plane.sh")
    built, failure = run_build_script(
        BUILD_SCRIPT, log_dir / "build-control-plane.log", BUILD_TIMEOUT_S
    )
    if built is None:
        _unavailable(failure)
    problem = _check_bin_dir(built)
    if problem:
        _unavailable(f"{BUILD_SCRIPT.name}: {problem}")
    return built


# --------------------------------------------------------------------------- processes

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM the child if pytest dies without running the teardown."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held together so that they differ)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _check_alive(proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    code = proc.poll()
    if code is not None:
        pytest.fail(f"{name} exited with {code} while starting; log tail:\n{_tail(log)}")


# --------------------------------------------------------------------------- certificates


def _openssl(*args: str) -> None:
    proc = subprocess.run(
        ["openssl", *args], stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"openssl {args[0]} failed: {proc.stderr.decode(errors='replace')}")


def _make_certs(d: Path) -> None:
    """CA, serving cert for 127.0.0.1/localhost (with SKI/AKI), and a service-account key."""
    _openssl(
        "req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-sha256", "-days", "7",
        "-subj", "/CN=gpu-audit-test-ca",
        "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
    )  # fmt: skip
    _openssl(
        "req", "-new", "-nodes", "-newkey", "rsa:2048", "-sha256",
        "-subj", "/CN=kube-apiserver",
        "-keyout", str(d / "apiserver.key"), "-out", str(d / "apiserver.csr"),
    )  # fmt: skip
    (d / "apiserver.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "x509", "-req", "-sha256", "-days", "7", "-in", str(d / "apiserver.csr"),
        "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
        "-set_serial", str(secrets.randbits(63)),
        "-extfile", str(d / "apiserver.ext"), "-out", str(d / "apiserver.crt"),
    )  # fmt: skip
    _openssl("genrsa", "-out", str(d / "sa.key"), "2048")


# --------------------------------------------------------------------------- kubeconfig


def write_kubeconfig(path: Path, server: str, ca_file: str, token: str, user: str) -> str:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "live", "cluster": {"server": server, "certificate-authority": ca_file}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "live", "context": {"cluster": "live", "user": user}}],
        "current-context": "live",
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    path.chmod(0o600)
    return str(path)


# --------------------------------------------------------------------------- CRDs


def crd_manifests(crd_dir: Path = CRD_DIR) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document in crd_dir/*.yaml / *.yml."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crds: list[dict[str, Any]] = []
    for f in sorted([*crd_dir.glob("*.yaml"), *crd_dir.glob("*.yml")]):
        with f.open("rb") as fh:
            crds.extend(
                doc
                for doc in yaml.load_all(fh, Loader=loader)
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
            )
    return crds


def _install_crds(req: Callable[..., tuple[int, Any]], crds: list[dict[str, Any]]) -> None:
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        status, body = req("POST", base, crd, timeout=120.0)
        _expect(status, body, (201,), f"creating CRD {crd['metadata']['name']}")
    pending = {str(crd["metadata"]["name"]) for crd in crds}
    deadline = time.monotonic() + CRD_TIMEOUT_S
    while pending:
        for name in sorted(pending):
            status, body = req("GET", f"{base}/{name}")
            conds = (body.get("status", {}).get("conditions") or []) if status == 200 else []
            true = {c.get("type") for c in conds if c.get("status") == "True"}
            if {"Established", "NamesAccepted"} <= true:
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            pytest.fail(f"CRDs not Established after {CRD_TIMEOUT_S:.0f}s: {sorted(pending)}")
        if pending:
            time.sleep(0.2)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def shared_crds() -> list[dict[str, Any]]:
    """The parsed CRDs of ../shared/crds (parsed once per session; do not mutate)."""
    if not CRD_DIR.is_dir():
        _unavailable(f"CRD directory {CRD_DIR} does not exist")
    crds = crd_manifests()
    if not crds:
        _unavailable(f"no CustomResourceDefinition in {CRD_DIR}")
    return crds


@pytest.fixture(scope="session")
def shared_crd_names(shared_crds: list[dict[str, Any]]) -> frozenset[str]:
    """metadata.name of every CRD in ../shared/crds (all installed by control_plane)."""
    return frozenset(str(crd["metadata"]["name"]) for crd in shared_crds)


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, shared_crds: list[dict[str, Any]]
) -> Iterator[ControlPlane]:
    work = tmp_path_factory.mktemp("control-plane")
    bin_dir = _find_bin_dir(work)
    if shutil.which("openssl") is None:
        _unavailable("openssl is not installed (needed for the test certificates)")

    _make_certs(work)
    admin_token = secrets.token_urlsafe(32)
    tokens = work / "tokens.csv"
    tokens.write_text(f'{admin_token},admin,admin-uid,"system:masters"\n')
    tokens.chmod(0o600)
    etcd_port, peer_port, api_port = _free_ports(3)
    server = f"https://127.0.0.1:{api_port}"
    ca_file = str(work / "ca.crt")
    # etcd's data (with its 64 MB preallocated WAL) goes away at teardown; logs stay in `work`.
    data_dir = Path(tempfile.mkdtemp(prefix="gpu-audit-etcd-"))

    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, data_dir, True)

        etcd_log = work / "etcd.log"
        etcd = _start(
            [
                str(bin_dir / "etcd"),
                f"--data-dir={data_dir}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            etcd_log,
        )
        stack.callback(_stop, etcd)
        deadline = time.monotonic() + ETCD_TIMEOUT_S
        while True:
            _check_alive(etcd, "etcd", etcd_log)
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{etcd_port}/health"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        break
            if time.monotonic() > deadline:
                pytest.fail(f"etcd not healthy after {ETCD_TIMEOUT_S:.0f}s:\n{_tail(etcd_log)}")
            time.sleep(0.2)

        api_log = work / "kube-apiserver.log"
        apiserver = _start(
            apiserver_command(
                bin_dir,
                work,
                etcd_port=etcd_port,
                api_port=api_port,
                tokens=tokens,
                service_ip_range="10.0.0.0/24",
            ),
            api_log,
        )
        stack.callback(_stop, apiserver)

        def req(
            method: str, path: str, body: Any = None, *, timeout: float = 30.0
        ) -> tuple[int, Any]:
            return api_request(server, ca_file, admin_token, method, path, body, timeout=timeout)

        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer yet"
        while True:
            _check_alive(apiserver, "kube-apiserver", api_log)
            _check_alive(etcd, "etcd", etcd_log)
            try:
                status, body = req("GET", "/readyz", timeout=5.0)
                if status == 200:
                    break
                last = f"HTTP {status}: {str(body)[:500]}"
            except (OSError, ssl.SSLError) as err:
                last = repr(err)
            if time.monotonic() > deadline:
                pytest.fail(
                    f"kube-apiserver not ready after {READY_TIMEOUT_S:.0f}s ({last}); "
                    f"log tail:\n{_tail(api_log)}"
                )
            time.sleep(0.25)

        _install_crds(req, shared_crds)
        kubeconfig = write_kubeconfig(
            work / "admin.kubeconfig", server, ca_file, admin_token, "admin"
        )
        yield ControlPlane(
            server=server,
            ca_file=ca_file,
            admin_token=admin_token,
            kubeconfig=kubeconfig,
            bin_dir=str(bin_dir),
        )


@pytest.fixture(scope="session")
def kube_request(control_plane: ControlPlane) -> KubeRequest:
    cp = control_plane

    def call(
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = JSON,
    ) -> tuple[int, Any]:
        return api_request(
            cp.server,
            cp.ca_file,
            cp.admin_token if token is None else token,
            method,
            path,
            body,
            content_type=content_type,
        )

    return call


@pytest.fixture(scope="session")
def mint_service_account_token(kube_request: KubeRequest) -> Callable[[str, str], str]:
    def mint(namespace: str, name: str) -> str:
        status, body = kube_request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        _expect(status, body, (201, 409), f"creating namespace {namespace}")
        status, body = kube_request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}}
        )
        _expect(status, body, (201, 409), f"creating ServiceAccount {namespace}/{name}")
        status, body = kube_request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        _expect(status, body, (201,), f"TokenRequest for {namespace}/{name}")
        return str(body["status"]["token"])

    return mint


@pytest.fixture(scope="session")
def kubeconfig_for_token(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], str]:
    out = tmp_path_factory.mktemp("kubeconfigs")
    counter = iter(range(1_000_000))

    def make(token: str) -> str:
        n = next(counter)
        return write_kubeconfig(
            out / f"token-{n}.kubeconfig",
            control_plane.server,
            control_plane.ca_file,
            token,
            f"token-{n}",
        )

    return make
