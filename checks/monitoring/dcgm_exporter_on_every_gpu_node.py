from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from gpu_audit.api import (
    Category,
    FixKind,
    ObjRef,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    controller_owner,
    failed,
    gpu_nodes,
    node_affinity_matches,
    node_is_schedulable,
    passed,
    schedules_on,
    untolerated_taints,
)

from ._common import exporter_daemonsets

CLUSTER_POLICY = "ClusterPolicy.nvidia.com"
_DEPLOY_LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"


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
        nvidia.com/gpu.deploy.dcgm-exporter=false: some exporter DaemonSet's nodeSelector,
        required node affinity and tolerations must admit the node; with live Pods, one of
        its exporter pods on that node must be Ready. Not flagged: cordoned nodes, opted-out
        nodes, and clusters without any exporter DaemonSet whose ClusterPolicy enables
        dcgmExporter (the operator creates it at run time). Node age grace periods need a
        clock and are not applied.
    """,
    remediation="""
        # Node $name: $problem
        # let the exporter DaemonSet $ds_namespace/$ds_name run on this node:
        apiVersion: apps/v1
        kind: DaemonSet
        metadata:
          name: $ds_name
          namespace: $ds_namespace
        spec:
          template:
            spec:
              tolerations: $tolerations
        # GPU Operator nodes also need: kubectl label node $name nvidia.com/gpu.deploy.dcgm-exporter=true --overwrite
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://github.com/NVIDIA/dcgm-exporter/blob/main/deployment/examples/README.md",
        "https://github.com/NVIDIA/gpu-operator/blob/main/assets/state-dcgm-exporter/0800_daemonset.yaml",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html",
    ),
)
def dcgm_exporter_on_every_gpu_node(snapshot: Snapshot) -> Iterator[Result]:
    exporters = exporter_daemonsets(snapshot)
    if not exporters and _operator_will_deploy(snapshot):
        return
    for node in gpu_nodes(snapshot):
        if not node_is_schedulable(node) or node.labels.get(_DEPLOY_LABEL) == "false":
            continue
        placed = [t for t in exporters if schedules_on(t.spec, node)]
        if not placed:
            problem = _why_not(node, exporters)
            yield failed(node, problem, path="spec.taints", fix=_fix(node, exporters, problem))
            continue
        pods = _exporter_pods(snapshot, node, placed)
        if pods is not None and not any(_ready(p) for p in pods):
            problem = (
                "no Ready DCGM exporter pod on the node"
                if not pods
                else f"DCGM exporter pod {pods[0].ref.name} is not Ready"
            )
            yield failed(node, problem, path="status", fix=_fix(node, placed, problem))
            continue
        yield passed(
            node, f"covered by DaemonSet {placed[0].owner.ref.namespace}/{placed[0].owner.ref.name}"
        )


def _operator_will_deploy(snapshot: Snapshot) -> bool:
    for policy in snapshot.of(CLUSTER_POLICY):
        if as_mapping(policy.spec.get("dcgmExporter")).get("enabled") is not False:
            return True
    return False


def _why_not(node: Resource, exporters: Sequence[PodTemplate]) -> str:
    if not exporters:
        return "GPU node, but no DCGM exporter DaemonSet exists"
    reasons = []
    for template in exporters:
        name = f"{template.owner.ref.namespace}/{template.owner.ref.name}"
        if not node_affinity_matches(template.spec, node):
            reasons.append(f"{name}: nodeSelector/affinity does not match the node labels")
        else:
            taints = ", ".join(str(t) for t in untolerated_taints(template.spec, node))
            reasons.append(f"{name}: does not tolerate {taints}")
    return "no DCGM exporter DaemonSet can schedule here (" + "; ".join(reasons) + ")"


def _exporter_pods(
    snapshot: Snapshot, node: Resource, placed: Sequence[PodTemplate]
) -> list[Resource] | None:
    """The exporter pods on the node, or None when the input has no live pod data."""
    index = snapshot.derived("monitoring.pods_with_status_by_owner", _pods_with_status_by_owner)
    by_node = [index[ref] for ref in dict.fromkeys(t.owner.ref for t in placed) if ref in index]
    if not by_node:
        return None
    pods = (p for pods_by_node in by_node for p in pods_by_node.get(node.ref.name, ()))
    return sorted(pods, key=lambda p: p.ref.sort_key)


def _pods_with_status_by_owner(snapshot: Snapshot) -> dict[ObjRef, dict[str, list[Resource]]]:
    """Controller -> node name -> its Pods there that have a status (live data), so that each
    node's exporter pods are a lookup, not a pass over every Pod."""
    index: dict[ObjRef, dict[str, list[Resource]]] = {}
    for pod in snapshot.of("Pod"):
        if pod.status and (owner := controller_owner(snapshot, pod)) is not None:
            by_node = index.setdefault(owner.ref, {})
            by_node.setdefault(str(pod.spec.get("nodeName") or ""), []).append(pod)
    return index


def _ready(pod: Resource) -> bool:
    return any(
        as_mapping(c).get("type") == "Ready" and as_mapping(c).get("status") == "True"
        for c in as_list(pod.status.get("conditions"))
    )


def _fix(node: Resource, exporters: Sequence[PodTemplate], problem: str) -> dict[str, str]:
    owner = exporters[0].owner.ref if exporters else None
    tolerations = [
        {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in untolerated_taints(exporters[0].spec if exporters else {}, node)
    ] or [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "problem": problem.replace("\n", " "),
        "ds_name": owner.name if owner else "nvidia-dcgm-exporter",
        "ds_namespace": owner.namespace if owner else "gpu-operator",
        "tolerations": json.dumps(tolerations),
    }
