"""SRV-CLASSIFY: which model server a container runs. Used by the SRV and NET checks, through
`gpu_audit.api`.

A heuristic on the image repository and the command line. Every classification carries the
rule that matched, so that findings can print it and users can waive a misclassification.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_audit.k8s.images import image_registry_and_path
from gpu_audit.k8s.objects import as_list
from gpu_audit.k8s.pods import Container

# ServerClass.name values.
TORCHSERVE = "torchserve"
TRITON = "triton"
VLLM = "vllm"
TGI = "tgi"
RAY = "ray"
SGLANG = "sglang"
OLLAMA = "ollama"
NIM = "nim"
KSERVE_RUNTIME = "kserve-runtime"

KSERVE_ISVC_LABEL = "serving.kserve.io/inferenceservice"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"

# Last path component of the image repository -> class. Suffix match on the path, so any
# registry or mirror (`myregistry/ml/tritonserver`) counts.
_REPO_NAMES: dict[str, str] = {
    "torchserve": TORCHSERVE,
    "torchserve-kfs": TORCHSERVE,
    "torchserve-nightly": TORCHSERVE,
    "tritonserver": TRITON,
    "vllm-openai": VLLM,
    "vllm": VLLM,
    "text-generation-inference": TGI,
    "ray": RAY,
    "ray-ml": RAY,
    "sglang": SGLANG,
    "ollama": OLLAMA,
}

_COMMAND_RULES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"(^|[\s/])tritonserver(\s|$)"), TRITON, "tritonserver"),
    (re.compile(r"(^|[\s/])torchserve(\s|$)"), TORCHSERVE, "torchserve"),
    (re.compile(r"(^|[\s/])vllm\s+serve(\s|$)|vllm\.entrypoints"), VLLM, "vllm serve"),
    (re.compile(r"text-generation-launcher"), TGI, "text-generation-launcher"),
    (re.compile(r"sglang\.launch_server"), SGLANG, "sglang.launch_server"),
)


@dataclass(frozen=True, slots=True)
class ServerClass:
    """A container's model-server class and the human-readable rule that decided it."""

    name: str
    rule: str

    def describe(self) -> str:
        return f"{self.name} ({self.rule})"


def argv(container: Container) -> list[str]:
    """The container's command followed by its args, as strings."""
    return [
        str(a) for a in as_list(container.raw.get("command")) + as_list(container.raw.get("args"))
    ]


def classify(container: Container) -> ServerClass | None:
    """The model server `container` runs, or None for anything else (sidecars, training)."""
    image = container.image
    host, repo = image_registry_and_path(image)
    if host == "nvcr.io" and repo.startswith("nim/"):
        return ServerClass(NIM, f"image {image} matches nvcr.io/nim/*")
    name = repo.rsplit("/", 1)[-1]
    if name in _REPO_NAMES:
        return ServerClass(_REPO_NAMES[name], f"image {image} matches */{name}")
    if "kuberay" in repo:
        return ServerClass(RAY, f"image {image} matches */kuberay*")
    command = " ".join(argv(container))
    for pattern, server, shown in _COMMAND_RULES:
        if pattern.search(command):
            return ServerClass(server, f"command line runs {shown}")
    labels = container.template.labels
    if labels.get(RAY_NODE_TYPE_LABEL) == "head" and not container.init:
        return ServerClass(RAY, f"pod labelled {RAY_NODE_TYPE_LABEL}=head")
    if container.name == "kserve-container" and KSERVE_ISVC_LABEL in labels:
        return ServerClass(
            KSERVE_RUNTIME, f"kserve-container in a pod labelled {KSERVE_ISVC_LABEL}"
        )
    return None
