"""`gpu-audit scan` and `collect` against a real kube-apiserver (see conftest.py).

Equivalence cases seed fixture objects into the apiserver, scan live, and compare with an
offline scan of the same files. The cluster itself holds objects the files do not (the CRDs,
the built-in APIServices, objects of other tests), so the offline side also reads a baseline
snapshot collected just before seeding: live and offline then differ only by what the server
did to the seeded objects. Each case deletes what it created, namespaces included.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.k8s.kinds import (
    BUILTIN_GROUPS,
    KNOWN_KINDS,
    KindInfo,
    api_group,
    resource_type,
)
from gpu_audit.registry import load_checks
from gpu_audit.sources.live import Connection, ListOptions, collect
from tests.live.harness import ControlPlane, KubeRequest, delete_namespace

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "fixtures" / "clusters" / "sample"
CHECK_FIXTURES = REPO_ROOT / "fixtures" / "checks"
RBAC_FILE = REPO_ROOT / "deploy" / "rbac.yaml"
EQUIVALENCE_DIRS = (
    "GPU-WL-001",
    "GPU-STACK-004",
    "GPU-MON-003",
    # DRA (resource.k8s.io/v1) and the NVIDIA DRA driver's ComputeDomains
    "GPU-SCHED-008",
    "GPU-SCHED-009",
    "GPU-SCHED-010",
    "GPU-NODE-009",
)
SERVICE_MONITOR = "ServiceMonitor.monitoring.coreos.com"
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
MERGE_PATCH = "application/merge-patch+json"
PAGINATION_PODS = 2000
# Objects of the sample cluster that a real apiserver refuses (HTTP 422), so no live cluster
# holds them; the offline side of the comparison reads only what the apiserver accepted.
# GPU-WL-001's failing cases are among them: extended resources must be whole numbers and
# their request must equal their limit, so only manifests (never a cluster) can hold those.
SAMPLE_REJECTED = ["Deployment triton-llm", "Job tokenizer-eval"]
# Cases that fail because server defaults expose a check bug: case id -> the bug (strict xfail,
# so a fix shows up). Empty: the DaemonSet-status and Node-allocatable bugs found here are fixed.
KNOWN_BUGS: dict[str, str] = {}


MintToken = Callable[[str, str], str]
KubeconfigFor = Callable[[str], str]


def _ok(status: int, body: Any, what: str, ok: Sequence[int] = (200, 201)) -> None:
    assert status in ok, f"{what}: HTTP {status}: {str(body)[:2000]}"


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


# --------------------------------------------------------------------------- seeding


def load_objects(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Every object of the YAML files (directories walked in sorted order), Lists expanded."""
    files = [f for p in paths for f in (sorted(p.glob("*.yaml")) if p.is_dir() else [p])]
    objects: list[dict[str, Any]] = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text(encoding="utf-8")):
            if not isinstance(doc, dict):
                continue
            if str(doc.get("kind", "")).endswith("List") and "items" in doc:
                objects.extend(doc["items"])
            else:
                objects.append(doc)
    return objects


def _info(obj: dict[str, Any]) -> KindInfo:
    type_ = resource_type(obj["apiVersion"], obj["kind"])
    info = KNOWN_KINDS.get(type_)
    assert info is not None, f"cannot seed {type_}: not in KNOWN_KINDS"
    return info


def _namespace_of(obj: dict[str, Any], info: KindInfo) -> str:
    return str(obj["metadata"].get("namespace") or "default") if info.namespaced else ""


def collection_path(info: KindInfo, version: str, namespace: str) -> str:
    prefix = f"/api/{version}" if not info.group else f"/apis/{info.group}/{version}"
    return (
        f"{prefix}/namespaces/{namespace}/{info.plural}" if namespace else f"{prefix}/{info.plural}"
    )


