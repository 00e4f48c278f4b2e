from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gpu_audit.api import (
    Category,
    FixKind,
    ObjRef,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_mapping,
    check,
    failed,
    label_selector_matches,
    passed,
    select,
    str_map,
)

from ._common import (
    POD_MONITOR,
    SERVICE_MONITOR,
    Namespaces,
    covers,
    exporter_daemonsets,
    monitor_namespaces,
    prometheus_selects,
    prometheuses,
    templates_behind,
)

CLUSTER_POLICY = "ClusterPolicy.nvidia.com"
OPERATOR_EXPORTER_LABELS = {"app": "nvidia-dcgm-exporter"}


@dataclass(frozen=True, slots=True)
class Monitor:
    """A ServiceMonitor/PodMonitor that reaches DCGM exporter pods. `virtual` marks the one
    the operator creates at run time (spec.dcgmExporter.serviceMonitor.enabled) when the
    input does not hold it."""

    resource: Resource
    selects: frozenset[ObjRef]  # exporter DaemonSets whose pods it scrapes
    virtual: bool = False
    policy: str = ""

    @property
    def label(self) -> str:
        if self.virtual:
            return f"ClusterPolicy {self.policy} (dcgmExporter.serviceMonitor)"
        return str(self.resource.ref)

    @property
    def keep_first(self) -> tuple[bool, bool, bool, str]:
        """The monitor that ships with the exporter is the one to keep: the operator's own
        (the run-time one first: it has no object in the input to name), then one named and
        placed like the exporter DaemonSet it scrapes, as the dcgm-exporter chart renders its
        ServiceMonitor (fullname, release namespace). A hand-written extra goes."""
        ref = self.resource.ref
        operator = self.virtual or (
            ref.name == "nvidia-dcgm-exporter"
            and self.resource.labels.get("app") == OPERATOR_EXPORTER_LABELS["app"]
        )
        shipped = any(e.namespace == ref.namespace and e.name == ref.name for e in self.selects)
        return (not self.virtual, not operator, not shipped, self.label)


def _scope(monitor: Resource, prometheus: Resource | None) -> Namespaces:
    if prometheus is not None and prometheus.spec.get("ignoreNamespaceSelectors") is True:
        return frozenset({monitor.ref.namespace})
    return monitor_namespaces(monitor)


def _scraped(
    snapshot: Snapshot,
    monitor: Resource,
    exporters: Sequence[PodTemplate],
    prometheus: Resource | None,
) -> frozenset[ObjRef]:
    """The exporter DaemonSets whose pods the monitor turns into targets."""
    namespaces = _scope(monitor, prometheus)
    selector = monitor.spec.get("selector")
    if monitor.ref.kind == POD_MONITOR:
        return frozenset(
            t.owner.ref
            for t in exporters
            if covers(namespaces, t.owner.ref.namespace)
            and label_selector_matches(selector, t.labels)
        )
    exporter_refs = {t.owner.ref for t in exporters}
    found: set[ObjRef] = set()
    for service in select(snapshot, "Service", None, selector):
        if covers(namespaces, service.ref.namespace):
            found.update(
                t.owner.ref
                for t in templates_behind(snapshot, service)
                if t.owner.ref in exporter_refs
            )
    return frozenset(found)


def _operator_monitor(snapshot: Snapshot, exporters: Sequence[PodTemplate]) -> Monitor | None:
    """The operator's nvidia-dcgm-exporter ServiceMonitor when the policy enables it but the
    input does not hold it: created at run time next to the operator's exporter, labelled
    app=nvidia-dcgm-exporter plus serviceMonitor.additionalLabels."""
    for policy in snapshot.of(CLUSTER_POLICY):
        exporter = as_mapping(policy.spec.get("dcgmExporter"))
        config = as_mapping(exporter.get("serviceMonitor"))
        if config.get("enabled") is not True or exporter.get("enabled") is False:
            continue
        targets = [t for t in exporters if t.owner.ref.name == "nvidia-dcgm-exporter"]
        if not targets:
            continue
        namespace = targets[0].owner.ref.namespace
        if snapshot.get(SERVICE_MONITOR, namespace, "nvidia-dcgm-exporter") is not None:
            continue
        labels = {**str_map(config.get("additionalLabels")), **OPERATOR_EXPORTER_LABELS}
        raw = {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "nvidia-dcgm-exporter", "namespace": namespace, "labels": labels},
        }
        resource = Resource(
            ObjRef(SERVICE_MONITOR, namespace, "nvidia-dcgm-exporter"),
            "monitoring.coreos.com/v1",
            raw,
            policy.source,
        )
        return Monitor(resource, frozenset({targets[0].owner.ref}), True, policy.ref.name)
    return None


def _groups(
    snapshot: Snapshot, exporters: Sequence[PodTemplate]
) -> list[tuple[str, list[Monitor]]]:
    """Per Prometheus (or, with none in the input, for whichever one selects them all), the
    monitors that scrape a DCGM exporter."""
    virtual = _operator_monitor(snapshot, exporters)
    groups: list[tuple[str, list[Monitor]]] = []
    for server in prometheuses(snapshot) or (None,):
        found = [
            Monitor(m, _scraped(snapshot, m, exporters, server))
            for m in snapshot.of(SERVICE_MONITOR, POD_MONITOR)
            if server is None or prometheus_selects(snapshot, server, m)
        ]
        if virtual is not None and (
            server is None or prometheus_selects(snapshot, server, virtual.resource)
        ):
            found.append(virtual)
        name = str(server.ref) if server is not None else "any Prometheus selecting them"
        groups.append((name, [m for m in found if m.selects]))
    return groups


