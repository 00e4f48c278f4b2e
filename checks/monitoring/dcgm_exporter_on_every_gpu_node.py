from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_audit.api import (
    Category,
    FixKind,
    ObjRef,
    RelatedRef,
    RelatedRole,
    Resource,
    Result,
    Severity,
    Snapshot,
    StackDaemonSet,
    Taint,
    active_cluster_policy,
    agent_pods_by_node,
    as_list,
    as_mapping,
    check,
    clusterpolicy_placement_fix,
    component_enabled,
    daemonset_not_ready_fix,
    daemonset_placement_fix,
    daemonset_untolerated_taints,
    failed,
    gpu_nodes,
    is_operator_operand,
    node_is_schedulable,
    operator_deployed,
    passed,
    pod_is_ready,
    relate,
    stack_agent_runs_on,
)

from ._common import POD_MONITOR, SERVICE_MONITOR, exporter_daemonsets

_DEPLOY_LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"
_ROLE = "dcgm-exporter"
_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# NVIDIA's raw manifest (deployment/examples/dcgm-exporter.yaml): DaemonSet dcgm-exporter,
# applied to the current namespace; the object to create when no exporter exists at all.
_MANIFEST = "https://raw.githubusercontent.com/NVIDIA/dcgm-exporter/main/deployment/examples/dcgm-exporter.yaml"
_MANIFEST_NAMESPACE = "default"
_MANIFEST_DAEMONSET = "dcgm-exporter"
_HPA = "HorizontalPodAutoscaler"
_SCALED_OBJECT = "ScaledObject.keda.sh"
_PROMETHEUS_RULE = "PrometheusRule.monitoring.coreos.com"


