"""The pod specs an operator builds from a custom resource that holds no PodTemplateSpec of the
kind's own (KubeRay, Kubeflow Notebooks, the NIM operator): what `templates_of` turns into a
PodTemplate of the custom resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class OperatorTemplate:
    """One pod spec an operator creates from a custom resource.

    `role` names it among the resource's pod specs ("head", "workerGroup gpu-workers", "nim"),
    `path` is where the pod spec's fields are written in the resource, `container_paths` where
    a container's fields are written when not at `path`.containers[i], and `inline_container`
    the container whose fields are written at `path` itself, beside the pod-level fields (a
    NIMService's spec.resources and spec.env are its NIM container's).
    """

    role: str
    path: str
    spec: Mapping[str, Any]
    metadata: Mapping[str, Any]
    container_paths: tuple[tuple[str, str], ...] = ()
    inline_container: str = ""
