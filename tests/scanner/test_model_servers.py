"""SRV-CLASSIFY (gpu_audit.k8s.model_servers): the one place that knows model servers by image
and command line, for the SRV, NET and QUOTA checks."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_audit.k8s.model_servers import (
    KSERVE_RUNTIME,
    LMDEPLOY,
    MLSERVER,
    NIM,
    OVMS,
    SGLANG,
    TEI,
    TF_SERVING,
    TGI,
    classify,
)
from gpu_audit.k8s.pods import Container, PodTemplate
from gpu_audit.model import ObjRef, Resource, SourceLocation


def _container(
    image: str, *, kind: str = "Deployment", name: str = "server", **fields: Any
) -> Container:
    owner = Resource(
        ObjRef(kind, "ml", "x"),
        "v1",
        {"metadata": {"name": "x", "namespace": "ml"}},
        SourceLocation("test.yaml"),
    )
    raw = {"name": name, "image": image, **fields}
    template = PodTemplate(owner, {"containers": [raw]}, {}, "spec.template.spec", "predictor")
    (container,) = template.containers()
    return container


@pytest.mark.parametrize(
    ("image", "server"),
    [
        ("tensorflow/serving:2.14.1-gpu", TF_SERVING),
        ("ghcr.io/huggingface/text-embeddings-inference:1.6", TEI),
        ("ghcr.io/huggingface/text-generation-inference:2.4.1", TGI),
        # Google Cloud's Hugging Face deep-learning containers
        (
            "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/"
            "huggingface-text-generation-inference-cu124.2-4.ubuntu2204.py311",
            TGI,
        ),
        (
            "us-docker.pkg.dev/deeplearning-platform-release/gcr.io/"
            "huggingface-text-embeddings-inference-cu122.1-4.ubuntu2204",
            TEI,
        ),
        # AWS's deep-learning containers
        (
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:"
            "2.4.0-tgi2.3.1-gpu-py311-cu124-ubuntu22.04",
            TGI,
        ),
        (
            "683313688378.dkr.ecr.us-east-1.amazonaws.com/tei:2.0.1-tei1.9.3-gpu-py310-cu129-ubuntu24.04",
            TEI,
        ),
        ("openvino/model_server:2024.4-gpu", OVMS),
        ("docker.io/seldonio/mlserver:1.6.1", MLSERVER),
        ("openmmlab/lmdeploy:v0.6.0-cu12", LMDEPLOY),
        ("lmsysorg/sglang:v0.4.0.post1-cu124", SGLANG),
        ("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3", NIM),
    ],
)
def test_model_server_images(image: str, server: str) -> None:
    found = classify(_container(image))
    assert found is not None and found.name == server, found


@pytest.mark.parametrize(
    ("command", "server"),
    [
        (
            ["tensorflow_model_server", "--port=8500", "--model_base_path=/models/resnet"],
            TF_SERVING,
        ),
        (["text-embeddings-router", "--model-id", "BAAI/bge-large-en-v1.5"], TEI),
        (["/ovms/bin/ovms", "--config_path", "/config/config.json"], OVMS),
        (["mlserver", "start", "/mnt/models"], MLSERVER),
        (["lmdeploy", "serve", "api_server", "internlm/internlm2_5-7b-chat"], LMDEPLOY),
    ],
)
def test_model_server_command_lines(command: list[str], server: str) -> None:
    found = classify(_container("registry.example.com/team/app:1.0", command=command))
    assert found is not None and found.name == server, found


@pytest.mark.parametrize(
    "image",
    [
        "tensorflow/tensorflow:2.16.1-gpu",  # training image, not TF Serving
        "openvino/ubuntu22_dev:2024.4.0",
        "docker.io/library/tei:1.0",  # only AWS's DLC accounts name TEI `tei`
        "nvcr.io/nvidia/pytorch:24.08-py3",
        "",
    ],
)
def test_other_images_are_no_model_server(image: str) -> None:
    assert classify(_container(image)) is None


def test_an_inference_service_model_container_is_a_kserve_runtime() -> None:
    found = classify(
        _container("", kind="InferenceService.serving.kserve.io", name="kserve-container")
    )
    assert found is not None and found.name == KSERVE_RUNTIME
    assert "predictor" in found.rule