@check(
    id="GPU-MON-001",
    title="A DCGM exporter runs and is Ready on every GPU node",
    category=Category.MONITORING,
    severity=Severity.MEDIUM,
    requires=("Node", "DaemonSet"),
    rationale="""
        DCGM exporter is the only source of per-GPU utilisation, memory, XID, ECC and thermal
        telemetry; device-plugin allocatable only says a GPU exists. A GPU node that no exporter
        DaemonSet can schedule on (an untolerated GPU taint, a nodeSelector on a label this
        node pool lacks) or whose exporter pod is not Ready is invisible to dashboards, alerts,
        GPU-based autoscaling and idle-GPU reports.
    """,
    detection="""
        Exporter DaemonSets are recognised by image (repository ending in dcgm-exporter), not
        by name. For every schedulable GPU node not opted out with
        nvidia.com/gpu.deploy.dcgm-exporter=false (nor paused by the MIG manager): some
        exporter DaemonSet's nodeSelector, required node affinity and tolerations (with the
        DaemonSet controller's own) must admit the node; with live Pods of it, its pod there
        must be Ready. The finding is on the object to change, once for all the nodes it
        leaves unmonitored (related as symptoms): the exporter DaemonSet that cannot be placed
        on them (the ClusterPolicy, spec.daemonsets, when the GPU Operator renders it) or
        whose pods there are not Ready; the ClusterPolicy when it disables dcgmExporter; and,
        when no exporter exists at all, the DaemonSet of NVIDIA's manifest to install. Not
        flagged: cordoned or opted-out nodes, and clusters without any exporter DaemonSet
        whose ClusterPolicy enables dcgmExporter (the operator creates it at run time). Node
        age grace periods need a clock and are not applied.
    """,
    severity_evidence="""
        Medium when an exporter DaemonSet exists but cannot run (or is not Ready) on GPU nodes,
        or when nothing exports DCGM metrics while the input shows they are expected: a
        ServiceMonitor, PodMonitor or PrometheusRule for DCGM, or an HPA or KEDA ScaledObject
        on DCGM_ metrics. Low when the cluster has no DCGM exporter and nothing in the input
        expects GPU metrics (a monitoring gap, not a breakage).
    """,
    remediation="""
        # $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # the exporter DaemonSet does not tolerate the GPU nodes' taint (NVIDIA's tainted-nodes patch)
        kubectl -n <namespace> patch daemonset <daemonset> --type=json -p '[{"op": "add", "path": "/spec/template/spec/tolerations/-", "value": {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}]'
        # a GPU Operator operand: its tolerations come from the ClusterPolicy
        kubectl patch clusterpolicy <clusterpolicy> --type=merge -p '{"spec": {"daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}'
        # the exporter pod on a node is not Ready: read its events and logs
        kubectl -n <namespace> describe pod <pod>
        # the ClusterPolicy disables the exporter
        kubectl patch clusterpolicy <clusterpolicy> --type=merge -p '{"spec": {"dcgmExporter": {"enabled": true}}}'
        # no DCGM exporter at all: NVIDIA's manifest, and its patch for tainted GPU nodes
        kubectl apply -n default -f https://raw.githubusercontent.com/NVIDIA/dcgm-exporter/main/deployment/examples/dcgm-exporter.yaml
    """,
    references=(
        "https://github.com/NVIDIA/dcgm-exporter/blob/main/deployment/examples/README.md",
        "https://github.com/NVIDIA/gpu-operator/blob/main/assets/state-dcgm-exporter/0800_daemonset.yaml",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html",
        "https://github.com/NVIDIA/dcgm-exporter/issues/731",
    ),
)
def dcgm_exporter_on_every_gpu_node(snapshot: Snapshot) -> Iterator[Result]:
    owners = {t.owner.ref: t.owner for t in exporter_daemonsets(snapshot)}
    exporters = [StackDaemonSet(ds, _ROLE, is_operator_operand(ds)) for ds in owners.values()]
    policy = active_cluster_policy(snapshot)
    if not exporters and (
        component_enabled(policy, "dcgmExporter")
        if policy is not None
        else operator_deployed(snapshot)
    ):
        return  # the operator creates its exporter at run time
    nodes = [
        n
        for n in gpu_nodes(snapshot)
        if node_is_schedulable(n) and not _opted_out(n.labels.get(_DEPLOY_LABEL, ""))
    ]
    causes: dict[ObjRef, _Cause] = {}
    for node in nodes:
        placed = [e for e in exporters if stack_agent_runs_on(e, node)]
        if placed:
            found = _not_ready(snapshot, node, placed, policy)
        elif exporters:
            found = _not_placed(snapshot, node, exporters, policy)
        else:
            found = _missing(snapshot, node, policy)
        if found is None:
            covering = _covering(snapshot, node, placed)
            yield passed(node, f"covered by {covering.daemonset.ref}")
            continue
        cause = causes.setdefault(found.target.ref, found)
        cause.nodes.append((node, found.why))
        cause.seen_taints.extend(found.taints)
    for cause in sorted(causes.values(), key=lambda c: c.target.ref.sort_key):
        yield cause.result()


def _opted_out(value: str) -> bool:
    """Opted out of the operator's exporter, or paused by the MIG manager while it
    reconfigures the GPUs (GPU-NODE-004 reports a pause that does not end)."""
    return value == "false" or value.startswith("paused-for-")


@dataclass
class _Cause:
    """One object that leaves GPU nodes without a working exporter, and those nodes, each
    with what it does there (`why` is that for the node it was found for)."""

    target: Resource
    what: str
    fix: Callable[[Sequence[Taint]], dict[str, str]]  # from the taints of every node
    why: str
    taints: tuple[Taint, ...] = ()  # what keeps it off the node it was found for
    seen_taints: list[Taint] = field(default_factory=list)
    severity: Severity = Severity.MEDIUM
    related: list[RelatedRef] = field(default_factory=list)
    nodes: list[tuple[Resource, str]] = field(default_factory=list)
    path: str = "spec.template.spec"

    def result(self) -> Result:
        sep = "; " if any(why for _, why in self.nodes) else ", "
        shown = sep.join(
            f"{n.ref.name} ({why})" if why else n.ref.name for n, why in self.nodes[:3]
        )
        more = f" and {len(self.nodes) - 3} more" if len(self.nodes) > 3 else ""
        count = len(self.nodes)
        return failed(
            self.target,
            f"{self.what}, so {count} GPU node{'s' if count != 1 else ''} "
            f"{'has' if count == 1 else 'have'} no GPU telemetry: {shown}{more}",
            path=self.path,
            severity=self.severity,
            fix=self.fix(list(dict.fromkeys(self.seen_taints))),
            related=[*(relate(n, RelatedRole.SYMPTOM) for n, _ in self.nodes), *self.related],
        )


