"""Edge cases of GPU-NODE-003/007/008, GPU-SCHED-004/005 and GPU-WL-003 beyond the fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.engine import CheckRun, run_check
from gpu_audit.model import Outcome, Severity
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

CHECKS = load_checks(plugins=False)
Doc = dict[str, Any]


@pytest.fixture
def scan(tmp_path: Path) -> Any:
    def run(check_id: str, *docs: Doc) -> CheckRun:
        (tmp_path / "in.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
        return run_check(CHECKS[check_id], load_files([str(tmp_path / "in.yaml")]))

    return run


def _verdicts(run: CheckRun) -> list[tuple[str, Outcome, Severity | None]]:
    severities = {id(f.result): f.severity for f in run.findings}
    return [(str(r.ref), r.outcome, severities.get(id(r))) for r in run.results]


def _node(name: str, labels: dict[str, str], capacity: dict[str, str] | None = None) -> Doc:
    doc: Doc = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    if capacity is not None:
        doc["status"] = {"capacity": capacity, "allocatable": capacity}
    return doc


def _pod_spec(image: str, gpus: int = 1, **extra: Any) -> Doc:
    container = {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    container.update(extra.pop("container", {}))
    return {"containers": [container], **extra}


def _deployment(name: str, spec: Doc, labels: dict[str, str] | None = None, **top: Any) -> Doc:
    labels = labels or {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
            **top,
        },
    }


# --------------------------------------------------------------------------- GPU-WL-003

SHM_MOUNT = {"volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}


def test_shm_nccl_disabled_is_info(scan: Any) -> None:
    spec = _pod_spec(
        "nvcr.io/nvidia/pytorch:24.08-py3",
        container={"env": [{"name": "NCCL_SHM_DISABLE", "value": "1"}]},
    )
    run = scan("GPU-WL-003", _deployment("train", spec))
    assert _verdicts(run) == [("Deployment ml/train", Outcome.FAIL, Severity.INFO)]


def test_shm_from_another_volume_type_gets_a_free_volume_name(scan: Any) -> None:
    spec = _pod_spec(
        "vllm/vllm-openai:v0.6.3",
        container=SHM_MOUNT,
        volumes=[{"name": "dshm", "configMap": {"name": "x"}}],
    )
    run = scan("GPU-WL-003", _deployment("llm", spec))
    assert "not a memory-backed emptyDir" in run.results[0].message
    patch = yaml.safe_load(run.findings[0].remediation)
    volumes = patch["spec"]["template"]["spec"]["volumes"]
    assert volumes == [
        {"name": "dshm-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    ]


def test_shm_host_path_and_host_ipc_pass(scan: Any) -> None:
    host_path = _pod_spec(
        "pytorch/pytorch:2.4.1-cuda12.1-cudnn9-runtime",
        container=SHM_MOUNT,
        volumes=[{"name": "dshm", "hostPath": {"path": "/dev/shm"}}],
    )
    host_ipc = _pod_spec("nvcr.io/nvidia/nemo:24.07", hostIPC=True)
    run = scan("GPU-WL-003", _deployment("a", host_path), _deployment("b", host_ipc))
    assert {o for _, o, _ in _verdicts(run)} == {Outcome.PASS}


def test_shm_torch_command_in_a_generic_image_and_multi_gpu_are_evaluated(scan: Any) -> None:
    torchrun = _pod_spec("registry.corp/ml/trainer:1.0", container={"command": ["torchrun"]})
    multi_gpu = _pod_spec("registry.corp/ml/solver:1.0", gpus=2)
    single = _pod_spec("registry.corp/ml/solver:1.0")  # not torch-like, one GPU: skipped
    run = scan(
        "GPU-WL-003",
        _deployment("t", torchrun),
        _deployment("m", multi_gpu),
        _deployment("s", single),
    )
    assert _verdicts(run) == [
        ("Deployment ml/m", Outcome.FAIL, Severity.HIGH),
        ("Deployment ml/t", Outcome.FAIL, Severity.MEDIUM),
    ]


# --------------------------------------------------------------------------- GPU-SCHED-004


def _anti(selector: Doc, **term: Any) -> Doc:
    rule = {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector, **term}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [rule]}}


def test_spread_single_replica_is_not_evaluated(scan: Any) -> None:
    spec = _pod_spec("vllm/vllm-openai:v0.6.3", affinity=_anti({"matchLabels": {"app": "x"}}))
    run = scan("GPU-SCHED-004", _deployment("one", spec))
    assert run.results == ()


def test_spread_job_injected_labels_count_as_present(scan: Any) -> None:
    selector = {"matchLabels": {"batch.kubernetes.io/job-name": "sweep"}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep", "namespace": "ml"},
        "spec": {
            "parallelism": 4,
            "template": {
                "spec": _pod_spec(
                    "pytorch/pytorch:2.4.1", affinity=_anti(selector), restartPolicy="Never"
                )
            },
        },
    }
    assert _verdicts(scan("GPU-SCHED-004", job)) == [("Job ml/sweep", Outcome.PASS, None)]


def test_spread_cross_namespace_target_needs_the_namespaces_field(scan: Any) -> None:
    other = _deployment("redis", {"containers": [{"name": "r", "image": "redis:7"}]})
    other["metadata"]["namespace"] = "cache"
    selector = {"matchLabels": {"app": "redis"}}
    wide = _pod_spec("vllm/vllm-openai:v0.6.3", affinity=_anti(selector, namespaces=["cache"]))
    narrow = _pod_spec("vllm/vllm-openai:v0.6.3", affinity=_anti(selector))
    run = scan(
        "GPU-SCHED-004",
        other,
        _deployment("wide", wide, replicas=2),
        _deployment("narrow", narrow, replicas=2),
    )
    assert _verdicts(run) == [
        ("Deployment ml/narrow", Outcome.FAIL, Severity.LOW),
        ("Deployment ml/wide", Outcome.PASS, None),
    ]


def test_spread_patch_path_points_into_a_volcano_task(scan: Any) -> None:
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "dist", "namespace": "ml"},
        "spec": {
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 4,
                    "template": {
                        "metadata": {"labels": {"role": "worker"}},
                        "spec": _pod_spec(
                            "nvcr.io/nvidia/pytorch:24.08-py3",
                            topologySpreadConstraints=[
                                {
                                    "maxSkew": 1,
                                    "topologyKey": "zone",
                                    "whenUnsatisfiable": "DoNotSchedule",
                                }
                            ],
                        ),
                    },
                }
            ]
        },
    }
    run = scan("GPU-SCHED-004", job)
    command = run.findings[0].remediation.splitlines()[-1]
    patch = json.loads(command.split("-p '", 1)[1].rstrip("'"))
    assert patch == [
        {
            "op": "add",
            "path": "/spec/tasks/0/template/spec/topologySpreadConstraints/0/labelSelector",
            "value": {"matchLabels": {"role": "worker"}},
        }
    ]
    assert command.startswith("kubectl patch job.batch.volcano.sh dist -n ml --type=json")


# --------------------------------------------------------------------------- GPU-SCHED-005


def _pending_pod(name: str, owner: Doc | None = None, reason: str = "Unschedulable") -> Doc:
    metadata: Doc = {"name": name, "namespace": "ml"}
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "controller": True, "uid": "u", **owner}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": _pod_spec("vllm/vllm-openai:v0.6.3"),
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }


def _event(pod: str, reason: str, time: str) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{reason}", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": "ml"},
        "reason": reason,
        "message": "m",
        "lastTimestamp": time,
    }


def test_pending_pod_without_its_controller_names_the_controller(scan: Any) -> None:
    pod = _pending_pod("llm-7d9-abc", {"kind": "ReplicaSet", "name": "llm-7d9"})
    run = scan("GPU-SCHED-005", pod)
    assert run.results[0].ref.name == "llm-7d9-abc"
    assert "(controlled by ReplicaSet llm-7d9)" in run.results[0].message


def test_pending_pods_of_one_controller_are_one_finding(scan: Any) -> None:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "llm-7d9", "namespace": "ml"},
    }
    owner["spec"] = {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"spec": _pod_spec("x:1")},
    }
    ref = {"kind": "ReplicaSet", "name": "llm-7d9"}
    run = scan("GPU-SCHED-005", owner, _pending_pod("p1", ref), _pending_pod("p2", ref))
    assert [(str(r.ref), r.outcome) for r in run.results] == [
        ("ReplicaSet ml/llm-7d9", Outcome.FAIL)
    ]
    assert "2 GPU pods Pending unschedulable" in run.results[0].message


def test_karpenter_nomination_after_the_failure_is_not_flagged(scan: Any) -> None:
    failed_then_nominated = (
        _pending_pod("nominated"),
        _event("nominated", "FailedScheduling", "2026-12-02T10:00:00Z"),
        _event("nominated", "Nominated", "2026-12-02T10:00:05Z"),
    )
    nominated_then_failed = (
        _pending_pod("refailed"),
        _event("refailed", "Nominated", "2026-12-02T09:00:00Z"),
        _event("refailed", "FailedScheduling", "2026-12-02T10:00:00Z"),
    )
    run = scan("GPU-SCHED-005", *failed_then_nominated, *nominated_then_failed)
    assert [r.ref.name for r in run.results] == ["refailed"]


def test_pending_pod_without_scheduling_status_is_not_evaluated(scan: Any) -> None:
    pod = _pending_pod("fresh")
    pod["status"] = {"phase": "Pending"}
    assert scan("GPU-SCHED-005", pod).results == ()


# --------------------------------------------------------------------------- GPU-NODE-003

MIG_NODE = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
}


def test_mig_profile_without_its_configmap_is_assumed_only_by_name(scan: Any) -> None:
    single = {
        **MIG_NODE,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.config.state": "pending",
    }
    run = scan(
        "GPU-NODE-003",
        _node("balanced", {**single, "nvidia.com/mig.config": "all-balanced"}),
        _node("custom", {**single, "nvidia.com/mig.config": "my-profile"}),
    )
    assert _verdicts(run) == [
        ("Node balanced", Outcome.FAIL, Severity.MEDIUM),
        ("Node custom", Outcome.PASS, None),
    ]


def test_mig_stale_gfd_and_stale_mixed_capacity_are_medium(scan: Any) -> None:
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cp"}}
    policy["spec"] = {"mig": {"strategy": "mixed"}}
    labels = {**MIG_NODE, "nvidia.com/mig.strategy": "single"}
    run = scan("GPU-NODE-003", policy, _node("n", labels, {"nvidia.com/mig-1g.10gb": "7"}))
    messages = sorted(r.message for r in run.results)
    assert [s for _, _, s in _verdicts(run)] == [Severity.MEDIUM, Severity.MEDIUM]
    assert "ClusterPolicy cp sets mixed" in messages[0]
    assert "advertises nvidia.com/mig-1g.10gb under mig.strategy single" in messages[1]


def test_mig_entries_for_other_gpu_models_do_not_mix(scan: Any) -> None:
    config = {
        "version": "v1",
        "mig-configs": {
            "all-1g.10gb": [
                {
                    "device-filter": ["0x20B210DE"],
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.10gb": 7},
                },
                {
                    "device-filter": "0x233010DE",
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.12gb": 7},
                },
            ]
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": yaml.safe_dump(config)},
    }
    labels = {
        **MIG_NODE,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.config": "all-1g.10gb",
    }
    run = scan("GPU-NODE-003", configmap, _node("n", labels))
    assert _verdicts(run) == [("Node n", Outcome.PASS, None)]


def test_mig_request_with_a_nodepool_in_the_input_is_medium(scan: Any) -> None:
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {},
    }
    spec = {
        "containers": [
            {"name": "m", "image": "x:1", "resources": {"limits": {"nvidia.com/mig-2g.20gb": 1}}}
        ]
    }
    run = scan(
        "GPU-NODE-003",
        pool,
        _node("full", {"nvidia.com/gpu.present": "true"}),
        _deployment("d", spec),
    )
    assert _verdicts(run) == [("Deployment ml/d", Outcome.FAIL, Severity.MEDIUM)]


# --------------------------------------------------------------------------- GPU-NODE-007

GFD_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-L4",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.memory": "23034",
    "nvidia.com/cuda.driver-version.major": "560",
}


def _policy(gfd: Doc) -> Doc:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cp"},
        "spec": {"gfd": gfd},
    }


def test_gfd_disabled_or_absent_is_not_evaluated(scan: Any) -> None:
    bare = _node("bare", {"nvidia.com/gpu.present": "true"}, {"nvidia.com/gpu": "1"})
    assert scan("GPU-NODE-007", _policy({"enabled": False}), bare).results == ()


def test_gfd_staleness_threshold_follows_the_sleep_interval(scan: Any) -> None:
    policy = _policy({"env": [{"name": "GFD_SLEEP_INTERVAL", "value": "3h"}]})  # 30h threshold
    newest = _node(
        "a", {**GFD_LABELS, "nvidia.com/gfd.timestamp": "1764669600"}, {"nvidia.com/gpu": "1"}
    )
    older = _node(
        "b", {**GFD_LABELS, "nvidia.com/gfd.timestamp": "1764576000"}, {"nvidia.com/gpu": "1"}
    )
    run = scan("GPU-NODE-007", policy, newest, older)  # 26h apart
    assert {o for _, o, _ in _verdicts(run)} == {Outcome.PASS}


def test_gfd_skips_nodes_still_joining(scan: Any) -> None:
    joining = _node("new", {"nvidia.com/gpu.present": "true"}, {"nvidia.com/gpu": "1"})
    joining["spec"] = {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]}
    assert scan("GPU-NODE-007", _policy({}), joining).results == ()


# --------------------------------------------------------------------------- GPU-NODE-008


def _slice(node: str) -> Doc:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def test_dra_with_mig_capacity_fails_and_unknown_nodes_are_skipped(scan: Any) -> None:
    node = _node("mig", {"nvidia.com/gpu.present": "true"}, {"nvidia.com/mig-1g.10gb": "7"})
    run = scan("GPU-NODE-008", node, _slice("mig"), _slice("not-in-input"))
    assert _verdicts(run) == [("Node mig", Outcome.FAIL, Severity.HIGH)]
