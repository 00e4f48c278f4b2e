"""KServe InferenceServices are pod templates like any workload (gpu_audit.k8s.kserve).

The same pod-spec problems in a Deployment and in an InferenceService predictor give the same
checks at the same severities, on the InferenceService (the object to change); a model
container's fix is a patch of spec.predictor.model. The runtime's container is merged in as
KServe merges it, what KServe rendered replaces the derivation when the input holds it, and
what KServe adds itself (readiness probe, port, storage initializer) is not blamed on the user.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpu_audit.k8s.pods import pod_templates, templates_of
from gpu_audit.model import Outcome, Severity
from tests.builders import (
    Doc,
    deployment,
    pod_spec,
    run_check_on,
)
from tests.json_patch import remediated

ISVC_API = "serving.kserve.io/v1beta1"
RUNTIME_API = "serving.kserve.io/v1alpha1"
FLOATING = "pytorch/torchserve-kfs:latest-gpu"
GPU_LIMIT = {"limits": {"nvidia.com/gpu": 1}}


def isvc(name: str, predictor: Doc, namespace: str = "ml", **annotations: str) -> Doc:
    metadata: Doc = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": ISVC_API,
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {"predictor": predictor},
    }


def bad_container(name: str = "kserve-container") -> Doc:
    """A floating latest-gpu tag (WL-006), a GPU request without a limit (WL-001) and
    privileged (WL-005)."""
    return {
        "name": name,
        "image": FLOATING,
        "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"memory": "8Gi"}},
        "securityContext": {"privileged": True},
    }


def findings(check_id: str, objects: list[Doc]) -> list[tuple[str, str, Severity]]:
    run = run_check_on(check_id, objects)
    return sorted((f.result.ref.kind_name, f.result.ref.name, f.severity) for f in run.findings)


SIDE_BY_SIDE = {
    "GPU-WL-006": Severity.LOW,  # a floating tag, nothing shows drift yet
    "GPU-WL-001": Severity.HIGH,  # a GPU request without a limit: every pod rejected
    "GPU-WL-005": Severity.HIGH,  # privileged: every GPU of the node
}


def test_the_same_pod_spec_problems_give_the_same_findings_in_a_deployment_and_a_predictor() -> (
    None
):
    plain = deployment("llm", pod_spec(bad_container()))
    custom = isvc("llm-custom", {"containers": [bad_container()]})
    model_spec = {k: v for k, v in bad_container().items() if k != "name"}
    model = isvc("llm-model", {"model": {"modelFormat": {"name": "pytorch"}, **model_spec}})
    for check_id, severity in SIDE_BY_SIDE.items():
        assert findings(check_id, [plain, custom, model]) == [
            ("Deployment", "llm", severity),
            ("InferenceService", "llm-custom", severity),
            ("InferenceService", "llm-model", severity),
        ], check_id


def test_findings_on_a_predictor_point_into_the_inference_service() -> None:
    custom = isvc("llm-custom", {"containers": [bad_container()]})
    model = isvc(
        "llm-model",
        {"model": {"modelFormat": {"name": "pytorch"}, "image": FLOATING, "resources": GPU_LIMIT}},
    )
    run = run_check_on("GPU-WL-006", [custom, model])
    paths = {f.result.ref.name: (f.result.path, f.result.pod_spec_path) for f in run.findings}
    assert paths["llm-custom"] == ("spec.predictor.containers[0].image", "spec.predictor")
    assert paths["llm-model"] == ("spec.predictor.model.image", "spec.predictor")
    assert all("(predictor) container kserve-container" in f.result.message for f in run.findings)


def test_a_model_container_fix_is_a_patch_of_spec_predictor_model() -> None:
    model = isvc(
        "llm-model",
        {"model": {"modelFormat": {"name": "pytorch"}, "image": FLOATING, "resources": GPU_LIMIT}},
    )
    (finding,) = run_check_on("GPU-WL-006", [model]).findings
    fixed = remediated(finding.remediation, model)["spec"]["predictor"]
    assert fixed["model"]["image"].startswith("pytorch/torchserve-kfs:")
    assert fixed["model"]["modelFormat"] == {"name": "pytorch"}
    assert "containers" not in fixed
    framework = isvc(
        "llm-fw",
        {
            "pytorch": {
                "image": FLOATING,
                "securityContext": {"privileged": True},
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        },
    )
    (privileged,) = run_check_on("GPU-WL-005", [framework]).findings
    fixed = remediated(privileged.remediation, framework)["spec"]["predictor"]["pytorch"]
    assert fixed["securityContext"]["privileged"] is False
    assert fixed["image"] == FLOATING


# --------------------------------------------------------------------------- derivation


def runtime(name: str, *, cluster: bool = False, **spec: Any) -> Doc:
    metadata: Doc = {"name": name}
    if not cluster:
        metadata["namespace"] = "ml"
    return {
        "apiVersion": RUNTIME_API,
        "kind": "ClusterServingRuntime" if cluster else "ServingRuntime",
        "metadata": metadata,
        "spec": spec,
    }


HF_RUNTIME = runtime(
    "kserve-huggingfaceserver",
    cluster=True,
    supportedModelFormats=[
        {"name": "huggingface", "version": "1", "autoSelect": True, "priority": 1}
    ],
    protocolVersions=["v2", "v1"],
    containers=[
        {
            "name": "kserve-container",
            "image": "kserve/huggingfaceserver:v0.15.2",
            "args": ["--model_name={{.Name}}"],
            "env": [{"name": "HF_HOME", "value": "/tmp/hf_home"}],
            "resources": {
                "requests": {"cpu": "1", "memory": "2Gi"},
                "limits": {"cpu": "1", "memory": "2Gi"},
            },
            "securityContext": {"privileged": False, "runAsNonRoot": True},
            "volumeMounts": [{"name": "devshm", "mountPath": "/dev/shm"}],
        }
    ],
    volumes=[{"name": "devshm", "emptyDir": {"medium": "Memory"}}],
    tolerations=[{"key": "dedicated", "operator": "Exists"}],
)


def snapshot_of(objects: list[Doc]) -> Any:
    import io

    from gpu_audit.sources.files import STDIN, load_files

    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(objects)))


def predictor_template(objects: list[Doc]) -> Any:
    (template,) = [
        t
        for t in pod_templates(snapshot_of(objects))
        if t.owner.ref.kind_name == "InferenceService"
    ]
    return template


def test_the_model_container_is_the_runtimes_merged_as_kserve_merges_it() -> None:
    llm = isvc(
        "qwen",
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "args": ["--max-model-len=4096"],
                "env": [{"name": "HF_HOME", "value": "/models/cache"}],
                "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "24Gi"}},
            }
        },
    )
    template = predictor_template([llm, HF_RUNTIME])
    (model,) = [c for c in template.containers() if c.name == "kserve-container"]
    # auto-selected runtime; -gpu appended for the GPU limit (UpdateImageTag)
    assert model.image == "kserve/huggingfaceserver:v0.15.2-gpu"
    # runtime args first, then the InferenceService's; {{.Name}} filled in
    assert model.raw["args"] == ["--model_name=qwen", "--max-model-len=4096"]
    assert model.env()["HF_HOME"]["value"] == "/models/cache"
    assert model.limits == {"cpu": "1", "memory": "24Gi", "nvidia.com/gpu": 1}
    assert model.security_context == {"privileged": False, "runAsNonRoot": True}
    assert template.spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert {v["name"] for v in template.spec["volumes"]} == {"devshm"}
    assert model.path == "spec.predictor.model"


def test_runtime_version_replaces_the_runtime_images_tag() -> None:
    llm = isvc(
        "qwen",
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "runtime": "kserve-huggingfaceserver",
                "runtimeVersion": "v0.15.2-gpu",
                "resources": {"limits": {"nvidia.com/mig-3g.40gb": 1}},
            }
        },
    )
    (model,) = [
        c
        for c in predictor_template([llm, HF_RUNTIME]).containers()
        if c.name == "kserve-container"
    ]
    assert model.image == "kserve/huggingfaceserver:v0.15.2-gpu"


def test_what_kserve_adds_is_modelled_so_that_no_check_blames_the_user_for_it() -> None:
    llm = isvc(
        "opt",
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "storageUri": "s3://models/opt-125m",
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        },
    )
    template = predictor_template([llm])
    containers = {c.name: c for c in template.containers()}
    model = containers["kserve-container"]
    assert model.raw["readinessProbe"]["tcpSocket"] == {"port": 8080}
    assert model.raw["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    init = containers["storage-initializer"]
    assert init.init and init.raw["args"] == ["s3://models/opt-125m", "/mnt/models"]
    assert {"name": "kserve-provision-location", "emptyDir": {}} in template.spec["volumes"]
    assert {
        "name": "kserve-provision-location",
        "mountPath": "/mnt/models",
        "readOnly": True,
    } in model.raw["volumeMounts"]
    # KServe's own Hugging Face runtime mounts a memory-backed /dev/shm
    assert {"name": "devshm", "emptyDir": {"medium": "Memory"}} in template.spec["volumes"]
    probe_findings = [
        f for f in run_check_on("GPU-SRV-005", [llm]).findings if "no readiness" in f.result.message
    ]
    assert probe_findings == []


def test_a_pvc_model_is_mounted_not_downloaded() -> None:
    llm = isvc(
        "t5",
        {
            "pytorch": {
                "storageUri": "pvc://models/t5",
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        },
    )
    template = predictor_template([llm])
    assert [c.name for c in template.containers()] == ["kserve-container"]
    assert {
        "name": "kserve-pvc-source",
        "persistentVolumeClaim": {"claimName": "models"},
    } in template.spec["volumes"]


def test_what_kserve_rendered_is_the_template_and_is_not_reported_twice() -> None:
    llm = isvc(
        "qwen",
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        },
        **{"serving.kserve.io/deploymentMode": "RawDeployment"},
    )
    labels = {"serving.kserve.io/inferenceservice": "qwen", "component": "predictor"}
    rendered = deployment(
        "qwen-predictor",
        pod_spec(
            {
                "name": "kserve-container",
                "image": "kserve/huggingfaceserver:latest-gpu",
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        ),
        labels=labels,
    )
    rendered["metadata"]["labels"] = labels
    rendered["metadata"]["ownerReferences"] = [
        {
            "apiVersion": ISVC_API,
            "kind": "InferenceService",
            "name": "qwen",
            "uid": "1",
            "controller": True,
        }
    ]
    knative = deployment(
        "qwen-predictor-00001-deployment",
        pod_spec(
            {
                "name": "kserve-container",
                "image": "kserve/huggingfaceserver:latest-gpu",
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        ),
        labels=labels,
        namespace="other",
    )
    knative["metadata"]["labels"] = labels
    knative["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Revision",
            "name": "qwen-predictor-00001",
            "uid": "2",
            "controller": True,
        }
    ]
    other = isvc(
        "qwen",
        {
            "model": {
                "modelFormat": {"name": "huggingface"},
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        },
        namespace="other",
    )
    run = run_check_on("GPU-WL-006", [llm, rendered, other, knative])
    assert sorted((f.result.ref.kind_name, f.result.ref.namespace) for f in run.findings) == [
        ("InferenceService", "ml"),
        ("InferenceService", "other"),
    ]
    assert all(f.result.path == "spec.predictor.model.image" for f in run.findings)


def test_model_mesh_predictors_and_runtimes_have_no_template_of_their_own() -> None:
    snapshot = snapshot_of(
        [
            isvc(
                "mm",
                {"model": {"modelFormat": {"name": "onnx"}}},
                **{"serving.kserve.io/deploymentMode": "ModelMesh"},
            ),
            HF_RUNTIME,
        ]
    )
    assert list(pod_templates(snapshot)) == []
    for resource in snapshot.all():
        assert templates_of(resource, snapshot) == ()


def test_transformer_and_explainer_are_components_too() -> None:
    doc = isvc(
        "chain",
        {"model": {"modelFormat": {"name": "sklearn"}, "image": "kserve/sklearnserver:v0.15.2"}},
    )
    doc["spec"]["transformer"] = {
        "containers": [
            {"image": "acme/feast-transformer:1.0", "resources": {"limits": {"nvidia.com/gpu": 1}}}
        ]
    }
    roles = {t.replica_type: t for t in pod_templates(snapshot_of([doc]))}
    assert set(roles) == {"predictor", "transformer"}
    (transformer,) = roles["transformer"].containers()
    assert (transformer.name, transformer.path) == (
        "kserve-container",
        "spec.transformer.containers[0]",
    )
    verdict = [r for r in run_check_on("GPU-WL-005", [doc]).results if r.outcome is Outcome.PASS]
    assert verdict and "(transformer)" in verdict[0].message
