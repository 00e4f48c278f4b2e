"""The Helm chart (deploy/helm/gpu-audit) with a real helm and a real kube-apiserver.

helm is built from the Go module proxy by scripts/build-helm.sh (cached) or taken from
$GPU_AUDIT_HELM; without it these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.model import Category
from gpu_audit.rbac import read_rules, scan_types
from gpu_audit.registry import load_checks, select_checks
from tests.live.harness import KubeRequest, delete_namespace, run_build_script

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "deploy" / "helm" / "gpu-audit"
NON_DEFAULT = CHART / "ci" / "nondefault-values.yaml"
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-helm.sh"
BUILD_TIMEOUT_S = 1800.0
VALUES = {"default": [], "non-default": ["-f", str(NON_DEFAULT)]}
READ_VERBS = ["list"]  # a scan lists; it never gets one object by name nor watches
# Where each kind the chart renders is created (namespaced ones under the release namespace).
COLLECTIONS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "CronJob": ("/apis/batch/v1", "cronjobs", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
}

MintToken = Callable[[str, str], str]
KubeconfigFor = Callable[[str], str]


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"helm unavailable (CI=true, so failing): {reason}", pytrace=False)
    pytest.skip(f"helm unavailable: {reason}")


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> str:
    given = os.environ.get("GPU_AUDIT_HELM")
    if given:
        if not os.access(given, os.X_OK):
            _unavailable(f"GPU_AUDIT_HELM={given} is not an executable")
        return given
    log = tmp_path_factory.mktemp("helm-build") / "build-helm.log"
    bin_dir, problem = run_build_script(BUILD_SCRIPT, log, BUILD_TIMEOUT_S)
    if bin_dir is None:
        _unavailable(problem)
    binary = bin_dir / "helm"
    if not os.access(binary, os.X_OK):
        _unavailable(f"{BUILD_SCRIPT.name} built no {binary}")
    return str(binary)


def _helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=120, check=False, env=_helm_env()
    )


def _helm_env() -> dict[str, str]:
    """helm writes caches and config under HOME; keep it out of the user's."""
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "gpu-audit-helm-home"
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(scratch / "cache"),
        "HELM_CONFIG_HOME": str(scratch / "config"),
        "HELM_DATA_HOME": str(scratch / "data"),
    }


