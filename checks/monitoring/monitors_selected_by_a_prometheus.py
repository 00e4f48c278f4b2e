from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

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
    namespace_labels,
    passed,
    str_map,
)

from ._common import (
    POD_MONITOR,
    PROMETHEUS,
    SERVICE_MONITOR,
    prometheus_selects,
    prometheuses,
)

_MANAGED_SELECTORS = (
    "serviceMonitorSelector",
    "podMonitorSelector",
    "probeSelector",
    "scrapeConfigSelector",
)
_NS_SELECTORS = ("serviceMonitorNamespaceSelector", "podMonitorNamespaceSelector")
# The API server labels every Namespace with its name.
_NAME_LABEL = "kubernetes.io/metadata.name"


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
    severity_evidence="""
        Medium when every Prometheus in the input that manages monitors is shown not to select
        the monitor, or a Prometheus namespace selector uses matchNames: its metrics never
        arrive. Verdicts that need Namespace labels the input lacks are not given.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
        # (kube-prometheus-stack: prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues:
        # false and serviceMonitorNamespaceSelector: {} select every ServiceMonitor.)
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # the Prometheus has no serviceMonitorSelector: select the monitor's labels
        kubectl patch prometheus.monitoring.coreos.com/<prometheus> -n <prometheus-namespace> --type=merge -p '{"spec":{"serviceMonitorSelector":{"matchLabels":{"<label>":"<value>"}}}}'
        # its selector does not match the monitor: give the monitor the labels it selects
        kubectl label servicemonitor.monitoring.coreos.com/<name> -n <namespace> <label>=<value> --overwrite
        # it has no serviceMonitorNamespaceSelector (its own namespace only): add the monitor's
        kubectl patch prometheus.monitoring.coreos.com/<prometheus> -n <prometheus-namespace> --type=merge -p '{"spec":{"serviceMonitorNamespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["<prometheus-namespace>","<namespace>"]}]}}}'
        # its namespace selector does not match: label the monitor's namespace
        kubectl label namespace/<namespace> <label>=<value> --overwrite
        # (PodMonitors: podMonitorSelector and podMonitorNamespaceSelector.) A Prometheus whose
        # namespace selector has matchNames, which is not a LabelSelector field, gets:
        #   spec:
        #     serviceMonitorNamespaceSelector:
        #       matchNames: null   # not a LabelSelector field
        #       matchExpressions:
        #         - {"key":"kubernetes.io/metadata.name","operator":"In","values":["<namespace>"]}
        # (kube-prometheus-stack: prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues:
        # false and serviceMonitorNamespaceSelector: {} select every ServiceMonitor.)
    """,
    references=(
        "https://github.com/prometheus-operator/prometheus-operator/blob/main/Documentation/api.md",
        "https://github.com/prometheus-operator/prometheus-operator/issues/1331",
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
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
                monitor,
                problem,
                path="metadata.labels",
                fix=_fix(snapshot, monitor, managed, problem),
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


def _fix(
    snapshot: Snapshot, monitor: Resource, managed: list[Resource], problem: str
) -> dict[str, str]:
    """Commands that make one Prometheus select the monitor: the monitor's labels for its
    monitor selector, and the monitor's namespace for its namespace selector."""
    field = _field(monitor)
    prometheus = next(
        (p for p in managed if isinstance(p.spec.get(f"{field}Selector"), Mapping)), managed[0]
    )
    target = f"{_resource(prometheus)}/{prometheus.ref.name} -n {prometheus.ref.namespace}"
    namespace = monitor.ref.namespace
    lines: list[str] = []
    selector = prometheus.spec.get(f"{field}Selector")
    if not isinstance(selector, Mapping):
        wanted = {f"{field}Selector": {"matchLabels": dict(monitor.labels)}}
        lines.append(f"kubectl patch {target} --type=merge -p '{_json({'spec': wanted})}'")
    elif not label_selector_matches(selector, monitor.labels):
        lines += _label(
            f"{_resource(monitor)}/{monitor.ref.name} -n {namespace}",
            str_map(selector.get("matchLabels")),
            selector,
        )
    ns_selector = prometheus.spec.get(f"{field}NamespaceSelector")
    if not isinstance(ns_selector, Mapping):
        if namespace != prometheus.ref.namespace:
            # null means the Prometheus's own namespace: keep it, and add the monitor's.
            names = sorted({prometheus.ref.namespace, namespace})
            expression = {"key": _NAME_LABEL, "operator": "In", "values": names}
            covered = {f"{field}NamespaceSelector": {"matchExpressions": [expression]}}
            lines.append(f"kubectl patch {target} --type=merge -p '{_json({'spec': covered})}'")
    elif not label_selector_matches(ns_selector, namespace_labels(snapshot, namespace)):
        labels = str_map(ns_selector.get("matchLabels"))
        lines += _label(f"namespace/{namespace}", labels, ns_selector)
    return {"problem": problem.replace("\n", " "), "snippet": "\n".join(lines)}


def _label(target: str, labels: Mapping[str, str], selector: Mapping[str, object]) -> list[str]:
    pairs = " ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    lines = [f"kubectl label {target} {pairs} --overwrite"] if pairs else []
    if selector.get("matchExpressions"):
        lines.append(f"# and satisfy its matchExpressions: {_json(selector['matchExpressions'])}")
    return lines


def _resource(resource: Resource) -> str:
    kind, _, group = resource.ref.kind.partition(".")
    return f"{kind.lower()}.{group}"


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), default=_plain)


def _plain(value: object) -> object:
    """Snapshot values are read-only mappings and tuples; JSON wants dicts and lists."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


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
                fix={"problem": problem, "snippet": _names_as_expression(field, selector)},
            )


def _names_as_expression(field: str, selector: Mapping[str, object]) -> str:
    """What matchNames meant, as a LabelSelector: the automatic namespace-name label In the
    names, next to the selector's other requirements (a merge patch replaces the list)."""
    names = sorted(str(n) for n in as_list(selector.get("matchNames")))
    expressions = [
        *as_list(selector.get("matchExpressions")),
        {"key": _NAME_LABEL, "operator": "In", "values": names},
    ]
    lines = [
        "spec:",
        f"  {field}:",
        "    matchNames: null   # not a LabelSelector field",
        "    matchExpressions:",
        *(f"      - {_json(e)}" for e in expressions),
    ]
    return "\n".join(lines)
