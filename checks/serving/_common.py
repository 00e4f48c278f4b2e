"""SRV-CLASSIFY: which model server a container runs, shared by the serving checks.

A heuristic on the image repository and the command line. Every classification carries the
rule that matched, so that findings can print it and users can waive a misclassification.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import Container, as_list

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

MODEL_SERVERS = frozenset({TORCHSERVE, TRITON, VLLM, TGI, RAY, SGLANG, OLLAMA, NIM, KSERVE_RUNTIME})


@dataclass(frozen=True, slots=True)
class ServerClass:
    """A container's model-server class and the human-readable rule that decided it."""

    name: str
    rule: str

    def describe(self) -> str:
        return f"{self.name} ({self.rule})"


def image_repository(image: str) -> tuple[str, str]:
    """(registry host, repository path), lower-cased, without tag or digest.

    The first component is a host only if it looks like one (a dot, a port or `localhost`),
    the same rule the container runtimes use for Docker Hub short names.
    """
    name = image.strip().lower().split("@", 1)[0]
    parts = name.split("/")
    last = parts[-1]
    if ":" in last:
        parts[-1] = last.split(":", 1)[0]
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        return parts[0], "/".join(parts[1:])
    return "docker.io", "/".join(parts)


def image_tag(image: str) -> str:
    name = image.strip().split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def argv(container: Container) -> list[str]:
    return [
        str(a) for a in as_list(container.raw.get("command")) + as_list(container.raw.get("args"))
    ]


def classify(container: Container) -> ServerClass | None:
    """The model server `container` runs, or None for anything else (sidecars, training)."""
    image = container.image
    host, repo = image_repository(image)
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


def env_value(container: Container, name: str) -> str | None:
    """A literal env value; None when unset or supplied by valueFrom (unknown offline)."""
    entry = container.env().get(name)
    if entry is None or "value" not in entry:
        return None
    value = entry.get("value")
    return "" if value is None else str(value)


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag=value` or `--flag value`, searching inside shell scripts too."""
    for index, arg in enumerate(args):
        for token_index, token in enumerate(tokens := arg.split()):
            if token.startswith(flag + "="):
                return token[len(flag) + 1 :]
            if token == flag:
                if token_index + 1 < len(tokens):
                    return tokens[token_index + 1]
                if index + 1 < len(args):
                    return args[index + 1]
                return ""
    return None


def has_flag(args: list[str], flag: str) -> bool:
    return flag_value(args, flag) is not None


def probe_budget(probe: Mapping[str, Any]) -> int:
    """Seconds before a probe gives up on a container that never answers, with the API's
    defaults (no initial delay, period 10 s, failure threshold 3)."""
    return _int_field(probe, "initialDelaySeconds", 0) + _int_field(
        probe, "failureThreshold", 3
    ) * _int_field(probe, "periodSeconds", 10)


def _int_field(probe: Mapping[str, Any], key: str, default: int) -> int:
    value = probe.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def owned_by_kserve(container: Container) -> bool:
    """KServe runtimes inject the model repository flag and manage readiness themselves."""
    return KSERVE_ISVC_LABEL in container.template.labels or container.name == "kserve-container"


def knative_managed(container: Container) -> bool:
    return any(k.startswith("serving.knative.dev/") for k in container.template.labels)
