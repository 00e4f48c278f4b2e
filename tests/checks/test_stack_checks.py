"""GPU stack checks (GPU-STACK-006) on cases the fixtures do not cover, with NVIDIA's own
manifests (../shared/upstream) as look-alike inputs."""

from __future__ import annotations

from gpu_audit.model import CheckStatus, Outcome, Severity
from tests.builders import (
    NFD_PCI_LABEL,
    Doc,
    container,
    daemonset,
    gpu_node,
    node,
    pod_spec,
    run_check_on,
    upstream_manifest,
    verdicts,
    verdicts_of,
)


def test_gfd_daemonset_is_not_an_nfd_worker_and_labels_need_a_cluster_policy() -> None:
    gfd = upstream_manifest("k8s-device-plugin", "gpu-feature-discovery-daemonset.yaml")
    run = run_check_on("GPU-STACK-006", [gpu_node("gpu-2")], files=[gfd])
    # No ClusterPolicy: a missing NFD label matters to nobody; GFD (same features.d mount,
    # device-plugin image) is not a second NFD.
    assert run.status is CheckStatus.NOT_EVALUATED
    assert run.results == ()


def test_upstream_cluster_policy_and_unlabelled_gpu_node_fail() -> None:
    policy = upstream_manifest("gpu-operator", "v1_clusterpolicy.yaml")
    run = run_check_on("GPU-STACK-006", [gpu_node("gpu-2")], files=[policy])
    assert verdicts(run) == [("Node gpu-2", Outcome.FAIL, Severity.HIGH)]
    assert "no NFD PCI label" in run.findings[0].result.message


def test_nfd_workers_on_disjoint_pools_are_not_duplicates() -> None:
    def worker(name: str, pool: str) -> Doc:
        nfd = container(
            "registry.k8s.io/nfd/node-feature-discovery:v0.17.3",
            name="worker",
            gpus=None,
            command=["nfd-worker"],
        )
        return daemonset(name, pod_spec(nfd, nodeSelector={"pool": pool}), namespace="nfd")

    objects = [
        node("a-1", {"pool": "a", **NFD_PCI_LABEL}),
        node("b-1", {"pool": "b", **NFD_PCI_LABEL}),
        worker("nfd-a", "a"),
        worker("nfd-b", "b"),
    ]
    assert verdicts_of("GPU-STACK-006", objects) == [
        ("DaemonSet nfd/nfd-a", Outcome.PASS, None),
        ("DaemonSet nfd/nfd-b", Outcome.PASS, None),
    ]
