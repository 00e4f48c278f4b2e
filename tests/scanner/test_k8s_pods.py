"""Container env values, template specs and namespace labels, each read in one place
(gpu_audit.k8s.pods, .objects, .selectors) instead of per check category."""

from __future__ import annotations

from typing import Any

from gpu_audit.k8s.objects import template_metadata, template_spec
from gpu_audit.k8s.pods import Container, env_value, templates_of
from gpu_audit.k8s.selectors import namespace_labels
from gpu_audit.model import ObjRef, Resource, SourceLocation
from gpu_audit.snapshot import Snapshot


def _resource(kind: str, name: str, ns: str = "", **body: Any) -> Resource:
    raw = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, **body}
    if ns:
        raw["metadata"]["namespace"] = ns
    return Resource(ObjRef(kind, ns, name), "v1", raw, SourceLocation("test.yaml"))


def _container(env: list[Any]) -> Container:
    pod = _resource("Pod", "p", "ml", spec={"containers": [{"name": "c", "env": env}]})
    return templates_of(pod)[0].containers()[0]


def test_env_value_reads_literals_only() -> None:
    container = _container(
        [
            {"name": "A", "value": "x"},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "C", "value": None},
        ]
    )
    assert env_value(container, "A") == "x"
    assert env_value(container, "B") is None  # unknown offline
    assert env_value(container, "C") == ""
    assert env_value(container, "D") is None


def test_env_value_last_definition_wins() -> None:
    """The drift: the GPU Operator copy took the first entry with a value, the serving copy
    the last entry. The kubelet builds the environment in list order, so the last one wins
    (the API server warns that it "hides" the earlier one)."""
    container = _container(
        [{"name": "MIG_STRATEGY", "value": "single"}, {"name": "MIG_STRATEGY", "value": "mixed"}]
    )
    assert env_value(container, "MIG_STRATEGY") == "mixed"
    assert env_value(container.raw, "MIG_STRATEGY") == "mixed"  # a raw container reads the same
    hidden = _container(
        [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_MODE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        ]
    )
    assert env_value(hidden, "RAY_AUTH_MODE") is None


def test_env_value_that_is_not_text_reads_as_its_text() -> None:
    """The drift: the GPU Operator copy read `value: 0` as "" (`value or ""`)."""
    container = _container([{"name": "VLLM_SERVER_DEV_MODE", "value": 0}])
    assert env_value(container, "VLLM_SERVER_DEV_MODE") == "0"
    assert env_value(container.raw, "VLLM_SERVER_DEV_MODE") == "0"


def test_template_spec_reads_nested_templates_defensively() -> None:
    deployment = {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}
    cronjob = {"jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never"}}}}}
    assert template_spec(deployment) == {"containers": []}
    assert template_metadata(deployment) == {"labels": {"a": "b"}}
    assert template_spec(template_spec(cronjob, "jobTemplate")) == {"restartPolicy": "Never"}
    assert template_spec({"template": "oops"}) == {}
    assert template_spec({"template": {"spec": ["oops"]}}) == {}
    assert template_spec({}) == {}


def test_namespace_labels_always_carry_the_name_label() -> None:
    namespace = _resource("Namespace", "ml", metadata={"name": "ml", "labels": {"team": "a"}})
    snapshot = Snapshot([namespace])
    assert namespace_labels(snapshot, "ml") == {
        "team": "a",
        "kubernetes.io/metadata.name": "ml",
    }
    assert namespace_labels(snapshot, "other") == {"kubernetes.io/metadata.name": "other"}
