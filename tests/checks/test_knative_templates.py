"""Knative Services are pod templates like any workload (gpu_audit.k8s.knative).

The same pod-spec problem in a Deployment and in a Knative Service's revision template gives
the same check at the same severity, on the Service, at spec.template.spec. What Knative adds
to every revision pod (the queue-proxy sidecar, the user port, the readiness probe it takes
over, the runtime class config-deployment selects) is modelled, so no finding blames the
Service for it, and what Knative renders is judged through the Service."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.k8s.pods import PodTemplate, pod_templates, templates_of
from gpu_audit.model import Outcome, Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import (
    Doc,
    config_map,
    container,
    deployment,
    pod,
    pod_spec,
    run_check_on,
    verdicts,
)
from tests.json_patch import remediated

API = "serving.knative.dev/v1"
VLLM = "vllm/vllm-openai:v0.8.5"
TOKEN = "hf_" + "Zq8Wx2Lm" * 5  # a Hugging Face token shape, not a real one
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checks"


def ksvc(name: str, spec: Doc, namespace: str = "ml", labels: dict[str, str] | None = None) -> Doc:
    template: Doc = {"spec": spec}
    if labels:
        template["metadata"] = {"labels": labels}
    return {
        "apiVersion": API,
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": template},
    }


def snapshot_of(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


def template_of(*objects: Doc) -> PodTemplate:
    snapshot = snapshot_of(*objects)
    (service,) = snapshot.of("Service.serving.knative.dev")
    (found,) = templates_of(service, snapshot)
    return found


PROBLEMS: dict[str, tuple[str, Doc]] = {
    "gpu-request-without-limit": (
        "GPU-WL-001",
        pod_spec({"name": "llm", "image": VLLM, "resources": {"requests": {"nvidia.com/gpu": 1}}}),
    ),
    # A tensor-parallel server on 4 GPUs on the 64 MiB default /dev/shm.
    "no-dev-shm-tensor-parallel": (
        "GPU-WL-003",
        pod_spec(container(VLLM, name="llm", gpus=4, args=["--tensor-parallel-size", "4"])),
    ),
    "literal-token-in-env": (
        "GPU-SEC-001",
        pod_spec(container(VLLM, name="llm", env=[{"name": "HF_TOKEN", "value": TOKEN}])),
    ),
    "privileged": (
        "GPU-WL-005",
        pod_spec(container(VLLM, name="llm", securityContext={"privileged": True})),
    ),
}


def found(check_id: str, obj: Doc) -> list[tuple[str, str, Severity, str]]:
    run = run_check_on(check_id, [obj])
    return [
        (f.result.ref.kind_name, f.result.ref.name, f.severity, f.result.path.split(".", 3)[-1])
        for f in run.findings
    ]


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_the_same_pod_spec_problem_is_the_same_finding_on_the_knative_service(
    problem: str,
) -> None:
    check_id, spec = PROBLEMS[problem]
    plain = found(check_id, deployment("w", spec))
    assert plain, f"{check_id} finds nothing in a Deployment"
    # The same relative field, under spec.template.spec in both objects.
    assert found(check_id, ksvc("w", spec)) == [("Service", "w", s, p) for _, _, s, p in plain]


def test_a_fix_is_a_patch_of_the_revision_template() -> None:
    spec = PROBLEMS["no-dev-shm-tensor-parallel"][1]
    service = ksvc("llm", spec)
    (finding,) = run_check_on("GPU-WL-003", [service]).findings
    assert finding.result.path == "spec.template.spec.containers[0]"
    assert "Service ml/llm (revision) container llm" in finding.result.message
    fixed = remediated(finding.remediation, service)["spec"]["template"]["spec"]
    assert fixed["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert fixed["containers"][0]["volumeMounts"][-1]["mountPath"] == "/dev/shm"


def test_what_knative_adds_to_the_revision_pod() -> None:
    spec = pod_spec(
        container(
            VLLM,
            name="",
            ports=[{"containerPort": 8000, "name": "h2c"}],
            readinessProbe={"httpGet": {"path": "/health"}},
            livenessProbe={"httpGet": {"path": "/health"}},
        ),
        timeoutSeconds=600,
        containerConcurrency=4,
    )
    template = template_of(ksvc("llm", spec, labels={"app": "llm"}))
    user, queue = template.spec["containers"]
    assert user["name"] == "user-container"
    assert user["ports"] == [{"name": "user-port", "containerPort": 8000}]
    assert {"name": "PORT", "value": "8000"} in user["env"]
    # queue-proxy runs the HTTP readiness probe; the liveness probe is pointed at the port.
    assert "readinessProbe" not in user
    assert user["livenessProbe"] == {"httpGet": {"path": "/health", "port": 8000}}
    assert queue["name"] == "queue-proxy" and "resources" not in queue
    assert template.spec["terminationGracePeriodSeconds"] == 600
    assert template.spec["enableServiceLinks"] is False
    assert "containerConcurrency" not in template.spec
    assert template.labels == {
        "app": "llm",
        "serving.knative.dev/configuration": "llm",
        "serving.knative.dev/service": "llm",
    }
    # The queue-proxy is Knative's: it points at the template, not at a container of it.
    assert [c.path for c in template.containers()] == [
        "spec.template.spec.containers[0]",
        "spec.template.spec",
    ]


def test_several_unnamed_containers_are_numbered_and_only_the_serving_one_gets_the_port() -> None:
    spec = pod_spec(
        container(VLLM, name="", ports=[{"containerPort": 8000}]),
        container("busybox:1.36", name="", gpus=None),
    )
    user, sidecar, _ = template_of(ksvc("llm", spec)).spec["containers"]
    assert (user["name"], sidecar["name"]) == ("user-container-0", "user-container-1")
    assert "ports" not in sidecar
    default_port = template_of(ksvc("llm", pod_spec(container(VLLM, name="llm"))))
    assert default_port.spec["containers"][0]["ports"] == [
        {"name": "user-port", "containerPort": 8080}
    ]


def test_the_runtime_class_config_deployment_selects_is_the_pods() -> None:
    config = config_map(
        "config-deployment",
        "knative-serving",
        {"runtime-class-name": 'kata: {}\nnvidia:\n  selector:\n    gpu: "true"\n'},
    )
    gpu = ksvc("llm", pod_spec(container(VLLM, name="llm")), labels={"gpu": "true"})
    cpu = ksvc("web", pod_spec(container("nginx:1.27", name="web", gpus=None)))
    assert template_of(gpu, config).spec["runtimeClassName"] == "nvidia"  # most specific
    assert template_of(cpu, config).spec["runtimeClassName"] == "kata"
    explicit = ksvc("llm", pod_spec(container(VLLM, name="llm"), runtimeClassName="own"))
    assert template_of(explicit, config).spec["runtimeClassName"] == "own"
    assert "runtimeClassName" not in template_of(gpu).spec  # without config-deployment


def test_a_gpu_service_on_rke2_passes_when_config_deployment_selects_the_nvidia_class() -> None:
    """GPU-WL-008 on the RKE2 cluster of its fixture: a Knative Service without a runtime class
    fails like a Deployment; with config-deployment selecting nvidia for it, it passes."""
    text = (FIXTURES / "GPU-WL-008" / "fail-rke2-gpu-operator-v25-3.yaml").read_text()
    cluster = [
        d
        for d in yaml.safe_load_all(text)
        if d and d["kind"] in ("Node", "ClusterPolicy", "RuntimeClass")
    ]
    service = ksvc("llm", pod_spec(container(VLLM, name="llm")), labels={"gpu": "true"})
    assert verdicts(run_check_on("GPU-WL-008", [*cluster, service])) == [
        ("Service ml/llm", Outcome.FAIL, Severity.HIGH)
    ]
    config = config_map(
        "config-deployment", "knative-serving", {"runtime-class-name": "nvidia: {}\n"}
    )
    assert verdicts(run_check_on("GPU-WL-008", [*cluster, service, config])) == [
        ("Service ml/llm", Outcome.PASS, None)
    ]


def owned_by_revision(obj: Doc, service: str, revision: str) -> Doc:
    obj["metadata"]["labels"] = {
        "serving.knative.dev/service": service,
        "serving.knative.dev/revision": revision,
    }
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": API,
            "kind": "Revision",
            "name": revision,
            "uid": "uid-rev",
            "controller": True,
        }
    ]
    return obj


def test_what_knative_renders_is_judged_through_the_service() -> None:
    spec = PROBLEMS["privileged"][1]
    service = ksvc("llm", spec)
    rendered = owned_by_revision(deployment("llm-00001-deployment", spec), "llm", "llm-00001")
    replica: Doc = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "llm-00001-deployment-5d9f",
            "namespace": "ml",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "llm-00001-deployment",
                    "uid": "uid-d",
                    "controller": True,
                }
            ],
        },
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": spec}},
    }
    running = pod("llm-00001-deployment-5d9f-x", spec)
    running["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "llm-00001-deployment-5d9f",
            "uid": "uid-rs",
            "controller": True,
        }
    ]
    objects = [service, rendered, replica, running]
    assert [(t.owner.ref.kind, str(t.owner.ref)) for t in pod_templates(snapshot_of(*objects))] == [
        ("Service.serving.knative.dev", "Service ml/llm")
    ]
    assert [str(f.result.ref) for f in run_check_on("GPU-WL-005", objects).findings] == [
        "Service ml/llm"
    ]
    # Without the Service in the input, what runs is judged as itself.
    assert [str(f.result.ref) for f in run_check_on("GPU-WL-005", objects[1:]).findings] == [
        "Deployment ml/llm-00001-deployment"
    ]


def test_a_service_without_a_revision_template_has_no_pod() -> None:
    empty: Any = {
        "apiVersion": API,
        "kind": "Service",
        "metadata": {"name": "x", "namespace": "ml"},
    }
    (service,) = snapshot_of(empty).all()
    assert templates_of(service) == ()


def test_a_knative_service_kserve_created_is_judged_through_the_inference_service() -> None:
    """KServe's serverless mode creates a Knative Service per component with the
    InferenceService as controller (components/predictor.go: SetControllerReference(isvc,
    r.Service, ...))."""
    isvc: Doc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"predictor": {"containers": [container(VLLM, name="kserve-container")]}},
    }
    created = ksvc("llm-predictor", pod_spec(container(VLLM, name="kserve-container")))
    created["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "name": "llm",
            "uid": "u",
            "controller": True,
        }
    ]
    owners = [str(t.owner.ref) for t in pod_templates(snapshot_of(isvc, created))]
    assert owners == ["InferenceService ml/llm"]
    assert [str(t.owner.ref) for t in pod_templates(snapshot_of(created))] == [
        "Service ml/llm-predictor"
    ]
