"""Edge cases of GPU-STACK-006/008, GPU-SHARE-006/007 and GPU-MON-002/005 beyond the fixtures,
with NVIDIA's own manifests (../shared/upstream) as look-alike inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_audit.engine import CheckRun, run_check
from gpu_audit.model import CheckStatus, Outcome, Severity
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

CHECKS = load_checks(plugins=False)
UPSTREAM = Path(__file__).resolve().parents[2] / ".." / "shared" / "upstream"


def _run(check_id: str, tmp_path: Path, *docs: object, files: tuple[Path, ...] = ()) -> CheckRun:
    paths = [str(p) for p in files]
    if docs:
        written = tmp_path / "input.yaml"
        written.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
        paths.append(str(written))
    return run_check(CHECKS[check_id], load_files(paths))


def _outcomes(run: CheckRun) -> list[tuple[str, Outcome]]:
    return [(r.ref.name, r.outcome) for r in run.results]


def _node(name: str, labels: dict[str, str], **status: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": status,
    }


GPU_NODE = _node(
    "gpu-1",
    {"nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/pci-10de.present": "true"},
    nodeInfo={"containerRuntimeVersion": "containerd://1.7.27"},
)


def _upstream(*parts: str) -> Path:
    path = UPSTREAM.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"{path} is not available")
    return path


# --------------------------------------------------------------------------- GPU-MON-005


def test_upstream_device_plugin_and_gfd_mount_no_docker_socket(tmp_path: Path) -> None:
    run = _run(
        "GPU-MON-005",
        tmp_path,
        GPU_NODE,
        files=(
            _upstream("k8s-device-plugin", "nvidia-device-plugin.yml"),
            _upstream("k8s-device-plugin", "gpu-feature-discovery-daemonset.yaml"),
        ),
    )
    assert run.results and {o for _, o in _outcomes(run)} == {Outcome.PASS}


def test_docker_socket_with_unknown_runtime_is_low(tmp_path: Path) -> None:
    exporter = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter", "namespace": "monitoring"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "containers": [
                        {"name": "e", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3"}
                    ],
                    "volumes": [{"name": "d", "hostPath": {"path": "/run/docker.sock"}}],
                },
            },
        },
    }
    run = _run("GPU-MON-005", tmp_path, exporter)
    assert [(f.severity, "does not say" in f.result.message) for f in run.findings] == [
        (Severity.LOW, True)
    ]


# --------------------------------------------------------------------------- GPU-STACK-006


def test_gfd_daemonset_is_not_an_nfd_worker_and_labels_need_a_cluster_policy(
    tmp_path: Path,
) -> None:
    unlabelled = _node("gpu-2", {"nvidia.com/gpu.present": "true"})
    run = _run(
        "GPU-STACK-006",
        tmp_path,
        unlabelled,
        files=(_upstream("k8s-device-plugin", "gpu-feature-discovery-daemonset.yaml"),),
    )
    # No ClusterPolicy: a missing NFD label matters to nobody; GFD (same features.d mount,
    # device-plugin image) is not a second NFD.
    assert run.status is CheckStatus.NOT_EVALUATED


def test_upstream_cluster_policy_and_unlabelled_gpu_node_fail(tmp_path: Path) -> None:
    unlabelled = _node("gpu-2", {"nvidia.com/gpu.present": "true"})
    run = _run(
        "GPU-STACK-006",
        tmp_path,
        unlabelled,
        files=(_upstream("gpu-operator", "v1_clusterpolicy.yaml"),),
    )
    assert _outcomes(run) == [("gpu-2", Outcome.FAIL)]
    assert "no NFD PCI label" in run.findings[0].result.message


def test_nfd_workers_on_disjoint_pools_are_not_duplicates(tmp_path: Path) -> None:
    def worker(name: str, pool: str) -> dict[str, object]:
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "nfd"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"pool": pool},
                        "containers": [
                            {
                                "name": "worker",
                                "image": "registry.k8s.io/nfd/node-feature-discovery:v0.17.3",
                                "command": ["nfd-worker"],
                            }
                        ],
                    },
                },
            },
        }

    nodes = [
        _node("a-1", {"pool": "a", "feature.node.kubernetes.io/pci-10de.present": "true"}),
        _node("b-1", {"pool": "b", "feature.node.kubernetes.io/pci-10de.present": "true"}),
    ]
    run = _run("GPU-STACK-006", tmp_path, *nodes, worker("nfd-a", "a"), worker("nfd-b", "b"))
    assert sorted(_outcomes(run)) == [("nfd-a", Outcome.PASS), ("nfd-b", Outcome.PASS)]


# --------------------------------------------------------------------------- GPU-SHARE-006


def _policy(default: str) -> dict[str, object]:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"devicePlugin": {"config": {"name": "dp-config", "default": default}}},
        "status": {"namespace": "gpu-operator"},
    }


def _config_map(**data: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dp-config", "namespace": "gpu-operator"},
        "data": data,
    }


SLICED_4 = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"


def test_renamed_node_may_still_list_gpu_zero(tmp_path: Path) -> None:
    renamed = SLICED_4.replace("timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n")
    node = _node(
        "gpu-1",
        {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/gpu.product": "NVIDIA-A10G",
        },
        capacity={"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "8"},
    )
    run = _run("GPU-SHARE-006", tmp_path, _policy("any"), _config_map(any=renamed), node)
    assert _outcomes(run) == [("gpu-1", Outcome.PASS)]


def test_old_gfd_without_strategy_label_and_unshared_zero_replicas(tmp_path: Path) -> None:
    node = _node(
        "gpu-1",
        {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.replicas": "0"},
    )
    run = _run(
        "GPU-SHARE-006", tmp_path, _policy("plain"), _config_map(plain="version: v1\n"), node
    )
    assert _outcomes(run) == [("gpu-1", Outcome.PASS)]


def test_shared_config_but_unshared_node_and_rejected_config_skipped(tmp_path: Path) -> None:
    stale = _node(
        "gpu-1",
        {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/gpu.product": "Tesla-T4",
        },
    )
    broken = _node(
        "gpu-2",
        {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/device-plugin.config": "broken",
            "nvidia.com/gpu.replicas": "1",
        },
    )
    bad = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1}\n"
    run = _run(
        "GPU-SHARE-006",
        tmp_path,
        _policy("any"),
        _config_map(any=SLICED_4, broken=bad),
        stale,
        broken,
    )
    assert _outcomes(run) == [("gpu-1", Outcome.FAIL)]
    message = run.findings[0].result.message
    assert "sharing-strategy=none (config: time-slicing)" in message
    assert "needs the -SHARED suffix" in message


def test_mig_mixed_compares_profile_replicas(tmp_path: Path) -> None:
    config = (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/mig-1g.10gb, replicas: 2}\n"
    )
    node = _node(
        "gpu-1",
        {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/mig-1g.10gb.replicas": "3",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        },
    )
    run = _run("GPU-SHARE-006", tmp_path, _policy("mig"), _config_map(mig=config), node)
    assert _outcomes(run) == [("gpu-1", Outcome.FAIL)]
    assert "nvidia.com/mig-1g.10gb.replicas=3 (config: 2)" in run.findings[0].result.message


# --------------------------------------------------------------------------- GPU-SHARE-007

SLICED_NODE = _node(
    "t4-1",
    {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    },
    capacity={"nvidia.com/gpu": "4"},
)


def _vllm_pod(args: list[str], node_name: str = "") -> dict[str, object]:
    spec: dict[str, object] = {
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.9.2",
                "args": args,
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        ]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llm", "namespace": "serving"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("args", "outcome"),
    [
        (["--gpu-memory-utilization", "0.2"], Outcome.PASS),  # fits a quarter of the GPU
        (["--gpu-memory-utilization=0.3"], Outcome.FAIL),
        ([], Outcome.FAIL),  # default 0.9
    ],
)
def test_vllm_threshold_against_replica_share(
    tmp_path: Path, args: list[str], outcome: Outcome
) -> None:
    run = _run("GPU-SHARE-007", tmp_path, SLICED_NODE, _vllm_pod(args))
    assert _outcomes(run) == [("llm", outcome)]


def test_pod_bound_to_unshared_node_passes(tmp_path: Path) -> None:
    whole = _node("h100-1", {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.replicas": "1"})
    run = _run("GPU-SHARE-007", tmp_path, SLICED_NODE, whole, _vllm_pod([], node_name="h100-1"))
    assert _outcomes(run) == [("llm", Outcome.PASS)]


# --------------------------------------------------------------------------- GPU-MON-002


def test_ignore_namespace_selectors_keeps_cross_namespace_monitor_out(tmp_path: Path) -> None:
    exporter = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter", "namespace": "gpu"},
        "spec": {
            "selector": {"matchLabels": {"app": "dcgm"}},
            "template": {
                "metadata": {"labels": {"app": "dcgm"}},
                "spec": {
                    "containers": [
                        {"name": "e", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3"}
                    ]
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "dcgm-exporter", "namespace": "gpu", "labels": {"app": "dcgm"}},
        "spec": {"selector": {"app": "dcgm"}, "ports": [{"name": "metrics", "port": 9400}]},
    }

    def monitor(namespace: str) -> dict[str, object]:
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "dcgm", "namespace": namespace},
            "spec": {
                "namespaceSelector": {"any": True},
                "selector": {"matchLabels": {"app": "dcgm"}},
                "endpoints": [{"port": "metrics"}],
            },
        }

    prometheus = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "k8s", "namespace": "monitoring"},
        "spec": {
            "serviceMonitorSelector": {},
            "serviceMonitorNamespaceSelector": {},
            "ignoreNamespaceSelectors": True,
        },
    }
    docs = (exporter, service, monitor("gpu"), monitor("monitoring"), prometheus)
    run = _run("GPU-MON-002", tmp_path, *docs)
    # With ignoreNamespaceSelectors the monitor in `monitoring` only looks in `monitoring`.
    assert _outcomes(run) == [("dcgm-exporter", Outcome.PASS)]
    prometheus["spec"] = {"serviceMonitorSelector": {}, "serviceMonitorNamespaceSelector": {}}
    run = _run("GPU-MON-002", tmp_path, *docs)
    assert [o for _, o in _outcomes(run)] == [Outcome.FAIL]
