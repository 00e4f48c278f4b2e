"""Edge cases of GPU-COST-001..004, GPU-QUOTA-002 and GPU-DIST-001/003/005 beyond the fixtures."""

from __future__ import annotations

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
Verdicts = list[tuple[str, Outcome, Severity | None]]


@pytest.fixture
def scan(tmp_path: Path) -> Any:
    def run(check_id: str, *docs: Doc) -> CheckRun:
        (tmp_path / "in.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
        return run_check(CHECKS[check_id], load_files([str(tmp_path / "in.yaml")]))

    return run


def _verdicts(run: CheckRun) -> Verdicts:
    severities = {id(f.result): f.severity for f in run.findings}
    return [(str(r.ref), r.outcome, severities.get(id(r))) for r in run.results]


def _container(gpus: int | str = 1, resource: str = "nvidia.com/gpu", **extra: Any) -> Doc:
    return {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "resources": {"limits": {resource: gpus}},
        **extra,
    }


def _pytorchjob(name: str, workers: int = 1, **spec: Any) -> Doc:
    template = {"spec": {"containers": [_container(8)]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": workers, "template": template},
            },
            **spec,
        },
    }


def _operator(*args: str) -> Doc:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
        "spec": {
            "selector": {"matchLabels": {"app": "to"}},
            "template": {
                "metadata": {"labels": {"app": "to"}},
                "spec": {
                    "containers": [
                        {
                            "name": "manager",
                            "image": "kubeflow/training-operator:v1-855e096",
                            "command": ["/manager", *args],
                        }
                    ]
                },
            },
        },
    }


# --------------------------------------------------------------------------- GPU-DIST-001


def test_operator_gang_flag_gangs_every_job_and_checks_the_minimum(scan: Any) -> None:
    run = scan(
        "GPU-DIST-001",
        _operator("--gang-scheduler-name=volcano"),
        _pytorchjob("plain", workers=3),
        _pytorchjob("too-big", workers=1, runPolicy={"schedulingPolicy": {"minAvailable": 5}}),
        _pytorchjob("partial", workers=3, runPolicy={"schedulingPolicy": {"minAvailable": 2}}),
    )
    assert _verdicts(run) == [
        ("PyTorchJob ml/partial", Outcome.FAIL, Severity.MEDIUM),
        ("PyTorchJob ml/plain", Outcome.PASS, None),
        ("PyTorchJob ml/too-big", Outcome.FAIL, Severity.HIGH),
    ]


def test_native_workload_ref_is_gang_scheduling(scan: Any) -> None:
    def job(name: str, workload: str) -> Doc:
        doc = _pytorchjob(name)
        for replica in doc["spec"]["pytorchReplicaSpecs"].values():
            replica["template"]["spec"]["workloadRef"] = {"name": workload, "podGroup": "all"}
        return doc

    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"podGroups": [{"name": "all", "policy": {"gang": {"minCount": 2}}}]},
    }
    run = scan("GPU-DIST-001", workload, job("ok", "train"), job("dangling", "missing"))
    assert _verdicts(run) == [
        ("PyTorchJob ml/dangling", Outcome.FAIL, Severity.HIGH),
        ("PyTorchJob ml/ok", Outcome.PASS, None),
    ]


# --------------------------------------------------------------------------- GPU-DIST-003


def _job_with_master(master: str, namespace: str = "ml") -> Doc:
    env = [{"name": "MASTER_ADDR", "value": master}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [_container(env=env)]}}
        },
    }


def _service(name: str, namespace: str = "ml", **spec: Any) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def test_rendezvous_service_cases(scan: Any) -> None:
    external = scan(
        "GPU-DIST-003", _service("store", type="ExternalName"), _job_with_master("store")
    )
    assert [v[1] for v in _verdicts(external)] == [Outcome.PASS]
    other_ns = scan(
        "GPU-DIST-003",
        _service("store", "infra", selector={"batch.kubernetes.io/job-name": "trainer"}),
        _job_with_master("store.infra"),
    )
    assert [v[1] for v in _verdicts(other_ns)] == [Outcome.FAIL]
    assert "can only select pods of namespace infra" in other_ns.results[0].message
    unresolved = scan("GPU-DIST-003", _service("x"), _job_with_master("$(UNKNOWN)-0.trainer"))
    assert unresolved.results == ()