@dataclass
class Seeder:
    """Creates objects as a cluster would hold them, and deletes them again."""

    request: KubeRequest
    objects: list[dict[str, Any]]
    created: list[str] = field(default_factory=list)  # object paths, in creation order
    accepted: list[dict[str, Any]] = field(default_factory=list)  # as in the files
    rejected: list[str] = field(default_factory=list)  # "Type name: why" (HTTP 422)
    namespaces: list[str] = field(default_factory=list)  # namespaces this seeder created

    def _create_namespace(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        status, reply = self.request("POST", "/api/v1/namespaces", body)
        if status == 201:
            self.namespaces.append(name)
            return
        _ok(status, reply, f"creating namespace {name}", (409,))
        patch = {k: v for k, v in body["metadata"].items() if k in ("labels", "annotations")}
        if patch:
            status, reply = self.request(
                "PATCH", f"/api/v1/namespaces/{name}", {"metadata": patch}, content_type=MERGE_PATCH
            )
            _ok(status, reply, f"labelling namespace {name}")

    def prepare_namespaces(self) -> None:
        """Namespaces the objects live in that the files do not declare (kubectl's -n)."""
        declared = {o["metadata"]["name"] for o in self.objects if o["kind"] == "Namespace"}
        used = {_namespace_of(o, _info(o)) for o in self.objects} - {""}
        for name in sorted(used - declared):
            self._create_namespace({"metadata": {"name": name}})

    def create_objects(self) -> None:
        """Namespaces first, then cluster-scoped objects, then namespaced ones; status through
        the status subresource (create resets it for everything but Nodes)."""
        for obj in self.objects:
            if obj["kind"] == "Namespace":
                self._create_namespace({k: v for k, v in obj.items() if k != "status"})
                self.accepted.append(obj)
        rest = [o for o in self.objects if o["kind"] != "Namespace"]
        rest.sort(key=lambda o: _info(o).namespaced)
        for obj in rest:
            self._create(obj)

    def _create(self, obj: dict[str, Any]) -> None:
        info = _info(obj)
        version = obj["apiVersion"].split("/")[-1]
        base = collection_path(info, version, _namespace_of(obj, info))
        body = json.loads(json.dumps(obj))
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            body["metadata"].pop(key, None)
        name = body["metadata"]["name"]
        status, reply = self.request("POST", base, body)
        if status == 422:  # invalid for a real apiserver: the offline side must not read it
            self.rejected.append(f"{info.type} {name}: {reply.get('message', reply)}")
            return
        _ok(status, reply, f"creating {info.type} {name}")
        self.accepted.append(obj)
        self.created.append(f"{base}/{name}")
        if obj.get("status"):
            status, reply = self.request(
                "PATCH",
                f"{base}/{name}/status",
                {"status": obj["status"]},
                content_type=MERGE_PATCH,
            )
            # 404: the CRD has no status subresource, so create kept the status
            _ok(status, reply, f"patching the status of {info.type} {name}", (200, 404))

    def delete_all(self) -> None:
        for path in reversed(self.created):
            status, reply = self.request(
                "DELETE", f"{path}?gracePeriodSeconds=0&propagationPolicy=Background"
            )
            _ok(status, reply, f"deleting {path}", (200, 202, 404))
        self.created.clear()
        for name in reversed(self.namespaces):
            delete_namespace(self.request, name)
        self.namespaces.clear()


@dataclass(frozen=True)
class Seeded:
    baseline: Path  # snapshot of the cluster just before the objects were created
    accepted: Path  # the objects the apiserver accepted, as in the files
    rejected: list[str]  # the objects it refused as invalid (HTTP 422), with why


@contextlib.contextmanager
def seeded(
    request: KubeRequest, paths: Sequence[Path], admin_kubeconfig: str, tmp: Path
) -> Iterator[Seeded]:
    """Seed the files' objects, and delete them again afterwards."""
    seeder = Seeder(request, load_objects(paths))
    tag = secrets.token_hex(3)
    try:
        seeder.prepare_namespaces()
        baseline = tmp / f"baseline-{tag}.json"
        result = cli(
            "collect", "--kubeconfig", admin_kubeconfig, "-q", "--output-file", str(baseline)
        )
        assert result.exit_code == 0, result.output
        seeder.create_objects()
        accepted = tmp / f"accepted-{tag}.yaml"
        accepted.write_text(yaml.safe_dump_all(seeder.accepted), encoding="utf-8")
        yield Seeded(baseline, accepted, list(seeder.rejected))
    finally:
        seeder.delete_all()


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def report(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.stdout)
        return loaded


def cli(*args: str) -> CliResult:
    result = CliRunner().invoke(main, list(args), catch_exceptions=True)
    exception = None if isinstance(result.exception, SystemExit) else result.exception
    return CliResult(result.exit_code, result.stdout, result.stderr, exception)


def live_scan(kubeconfig: str, *extra: str) -> CliResult:
    return cli("scan", "--kubeconfig", kubeconfig, "--format", "json", "-q", *extra)


def offline_scan(*paths: Path | str) -> CliResult:
    args = [a for p in paths for a in ("--from-file", str(p))]
    return cli("scan", *args, "--format", "json")


def findings(report: dict[str, Any]) -> list[tuple[str, ...]]:
    return sorted(
        (
            f["check_id"],
            f["resource"]["kind"],
            f["resource"].get("namespace") or "",
            f["resource"]["name"],
            f.get("path") or "",
            f["message"],
            f["severity"],
            f["remediation"],
        )
        for f in report["findings"]
    )


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["checks"]}


