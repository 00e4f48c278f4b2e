"""The model a pod template names and the size of its weights, read from parameter counts in
model names (`Llama-3.1-70B-Instruct`, `Mixtral-8x7B`, `Qwen2-0.5B-AWQ`): the evidence the
probe and model-cache checks need to tell a model that loads in seconds from one that takes
minutes (docs/severity.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.k8s.model_servers import argv
from gpu_audit.k8s.objects import as_mapping
from gpu_audit.k8s.pods import PodTemplate

# A parameter count in a model name: 8B, 0.5B, 125m, 8x7B (mixture of experts: all experts).
_PARAMS = re.compile(r"(?<![A-Za-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bBmM])(?![A-Za-z0-9])")
_ONE_BYTE = re.compile(r"fp8|int8|8bit|w8a8", re.IGNORECASE)
_HALF_BYTE = re.compile(r"awq|gptq|int4|4bit|w4a16|nf4|bnb", re.IGNORECASE)
# From this size of weights on, a model is "large" for the probe and cache checks: about 3B
# parameters at 16 bits, minutes of download and load on a fresh node.
LARGE_MODEL_GB = 6.0


@dataclass(frozen=True, slots=True)
class ModelSize:
    """The model a pod template names and its weights, estimated from the parameter count in
    its name (2 bytes a parameter, 1 for FP8/INT8 names, 0.5 for AWQ/GPTQ/INT4 ones)."""

    name: str
    params_billion: float
    weights_gb: float

    @property
    def large(self) -> bool:
        return self.weights_gb >= LARGE_MODEL_GB

    def describe(self) -> str:
        return f"{self.name} (~{self.params_billion:g}B parameters, ~{self.weights_gb:.0f} GB of weights)"


def model_size(template: PodTemplate) -> ModelSize | None:
    """The largest model named in the template: images, command lines, env values, labels and
    annotations (KServe's storage-initializer source URI). None when no name carries a
    parameter count."""
    quantized = " ".join(t for c in template.containers() for t in argv(c))
    best: ModelSize | None = None
    for text in _model_texts(template):
        for token in text.split():
            for match in _PARAMS.finditer(token):
                experts, count, unit = match.groups()
                params = float(count) * (int(experts) if experts else 1)
                params = params if unit in "bB" else params / 1000
                per_param = 2.0
                if _HALF_BYTE.search(token) or _HALF_BYTE.search(quantized):
                    per_param = 0.5
                elif _ONE_BYTE.search(token):
                    per_param = 1.0
                size = ModelSize(token.split("=", 1)[-1], params, params * per_param)
                if best is None or size.weights_gb > best.weights_gb:
                    best = size
    return best


def _model_texts(template: PodTemplate) -> Iterator[str]:
    """Where a model is named, the most specific first (a tie keeps the first name)."""
    for container in template.containers():
        yield from argv(container)
        for entry in container.env().values():
            value = as_mapping(entry).get("value")
            if isinstance(value, str):
                yield value
    yield from template.annotations.values()
    for container in template.containers():
        yield container.image
    yield from template.labels.values()