@pytest.mark.parametrize(
    ("master", "outcome"),
    [
        ("trainer-999999999999.trainer", Outcome.PASS),  # within completions
        ("trainer-1000000000000.trainer", Outcome.FAIL),  # one past the last index
        ("trainer-01.trainer", Outcome.FAIL),  # pods are named without leading zeros
        ("trainer-" + "9" * 5000 + ".trainer", Outcome.FAIL),  # no int() of 5,000 digits
    ],
)
def test_indexed_job_hostnames_are_parsed_not_enumerated(
    scan: Any, master: str, outcome: Outcome
) -> None:
    """completions can be any number: a set of a trillion pod names would never finish (the
    fuzzer found this as an out-of-memory kill)."""
    job = _job_with_master(master)
    job["spec"].update(completionMode="Indexed", completions=10**12, parallelism=2)
    job["spec"]["template"]["spec"]["subdomain"] = "trainer"
    service = _service(
        "trainer", clusterIP="None", selector={"batch.kubernetes.io/job-name": "trainer"}
    )
    assert [v[1] for v in _verdicts(scan("GPU-DIST-003", service, job))] == [outcome]


# --------------------------------------------------------------------------- GPU-DIST-005


def test_generic_ephemeral_and_read_only_claims_are_not_durable(scan: Any) -> None:
    mounts = [{"name": "scratch", "mountPath": "/ckpt"}, {"name": "data", "mountPath": "/data"}]
    volumes = [
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d", "readOnly": True}},
    ]
    job = _job_with_master("localhost")
    pod = job["spec"]["template"]["spec"]
    pod.update(
        {
            "nodeSelector": {"eks.amazonaws.com/capacityType": "SPOT"},
            "terminationGracePeriodSeconds": 120,
            "volumes": volumes,
        }
    )
    pod["containers"][0]["volumeMounts"] = mounts
    assert _verdicts(scan("GPU-DIST-005", job)) == [("Job ml/trainer", Outcome.FAIL, Severity.HIGH)]


# --------------------------------------------------------------------------- GPU-COST-001


def _node(name: str, allocatable: dict[str, str]) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(name: str, node: str, container: Doc, **metadata: Any) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", **metadata},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Running"},
    }


def test_shared_and_mig_units_count_as_requested(scan: Any) -> None:
    run = scan(
        "GPU-COST-001",
        _node("shared", {"nvidia.com/gpu.shared": "16"}),
        _node("mig", {"nvidia.com/mig-1g.10gb": "7"}),
        _node("draining", {"nvidia.com/gpu": "8"})
        | {"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}},
        _pod("a", "shared", _container(1, "nvidia.com/gpu.shared")),
        _pod("b", "mig", _container(1, "nvidia.com/mig-1g.10gb")),
        _pod("c", "draining", _container(0)),
    )
    assert _verdicts(run) == [("Node mig", Outcome.PASS, None), ("Node shared", Outcome.PASS, None)]


def test_mirror_and_deleted_pods_are_not_tenants(scan: Any) -> None:
    run = scan(
        "GPU-COST-001",
        _node("gpu-a", {"nvidia.com/gpu": "8"}),
        _pod("static", "gpu-a", _container(0), annotations={"kubernetes.io/config.mirror": "x"}),
        _pod("leaving", "gpu-a", _container(0), deletionTimestamp="2026-01-10T08:00:00Z"),
    )
    assert _verdicts(run) == [("Node gpu-a", Outcome.FAIL, Severity.LOW)]


# --------------------------------------------------------------------------- GPU-COST-002


def test_clean_pod_policy_defaults_differ_per_kind(scan: Any) -> None:
    tfjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf", "namespace": "ml"},
        "spec": {
            "tfReplicaSpecs": {
                "PS": {"template": {"spec": {"containers": [_container(0)]}}},
                "Worker": {"template": {"spec": {"containers": [_container(1)]}}},
            }
        },
    }
    run = scan("GPU-COST-002", tfjob, _pytorchjob("pt"))
    assert _verdicts(run) == [
        ("PyTorchJob ml/pt", Outcome.FAIL, Severity.MEDIUM),
        ("TFJob ml/tf", Outcome.PASS, None),
    ]


