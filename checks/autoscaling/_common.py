"""HorizontalPodAutoscaler and KEDA semantics shared by the autoscaling checks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import Resource, Severity, Snapshot, as_list, as_mapping, templates_of

HPA = "HorizontalPodAutoscaler"
SCALED_OBJECT = "ScaledObject.keda.sh"
APISERVICE = "APIService"

# The Resource metrics the resource metrics API (metrics-server) serves.
RESOURCE_METRICS = frozenset({"cpu", "memory"})


@dataclass(frozen=True, slots=True)
class Metric:
    index: int
    type: str
    source: Mapping[str, Any]  # the type-specific block: resource, containerResource, pods, ...

    @property
    def path(self) -> str:
        return f"spec.metrics[{self.index}]"

    @property
    def resource_name(self) -> str:
        """The resource of a Resource/ContainerResource metric, "" for other types."""
        if self.type in ("Resource", "ContainerResource"):
            return str(self.source.get("name", ""))
        return ""


_SOURCE_FIELD = {
    "Resource": "resource",
    "ContainerResource": "containerResource",
    "Pods": "pods",
    "Object": "object",
    "External": "external",
}


def hpa_metrics(hpa: Resource) -> Iterator[Metric]:
    """spec.metrics of autoscaling/v2(beta2); an HPA without metrics, and every autoscaling/v1
    HPA, scales on CPU (targetCPUUtilizationPercentage, 80% by default)."""
    metrics = as_list(hpa.spec.get("metrics"))
    if not metrics:
        yield Metric(-1, "Resource", {"name": "cpu"})
        return
    for index, raw in enumerate(map(as_mapping, metrics)):
        type_ = str(raw.get("type", ""))
        yield Metric(index, type_, as_mapping(raw.get(_SOURCE_FIELD.get(type_, ""))))


def owned_by_keda(hpa: Resource) -> bool:
    return any(
        as_mapping(ref).get("kind") == "ScaledObject"
        and str(as_mapping(ref).get("apiVersion", "")).startswith("keda.sh/")
        for ref in as_list(hpa.metadata.get("ownerReferences"))
    )


def keda_hpa_names(snapshot: Snapshot) -> set[tuple[str, str]]:
    """(namespace, name) of the HPAs KEDA creates for ScaledObjects: status.hpaName, the
    advanced.horizontalPodAutoscalerConfig.name override, else keda-hpa-<name>."""
    names: set[tuple[str, str]] = set()
    for scaled in snapshot.of(SCALED_OBJECT):
        override = as_mapping(
            as_mapping(scaled.spec.get("advanced")).get("horizontalPodAutoscalerConfig")
        ).get("name")
        name = scaled.status.get("hpaName") or override or f"keda-hpa-{scaled.ref.name}"
        names.add((scaled.ref.namespace, str(name)))
    return names


def is_keda_hpa(hpa: Resource, keda_names: set[tuple[str, str]]) -> bool:
    return owned_by_keda(hpa) or (hpa.ref.namespace, hpa.ref.name) in keda_names


@dataclass(frozen=True, slots=True)
class TargetRef:
    kind: str
    name: str
    api_version: str

    @property
    def group(self) -> str:
        return self.api_version.split("/", 1)[0] if "/" in self.api_version else ""


def scale_target(obj: Resource) -> TargetRef:
    """spec.scaleTargetRef of an HPA or a ScaledObject (whose kind defaults to Deployment)."""
    ref = as_mapping(obj.spec.get("scaleTargetRef"))
    return TargetRef(
        str(ref.get("kind") or "Deployment"),
        str(ref.get("name", "")),
        str(ref.get("apiVersion") or "apps/v1"),
    )


def condition(obj: Resource, type_: str) -> Mapping[str, Any] | None:
    for cond in map(as_mapping, as_list(obj.status.get("conditions"))):
        if cond.get("type") == type_:
            return cond
    return None


_ONE_STEP_DOWN = {
    Severity.CRITICAL: Severity.HIGH,
    Severity.HIGH: Severity.MEDIUM,
    Severity.MEDIUM: Severity.LOW,
    Severity.LOW: Severity.LOW,
    Severity.INFO: Severity.INFO,
}


def cpu_only_target(snapshot: Snapshot, owner: Resource) -> str:
    """The scale target as text when it is in the input and requests no GPU, else "" (a GPU
    workload, or one the input does not hold)."""
    target = scale_target(owner)
    found = snapshot.get(target.kind, owner.ref.namespace, target.name)
    if found is None or any(t.requests_gpu for t in templates_of(found)):
        return ""
    return f"{target.kind} {target.name}"


def for_target(severity: Severity, cpu_target: str) -> tuple[Severity, str]:
    """`severity` one step lower, with the reason to append to the message, when the scale
    target is known to run no GPU work."""
    if not cpu_target:
        return severity, ""
    return _ONE_STEP_DOWN[severity], f" ({cpu_target} requests no GPU)"