@check(
    id="GPU-MON-002",
    title="Each DCGM exporter is scraped by one monitor per Prometheus",
    category=Category.MONITORING,
    severity=Severity.MEDIUM,
    requires=("DaemonSet", (SERVICE_MONITOR, POD_MONITOR)),
    rationale="""
        Two ServiceMonitors or PodMonitors that reach the same dcgm-exporter pods in one
        Prometheus store every DCGM_FI_* series twice, under different job labels: sum()
        dashboards, idle-GPU reports and GPU-utilisation autoscaling read double. It happens
        when the GPU Operator's own ServiceMonitor (dcgmExporter.serviceMonitor.enabled) is
        kept next to one from a monitoring stack or the dcgm-exporter chart. Two exporters on
        one node are the other way to double the series (GPU-STACK-005).
    """,
    detection="""
        Exporters are DaemonSets with a dcgm-exporter image. For each Prometheus (or
        PrometheusAgent) in the input, the monitors it selects (labels and namespace) that
        reach an exporter: a PodMonitor by pod labels, a ServiceMonitor through a Service
        whose selector picks the exporter's pods, in the monitor's namespaces
        (ignoreNamespaceSelectors honoured). Without Prometheus objects every monitor counts.
        An enabled operator ServiceMonitor that is not in the input counts as one. More than
        one fails; the finding names the extra monitor, keeping the one that ships with the
        exporter: the operator's, else one named like the exporter DaemonSet in its namespace
        (the dcgm-exporter chart's ServiceMonitor). Not flagged: monitors in different Prometheus servers (each stores the series once),
        monitors no Prometheus selects (GPU-MON-004), and several exporters on a node
        (GPU-STACK-005).
    """,
    severity_evidence="""
        Medium when a Prometheus (or PrometheusAgent) in the input selects both monitors: the
        series are then stored twice. Without Prometheus objects in the input nothing shows
        that one server loads both (kube-prometheus-stack selects only its release's label),
        so the finding is low.
    """,
    remediation="""
        # $subject: $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # <kind> <namespace>/<name> scrapes DCGM exporter pods another monitor already scrapes in the
        # same Prometheus: keep one monitor per exporter
        kubectl -n <namespace> delete servicemonitor.monitoring.coreos.com <name>
        kubectl -n <namespace> delete podmonitor.monitoring.coreos.com <name>   # a PodMonitor
        # or, when the other one is the GPU Operator's, keep this one and turn the operator's off:
        kubectl patch clusterpolicies.nvidia.com/<cluster-policy> --type merge -p '{"spec":{"dcgmExporter":{"serviceMonitor":{"enabled":false}}}}'
    """,
    references=(
        "https://github.com/NVIDIA/gpu-operator/blob/main/assets/state-dcgm-exporter/0500_service_monitor.yaml",
        "https://github.com/prometheus-operator/prometheus-operator/blob/main/Documentation/api.md",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html",
        "https://github.com/NVIDIA/dcgm-exporter/blob/main/deployment/templates/service-monitor.yaml",
    ),
)
def dcgm_exporters_scraped_once(snapshot: Snapshot) -> Iterator[Result]:
    exporters = exporter_daemonsets(snapshot)
    by_ref = {t.owner.ref: t for t in exporters}
    extra: dict[ObjRef, tuple[Resource, list[str], list[str]]] = {}
    duplicated: set[ObjRef] = set()
    once: dict[ObjRef, str] = {}
    for server, monitors in _groups(snapshot, exporters):
        for exporter in sorted(by_ref, key=lambda r: r.sort_key):
            scrapers = sorted((m for m in monitors if exporter in m.selects), key=_keep_first)
            if len(scrapers) == 1:
                once.setdefault(exporter, server)
            for duplicate in scrapers[1:]:
                duplicated.add(exporter)
                entry = extra.setdefault(duplicate.resource.ref, (duplicate.resource, [], []))
                entry[1].append(
                    f"{exporter.namespace}/{exporter.name} in {server}, also scraped by "
                    f"{scrapers[0].label}"
                )
                if scrapers[0].virtual:
                    entry[2].append(scrapers[0].policy)
    # Without Prometheus objects nothing shows that one server selects both monitors.
    seen_in_a_server = bool(prometheuses(snapshot))
    for resource, why, policies in extra.values():
        yield _finding(resource, why, policies, seen_in_a_server)
    for exporter, server in sorted(once.items(), key=lambda e: e[0].sort_key):
        if exporter not in duplicated:
            yield passed(by_ref[exporter], f"is scraped once in {server}")


def _keep_first(monitor: Monitor) -> tuple[bool, bool, bool, str]:
    return monitor.keep_first


def _finding(monitor: Resource, why: list[str], policies: list[str], confirmed: bool) -> Result:
    kind = monitor.ref.kind_name.lower()
    consequence = (
        "every DCGM series is stored twice"
        if confirmed
        else "every DCGM series is stored twice if one Prometheus selects both (no Prometheus "
        "object in the input says)"
    )
    return failed(
        monitor,
        f"scrapes DCGM exporter pods another monitor already scrapes ({'; '.join(why)}): "
        f"{consequence}",
        path="spec.selector",
        severity=None if confirmed else Severity.LOW,
        fix={
            "subject": f"{monitor.ref.kind_name} {monitor.ref.namespace}/{monitor.ref.name}",
            "summary": "keep one monitor per exporter"
            + (
                f" (or keep this one and set dcgmExporter.serviceMonitor.enabled=false in "
                f"ClusterPolicy {policies[0]})"
                if policies
                else ""
            ),
            "command": f"kubectl -n {monitor.ref.namespace} delete {kind}.monitoring.coreos.com "
            f"{monitor.ref.name}",
        },
    )