def failed_gaps(report: dict[str, Any]) -> list[dict[str, str]]:
    """Gaps that are failures, not types the cluster does not serve (a CRD not installed)."""
    absent = ("CRD not installed: ", "API not served: ")
    return [g for g in report["source"]["gaps"] if not g["reason"].startswith(absent)]


def uninstalled_crds(shared_crd_names: frozenset[str]) -> set[str]:
    """The known custom resource types whose CRD ../shared/crds does not hold (TFJob)."""
    return {
        info.type
        for info in KNOWN_KINDS.values()
        if info.group not in BUILTIN_GROUPS
        and f"{info.plural}.{info.group}" not in shared_crd_names
    }


def assert_same_verdicts(live: dict[str, Any], offline: dict[str, Any]) -> None:
    assert live["source"]["type"] == "live"
    assert failed_gaps(live) == [] and failed_gaps(offline) == []
    assert offline["source"]["warnings"] == []  # no object both seeded and in the baseline
    assert findings(live) == findings(offline)
    assert statuses(live) == statuses(offline)
    assert live["score"] == offline["score"]


def missing_input(check: dict[str, Any]) -> bool:
    """Not evaluated for want of input (not merely not applicable to this cluster)."""
    return check["status"] == "not_evaluated" and check["applicable"] is not False


def assert_no_traceback(result: CliResult) -> None:
    assert result.exception is None, repr(result.exception)
    assert "Traceback" not in result.output


def kubeconfig_file(path: Path, server: str, token: str, ca_file: str | None = None) -> str:
    cluster: dict[str, Any] = {"server": server}
    if ca_file:
        cluster["certificate-authority"] = ca_file
    else:
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return str(path)


# --------------------------------------------------------------------------- RBAC


def rbac_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC_FILE.read_text(encoding="utf-8")) if d]


