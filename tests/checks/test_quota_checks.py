"""GPU quota and priority checks (GPU-QUOTA-002) on cases the fixtures do not cover."""

from __future__ import annotations

from gpu_audit.model import Outcome, Severity
from tests.builders import VLLM_IMAGE, container, deployment, job, pod_spec, verdicts_of


def test_missing_priority_class_and_serving_only() -> None:
    llm = deployment(
        "llm", pod_spec(container(), priorityClassName="gpu-prod"), namespace="serving"
    )
    unrelated = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "unrelated"},
        "value": 10,
    }
    assert verdicts_of("GPU-QUOTA-002", [llm, unrelated]) == [
        ("Deployment serving/llm", Outcome.FAIL, Severity.HIGH)
    ]
    assert verdicts_of("GPU-QUOTA-002", [llm]) == [("Deployment serving/llm", Outcome.PASS, None)]


def _priority_class(
    name: str, value: int, policy: str = "PreemptLowerPriority"
) -> dict[str, object]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": policy,
    }


def test_serving_level_with_batch_in_one_class_that_preempts_nobody_is_low() -> None:
    """Classes exist, but serving and batch share one and no tenant pod sits below it."""
    shared = {"priorityClassName": "gpu-shared"}
    server = deployment("llm", pod_spec(container(VLLM_IMAGE), **shared), namespace="serving")
    sweep = job("sweep", pod_spec(container(gpus=8), **shared), namespace="research")
    objects = [_priority_class("gpu-shared", 1000), server, sweep]
    assert verdicts_of("GPU-QUOTA-002", objects) == [
        ("Deployment serving/llm", Outcome.FAIL, Severity.LOW),
        ("Job research/sweep", Outcome.PASS, None),
    ]
    # A classless CPU pod below the shared class: the class now preempts it, so preemption is
    # in use and serving level with batch is medium.
    web = deployment("web", pod_spec(container("nginx:1.27", gpus=None)), namespace="shop")
    assert verdicts_of("GPU-QUOTA-002", [*objects, web])[0] == (
        "Deployment serving/llm",
        Outcome.FAIL,
        Severity.MEDIUM,
    )