def test_pods_being_deleted_are_not_leftovers(scan: Any) -> None:
    job = _pytorchjob("pt", runPolicy={"cleanPodPolicy": "Running"})
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    owner: list[Doc] = [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pt", "controller": True}
    ]
    leaving = _pod(
        "pt-worker-0",
        "gpu-a",
        _container(8),
        ownerReferences=owner,
        deletionTimestamp="2026-01-10T08:00:00Z",
    )
    assert _verdicts(scan("GPU-COST-002", job, leaving)) == [
        ("PyTorchJob ml/pt", Outcome.PASS, None)
    ]


# --------------------------------------------------------------------------- GPU-COST-003


def _nodepool(name: str, **spec: Any) -> Doc:
    requirements = [
        {
            "key": "karpenter.k8s.aws/instance-gpu-manufacturer",
            "operator": "In",
            "values": ["nvidia"],
        }
    ]
    template = {"spec": {"nodeClassRef": {"name": "gpu"}, "requirements": requirements}}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def test_nodepool_static_pools_and_budget_reasons(scan: Any) -> None:
    run = scan(
        "GPU-COST-003",
        _nodepool("static", replicas=2),
        _nodepool(
            "underutilized-frozen",
            limits={"nvidia.com/gpu": "8"},
            disruption={"budgets": [{"nodes": "0", "reasons": ["Underutilized"]}]},
        ),
        _nodepool(
            "frozen",
            limits={"nvidia.com/gpu": "8"},
            disruption={"budgets": [{"nodes": "0%"}]},
        ),
    )
    assert _verdicts(run) == [
        ("NodePool frozen", Outcome.FAIL, Severity.MEDIUM),
        ("NodePool static", Outcome.PASS, None),
        ("NodePool underutilized-frozen", Outcome.PASS, None),
    ]


# --------------------------------------------------------------------------- GPU-COST-004


def test_nth_and_non_aws_spot_need_no_karpenter_queue(scan: Any) -> None:
    pool = _nodepool("gpu", limits={"nvidia.com/gpu": "8"})
    pool["spec"]["template"]["spec"]["nodeClassRef"] = {
        "group": "karpenter.k8s.aws",
        "kind": "EC2NodeClass",
        "name": "gpu",
    }
    pool["spec"]["template"]["spec"]["requirements"].append(
        {"key": "karpenter.sh/capacity-type", "operator": "Exists"}
    )
    karpenter = _operator()
    karpenter["metadata"] = {"name": "karpenter", "namespace": "kube-system"}
    karpenter["spec"]["template"]["spec"]["containers"][0]["image"] = (
        "public.ecr.aws/karpenter/controller:1.0.6"
    )
    nth = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "aws-node-termination-handler", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "nth",
                            "image": "public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.22.0",
                        }
                    ]
                }
            }
        },
    }
    with_nth = scan("GPU-COST-004", pool, karpenter, nth)
    assert _verdicts(with_nth) == [("Deployment kube-system/karpenter", Outcome.PASS, None)]
    assert "IMDS mode" in with_nth.results[0].message
    without = scan("GPU-COST-004", pool, karpenter)
    assert _verdicts(without) == [("Deployment kube-system/karpenter", Outcome.FAIL, Severity.HIGH)]
    gke_node = _node("gke-gpu", {"nvidia.com/gpu": "1"})
    gke_node["metadata"]["labels"]["cloud.google.com/gke-spot"] = "true"
    assert scan("GPU-COST-004", gke_node, karpenter).results == ()


# --------------------------------------------------------------------------- GPU-QUOTA-002


def test_missing_priority_class_and_serving_only(scan: Any) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "serving"},
        "spec": {
            "selector": {"matchLabels": {"app": "llm"}},
            "template": {
                "metadata": {"labels": {"app": "llm"}},
                "spec": {"priorityClassName": "gpu-prod", "containers": [_container()]},
            },
        },
    }
    other = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "unrelated"},
        "value": 10,
    }
    missing = scan("GPU-QUOTA-002", deployment, other)
    assert _verdicts(missing) == [("Deployment serving/llm", Outcome.FAIL, Severity.HIGH)]
    no_classes = scan("GPU-QUOTA-002", deployment)
    assert _verdicts(no_classes) == [("Deployment serving/llm", Outcome.PASS, None)]
