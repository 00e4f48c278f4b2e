"""The multi-node fabric checks (GPU-FAB-*) and gpu_audit.k8s.fabric: the same problem judged
alike in every multi-node kind, look-alikes left alone, and `inventory`'s fabric per pool."""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml

from gpu_audit.diagnostics import build_inventory
from gpu_audit.k8s.fabric import fabric_family, multi_node_templates
from gpu_audit.k8s.gpu_operator import device_plugin_daemonsets
from gpu_audit.model import Outcome, Severity
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import container, gpu_node, pod_spec, pytorchjob, verdicts_of

Doc = dict[str, Any]
EFA = "vpc.amazonaws.com/efa"


def _snapshot(objects: list[Doc]) -> Any:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(objects)))


def p5(name: str, zone: str = "us-east-2a", efa: int = 32) -> Doc:
    return gpu_node(
        name,
        8,
        {"topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": "p5.48xlarge"},
        allocatable={"nvidia.com/gpu": 8, EFA: efa, "hugepages-2Mi": "10256Mi", "memory": "2000Gi"},
    )


def worker(**resources: Any) -> Doc:
    limits = {"nvidia.com/gpu": 8, "memory": "64Gi", **resources}
    return pod_spec(container(name="pytorch", gpus=None, resources={"limits": limits}))


def jobset(name: str, spec: Doc, pods: int = 4) -> Doc:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "template": {
                                "spec": {
                                    **spec,
                                    "containers": [
                                        {**c, "command": ["torchrun", "--nnodes=4", "train.py"]}
                                        for c in spec["containers"]
                                    ],
                                }
                            },
                        }
                    },
                }
            ]
        },
    }


def lws(name: str, spec: Doc, size: int = 2) -> Doc:
    containers = [
        {**c, "args": ["vllm serve --pipeline-parallel-size 2"]} for c in spec["containers"]
    ]
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "workerTemplate": {"spec": {**spec, "containers": containers}},
            },
        },
    }


def _fails(check_id: str, objects: list[Doc]) -> list[tuple[str, Severity | None]]:
    return [(o, s) for o, out, s in verdicts_of(check_id, objects) if out is Outcome.FAIL]


@pytest.mark.parametrize(
    ("resource", "family"),
    [
        (EFA, "EFA"),
        ("rdma/rdma_shared_device_a", "RDMA"),
        ("rdma/shared_ib", "RDMA"),
        ("networking.gke.io.networks/rdma-0", "GKE multi-network"),
        ("networking.gke.io.networks/rdma-0.IP", ""),
        ("nvidia.com/gpu", ""),
        ("hugepages-2Mi", ""),
    ],
)
def test_fabric_resources_are_recognised_by_name(resource: str, family: str) -> None:
    assert fabric_family(resource) == family


def test_the_same_missing_efa_request_is_judged_alike_in_every_multi_node_kind() -> None:
    spec = worker()
    nodes = [p5("p5-a"), p5("p5-b")]
    for job in (pytorchjob("ddp", 1, spec), jobset("ddp", spec), lws("ddp", spec)):
        kind = job["kind"]
        assert _fails("GPU-FAB-001", [*nodes, job]) == [(f"{kind} ml/ddp", Severity.MEDIUM)] * (
            2 if kind == "PyTorchJob" else 1
        ), kind


def test_template_pods_count_every_kind() -> None:
    spec = worker()
    found = {
        (t.template.owner.ref.kind, t.pods, t.job_gpu_pods)
        for t in multi_node_templates(
            _snapshot([pytorchjob("a", 3, spec), jobset("b", spec, 4), lws("c", spec, 4)])
        )
    }
    assert found == {
        ("PyTorchJob.kubeflow.org", 1, 4),
        ("PyTorchJob.kubeflow.org", 3, 4),
        ("JobSet.jobset.x-k8s.io", 4, 4),
        ("LeaderWorkerSet.leaderworkerset.x-k8s.io", 4, 4),
    }


def test_single_node_jobs_cpu_jobs_and_nodes_without_fabric_are_not_judged() -> None:
    single = pytorchjob("one", 0, worker())
    single["spec"]["pytorchReplicaSpecs"].pop("Worker")
    cpu = pytorchjob("cpu", 2, pod_spec(container(gpus=None)))
    plain = gpu_node("g5", 8, allocatable={"nvidia.com/gpu": 8})
    assert verdicts_of("GPU-FAB-001", [p5("p5-a"), single, cpu]) == []
    assert verdicts_of("GPU-FAB-001", [plain, pytorchjob("ddp", 1, worker())]) == []


def test_a_job_that_may_also_land_on_nodes_without_fabric_is_not_judged() -> None:
    mixed = [p5("p5-a"), gpu_node("g5", 8, allocatable={"nvidia.com/gpu": 8})]
    assert verdicts_of("GPU-FAB-001", [*mixed, pytorchjob("ddp", 1, worker())]) == []