def apply(request: KubeRequest, doc: dict[str, Any]) -> None:
    """Create, or replace when it exists (the file as-is, as `kubectl apply` would leave it)."""
    group = api_group(doc["apiVersion"])
    version = doc["apiVersion"].split("/")[-1]
    plural = {
        "Namespace": "namespaces",
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
    }[doc["kind"]]
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    namespace = doc["metadata"].get("namespace")
    base = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    status, reply = request("POST", base, doc)
    if status == 409 and doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
        status, current = request("GET", f"{base}/{doc['metadata']['name']}")
        _ok(status, current, "reading " + doc["metadata"]["name"])
        body = {
            **doc,
            "metadata": {
                **doc["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        status, reply = request("PUT", f"{base}/{doc['metadata']['name']}", body)
    _ok(status, reply, f"applying {doc['kind']} {doc['metadata']['name']}", (200, 201, 409))


def bind(request: KubeRequest, role: str, namespace: str, account: str) -> None:
    apply(
        request,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{role}-{namespace}-{account}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )


def wait_until_allowed(request: KubeRequest, token: str, path: str) -> None:
    """RBAC changes reach the authorizer's informer cache within moments; wait for it."""
    deadline = time.monotonic() + 10
    while True:
        status, reply = request("GET", f"{path}?limit=1", token=token)
        if status == 200:
            return
        assert time.monotonic() < deadline, f"still HTTP {status} on {path}: {reply}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reader_kubeconfig(
    kube_request: KubeRequest,
    mint_service_account_token: MintToken,
    kubeconfig_for_token: KubeconfigFor,
) -> str:
    """deploy/rbac.yaml applied as-is; a kubeconfig for its gpu-audit ServiceAccount."""
    for doc in rbac_documents():
        apply(kube_request, doc)
    token = mint_service_account_token("gpu-audit", "gpu-audit")
    wait_until_allowed(kube_request, token, "/apis/monitoring.coreos.com/v1/servicemonitors")
    return kubeconfig_for_token(token)


# --------------------------------------------------------------------------- equivalence


@dataclass(frozen=True)
class SampleScan:
    seeded: Seeded
    report: dict[str, Any]
    seconds: float


@pytest.fixture(scope="class")
def sample(
    kube_request: KubeRequest,
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SampleScan]:
    """The sample cluster seeded for the tests of TestSampleCluster, scanned live once."""
    tmp = tmp_path_factory.mktemp("sample")
    with seeded(kube_request, [SAMPLE], control_plane.kubeconfig, tmp) as seeds:
        started = time.monotonic()
        result = live_scan(control_plane.kubeconfig)
        seconds = time.monotonic() - started
        assert_no_traceback(result)
        assert result.exit_code == 0, result.output
        yield SampleScan(seeds, result.report, seconds)


class TestSampleCluster:
    def test_live_equals_offline(self, sample: SampleScan) -> None:
        print(f"\nlive scan of the sample cluster: {sample.seconds:.2f}s")
        rejected = [r.split(":", 1)[0] for r in sample.seeded.rejected]
        assert sorted(rejected) == sorted(SAMPLE_REJECTED), sample.seeded.rejected
        offline = offline_scan(sample.seeded.accepted, sample.seeded.baseline)
        assert offline.exit_code == 0, offline.output
        assert findings(sample.report), "the sample cluster has deliberate misconfigurations"
        assert_same_verdicts(sample.report, offline.report)
        assert sample.report["source"]["details"]["identity"]["username"] == "admin"

    def test_collect_round_trip_without_secret_data(
        self,
        sample: SampleScan,
        kube_request: KubeRequest,
        control_plane: ControlPlane,
        tmp_path: Path,
    ) -> None:
        value = f"s3cr3t-{secrets.token_hex(8)}"
        path = "/api/v1/namespaces/ml-serving/secrets"
        secret = {"metadata": {"name": "hf-token"}, "stringData": {"token": value}}
        status, reply = kube_request("POST", path, secret)
        _ok(status, reply, "creating the Secret")
        try:
            snap = tmp_path / "snap.json"
            collected = cli(
                "collect",
                "--kubeconfig",
                control_plane.kubeconfig,
                "-q",
                "--output-file",
                str(snap),
            )
            assert_no_traceback(collected)
            assert collected.exit_code == 0, collected.output
            text = snap.read_text(encoding="utf-8")
            assert value not in text
            assert base64.b64encode(value.encode()).decode() not in text
            assert '"kind": "Secret"' not in text
            again = offline_scan(snap)
            assert again.exit_code == 0, again.output
            assert findings(again.report) == findings(sample.report)
            assert statuses(again.report) == statuses(sample.report)
            assert again.report["score"] == sample.report["score"]
        finally:
            kube_request("DELETE", f"{path}/hf-token")


def _equivalence_cases() -> list[Any]:
    cases = []
    for directory in EQUIVALENCE_DIRS:
        fixtures = (CHECK_FIXTURES / directory).glob("*.yaml")
        for fixture in sorted(p for p in fixtures if p.name != "expected.yaml"):
            case_id = f"{directory}/{fixture.stem}"
            bug = KNOWN_BUGS.get(case_id)
            marks = [pytest.mark.xfail(reason=bug, strict=True)] if bug else []
            cases.append(pytest.param(fixture, id=case_id, marks=marks))
    return cases


@pytest.mark.parametrize("fixture", _equivalence_cases())
def test_check_fixture_live_equals_offline(
    fixture: Path, kube_request: KubeRequest, control_plane: ControlPlane, tmp_path: Path
) -> None:
    with seeded(kube_request, [fixture], control_plane.kubeconfig, tmp_path) as seeds:
        live = live_scan(control_plane.kubeconfig)
        assert_no_traceback(live)
        assert live.exit_code == 0, live.output
        offline = offline_scan(seeds.accepted, seeds.baseline)
        assert offline.exit_code == 0, offline.output
        assert_same_verdicts(live.report, offline.report)
        if not seeds.rejected:  # the case is intact, so its verdict is the fixture's
            expected = "failed" if fixture.name.startswith("fail-") else "passed"
            assert statuses(live.report)[fixture.parent.name] == expected


# --------------------------------------------------------------------------- permissions


def test_reader_role_scans_with_no_gaps(
    reader_kubeconfig: str, shared_crd_names: frozenset[str]
) -> None:
    result = live_scan(reader_kubeconfig)
    assert_no_traceback(result)
    assert result.exit_code == 0, result.output
    report = result.report
    assert failed_gaps(report) == []
    assert {g["type"] for g in report["source"]["gaps"]} <= uninstalled_crds(shared_crd_names)
    assert report["source"]["details"]["missing_permissions"] == []
    assert report["source"]["details"]["identity"]["username"] == (
        "system:serviceaccount:gpu-audit:gpu-audit"
    )
    assert not [c["id"] for c in report["checks"] if missing_input(c)]


def test_unbound_account_gets_forbidden_gaps(
    mint_service_account_token: MintToken, kubeconfig_for_token: KubeconfigFor
) -> None:
    namespace = _unique("noperm")
    token = mint_service_account_token(namespace, "scanner")
    result = live_scan(kubeconfig_for_token(token))
    assert_no_traceback(result)
    assert result.exit_code == 3, result.output
    report = result.report
    assert report["checks"]
    for check in report["checks"]:
        assert check["status"] == "not_evaluated", check["id"]
        assert check["reason"].startswith("forbidden: list"), (check["id"], check["reason"])
    assert failed_gaps(report)
    assert all(g["reason"].startswith("forbidden: list ") for g in failed_gaps(report))
    assert report["source"]["details"]["identity"]["username"] == (
        f"system:serviceaccount:{namespace}:scanner"
    )


def test_role_without_servicemonitors_blocks_only_their_checks(
    kube_request: KubeRequest,
    mint_service_account_token: MintToken,
    kubeconfig_for_token: KubeconfigFor,
    reader_kubeconfig: str,
) -> None:
    role = next(d for d in rbac_documents() if d["kind"] == "ClusterRole")
    role = json.loads(json.dumps(role))
    role["metadata"]["name"] = _unique("gpu-audit-reader-no-sm")
    for rule in role["rules"]:
        rule["resources"] = [r for r in rule["resources"] if r != "servicemonitors"]
    assert any("prometheuses" in r["resources"] for r in role["rules"])
    apply(kube_request, role)
    namespace = _unique("no-sm")
    token = mint_service_account_token(namespace, "scanner")
    bind(kube_request, role["metadata"]["name"], namespace, "scanner")
    wait_until_allowed(kube_request, token, "/apis/monitoring.coreos.com/v1/prometheuses")

    result = live_scan(kubeconfig_for_token(token))
    assert_no_traceback(result)
    assert result.exit_code == 3, result.output
    report = result.report
    reason = f"forbidden: list {SERVICE_MONITOR_CRD}"
    assert failed_gaps(report) == [{"type": SERVICE_MONITOR, "reason": reason}]
    blocked = {
        c.id
        for c in load_checks(plugins=False).values()
        if any(
            set((entry,) if isinstance(entry, str) else entry) == {SERVICE_MONITOR}
            for entry in c.requires
        )
    }
    assert blocked, "some check requires ServiceMonitor"
    for check in report["checks"]:
        if check["id"] in blocked:
            assert check["status"] == "not_evaluated", check["id"]
            assert reason in check["reason"]
        else:
            assert not missing_input(check), (check["id"], check["reason"])


# --------------------------------------------------------------------------- pagination


def test_pagination_lists_every_pod(kube_request: KubeRequest, control_plane: ControlPlane) -> None:
    namespace = _unique("many-pods")
    status, reply = kube_request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    _ok(status, reply, "creating the namespace")

    def create(i: int) -> None:
        body = {
            "metadata": {"name": f"pod-{i:04d}", "labels": {"app": "many"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }
        status, reply = kube_request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
        _ok(status, reply, f"creating pod {i}")

    try:
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(create, range(PAGINATION_PODS)))
        pages: list[int] = []
        snapshot = collect(
            ["Pod"],
            Connection(kubeconfig=control_plane.kubeconfig),
            ListOptions(namespace=namespace, page_size=500),
            lambda type_, count: pages.append(count),
        )
        assert not snapshot.gaps
        assert snapshot.count("Pod") == PAGINATION_PODS
        names = {r.ref.name for r in snapshot.of("Pod")}
        assert len(names) == PAGINATION_PODS
        assert len(pages) >= PAGINATION_PODS // 500
        assert pages[:4] == [500, 1000, 1500, 2000]
        # Equal parts are held once, across pages (gpu_audit.sharing); the rest is each pod's.
        first, *rest = snapshot.of("Pod")
        assert all(r.raw["metadata"]["labels"] is first.raw["metadata"]["labels"] for r in rest)
        assert all(
            r.raw["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10" for r in rest
        )
        assert not any(r.raw["metadata"] is first.raw["metadata"] for r in rest)
    finally:
        status, reply = kube_request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0"
        )
        _ok(status, reply, "deleting the pods")
        delete_namespace(kube_request, namespace)


# --------------------------------------------------------------------------- unreachable


def test_closed_port_is_one_line_exit_3(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = kubeconfig_file(tmp_path / "closed.kubeconfig", f"https://127.0.0.1:{port}", "x")
    started = time.monotonic()
    result = live_scan(kubeconfig, "--timeout", "5")
    assert time.monotonic() - started < 15
    assert_no_traceback(result)
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-audit: error: cannot reach the cluster at https://127.0.0.1:")


def test_bad_token_is_rejected_exit_3(control_plane: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = kubeconfig_file(
        tmp_path / "bad.kubeconfig",
        control_plane.server,
        "not-a-valid-token",
        control_plane.ca_file,
    )
    result = live_scan(kubeconfig)
    assert_no_traceback(result)
    assert result.exit_code == 3, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "rejected the credentials" in lines[0]


# --------------------------------------------------------------------------- missing CRD (last)


def test_zz_missing_service_monitor_crd(
    kube_request: KubeRequest,
    control_plane: ControlPlane,
    shared_crds: list[dict[str, Any]],
) -> None:
    """Runs last in this file: deletes the ServiceMonitor CRD, scans, and installs it again."""
    crd = next(c for c in shared_crds if c["metadata"]["name"] == SERVICE_MONITOR_CRD)
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    status, reply = kube_request("DELETE", f"{base}/{SERVICE_MONITOR_CRD}")
    _ok(status, reply, "deleting the ServiceMonitor CRD")
    try:
        deadline = time.monotonic() + 30
        while kube_request("GET", "/apis/monitoring.coreos.com/v1/servicemonitors")[0] != 404:
            assert time.monotonic() < deadline, "ServiceMonitor CRD still served"
            time.sleep(0.1)
        result = live_scan(control_plane.kubeconfig)
        assert_no_traceback(result)
        # A CRD that is not installed is a fact about the cluster, not a failed collection:
        # its checks are not evaluated, and the scan is complete.
        assert result.exit_code == 0, result.output
        report = result.report
        assert report["complete"] is True
        reason = f"CRD not installed: {SERVICE_MONITOR_CRD}"
        assert {"type": SERVICE_MONITOR, "reason": reason} in report["source"]["gaps"]
        checks = {c["id"]: c for c in report["checks"]}
        assert checks["GPU-MON-003"]["status"] == "not_evaluated"
        assert reason in checks["GPU-MON-003"]["reason"]
    finally:
        status, reply = kube_request("POST", base, crd)
        _ok(status, reply, "re-creating the ServiceMonitor CRD", (201,))
        deadline = time.monotonic() + 60
        while True:
            status, body = kube_request("GET", f"{base}/{SERVICE_MONITOR_CRD}")
            conditions = body.get("status", {}).get("conditions") or [] if status == 200 else []
            if {"Established", "NamesAccepted"} <= {
                c["type"] for c in conditions if c.get("status") == "True"
            }:
                break
            assert time.monotonic() < deadline, "ServiceMonitor CRD not Established again"
            time.sleep(0.1)
