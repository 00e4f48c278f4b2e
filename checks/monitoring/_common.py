"""prometheus-operator discovery semantics shared by the monitoring checks.

Written once so that "which namespaces does this ServiceMonitor look in" and "which Prometheus
picks this monitor up" mean the same thing in every check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpu_audit.api import (
    Container,
    PodTemplate,
    Resource,
    Snapshot,
    as_list,
    as_mapping,
    image_repository,
    label_selector_matches,
    map_selector_matches,
    namespace_labels,
    pod_templates,
    str_map,
    templates_of,
)

SERVICE_MONITOR = "ServiceMonitor.monitoring.coreos.com"
POD_MONITOR = "PodMonitor.monitoring.coreos.com"
PROMETHEUS = "Prometheus.monitoring.coreos.com"
PROMETHEUS_AGENT = "PrometheusAgent.monitoring.coreos.com"

# Namespaces a monitor covers: None stands for "every namespace".
Namespaces = frozenset[str] | None


def monitor_namespaces(monitor: Resource) -> Namespaces:
    """The operator's getNamespacesFromNamespaceSelector: `any` -> all namespaces, no
    matchNames -> the monitor's own namespace only."""
    selector = as_mapping(monitor.spec.get("namespaceSelector"))
    if selector.get("any") is True:
        return None
    names = frozenset(str(n) for n in as_list(selector.get("matchNames")) if n)
    return names or frozenset({monitor.ref.namespace})


def covers(namespaces: Namespaces, namespace: str) -> bool:
    return namespaces is None or namespace in namespaces


def describe_namespaces(namespaces: Namespaces) -> str:
    return "all namespaces" if namespaces is None else ", ".join(sorted(namespaces))


def prometheus_selects(snapshot: Snapshot, prometheus: Resource, monitor: Resource) -> bool:
    """Whether a Prometheus (or PrometheusAgent) picks `monitor` up: a null monitor selector
    matches nothing, `{}` everything; a null namespace selector means the Prometheus's own
    namespace, `{}` every namespace."""
    field = "serviceMonitor" if monitor.ref.kind == SERVICE_MONITOR else "podMonitor"
    selector = prometheus.spec.get(f"{field}Selector")
    if not isinstance(selector, Mapping):
        return False
    if not label_selector_matches(selector, monitor.labels):
        return False
    ns_selector = prometheus.spec.get(f"{field}NamespaceSelector")
    if not isinstance(ns_selector, Mapping):
        return monitor.ref.namespace == prometheus.ref.namespace
    return label_selector_matches(ns_selector, namespace_labels(snapshot, monitor.ref.namespace))


def prometheuses(snapshot: Snapshot) -> tuple[Resource, ...]:
    return snapshot.of(PROMETHEUS, PROMETHEUS_AGENT)


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a monitor discovers targets, as seen by one set of Prometheus servers."""

    namespaces: Namespaces
    why: str  # "" for the monitor's own namespaceSelector


def discovery_scopes(snapshot: Snapshot, monitor: Resource) -> tuple[Scope, ...]:
    """The monitor's namespaceSelector, except for Prometheus servers that set
    ignoreNamespaceSelectors: those only look in the monitor's own namespace."""
    selecting = [p for p in prometheuses(snapshot) if prometheus_selects(snapshot, p, monitor)]
    ignoring = [p for p in selecting if p.spec.get("ignoreNamespaceSelectors") is True]
    scopes: list[Scope] = []
    if not selecting or len(ignoring) < len(selecting):
        scopes.append(Scope(monitor_namespaces(monitor), ""))
    if ignoring:
        names = ", ".join(str(p.ref) for p in ignoring)
        scopes.append(
            Scope(frozenset({monitor.ref.namespace}), f"{names} sets ignoreNamespaceSelectors")
        )
    return tuple(scopes)


def service_port_names(service: Resource) -> list[str]:
    return [
        str(p.get("name"))
        for p in map(as_mapping, as_list(service.spec.get("ports")))
        if p.get("name")
    ]


def templates_behind(snapshot: Snapshot, service: Resource) -> list[PodTemplate]:
    """The pod templates a Service's spec.selector picks; none for selector-less Services,
    whose Endpoints are managed by hand."""
    selector = str_map(service.spec.get("selector"))
    if not selector:
        return []
    # Only templates carrying the selector's first label can match: look them up by it.
    key, value = next(iter(selector.items()))
    index = snapshot.derived("monitoring.templates_by_label", _templates_by_label)
    return [
        t
        for t in index.get((service.ref.namespace, key, value), ())
        if map_selector_matches(selector, t.labels)
    ]


def _templates_by_label(
    snapshot: Snapshot,
) -> dict[tuple[str, str, str], tuple[PodTemplate, ...]]:
    """(namespace, label key, value) -> the pod templates with that label, in snapshot order."""
    index: dict[tuple[str, str, str], list[PodTemplate]] = {}
    for template in pod_templates(snapshot):
        for key, value in template.labels.items():
            index.setdefault((template.owner.ref.namespace, key, value), []).append(template)
    return {k: tuple(v) for k, v in index.items()}


def container_declares_port(container: Container, port: object) -> bool:
    for declared in map(as_mapping, as_list(container.raw.get("ports"))):
        if isinstance(port, int) and not isinstance(port, bool):
            if declared.get("containerPort") == port:
                return True
        elif str(declared.get("name", "")) == str(port) or str(
            declared.get("containerPort", "")
        ) == str(port):
            return True
    return False


def is_dcgm_exporter(container: Container) -> bool:
    """By image, never by name: fake-GPU stacks reuse the nvidia-dcgm-exporter name, and the
    standalone host engine (.../cloud-native/dcgm) is not an exporter."""
    return image_repository(container.image).endswith("dcgm-exporter")


def exporter_daemonsets(snapshot: Snapshot) -> list[PodTemplate]:
    return [
        t
        for ds in snapshot.of("DaemonSet")
        for t in templates_of(ds)
        if any(is_dcgm_exporter(c) for c in t.containers())
    ]
