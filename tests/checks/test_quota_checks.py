"""GPU quota and priority checks (GPU-QUOTA-002) on cases the fixtures do not cover."""

from __future__ import annotations

from gpu_audit.model import Outcome, Severity
from tests.builders import container, deployment, pod_spec, verdicts_of


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
