from __future__ import annotations

import json
from collections.abc import Iterator

from gpu_audit.api import (
    AdmissionRule,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    is_gpu_resource,
    passed,
)

from ._common import (
    HPA,
    RESOURCE_METRICS,
    Metric,
    cpu_only_target,
    for_target,
    hpa_metrics,
    scale_target,
)


@check(
    id="GPU-HPA-001",
    title="HPA Resource metrics use only cpu or memory, never nvidia.com/gpu",
    category=Category.AUTOSCALING,
    severity=Severity.HIGH,
    requires=(HPA,),
    rationale="""
        Resource and ContainerResource metrics come from the resource metrics API
        (metrics.k8s.io, served by metrics-server), which reports only CPU and memory. The API
        server accepts any resource name, so an HPA on `nvidia.com/gpu` is admitted, but the
        controller can never compute a replica count for it: a GPU Deployment silently stays
        at its current size. GPU allocation is an extended resource, not a utilisation
        signal; GPU utilisation has to come from DCGM exporter through a metrics adapter.
    """,
    detection="""
        Every Resource and ContainerResource entry of spec.metrics whose resource name is not
        cpu or memory. Not flagged: cpu/memory metrics, autoscaling/v1
        targetCPUUtilizationPercentage, HPAs without metrics (CPU by default), and
        Pods/Object/External metrics such as a DCGM_FI_DEV_GPU_UTIL series or the External
        metrics of KEDA-generated HPAs.
    """,
    severity_evidence="""
        High when the HPA has no other usable metric: it never scales. Medium when another
        metric still drives it: the controller scales up on the metrics it can read but skips
        every scale-down while one metric fails, so GPU replicas are never released. One step
        lower when the scale target is in the input and requests no GPU.
    """,
    remediation="""
        # $kind $namespace/$name: spec.metrics[$index] asks the resource metrics API for
        # $resource, which it does not serve. Scale on a GPU metric from DCGM exporter instead,
        # served by prometheus-adapter (custom.metrics.k8s.io) or a KEDA prometheus trigger;
        # keep any cpu/memory entries you already have in the list.
        apiVersion: autoscaling/v2
        kind: HorizontalPodAutoscaler
        metadata:
          name: $name
          namespace: $namespace
        spec:
          scaleTargetRef: $target
          maxReplicas: $max_replicas
          metrics:
            - type: Pods
              pods:
                metric:
                  name: DCGM_FI_DEV_GPU_UTIL   # the name your adapter rule exposes
                target:
                  type: AverageValue
                  averageValue: "70"
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#support-for-metrics-apis",
        "https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details",
        "https://github.com/kubernetes/kubernetes/issues/59633",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html",
    ),
    admission=AdmissionRule(
        scope="object",
        kinds=(HPA,),
        valid=f"""
            object.spec.?metrics.orValue([]).all(m,
                !(m.?type.orValue('') in ['Resource', 'ContainerResource'])
                || (m.type == 'Resource' ? m.?resource.?name.orValue('')
                    : m.?containerResource.?name.orValue('')) in {["", *sorted(RESOURCE_METRICS)]})
        """,
        message="a Resource or ContainerResource metric names a resource metrics.k8s.io does not "
        "serve (only cpu and memory; GPU allocation is not a utilisation metric)",
    ),
)
def hpa_resource_metrics_only_cpu_or_memory(snapshot: Snapshot) -> Iterator[Result]:
    for hpa in snapshot.of(HPA):
        metrics = list(hpa_metrics(hpa))
        invalid = [
            m for m in metrics if m.resource_name and m.resource_name not in RESOURCE_METRICS
        ]
        if not invalid:
            yield passed(hpa, "scales only on metrics its metrics APIs can serve")
            continue
        alone = len(invalid) == len(metrics)
        severity, why = for_target(
            Severity.HIGH if alone else Severity.MEDIUM, cpu_only_target(snapshot, hpa)
        )
        for metric in invalid:
            yield failed(
                hpa,
                _message(metric, alone) + why,
                path=metric.path,
                severity=severity,
                fix=_fix(hpa, metric),
            )


def _message(metric: Metric, alone: bool) -> str:
    name = metric.resource_name
    text = f"{metric.type} metric {name!r} is not served by metrics.k8s.io (only cpu and memory)"
    if is_gpu_resource(name) or name.startswith(("nvidia.com/", "amd.com/")):
        text += "; GPU allocation is not a utilisation metric"
    if alone:
        return text + "; the HPA has no other metric, so it never scales"
    return (
        text + "; the HPA scales up on its other metrics but skips every scale-down while "
        "this one fails"
    )


def _fix(hpa: Resource, metric: Metric) -> dict[str, str]:
    target = scale_target(hpa)
    return {
        "index": str(metric.index),
        "resource": metric.resource_name,
        "target": json.dumps(
            {"apiVersion": target.api_version, "kind": target.kind, "name": target.name}
        ),
        "max_replicas": str(hpa.spec.get("maxReplicas", 1)),
    }
