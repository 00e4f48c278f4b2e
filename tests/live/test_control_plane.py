"""Tests of the live test harness itself (tests/live/conftest.py).

They also check that the harness's kubeconfigs work with the kubernetes Python client.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.live.harness import ControlPlane

if TYPE_CHECKING:
    from kubernetes import client

REPO_ROOT = Path(__file__).resolve().parents[2]
WRAPPER_GO_MOD = REPO_ROOT / "tools" / "k8s-bin" / "go.mod"

KubeRequest = Callable[..., tuple[int, Any]]


def _module_version(module: str) -> str:
    for line in WRAPPER_GO_MOD.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == module and fields[1].startswith("v"):
            return fields[1]
    raise AssertionError(f"{module} not required in {WRAPPER_GO_MOD}")


def _api_client(kubeconfig: str) -> client.ApiClient:
    from kubernetes import config

    api: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)
    return api


@pytest.fixture
def admin(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api = _api_client(control_plane.kubeconfig)
    with api:
        yield api


@pytest.fixture
def namespace(kube_request: KubeRequest) -> str:
    name = f"live-{secrets.token_hex(4)}"
    status, body = kube_request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201, body
    return name  # namespaces never finish deleting without kube-controller-manager


def test_version_is_the_built_one(control_plane: ControlPlane, admin: client.ApiClient) -> None:
    from kubernetes import client

    k8s_version = _module_version("k8s.io/kubernetes")
    info = client.VersionApi(admin).get_code()
    assert info.git_version == k8s_version
    major, minor = k8s_version.lstrip("v").split(".")[:2]
    assert (info.major, info.minor) == (major, minor)

    etcd_version = _module_version("go.etcd.io/etcd/server/v3")
    out = subprocess.run(
        [str(Path(control_plane.bin_dir) / "etcd"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"etcd Version: {etcd_version.lstrip('v')}" in out


def test_all_shared_crds_are_established(
    admin: client.ApiClient, shared_crd_names: frozenset[str]
) -> None:
    from kubernetes import client

    assert len(shared_crd_names) >= 1
    crds = client.ApiextensionsV1Api(admin).list_custom_resource_definition().items
    assert {crd.metadata.name for crd in crds if crd.metadata} == shared_crd_names
    for crd in crds:
        conditions = {
            c.type: c.status for c in (crd.status.conditions if crd.status else None) or []
        }
        assert conditions.get("Established") == "True", crd.metadata
        assert conditions.get("NamesAccepted") == "True", crd.metadata


def test_node_status_capacity_reads_back(admin: client.ApiClient) -> None:
    from kubernetes import client

    core = client.CoreV1Api(admin)
    name = f"gpu-node-{secrets.token_hex(4)}"
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    node = client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"nvidia.com/gpu.present": "true"}),
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity),
    )
    core.create_node(node)
    try:
        got = core.read_node(name)
        assert got.status is not None and got.status.capacity is not None
        assert got.status.capacity["nvidia.com/gpu"] == "8"
        assert got.status.allocatable is not None
        assert got.status.allocatable["nvidia.com/gpu"] == "8"
        # TaintNodesByCondition is disabled, so no not-ready taint was added on create.
        assert not (got.spec and got.spec.taints)
    finally:
        core.delete_node(name)


def test_pod_status_can_be_patched_to_running(admin: client.ApiClient, namespace: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(admin)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="trainer"),
        spec=client.V1PodSpec(
            node_name="gpu-node-0",
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.invalid/trainer:1",
                    resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                )
            ],
        ),
    )
    core.create_namespaced_pod(namespace, pod)
    created = core.read_namespaced_pod("trainer", namespace)
    assert created.status is not None
    assert created.status.phase == "Pending"
    core.patch_namespaced_pod_status(
        "trainer",
        namespace,
        {
            "status": {
                "phase": "Running",
                "podIP": "10.1.2.3",
                "hostIP": "10.0.0.5",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "registry.invalid/trainer:1",
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            }
        },
    )
    try:
        got = core.read_namespaced_pod("trainer", namespace)
        assert got.status is not None
        assert got.status.phase == "Running"
        assert got.status.pod_ip == "10.1.2.3"
    finally:
        # Other live tests compare whole-cluster scans: leave nothing behind.
        core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)


def test_service_account_without_bindings_is_forbidden(
    admin: client.ApiClient,
    namespace: str,
    mint_service_account_token: Callable[[str, str], str],
    kubeconfig_for_token: Callable[[str], str],
) -> None:
    from kubernetes import client

    assert client.CoreV1Api(admin).list_node().items is not None  # admin may
    token = mint_service_account_token(namespace, "scanner")
    with _api_client(kubeconfig_for_token(token)) as sa:
        review = client.AuthenticationV1Api(sa).create_self_subject_review(
            client.V1SelfSubjectReview()
        )
        assert review.status is not None and review.status.user_info is not None
        assert review.status.user_info.username == f"system:serviceaccount:{namespace}:scanner"
        with pytest.raises(client.ApiException) as exc:
            client.CoreV1Api(sa).list_node()
    assert exc.value.status == 403
