"""The test control plane of tests/live (etcd + kube-apiserver, CRDs of ../shared/crds), started
outside pytest and loaded with a synthetic cluster for the live benchmark.

It reuses tests/live/conftest.py's helpers (certificates, processes, kubeconfig, CRDs) and
tests/live/harness.py's kube-apiserver command line by importing them; only etcd's command line
is repeated here, because conftest builds it inside its pytest fixture. Objects are created with parallel keep-alive HTTPS connections; the API
server ignores `status` on create, so Pods stay Pending, as in the live tests.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import secrets
import shutil
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_audit.k8s.kinds import KNOWN_KINDS, resource_type  # noqa: E402
from tests.live import conftest as live  # noqa: E402  (the repository root is on the path now)
from tests.live.harness import apiserver_command  # noqa: E402

WORKERS = 8


@dataclass(frozen=True)
class Cluster:
    server: str
    ca_file: str
    token: str
    kubeconfig: str


def _wait(what: str, ready: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout:.0f}s")
        time.sleep(0.25)


def _etcd_healthy(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/health"
    with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=2) as resp:
        return bool(json.loads(resp.read()).get("health") == "true")
    return False


@contextlib.contextmanager
def control_plane(bin_dir: Path, work: Path) -> Iterator[Cluster]:
    """etcd + kube-apiserver as in tests/live/conftest.py's control_plane fixture."""
    live._make_certs(work)
    token = secrets.token_urlsafe(32)
    tokens = work / "tokens.csv"
    tokens.write_text(f'{token},admin,admin-uid,"system:masters"\n')
    etcd_port, peer_port, api_port = live._free_ports(3)
    server = f"https://127.0.0.1:{api_port}"
    ca_file = str(work / "ca.crt")
    data_dir = Path(tempfile.mkdtemp(prefix="gpu-audit-bench-etcd-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, data_dir, True)
        etcd = live._start(
            [
                str(bin_dir / "etcd"),
                f"--data-dir={data_dir}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            work / "etcd.log",
        )
        stack.callback(live._stop, etcd)
        _wait("etcd", lambda: _etcd_healthy(etcd_port), live.ETCD_TIMEOUT_S)
        apiserver = live._start(
            apiserver_command(
                bin_dir,
                work,
                etcd_port=etcd_port,
                api_port=api_port,
                tokens=tokens,
                service_ip_range="10.0.0.0/16",
                # The benchmark's own write burst must not be throttled by priority & fairness.
                extra=("--max-requests-inflight=2000", "--max-mutating-requests-inflight=2000"),
            ),
            work / "kube-apiserver.log",
        )
        stack.callback(live._stop, apiserver)

        def request(
            method: str, path: str, body: Any = None, *, timeout: float = 120.0
        ) -> tuple[int, Any]:
            answer: tuple[int, Any] = live.api_request(
                server, ca_file, token, method, path, body, timeout=timeout
            )
            return answer

        def ready() -> bool:
            with contextlib.suppress(OSError, ssl.SSLError):
                return request("GET", "/readyz")[0] == 200
            return False

        _wait("kube-apiserver", ready, live.READY_TIMEOUT_S)
        live._install_crds(request, live.crd_manifests())
        kubeconfig = live.write_kubeconfig(
            work / "admin.kubeconfig", server, ca_file, token, "admin"
        )
        yield Cluster(server, ca_file, token, kubeconfig)


def _collection_path(obj: dict[str, Any]) -> str:
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    info = KNOWN_KINDS[resource_type(api_version, kind)]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = obj["metadata"].get("namespace")
    if info.namespaced:
        return f"{prefix}/namespaces/{namespace}/{info.plural}"
    return f"{prefix}/{info.plural}"


def _for_create(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a client sends it: no server-set metadata, no status. A Job's selector
    is generated by the API server (a given one needs manualSelector), and so are Service
    cluster IPs, so they are left out."""
    metadata = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp", "generateName")
    }
    body = {k: v for k, v in obj.items() if k != "status"}
    body["metadata"] = metadata
    if obj["kind"] == "Service":  # the API server allocates cluster IPs from its own range
        body["spec"] = {
            k: v for k, v in body["spec"].items() if k not in ("clusterIP", "clusterIPs")
        }
    if obj["kind"] == "Job":
        spec = dict(body["spec"])
        spec.pop("selector", None)
        template = json.loads(json.dumps(spec["template"]))
        template["metadata"]["labels"].pop("batch.kubernetes.io/controller-uid", None)
        spec["template"] = template
        body["spec"] = spec
    return body


class _Poster:
    """One keep-alive HTTPS connection per thread."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.local = threading.local()
        self.context = ssl.create_default_context(cafile=cluster.ca_file)
        self.netloc = urlsplit(cluster.server).netloc

    def post(self, path: str, body: dict[str, Any]) -> bool:
        return self.send("POST", path, body, "application/json")

    def send(self, method: str, path: str, body: dict[str, Any], content_type: str) -> bool:
        """True once the server has the object; False when it refuses it as invalid (422)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        headers = {
            "Authorization": f"Bearer {self.cluster.token}",
            "Content-Type": content_type,
            "Accept": "application/json",
        }
        for attempt in range(5):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = http.client.HTTPSConnection(self.netloc, context=self.context, timeout=120)
                self.local.conn = conn
            try:
                conn.request(method, path, data, headers)
                response = conn.getresponse()
                text = response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if response.status in (200, 201, 409):
                return True
            if response.status == 422:
                return False
            if response.status in (429, 500, 503, 504):
                time.sleep(0.2 * (attempt + 1))
                continue
            raise RuntimeError(f"{method} {path}: HTTP {response.status}: {text[:300]!r}")
        raise RuntimeError(f"{method} {path}: gave up after retries")


def load(cluster: Cluster, objects: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Create every object (Namespaces first, then the rest in parallel) and set the Nodes'
    status (capacity, conditions: the checks read them). Returns the objects created and
    those the API server refused per kind: it validates pod templates as it validates pods,
    so workloads with a fractional or request-only GPU exist only in manifests."""
    ordered = sorted(objects, key=lambda o: o["kind"] != "Namespace")
    poster = _Poster(cluster)
    created: dict[str, int] = {}
    refused: dict[str, int] = {}
    namespaces = [o for o in ordered if o["kind"] == "Namespace"]
    rest = ordered[len(namespaces) :]
    with ThreadPoolExecutor(WORKERS) as pool:
        for batch in (namespaces, rest):
            futures = [pool.submit(poster.post, _collection_path(o), _for_create(o)) for o in batch]
            for obj, future in zip(batch, futures, strict=True):
                tally = created if future.result() else refused
                tally[obj["kind"]] = tally.get(obj["kind"], 0) + 1
        nodes = [o for o in ordered if o["kind"] == "Node"]
        statuses = [
            pool.submit(
                poster.send,
                "PATCH",
                f"/api/v1/nodes/{o['metadata']['name']}/status",
                {"status": o["status"]},
                live.MERGE_PATCH,
            )
            for o in nodes
        ]
        for future in statuses:
            future.result()
    return {"created": dict(sorted(created.items())), "refused": dict(sorted(refused.items()))}
