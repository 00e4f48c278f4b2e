"""why-pending on the fixture clusters: each predicate alone, then in combination.

The expected summaries are kube-scheduler's FitError format, built from its reason strings
(pkg/scheduler/framework/plugins/*): reasons counted per node, "N reason" sorted as strings.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_audit.diagnostics import explain_targets
from gpu_audit.diagnostics.pending import fit_error_message, parse_fit_error
from tests.diagnostics.conftest import LoadCase


def explain(load_case: LoadCase, case: str, target: str) -> dict[str, Any]:
    found = explain_targets(load_case(case), target)
    assert len(found) == 1
    return found[0].as_dict()


def failing(explanation: dict[str, Any]) -> dict[str, list[str]]:
    """node -> names of its failing predicates."""
    return {
        n["node"]: [p["predicate"] for p in n["predicates"] if not p["passed"]]
        for n in explanation["nodes"]
    }


ALONE = [
    (
        "taint",
        "ml/trainer",
        "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: true}.",
        'key: "nvidia.com/gpu", operator: Equal, value: "true", effect: NoSchedule',
    ),
    (
        "unschedulable",
        "ml/trainer",
        "0/1 nodes are available: 1 node(s) were unschedulable.",
        "kubectl uncordon gpu-1",
    ),
    (
        "not-ready",
        "ml/trainer",
        "0/1 nodes are available: 1 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }.",
        "node gpu-1 is not Ready (node.kubernetes.io/not-ready): repair it",
    ),
    (
        "node-selector",
        "ml/trainer",
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
        "nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}",
    ),
    (
        "node-affinity",
        "ml/trainer",
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
        "matches no term of the pod's required node affinity",
    ),
    (
        "insufficient-gpu",
        "ml/trainer",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        "node gpu-1 has 2 of 8 nvidia.com/gpu free; held by ml/prep (4), ml/serve (2)",
    ),
    (
        "cpu-memory",
        "ml/trainer",
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
        "memory 64Gi exceeds node gpu-1's allocatable 32Gi",
    ),
    (
        "too-many-pods",
        "ml/trainer",
        "0/1 nodes are available: 1 Too many pods.",
        "runs its maximum of 2 pods",
    ),
    (
        "mig-mixed",
        "ml/trainer",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        "runs MIG strategy mixed: it offers nvidia.com/mig-1g.5gb, nvidia.com/mig-3g.20gb",
    ),
    (
        "mig-single",
        "ml/trainer",
        "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.5gb.",
        "nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb}",
    ),
    (
        "shared-renamed",
        "ml/notebook",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        "resources: {limits: {nvidia.com/gpu.shared: 1}}",
    ),
    (
        "pod-anti-affinity",
        "ml/llm-1",
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.",
        "required podAntiAffinity keeps the pod away",
    ),
    (
        "existing-anti-affinity",
        "ml/trainer",
        "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules.",
        "pod ml/exclusive's required podAntiAffinity selects this pod",
    ),
    (
        "pod-affinity",
        "ml/worker",
        "0/1 nodes are available: 1 node(s) didn't match pod affinity rules.",
        "required podAffinity",
    ),
]


@pytest.mark.parametrize(("case", "target", "summary", "fix"), ALONE, ids=[c[0] for c in ALONE])
def test_each_predicate_alone(
    load_case: LoadCase, case: str, target: str, summary: str, fix: str
) -> None:
    explanation = explain(load_case, case, target)
    assert explanation["summary"] == summary
    assert explanation["fitting_nodes"] == []
    assert any(fix in f for f in explanation["fixes"]), explanation["fixes"]


def test_topology_spread(load_case: LoadCase) -> None:
    explanation = explain(load_case, "topology-spread", "ml/llm-2")
    assert explanation["summary"] == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match pod topology spread constraints."
    )
    assert failing(explanation) == {"gpu-a": ["PodTopologySpread"], "gpu-b": ["NodeResourcesFit"]}


def test_init_containers_and_finished_pods_count_as_the_scheduler_counts(
    load_case: LoadCase,
) -> None:
    # prep: init container 4 GPUs, containers 2 -> 4; serve 2; the Succeeded pod's 8 are free.
    explanation = explain(load_case, "insufficient-gpu", "ml/trainer")
    (fit,) = [
        p for p in explanation["nodes"][0]["predicates"] if p["predicate"] == "NodeResourcesFit"
    ]
    assert fit["detail"] == "nvidia.com/gpu: wants 4, allocatable 8, requested by bound pods 6"


def test_runtime_class_scheduling_is_merged_into_the_pod(load_case: LoadCase) -> None:
    # Without the RuntimeClass the pod would fit cpu-1 and be kept off gpu-1 by its taint.
    explanation = explain(load_case, "runtimeclass", "ml/trainer")
    assert explanation["fitting_nodes"] == ["gpu-1"]
    assert failing(explanation)["cpu-1"] == ["NodeAffinity"]
    # The class's overhead is added to the request.
    assert explanation["request"]["cpu"] == 4.25


def test_missing_runtime_class(load_case: LoadCase) -> None:
    explanation = explain(load_case, "runtimeclass", "ml/broken")
    (check,) = explanation["pod_checks"]
    assert (check["predicate"], check["passed"]) == ("RuntimeClass", False)
    assert "RuntimeClass nvidia-legacy does not exist" in explanation["summary"]


def test_scheduling_gates(load_case: LoadCase) -> None:
    explanation = explain(load_case, "scheduling-gates", "ml/trainer")
    assert explanation["fitting_nodes"] == ["gpu-1"]
    assert "scheduling gates kueue.x-k8s.io/admission" in explanation["summary"]


def test_gang_waits_for_room_for_min_member(load_case: LoadCase) -> None:
    explanation = explain(load_case, "gang", "ml/train-0")
    gang = next(c for c in explanation["pod_checks"] if c["predicate"] == "Gang")
    assert not gang["passed"]
    assert "minMember 4, 4 member pods exist (0 bound, 4 pending)" in gang["detail"]
    assert "room for 2 pod(s) shaped like this one, the gang needs 4 more" in gang["detail"]
    # Volcano's own event is not in the default scheduler's format: shown, not compared.
    (message,) = explanation["scheduler_messages"]
    assert message["agrees"] is None


def test_gang_with_missing_members_and_missing_podgroup(load_case: LoadCase) -> None:
    waiting = explain(load_case, "gang-missing-members", "ml/w-0")
    gang = next(c for c in waiting["pod_checks"] if c["predicate"] == "Gang")
    assert "minMember 3, 2 member pods exist" in gang["detail"]
    assert "1 member pod(s) are missing" in gang["fix"]
    orphan = explain(load_case, "gang-missing-members", "ml/orphan")
    gang = next(c for c in orphan["pod_checks"] if c["predicate"] == "Gang")
    assert "PodGroup ml/pg-gone (scheduling.x-k8s.io) does not exist" in gang["detail"]


def test_combined_taint_and_capacity_and_a_stale_event(load_case: LoadCase) -> None:
    explanation = explain(load_case, "combined-taint-and-capacity", "ml/trainer")
    assert explanation["summary"] == (
        "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, "
        "8 node(s) had untolerated taint {nvidia.com/gpu: true}."
    )
    old, new = explanation["scheduler_messages"]  # oldest first
    assert new["source"] == "event trainer.new" and new["agrees"] is True
    assert old["agrees"] is False
    assert old["differences"] == [
        "the scheduler counted 11 nodes, the input has 12",
        "Insufficient nvidia.com/gpu: scheduler 3, gpu-audit 4",
    ]


def test_combined_everything(load_case: LoadCase) -> None:
    explanation = explain(load_case, "combined-everything", "ml/trainer")
    assert explanation["summary"] == (
        "0/7 nodes are available: 1 Insufficient memory, 1 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {team: research}, 1 node(s) were unschedulable, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    assert failing(explanation) == {
        "broken": ["TaintToleration"],
        "cordoned": ["NodeUnschedulable"],
        "cpu-1": ["NodeAffinity", "NodeResourcesFit"],
        "full": ["NodeResourcesFit"],
        "small": ["NodeResourcesFit"],
        "tainted": ["TaintToleration"],
        "wrong-product": ["NodeAffinity"],
    }
    # The fix names what stands in the way on the nodes closest to fitting (one failure each).
    assert any("kubectl uncordon cordoned" in f for f in explanation["fixes"])


def test_every_pending_gpu_pod_without_a_target(load_case: LoadCase) -> None:
    names = [e.pod.name for e in explain_targets(load_case("gang-missing-members"), None)]
    assert names == ["orphan", "w-0", "w-1"]


def test_fit_error_message_sorts_as_strings_like_the_scheduler() -> None:
    message = fit_error_message(12, {"Insufficient nvidia.com/gpu": 4, "node(s) x": 12})
    assert message == "0/12 nodes are available: 12 node(s) x, 4 Insufficient nvidia.com/gpu."


def test_parse_fit_error_ignores_the_preemption_part() -> None:
    parsed = parse_fit_error(
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint "
        "{a: b}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    assert parsed == (3, {"Insufficient cpu": 1, "node(s) had untolerated taint {a: b}": 2}, [])
    assert parse_fit_error("pod group is not ready") is None
