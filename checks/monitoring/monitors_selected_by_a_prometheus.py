from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpu_audit.api import (
    Category,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_mapping,
    check,
    failed,
    passed,
    str_map,
)

from ._common import POD_MONITOR, PROMETHEUS, SERVICE_MONITOR, prometheus_selects, prometheuses

_MANAGED_SELECTORS = (
    "serviceMonitorSelector",
    "podMonitorSelector",
    "probeSelector",
    "scrapeConfigSelector",
)
_NS_SELECTORS = ("serviceMonitorNamespaceSelector", "podMonitorNamespaceSelector")


@check(
    id="GPU-MON-004",
    title="Every ServiceMonitor and PodMonitor is selected by a Prometheus",
    category=Category.MONITORING,
    severity=Severity.MEDIUM,
    requires=((SERVICE_MONITOR, POD_MONITOR), PROMETHEUS),
    rationale="""
        A Prometheus only loads the monitors its serviceMonitorSelector/podMonitorSelector match
        in the namespaces its namespace selectors cover. kube-prometheus-stack selects only
        monitors labelled `release: <release>`, so a DCGM, Triton or vLLM monitor without that
        label, or in an uncovered namespace, is ignored without any error and its GPU metrics
        never arrive.
    """,
    detection="""
        A monitor passes when some Prometheus selects it: monitor selector null = nothing,
        {} = everything; namespace selector null = the Prometheus's own namespace, {} = all,
        matched against Namespace labels (the automatic kubernetes.io/metadata.name label
        when the input has no Namespace objects). Prometheus objects in unmanaged mode (all
        four selectors null) are ignored. A Prometheus with `matchNames` under a monitor
        namespace selector (not a LabelSelector field; the API drops it) fails. Not flagged:
        monitors whose verdict needs Namespace labels the input does not have.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        # either give the monitor the labels a Prometheus selects ...
        metadata:
          labels: $labels
        # ... or widen the Prometheus (kube-prometheus-stack values):
        #   prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues: false
        #   prometheus.prometheusSpec.serviceMonitorNamespaceSelector: {}
        # a namespace selector by name: {matchLabels: {kubernetes.io/metadata.name: $namespace}}
    """,
    references=(
        "https://github.com/prometheus-operator/prometheus-operator/blob/main/Documentation/api.md",
        "https://github.com/prometheus-operator/prometheus-operator/issues/1331",
    ),
)
def monitors_selected_by_a_prometheus(snapshot: Snapshot) -> Iterator[Result]:
    managed = [p for p in prometheuses(snapshot) if _managed(p)]
    for prometheus in managed:
        yield from _selector_shape(prometheus)
    if not managed:
        return
    for monitor in snapshot.of(SERVICE_MONITOR, POD_MONITOR):
        verdicts = [_selects(snapshot, p, monitor) for p in managed]
        selecting = [p for p, v in zip(managed, verdicts, strict=True) if v]
        if selecting:
            yield passed(monitor, f"is selected by {selecting[0].ref}", path="metadata.labels")
        elif None not in verdicts:
            field = _field(monitor)
            problem = "no Prometheus selects it: " + "; ".join(_summary(p, field) for p in managed)
            yield failed(
                monitor, problem, path="metadata.labels", fix=_fix(monitor, managed, problem)
            )


def _managed(prometheus: Resource) -> bool:
    return any(isinstance(prometheus.spec.get(f), Mapping) for f in _MANAGED_SELECTORS)


def _selects(snapshot: Snapshot, prometheus: Resource, monitor: Resource) -> bool | None:
    """None when the answer depends on Namespace labels the input lacks."""
    field = _field(monitor)
    ns_selector = as_mapping(prometheus.spec.get(f"{field}NamespaceSelector"))
    needs_labels = any(
        k != "kubernetes.io/metadata.name" for k in str_map(ns_selector.get("matchLabels"))
    ) or bool(ns_selector.get("matchExpressions"))
    if needs_labels and not snapshot.of("Namespace"):
        return None
    return prometheus_selects(snapshot, prometheus, monitor)


def _field(monitor: Resource) -> str:
    return "serviceMonitor" if monitor.ref.kind == SERVICE_MONITOR else "podMonitor"


def _summary(prometheus: Resource, field: str) -> str:
    spec = prometheus.spec
    return (
        f"{prometheus.ref} wants labels {spec.get(f'{field}Selector')} in namespaces "
        f"{spec.get(f'{field}NamespaceSelector', 'of its own')}"
    )


def _fix(monitor: Resource, managed: list[Resource], problem: str) -> dict[str, str]:
    wanted = dict(monitor.labels)
    for prometheus in managed:
        selector = prometheus.spec.get(f"{_field(monitor)}Selector")
        wanted.update(str_map(as_mapping(selector).get("matchLabels")))
    labels = ", ".join(f'"{k}": "{v}"' for k, v in sorted(wanted.items()))
    return {"problem": problem.replace("\n", " "), "labels": "{" + labels + "}"}


def _selector_shape(prometheus: Resource) -> Iterator[Result]:
    for field in _NS_SELECTORS:
        selector = prometheus.spec.get(field)
        if isinstance(selector, Mapping) and "matchNames" in selector:
            problem = (
                f"{field}.matchNames is not a LabelSelector field; the API drops it and the "
                "selector no longer means what it says"
            )
            yield failed(
                prometheus,
                problem,
                path=f"spec.{field}",
                severity=Severity.MEDIUM,
                fix={"problem": problem, "labels": "{}"},
            )