def render(helm: str, release: str, namespace: str, *args: str) -> list[dict[str, Any]]:
    proc = _helm(helm, "template", release, str(CHART), "--namespace", namespace, *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    spec = one(documents, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (found,) = spec["containers"]
    assert isinstance(found, dict)
    return found


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def _path(doc: dict[str, Any], namespace: str) -> str:
    prefix, plural, namespaced = COLLECTIONS[doc["kind"]]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


def _create_namespace(kube_request: KubeRequest, namespace: str) -> None:
    status, body = kube_request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    assert status in (201, 409), body


def _delete(kube_request: KubeRequest, doc: dict[str, Any], namespace: str) -> None:
    kube_request("DELETE", f"{_path(doc, namespace)}/{doc['metadata']['name']}")


# --------------------------------------------------------------------------- lint and render


@pytest.mark.parametrize("values", sorted(VALUES))
def test_lint(helm: str, values: str) -> None:
    proc = _helm(helm, "lint", "--strict", str(CHART), *VALUES[values])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_defaults_are_a_hardened_cronjob(helm: str) -> None:
    documents = render(helm, "ga", "gpu-audit")
    assert sorted(d["kind"] for d in documents) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CronJob",
        "PersistentVolumeClaim",
        "ServiceAccount",
    ]
    cron = one(documents, "CronJob")["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"
    job = cron["jobTemplate"]["spec"]
    assert (job["activeDeadlineSeconds"], job["backoffLimit"]) == (1800, 1)
    assert (cron["successfulJobsHistoryLimit"], cron["failedJobsHistoryLimit"]) == (3, 3)
    pod = job["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == one(documents, "ServiceAccount")["metadata"]["name"]
    c = container(documents)
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert set(c["resources"]) == {"requests", "limits"}
    assert "--history-dir=/var/lib/gpu-audit" in c["args"] and "--history-keep=30" in c["args"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    claim = one(documents, "PersistentVolumeClaim")["metadata"]["name"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/var/lib/gpu-audit"]]["persistentVolumeClaim"]["claimName"] == claim


def _expected_rules(only: list[str], skip: list[str], categories: list[str]) -> list[Any]:
    enabled = select_checks(
        load_checks(plugins=False),
        only=only,
        skip=skip,
        categories=[Category.parse(c) for c in categories],
    )
    return read_rules(scan_types(enabled.values()))


def test_the_role_is_exactly_what_the_enabled_checks_read(helm: str) -> None:
    default = one(render(helm, "ga", "gpu-audit"), "ClusterRole")["rules"]
    assert default == _expected_rules([], [], [])
    values = yaml.safe_load(NON_DEFAULT.read_text(encoding="utf-8"))["checks"]
    narrow = one(render(helm, "ga", "gpu-audit", *VALUES["non-default"]), "ClusterRole")["rules"]
    assert narrow == _expected_rules([], values["skip"], values["categories"])
    assert len(narrow) < len(default)
    for rule in default:
        assert set(rule) == {"apiGroups", "resources", "verbs"} and rule["verbs"] == READ_VERBS
        assert "secrets" not in rule["resources"] and "*" not in json.dumps(rule)
        for resource in rule["resources"]:
            assert any(
                (i.group, i.plural) == (rule["apiGroups"][0], resource)
                for i in KNOWN_KINDS.values()
            )


def test_non_default_values_reach_the_cronjob(helm: str) -> None:
    documents = render(helm, "ga", "ops", *VALUES["non-default"])
    cron = one(documents, "CronJob")["spec"]
    assert (cron["schedule"], cron["timeZone"]) == ("*/30 * * * *", "Etc/UTC")
    assert cron["jobTemplate"]["spec"]["ttlSecondsAfterFinished"] == 86400
    args = container(documents)["args"]
    for expected in (
        "--cluster-name=lab-a100",
        "--category=monitoring,SCHED",
        "--skip=GPU-MON-006",
        "--framework=nvidia-gpu-operator",
        "--exemptions=/etc/gpu-audit/exemptions.yaml",
        "--history-keep=7",
        "--pushgateway=http://prometheus-pushgateway.monitoring.svc:9091",
        "--fail-on=critical",
    ):
        assert expected in args
    assert container(documents)["image"].endswith("@sha256:" + "0" * 64)
    exemptions = yaml.safe_load(one(documents, "ConfigMap")["data"]["exemptions.yaml"])
    assert exemptions["exemptions"][0]["checks"] == ["GPU-MON-001"]
    assert one(documents, "ServiceAccount")["metadata"]["name"] == "gpu-auditor"
    pvc = one(documents, "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "" and "annotations" not in pvc["metadata"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("checks.only={GPU-NOPE-001}", 'unknown check id "GPU-NOPE-001"'),
        ("checks.categories={bogus}", 'unknown category "bogus"'),
    ],
)
def test_bad_check_selection_fails_the_render(helm: str, setting: str, message: str) -> None:
    proc = _helm(helm, "template", "ga", str(CHART), "--set", setting)
    assert proc.returncode != 0 and message in proc.stderr


@pytest.mark.parametrize("values", sorted(VALUES))
def test_gpu_audit_passes_its_own_chart(helm: str, values: str, tmp_path: Path) -> None:
    rendered = tmp_path / "chart.yaml"
    rendered.write_text(
        yaml.safe_dump_all(render(helm, "ga", "gpu-audit", *VALUES[values])), encoding="utf-8"
    )
    result = CliRunner().invoke(main, ["scan", "--from-file", str(rendered), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["findings"] == [], [(f["check_id"], f["message"]) for f in report["findings"]]
    assert not [c["id"] for c in report["checks"] if c["status"] in ("failed", "error")]


# --------------------------------------------------------------------------- on the apiserver


@pytest.mark.parametrize("values", sorted(VALUES))
def test_every_rendered_object_passes_server_side_dry_run(
    helm: str, kube_request: KubeRequest, values: str
) -> None:
    namespace = _unique("chart-dry")
    _create_namespace(kube_request, namespace)
    try:
        documents = render(helm, _unique("ga"), namespace, *VALUES[values])
        assert documents
        for doc in documents:
            status, body = kube_request("POST", _path(doc, namespace) + "?dryRun=All", doc)
            assert status == 201, f"{doc['kind']} {doc['metadata']['name']}: {body}"
    finally:
        delete_namespace(kube_request, namespace)


@dataclass(frozen=True)
class Installed:
    """The chart's ServiceAccount, ClusterRole and binding created for real."""

    kubeconfig: str
    args: list[str]  # the CronJob's command line


@contextlib.contextmanager
def _install_access(
    helm: str,
    kube_request: KubeRequest,
    mint_service_account_token: MintToken,
    kubeconfig_for_token: KubeconfigFor,
    *values: str,
) -> Iterator[Installed]:
    namespace, release = _unique("chart"), _unique("ga")
    documents = render(helm, release, namespace, *values)
    access = [
        d for d in documents if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    _create_namespace(kube_request, namespace)
    try:
        for doc in access:
            status, body = kube_request("POST", _path(doc, namespace), doc)
            assert status == 201, f"{doc['kind']}: {body}"
        account = one(documents, "ServiceAccount")["metadata"]["name"]
        token = mint_service_account_token(namespace, account)
        deadline = time.monotonic() + 10
        while kube_request("GET", "/api/v1/pods?limit=1", token=token)[0] != 200:
            assert time.monotonic() < deadline, "the chart's role never took effect"
            time.sleep(0.05)
        yield Installed(kubeconfig_for_token(token), list(container(documents)["args"]))
    finally:
        for doc in access:
            _delete(kube_request, doc, namespace)
        delete_namespace(kube_request, namespace)


def _local(args: list[str], kubeconfig: str, history: Path | None) -> list[str]:
    """The CronJob's command run here: the kubeconfig instead of the pod's account, a
    temporary history directory (or none), and no files or services only the pod has."""
    pod_only = ("--exemptions=", "--pushgateway=", "--history-dir=", "--history-keep=")
    out = [f"--kubeconfig={kubeconfig}" if a == "--in-cluster" else a for a in args]
    out = [a for a in out if not a.startswith(pod_only)]
    if history is not None:
        out += [f"--history-dir={history}", "--history-keep=5"]
    return out


@pytest.mark.parametrize("values", sorted(VALUES))
def test_scanning_as_the_chart_account_is_never_forbidden(
    helm: str,
    kube_request: KubeRequest,
    mint_service_account_token: MintToken,
    kubeconfig_for_token: KubeconfigFor,
    values: str,
) -> None:
    with _install_access(
        helm, kube_request, mint_service_account_token, kubeconfig_for_token, *VALUES[values]
    ) as installed:
        args = [*_local(installed.args, installed.kubeconfig, None), "--fail-on=none", "-o", "json"]
        result = CliRunner().invoke(main, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        report = json.loads(result.stdout)
        details = report["source"]["details"]
        assert details["missing_permissions"] == []
        forbidden = [g for g in report["source"]["gaps"] if g["reason"].startswith("forbidden")]
        assert forbidden == []
        assert result.exit_code == 0, result.output
        assert details["identity"]["username"].startswith("system:serviceaccount:chart-")


GPU_DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "trainer"},
    "spec": {
        "selector": {"matchLabels": {"app": "trainer"}},
        "template": {
            "metadata": {"labels": {"app": "trainer"}},
            "spec": {
                "containers": [
                    {
                        "name": "train",
                        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ]
            },
        },
    },
}


def test_the_cronjob_command_twice_gives_two_runs_an_index_and_a_trend(
    helm: str,
    kube_request: KubeRequest,
    mint_service_account_token: MintToken,
    kubeconfig_for_token: KubeconfigFor,
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    workloads = _unique("chart-gpu")
    _create_namespace(kube_request, workloads)
    deployments = f"/apis/apps/v1/namespaces/{workloads}/deployments"
    try:
        with _install_access(
            helm,
            kube_request,
            mint_service_account_token,
            kubeconfig_for_token,
            "--set",
            "clusterName=live-lab",
        ) as installed:
            args = _local(installed.args, installed.kubeconfig, tmp_path)
            lines = []
            # A GPU workload before each run: the second run finds more (a trend to show).
            for name, epoch in (("trainer", "1748746800"), ("trainer-2", "1748833200")):
                workload = {**GPU_DEPLOYMENT, "metadata": {"name": name}}
                status, body = kube_request("POST", deployments, workload)
                assert status == 201, body
                result = runner.invoke(main, args, env={"SOURCE_DATE_EPOCH": epoch})
                assert result.exit_code == 0, result.output
                assert result.stdout == ""
                (line,) = result.stderr.splitlines()
                lines.append(line)
    finally:
        for name in ("trainer", "trainer-2"):
            kube_request("DELETE", f"{deployments}/{name}")
        delete_namespace(kube_request, workloads)
    for line in lines:
        assert re.match(r"gpu-audit: cluster live-lab (score \d+\.\d \([A-F]\)|no score), ", line)
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == [
        "20250601T030000Z-live-lab.html",
        "20250601T030000Z-live-lab.json",
        "20250602T030000Z-live-lab.html",
        "20250602T030000Z-live-lab.json",
    ]
    reports = [json.loads((tmp_path / "runs" / r).read_text()) for r in runs if r.endswith("json")]
    assert [r["cluster"] for r in reports] == ["live-lab", "live-lab"]
    assert all(r["source"]["details"]["missing_permissions"] == [] for r in reports)
    assert reports[1]["summary"]["findings"] > reports[0]["summary"]["findings"]
    assert (tmp_path / "latest.json").read_text() == (tmp_path / "runs" / runs[3]).read_text()
    index = (tmp_path / "index.html").read_text()
    assert index.count("<tr><td>") == 2
    (points,) = re.findall(r'<polyline class="line" points="([^"]+)"', index)
    assert len(points.split()) == 2
