from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    label_selector_matches,
    passed,
    pod_templates,
    select,
)

from ._common import (
    SERVICE_MONITOR,
    Scope,
    container_declares_port,
    covers,
    describe_namespaces,
    discovery_scopes,
    service_port_names,
    templates_behind,
)


@check(
    id="GPU-MON-003",
    title="Every ServiceMonitor selects a Service and names one of its ports",
    category=Category.MONITORING,
    severity=Severity.MEDIUM,
    requires=(SERVICE_MONITOR, "Service"),
    rationale="""
        A ServiceMonitor selects Services by their metadata.labels (never pod labels) in the
        namespaces of its namespaceSelector, and each endpoint's `port` is the NAME of a Service
        port. A selector that only matches pods, a namespaceSelector pointing elsewhere, or a
        port name copied from another chart (`metrics` instead of the GPU Operator's
        `gpu-metrics`) produces zero scrape targets: DCGM, vLLM or Triton metrics never reach
        Prometheus and nothing reports an error.
    """,
    detection="""
        Per ServiceMonitor: the Services whose labels match spec.selector in the covered
        namespaces (`any: true` = all, no matchNames = the monitor's own namespace, and only
        its own namespace for a selecting Prometheus with ignoreNamespaceSelectors: true).
        No Service selected fails, with a diagnosis (labels match pods only, or a Service in
        another namespace). Then each endpoint: `port` must be a name that at least one
        selected Service declares; `targetPort` (valid, not deprecated) must be declared by
        a container of a pod behind a selected Service. Not flagged: monitors whose covered
        namespaces hold no Service at all in the input and no other evidence (typical of a
        bundle where the operator creates the Service at run time); targetPorts whose
        backing pods are not in the input; selected Services that lack the port while
        another selected Service has it (multi-Service selectors).
    """,
    severity_evidence="""
        Medium whenever the input shows the monitor resolves to nothing: no Service matches
        in its namespaces, or its port names no selected Service port. Low for an endpoint
        without port or targetPort (it scrapes every port). Monitors whose namespaces hold no
        Service in the input, and targetPorts whose pods are not in the input, are not judged.
    """,
    remediation="""
        # $kind $namespace/$name: $advice
        apiVersion: monitoring.coreos.com/v1
        kind: ServiceMonitor
        metadata:
          name: $name
          namespace: $monitor_namespace
        spec:
          namespaceSelector:
            matchNames: $namespaces
          selector:
            matchLabels: $labels   # Service metadata.labels, not pod labels
          endpoints:
            - port: $port   # a Service.spec.ports[].name; keep your other endpoint settings
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://github.com/prometheus-operator/prometheus-operator/blob/main/Documentation/api.md",
        "https://docs.okd.io/latest/rest_api/monitoring_apis/servicemonitor-monitoring-coreos-com-v1.html",
        "https://github.com/NVIDIA/gpu-operator/blob/main/assets/state-dcgm-exporter/0400_service.yaml",
    ),
)
def service_monitors_resolve_to_service_ports(snapshot: Snapshot) -> Iterator[Result]:
    for monitor in snapshot.of(SERVICE_MONITOR):
        for scope in discovery_scopes(snapshot, monitor):
            services = _selected(snapshot, monitor, scope)
            if services:
                yield passed(
                    monitor,
                    f"selects {_names(services)}{_suffix(scope)}",
                    path="spec.selector",
                )
                yield from _endpoint_results(snapshot, monitor, services)
            else:
                yield from _diagnose(snapshot, monitor, scope)


def _selected(snapshot: Snapshot, monitor: Resource, scope: Scope) -> list[Resource]:
    selector = as_mapping(monitor.spec.get("selector"))
    return [
        s
        for s in select(snapshot, "Service", None, selector)
        if covers(scope.namespaces, s.ref.namespace)
    ]


def _suffix(scope: Scope) -> str:
    return f" (scope limited because {scope.why})" if scope.why else ""


def _names(services: Sequence[Resource]) -> str:
    return ", ".join(f"Service {s.ref.namespace}/{s.ref.name}" for s in services)


def _diagnose(snapshot: Snapshot, monitor: Resource, scope: Scope) -> Iterator[Result]:
    selector = as_mapping(monitor.spec.get("selector"))
    covered = describe_namespaces(scope.namespaces)
    home = monitor.ref.namespace
    elsewhere = select(snapshot, "Service", None, selector)
    pods = [
        t
        for t in pod_templates(snapshot)
        if covers(scope.namespaces, t.owner.ref.namespace)
        and label_selector_matches(selector, t.labels)
    ]
    if elsewhere:
        namespaces = sorted({s.ref.namespace for s in elsewhere})
        message = (
            f"selector matches {_names(elsewhere)}, outside the namespaces it covers "
            f"({covered}){_suffix(scope)}"
        )
        advice = "cover the namespace of the matching Service"
        if scope.why:
            # namespaceSelector is ignored there: the monitor has to live next to the Service
            advice = f"move the ServiceMonitor to {namespaces[0]}; {scope.why}"
            home = namespaces[0]
    elif pods:
        namespaces = sorted({t.owner.ref.namespace for t in pods})
        message = (
            f"selector matches the pod labels of {pods[0].owner.ref} but no Service labels; "
            "ServiceMonitors select Services"
        )
        advice = "put these labels on the Service metadata.labels, or use a PodMonitor"
    elif any(covers(scope.namespaces, s.ref.namespace) for s in snapshot.of("Service")):
        namespaces = sorted(scope.namespaces or {monitor.ref.namespace})
        message = f"selector matches no Service in {covered}{_suffix(scope)}"
        advice = "match the labels of the Service that exposes the metrics port"
    else:
        return  # nothing in the input to judge by: the Service may be created at run time
    yield failed(
        monitor,
        message,
        path="spec.selector",
        fix=_fix(monitor, advice, namespaces, _first_port(monitor), home),
    )


def _endpoint_results(
    snapshot: Snapshot, monitor: Resource, services: Sequence[Resource]
) -> Iterator[Result]:
    endpoints = [as_mapping(e) for e in as_list(monitor.spec.get("endpoints"))]
    namespaces = sorted({s.ref.namespace for s in services})
    available = sorted({n for s in services for n in service_port_names(s)})
    suggestion = available[0] if available else "metrics"
    for index, endpoint in enumerate(endpoints):
        path = f"spec.endpoints[{index}]"
        problem = _endpoint_problem(snapshot, endpoint, services, available)
        if problem is None:
            continue
        if problem:
            advice = f"Service ports named: {', '.join(available) or 'none (name the port)'}"
            yield failed(
                monitor,
                problem,
                path=path,
                severity=Severity.LOW if problem.startswith("endpoint names neither") else None,
                fix=_fix(monitor, advice, namespaces, suggestion, monitor.ref.namespace),
            )
        else:
            yield passed(monitor, f"endpoint {index} resolves to a Service port", path=path)


def _endpoint_problem(
    snapshot: Snapshot,
    endpoint: Mapping[str, Any],
    services: Sequence[Resource],
    available: Sequence[str],
) -> str | None:
    """ "" when the endpoint resolves, the problem otherwise, None when it cannot be judged."""
    port = endpoint.get("port")
    target = endpoint.get("targetPort")
    if port not in (None, ""):
        text = str(port)
        if text.isdigit():
            return f"endpoint port {text} is a number; `port` must be a Service port NAME"
        if text not in available:
            names = ", ".join(available) or "none (unnamed ports cannot be referenced)"
            return f"no selected Service has a port named {text!r} (they have: {names})"
        return ""
    if target not in (None, ""):
        templates = [t for s in services for t in templates_behind(snapshot, s)]
        if not templates:
            return None  # the pods behind the Service are not in the input
        if any(container_declares_port(c, target) for t in templates for c in t.containers()):
            return ""
        return f"targetPort {target!r} is not declared by any container of the pods behind it"
    return "endpoint names neither port nor targetPort, so every port of the Service is scraped"


def _first_port(monitor: Resource) -> str:
    for endpoint in map(as_mapping, as_list(monitor.spec.get("endpoints"))):
        if endpoint.get("port"):
            return str(endpoint["port"])
    return "metrics"


def _fix(
    monitor: Resource, advice: str, namespaces: Sequence[str], port: str, home: str
) -> dict[str, str]:
    labels = as_mapping(as_mapping(monitor.spec.get("selector")).get("matchLabels"))
    return {
        "advice": advice.replace("\n", " "),
        "monitor_namespace": home,
        "namespaces": json.dumps(list(namespaces)),
        "labels": json.dumps({str(k): str(v) for k, v in labels.items()}),
        "port": json.dumps(port),
    }