def test_efa_share_follows_the_pods_gpus() -> None:
    nodes = [p5("p5-a"), p5("p5-b")]
    whole_short = pytorchjob("whole", 1, worker(**{EFA: 4, "hugepages-2Mi": "5120Mi"}))
    whole_ok = pytorchjob("ok", 1, worker(**{EFA: 32, "hugepages-2Mi": "5120Mi"}))
    half = pytorchjob(
        "half",
        3,
        pod_spec(
            container(
                name="pytorch",
                gpus=None,
                resources={
                    "limits": {
                        "nvidia.com/gpu": 4,
                        EFA: 8,
                        "hugepages-2Mi": "5120Mi",
                        "memory": "1Gi",
                    }
                },
            )
        ),
    )
    assert (
        _fails("GPU-FAB-001", [*nodes, whole_short])
        == [("PyTorchJob ml/whole", Severity.MEDIUM)] * 2
    )
    assert _fails("GPU-FAB-001", [*nodes, whole_ok]) == []
    # 4 of 8 GPUs with 8 of 32 EFA: less than its 16, on part of a node.
    assert _fails("GPU-FAB-001", [*nodes, half]) == [("PyTorchJob ml/half", Severity.LOW)] * 2


def test_efa_without_hugepages_is_low() -> None:
    job = pytorchjob("ddp", 1, worker(**{EFA: 32}))
    assert (
        _fails("GPU-FAB-001", [p5("p5-a"), p5("p5-b"), job])
        == [("PyTorchJob ml/ddp", Severity.LOW)] * 2
    )


def test_gke_networks_count_per_nic_and_the_interfaces_annotation_attaches() -> None:
    nets = {f"networking.gke.io.networks/rdma-{i}": 1 for i in range(8)}
    node = gpu_node("a3u", 8, allocatable={"nvidia.com/gpu": 8, **nets})
    all_nets = pytorchjob("all", 1, worker(**nets))
    two = pytorchjob("two", 1, worker(**dict(list(nets.items())[:2])))
    annotated = pytorchjob("annotated", 1, worker())
    for replica in annotated["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["metadata"] = {
            "annotations": {
                "networking.gke.io/interfaces": '[{"interfaceName":"eth0","network":"default"}]'
            }
        }
    assert _fails("GPU-FAB-001", [node, all_nets]) == []
    assert _fails("GPU-FAB-001", [node, two]) == [("PyTorchJob ml/two", Severity.MEDIUM)] * 2
    assert _fails("GPU-FAB-001", [node, annotated]) == []


def test_socket_settings_are_judged_only_where_the_fabric_is() -> None:
    env = [{"name": "NCCL_NET", "value": "Socket"}]
    spec = worker(**{EFA: 32, "hugepages-2Mi": "5120Mi"})
    spec["containers"][0]["env"] = env
    bare = worker()
    bare["containers"][0]["env"] = env
    plain = gpu_node("g5", 8, allocatable={"nvidia.com/gpu": 8})
    assert (
        _fails("GPU-FAB-003", [p5("p5-a"), pytorchjob("ddp", 1, spec)])
        == [("PyTorchJob ml/ddp", Severity.MEDIUM)] * 2
    )
    assert verdicts_of("GPU-FAB-003", [plain, pytorchjob("ddp", 1, bare)]) == []


def test_nccl_ib_disable_matters_on_rdma_not_on_efa() -> None:
    ib = gpu_node("ib", 8, allocatable={"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": 63})
    on_ib = worker(**{"rdma/rdma_shared_device_a": 1})
    on_efa = worker(**{EFA: 32, "hugepages-2Mi": "5120Mi"})
    for spec in (on_ib, on_efa):
        spec["containers"][0]["env"] = [{"name": "NCCL_IB_DISABLE", "value": "1"}]
    assert _fails("GPU-FAB-003", [ib, pytorchjob("ddp", 1, on_ib)])
    assert _fails("GPU-FAB-003", [p5("p5-a"), pytorchjob("ddp", 1, on_efa)]) == []


def test_the_efa_device_plugin_is_not_an_nvidia_device_plugin() -> None:
    efa_plugin = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": "efa"}},
            "template": {
                "metadata": {"labels": {"name": "efa"}},
                "spec": {
                    "containers": [
                        {
                            "name": "aws-efa-k8s-device-plugin",
                            "image": "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20",
                            "volumeMounts": [
                                {"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"}
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}
                    ],
                },
            },
        },
    }
    assert device_plugin_daemonsets(_snapshot([efa_plugin])) == ()


def test_inventory_shows_fabric_per_pool_and_pools_without() -> None:
    plain = gpu_node(
        "g5", 4, {"eks.amazonaws.com/nodegroup": "g5"}, allocatable={"nvidia.com/gpu": 4}
    )
    small = p5("p5-c", efa=16)
    pools = {
        p["pool"]: p["fabric"]
        for p in build_inventory(
            _snapshot(
                [
                    {
                        **p5("p5-a"),
                        "metadata": {
                            **p5("p5-a")["metadata"],
                            "labels": {
                                **p5("p5-a")["metadata"]["labels"],
                                "eks.amazonaws.com/nodegroup": "efa",
                            },
                        },
                    },
                    {
                        **small,
                        "metadata": {
                            **small["metadata"],
                            "labels": {
                                **small["metadata"]["labels"],
                                "eks.amazonaws.com/nodegroup": "efa",
                            },
                        },
                    },
                    plain,
                ]
            )
        ).as_dict()["pools"]
    }
    assert pools == {"efa": {EFA: "16-32"}, "g5": {}}