def _not_placed(
    snapshot: Snapshot, node: Resource, exporters: list[StackDaemonSet], policy: Resource | None
) -> _Cause:
    # The exporter meant for GPU nodes: one that runs on some GPU node, else the first.
    gpu = gpu_nodes(snapshot)
    agent = next(
        (e for e in exporters if any(stack_agent_runs_on(e, n) for n in gpu)), exporters[0]
    )
    ds = agent.daemonset
    taints = daemonset_untolerated_taints(agent.spec, node)
    why = (
        f"does not tolerate {', '.join(str(t) for t in taints)}"
        if taints
        else "nodeSelector/affinity does not match the node labels"
    )
    if agent.operand and policy is not None:
        return _Cause(
            policy,
            f"renders exporter DaemonSet {ds.ref.namespace}/{ds.ref.name}, which cannot be "
            "placed on its GPU nodes",
            lambda ts: _policy_fix(policy, ts, why),
            why,
            taints=taints,
            related=[relate(ds, RelatedRole.CAUSE)],
            path="spec.daemonsets.tolerations",
        )
    owner = [relate(policy, RelatedRole.OWNER)] if agent.operand and policy is not None else []
    return _Cause(
        ds,
        "cannot be placed on the GPU nodes",
        lambda ts: _daemonset_fix(ds, agent.spec, ts, why),
        why,
        taints=taints,
        related=owner,
    )


def _covering(snapshot: Snapshot, node: Resource, placed: list[StackDaemonSet]) -> StackDaemonSet:
    """The placed exporter that covers the node: one with a Ready pod there, else one whose
    pods are not in the input, else the first."""
    index = agent_pods_by_node(snapshot)
    for agent in placed:
        if any(pod_is_ready(p) for p in index.get(agent.daemonset.ref, {}).get(node.ref.name, [])):
            return agent
    return next((a for a in placed if a.daemonset.ref not in index), placed[0])


def _not_ready(
    snapshot: Snapshot, node: Resource, placed: list[StackDaemonSet], policy: Resource | None
) -> _Cause | None:
    """The placed exporter whose pod on the node is missing or not Ready, when every placed
    exporter has live pods in the input and none is Ready there; None when one is Ready or
    cannot be judged (no pods of it in the input)."""
    index = agent_pods_by_node(snapshot)
    broken: list[tuple[StackDaemonSet, list[Resource]]] = []
    for agent in placed:
        by_node = index.get(agent.daemonset.ref)
        if by_node is None:
            return None  # no live pod of it in the input: cannot tell, assume it covers
        pods = sorted(by_node.get(node.ref.name, []), key=lambda p: p.ref.sort_key)
        if any(pod_is_ready(p) for p in pods):
            return None
        broken.append((agent, pods))
    agent, pods = broken[0]
    ds = agent.daemonset
    why = f"pod {pods[0].ref.name} not Ready{_waiting(pods[0])}" if pods else "no pod of it there"
    return _Cause(
        ds,
        "has no Ready pod on GPU nodes it is placed on",
        _fixed(daemonset_not_ready_fix(ds, pods)),
        why,
        related=[relate(policy, RelatedRole.OWNER)] if agent.operand and policy else [],
        path="status",
    )


