"""GPU scheduling checks (GPU-SCHED-002/004/005) on cases the fixtures do not cover."""

from __future__ import annotations

import json
from typing import Any

import yaml

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    PYTORCH_IMAGE,
    VLLM_IMAGE,
    Doc,
    container,
    deployment,
    job,
    node,
    pod,
    pod_spec,
    run_check_on,
    verdicts,
    verdicts_of,
)

# --------------------------------------------------------------------------- GPU-SCHED-004


def _anti(selector: Doc, **term: Any) -> Doc:
    """A required pod anti-affinity of one term over kubernetes.io/hostname."""
    rule = {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector, **term}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [rule]}}


def test_spread_single_replica_is_not_evaluated() -> None:
    spec = pod_spec(container(VLLM_IMAGE), affinity=_anti({"matchLabels": {"app": "x"}}))
    assert run_check_on("GPU-SCHED-004", [deployment("one", spec)]).results == ()


def test_spread_job_injected_labels_count_as_present() -> None:
    selector = {"matchLabels": {"batch.kubernetes.io/job-name": "sweep"}}
    spec = pod_spec(container("pytorch/pytorch:2.4.1"), affinity=_anti(selector))
    assert verdicts_of("GPU-SCHED-004", [job("sweep", spec, parallelism=4)]) == [
        ("Job ml/sweep", Outcome.PASS, None)
    ]


def test_spread_cross_namespace_target_needs_the_namespaces_field() -> None:
    redis = deployment(
        "redis", pod_spec(container("redis:7", name="r", gpus=None)), namespace="cache"
    )
    selector = {"matchLabels": {"app": "redis"}}
    wide = pod_spec(container(VLLM_IMAGE), affinity=_anti(selector, namespaces=["cache"]))
    narrow = pod_spec(container(VLLM_IMAGE), affinity=_anti(selector))
    objects = [
        redis,
        deployment("wide", wide, replicas=2),
        deployment("narrow", narrow, replicas=2),
    ]
    assert verdicts_of("GPU-SCHED-004", objects) == [
        ("Deployment ml/narrow", Outcome.FAIL, Severity.LOW),
        ("Deployment ml/wide", Outcome.PASS, None),
    ]


def test_spread_patch_path_points_into_a_volcano_task() -> None:
    spread = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    volcano_job = {
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
                        "spec": pod_spec(
                            container(PYTORCH_IMAGE), topologySpreadConstraints=[spread]
                        ),
                    },
                }
            ]
        },
    }
    run = run_check_on("GPU-SCHED-004", [volcano_job])
    assert verdicts(run) == [("Job ml/dist", Outcome.FAIL, Severity.MEDIUM)]
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


def _unschedulable(name: str, owner: Doc | None = None) -> Doc:
    """A one-GPU vLLM pod of namespace ml that the scheduler found no node for, controlled by
    `owner` (kind and name) when given. Short of GPUs with no node status in the input, so it
    is reported medium: whether a node could ever hold it is unknown."""
    metadata: Doc = {}
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "controller": True, "uid": "u", **owner}
        ]
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    }
    spec = pod_spec(container(VLLM_IMAGE))
    return pod(name, spec, phase="Pending", status={"conditions": [scheduled]}, **metadata)


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


def test_pending_pod_without_its_controller_names_the_controller() -> None:
    pending = _unschedulable("llm-7d9-abc", {"kind": "ReplicaSet", "name": "llm-7d9"})
    run = run_check_on("GPU-SCHED-005", [pending])
    assert verdicts(run) == [("Pod ml/llm-7d9-abc", Outcome.FAIL, Severity.MEDIUM)]
    assert "(controlled by ReplicaSet llm-7d9)" in run.results[0].message


def test_pending_pods_of_one_controller_are_one_finding() -> None:
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "llm-7d9", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"spec": pod_spec(container("x:1"))},
        },
    }
    ref = {"kind": "ReplicaSet", "name": "llm-7d9"}
    run = run_check_on(
        "GPU-SCHED-005", [replica_set, _unschedulable("p1", ref), _unschedulable("p2", ref)]
    )
    assert verdicts(run) == [("ReplicaSet ml/llm-7d9", Outcome.FAIL, Severity.MEDIUM)]
    assert "2 GPU pods Pending unschedulable" in run.results[0].message
    assert {r.ref.name for r in run.results[0].related} == {"p1", "p2"}


def test_karpenter_nomination_after_the_failure_is_not_flagged() -> None:
    failed_then_nominated = [
        _unschedulable("nominated"),
        _event("nominated", "FailedScheduling", "2026-12-02T10:00:00Z"),
        _event("nominated", "Nominated", "2026-12-02T10:00:05Z"),
    ]
    nominated_then_failed = [
        _unschedulable("refailed"),
        _event("refailed", "Nominated", "2026-12-02T09:00:00Z"),
        _event("refailed", "FailedScheduling", "2026-12-02T10:00:00Z"),
    ]
    assert verdicts_of("GPU-SCHED-005", failed_then_nominated + nominated_then_failed) == [
        ("Pod ml/refailed", Outcome.FAIL, Severity.MEDIUM)
    ]


def test_pending_pod_without_scheduling_status_is_not_evaluated() -> None:
    fresh = _unschedulable("fresh")
    fresh["status"] = {"phase": "Pending"}
    assert run_check_on("GPU-SCHED-005", [fresh]).results == ()


# --------------------------------------------------------------------------- GPU-SCHED-002


def test_node_selector_message_does_not_depend_on_the_manifests_key_order() -> None:
    # The API server writes a map's keys sorted; a manifest may not. Both give one message.
    gpu_node = node("gpu-1", {"pool": "a100", "zone": "a"}, allocatable={"nvidia.com/gpu": "8"})
    messages = set()
    for selector in ({"zone": "b", "pool": "h100"}, {"pool": "h100", "zone": "b"}):
        objects = [gpu_node, deployment("d", pod_spec(nodeSelector=selector))]
        # YAML text in the manifest's own key order (yaml.safe_dump would sort the keys)
        text = yaml.dump_all(objects, sort_keys=False)
        run = run_check_on("GPU-SCHED-002", text)
        (finding,) = run.findings
        messages.add(finding.result.message)
    (message,) = messages
    assert message.endswith(
        "no node matches its node selection (pool: nodes have a100; zone: nodes have a)"
    )
