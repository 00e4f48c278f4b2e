"""GPU cost checks (GPU-COST-001..004) on cases the fixtures do not cover."""

from __future__ import annotations

from typing import Any

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    GPU,
    Doc,
    container,
    daemonset,
    deployment,
    gpu_node,
    nodepool,
    pod,
    pod_spec,
    pytorchjob,
    run_check_on,
    verdicts,
    verdicts_of,
)

# --------------------------------------------------------------------------- GPU-COST-001


def _running(name: str, node: str, main: Doc, **metadata: Any) -> Doc:
    """A Running pod `name` of namespace ml on `node`, with the one container `main`."""
    return pod(name, pod_spec(main), node_name=node, phase="Running", **metadata)


def test_shared_and_mig_units_count_as_requested() -> None:
    disrupted = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
    objects = [
        gpu_node("shared", allocatable={"nvidia.com/gpu.shared": "16"}, ready=True),
        gpu_node("mig", allocatable={"nvidia.com/mig-1g.10gb": "7"}, ready=True),
        gpu_node("draining", allocatable={GPU: "8"}, ready=True, taints=[disrupted]),
        _running("a", "shared", container(gpus=1, resource="nvidia.com/gpu.shared")),
        _running("b", "mig", container(gpus=1, resource="nvidia.com/mig-1g.10gb")),
        _running("c", "draining", container(gpus=0)),
    ]
    assert verdicts_of("GPU-COST-001", objects) == [
        ("Node mig", Outcome.PASS, None),
        ("Node shared", Outcome.PASS, None),
    ]


def test_mirror_and_deleted_pods_are_not_tenants() -> None:
    mirror = {"kubernetes.io/config.mirror": "x"}
    objects = [
        gpu_node("gpu-a", allocatable={GPU: "8"}, ready=True),
        _running("static", "gpu-a", container(gpus=0), annotations=mirror),
        _running("leaving", "gpu-a", container(gpus=0), deletionTimestamp="2026-01-10T08:00:00Z"),
    ]
    assert verdicts_of("GPU-COST-001", objects) == [("Node gpu-a", Outcome.FAIL, Severity.LOW)]


# --------------------------------------------------------------------------- GPU-COST-002


def test_clean_pod_policy_defaults_differ_per_kind() -> None:
    tfjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf", "namespace": "ml"},
        "spec": {
            "tfReplicaSpecs": {
                "PS": {"template": {"spec": pod_spec(container(gpus=0))}},
                "Worker": {"template": {"spec": pod_spec(container(gpus=1))}},
            }
        },
    }
    # PyTorchJob defaults to None; its workers end with the script, so the risk is low.
    assert verdicts_of("GPU-COST-002", [tfjob, pytorchjob("pt")]) == [
        ("PyTorchJob ml/pt", Outcome.FAIL, Severity.LOW),
        ("TFJob ml/tf", Outcome.PASS, None),
    ]


def test_pods_being_deleted_are_not_leftovers() -> None:
    job = pytorchjob("pt", runPolicy={"cleanPodPolicy": "Running"})
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "pt",
        "controller": True,
    }
    leaving = _running(
        "pt-worker-0",
        "gpu-a",
        container(gpus=8),
        ownerReferences=[owner],
        deletionTimestamp="2026-01-10T08:00:00Z",
    )
    assert verdicts_of("GPU-COST-002", [job, leaving]) == [("PyTorchJob ml/pt", Outcome.PASS, None)]


# --------------------------------------------------------------------------- GPU-COST-003


def test_nodepool_static_pools_and_budget_reasons() -> None:
    objects = [
        nodepool("static", replicas=2),
        nodepool(
            "underutilized-frozen",
            limits={GPU: "8"},
            disruption={"budgets": [{"nodes": "0", "reasons": ["Underutilized"]}]},
        ),
        nodepool("frozen", limits={GPU: "8"}, disruption={"budgets": [{"nodes": "0%"}]}),
    ]
    # No node of the frozen pool in the input: nothing shows an idle GPU node it keeps (low).
    assert verdicts_of("GPU-COST-003", objects) == [
        ("NodePool frozen", Outcome.FAIL, Severity.LOW),
        ("NodePool static", Outcome.PASS, None),
        ("NodePool underutilized-frozen", Outcome.PASS, None),
    ]


# --------------------------------------------------------------------------- GPU-COST-004


def test_nth_and_non_aws_spot_need_no_karpenter_queue() -> None:
    pool = nodepool(
        "gpu",
        [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
        node_class={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
        limits={GPU: "8"},
    )
    controller = container(
        "public.ecr.aws/karpenter/controller:1.0.6", name="manager", gpus=None, command=["/manager"]
    )
    karpenter = deployment("karpenter", pod_spec(controller), namespace="kube-system")
    nth = daemonset(
        "aws-node-termination-handler",
        pod_spec(
            container(
                "public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.22.0",
                name="nth",
                gpus=None,
            )
        ),
        namespace="kube-system",
    )
    with_nth = run_check_on("GPU-COST-004", [pool, karpenter, nth])
    assert verdicts(with_nth) == [("Deployment kube-system/karpenter", Outcome.PASS, None)]
    assert "IMDS mode" in with_nth.results[0].message
    # The pool allows spot GPUs but no spot GPU node is in the input: medium, not high.
    assert verdicts_of("GPU-COST-004", [pool, karpenter]) == [
        ("Deployment kube-system/karpenter", Outcome.FAIL, Severity.MEDIUM)
    ]
    gke_node = gpu_node(
        "gke-gpu",
        labels={"cloud.google.com/gke-spot": "true"},
        allocatable={GPU: "1"},
        ready=True,
    )
    assert run_check_on("GPU-COST-004", [gke_node, karpenter]).results == ()