def _missing(snapshot: Snapshot, node: Resource, policy: Resource | None) -> _Cause:
    expected = _metrics_expected(snapshot)
    severity = Severity.MEDIUM if expected else Severity.LOW
    because = (
        f"; {expected[0].ref} expects DCGM metrics"
        + (f" (and {len(expected) - 1} more)" if len(expected) > 1 else "")
        if expected
        else "; nothing in the input consumes DCGM metrics"
    )
    if policy is not None:  # it disables dcgmExporter (else nothing is reported)
        return _Cause(
            policy,
            f"disables dcgmExporter and no other DCGM exporter DaemonSet exists{because}",
            _fixed(
                {
                    "summary": f"ClusterPolicy {policy.ref.name}: enable the DCGM exporter",
                    "command": f"kubectl patch clusterpolicy {policy.ref.name} --type=merge "
                    '-p \'{"spec": {"dcgmExporter": {"enabled": true}}}\'',
                }
            ),
            "",
            severity=severity,
            related=[relate(r, RelatedRole.SYMPTOM) for r in expected],
            path="spec.dcgmExporter.enabled",
        )
    raw = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": _MANIFEST_DAEMONSET, "namespace": _MANIFEST_NAMESPACE},
    }
    target = Resource(
        ObjRef("DaemonSet", _MANIFEST_NAMESPACE, _MANIFEST_DAEMONSET), "apps/v1", raw, node.source
    )
    tainted = any(
        daemonset_untolerated_taints({}, n) for n in gpu_nodes(snapshot) if node_is_schedulable(n)
    )
    patch = (
        f"\nkubectl -n {_MANIFEST_NAMESPACE} patch daemonset {_MANIFEST_DAEMONSET} --type=json "
        f"-p '{_quoted([{'op': 'add', 'path': '/spec/template/spec/tolerations', 'value': [_GPU_TOLERATION]}])}'"
        if tainted
        else ""
    )
    return _Cause(
        target,
        f"does not exist: no DCGM exporter DaemonSet is in the input{because}",
        _fixed(
            {
                "summary": "install NVIDIA's dcgm-exporter (and let it tolerate the GPU nodes' taint)"
                if tainted
                else "install NVIDIA's dcgm-exporter",
                "command": f"kubectl apply -n {_MANIFEST_NAMESPACE} -f {_MANIFEST}{patch}",
            }
        ),
        "",
        severity=severity,
        related=[relate(r, RelatedRole.SYMPTOM) for r in expected],
        path="",
    )


def _metrics_expected(snapshot: Snapshot) -> list[Resource]:
    """Objects that show GPU metrics are expected: monitors or rules for DCGM, autoscalers on
    DCGM_ metrics. Named after what they read, not guessed from a Prometheus alone."""
    found = [
        m
        for m in snapshot.of(SERVICE_MONITOR, POD_MONITOR)
        if "dcgm" in m.ref.name.lower() or any("dcgm" in v.lower() for v in _selector_values(m))
    ]
    found += [r for r in snapshot.of(_PROMETHEUS_RULE) if "DCGM_" in json.dumps(r.spec)]
    found += [h for h in snapshot.of(_HPA, _SCALED_OBJECT) if "DCGM_" in json.dumps(h.spec)]
    return sorted(found, key=lambda r: r.ref.sort_key)


def _selector_values(monitor: Resource) -> list[str]:
    selector = as_mapping(monitor.spec.get("selector"))
    values = [str(v) for v in as_mapping(selector.get("matchLabels")).values()]
    for expr in map(as_mapping, as_list(selector.get("matchExpressions"))):
        values += [str(v) for v in as_list(expr.get("values"))]
    return values


def _daemonset_fix(
    ds: Resource, spec: Mapping[str, Any], taints: Sequence[Taint], why: str
) -> dict[str, str]:
    return daemonset_placement_fix(
        ds, spec, taints, why, "widen its nodeSelector/affinity to the GPU nodes"
    )


def _policy_fix(policy: Resource, taints: Sequence[Taint], why: str) -> dict[str, str]:
    hint = f"check the nodes' {_DEPLOY_LABEL} labels"
    return clusterpolicy_placement_fix(policy, taints, why, "exporter", [_DEPLOY_LABEL], hint)


def _fixed(fix: dict[str, str]) -> Callable[[Sequence[Taint]], dict[str, str]]:
    """A fix that does not depend on the taints."""
    return lambda _: fix


def _quoted(value: object) -> str:
    """JSON for a single-quoted shell argument."""
    return json.dumps(value).replace("'", "'\\''")


def _waiting(pod: Resource) -> str:
    reasons = [
        str(as_mapping(as_mapping(as_mapping(s).get("state")).get("waiting")).get("reason") or "")
        for key in ("initContainerStatuses", "containerStatuses")
        for s in as_list(pod.status.get(key))
    ]
    shown = [r for r in dict.fromkeys(reasons) if r]
    return f": {', '.join(shown)}" if shown else ""
