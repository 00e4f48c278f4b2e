"""The fixes several checks render when a GPU-stack agent does not run on the GPU nodes: let
a DaemonSet, or every GPU Operator operand, tolerate their taints (or show what selects it);
find why its pods are not Ready (`agent_pods_by_node`, `pod_is_ready`). `operator_deployed`
tells when the GPU Operator may be about to deploy an agent that is missing."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_audit.k8s.gpu_operator import containers
from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.pods import controller_owner
from gpu_audit.k8s.scheduling import Taint
from gpu_audit.model import ObjRef, Resource
from gpu_audit.snapshot import Snapshot


def exists_toleration(taint: Taint) -> dict[str, str]:
    """The toleration of any value of the taint's key for its effect."""
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


def _quoted(value: object) -> str:
    """JSON for a single-quoted shell argument."""
    return json.dumps(value).replace("'", "'\\''")


def daemonset_toleration_patch(
    daemonset: Resource, pod_spec: Mapping[str, Any], taints: Sequence[Taint]
) -> str:
    """`kubectl patch --type=json` that appends the tolerations, keeping the existing ones
    (a merge patch would replace the whole list)."""
    values = [exists_toleration(t) for t in taints]
    ops: list[dict[str, Any]]
    if as_list(pod_spec.get("tolerations")):
        ops = [
            {"op": "add", "path": "/spec/template/spec/tolerations/-", "value": v} for v in values
        ]
    else:
        ops = [{"op": "add", "path": "/spec/template/spec/tolerations", "value": values}]
    ref = daemonset.ref
    return f"kubectl -n {ref.namespace} patch daemonset {ref.name} --type=json -p '{_quoted(ops)}'"


def policy_toleration_patch(policy: Resource, taints: Sequence[Taint]) -> str:
    """`kubectl patch clusterpolicy` adding the tolerations to spec.daemonsets.tolerations,
    which the operator gives every operand."""
    existing = list(as_list(as_mapping(policy.spec.get("daemonsets")).get("tolerations")))
    tolerations = existing + [exists_toleration(t) for t in taints]
    patch = {"spec": {"daemonsets": {"tolerations": tolerations}}}
    return f"kubectl patch clusterpolicy {policy.ref.name} --type=merge -p '{_quoted(patch)}'"


def daemonset_placement_fix(
    daemonset: Resource,
    pod_spec: Mapping[str, Any],
    taints: Sequence[Taint],
    why: str,
    selector_hint: str,
) -> dict[str, str]:
    """The `summary` and `command` of a fix for a DaemonSet kept off GPU nodes: tolerate the
    blocking taints, or (no taint blocks) show its selection, with `selector_hint` saying what
    to change there."""
    ref = daemonset.ref
    name = f"DaemonSet {ref.namespace}/{ref.name}"
    if not taints:
        return {
            "summary": f"{name}: {why}; {selector_hint}",
            "command": f"kubectl -n {ref.namespace} get daemonset {ref.name} -o "
            "jsonpath='{.spec.template.spec.nodeSelector}{.spec.template.spec.affinity}'",
        }
    return {
        "summary": f"{name}: tolerate the GPU nodes' taints",
        "command": daemonset_toleration_patch(daemonset, pod_spec, taints),
    }


def clusterpolicy_placement_fix(
    policy: Resource,
    taints: Sequence[Taint],
    why: str,
    operand: str,
    labels: Sequence[str],
    labels_hint: str,
) -> dict[str, str]:
    """The `summary` and `command` of a fix for a GPU Operator `operand` ("device plugin")
    kept off GPU nodes: let every operand tolerate the blocking taints (the ClusterPolicy's
    spec.daemonsets.tolerations), or (no taint blocks) show the node `labels` that select the
    operand, with `labels_hint` saying which to check."""
    name = f"ClusterPolicy {policy.ref.name}"
    if not taints:
        return {
            "summary": f"{name}: its {operand} {why}; {labels_hint}",
            "command": f"kubectl get nodes -L {','.join(labels)}",
        }
    return {
        "summary": f"{name}: let its operands tolerate the GPU nodes' taints "
        "(spec.daemonsets.tolerations)",
        "command": policy_toleration_patch(policy, taints),
    }


def daemonset_not_ready_fix(daemonset: Resource, pods: Sequence[Resource]) -> dict[str, str]:
    """Where to look when a DaemonSet placed on a GPU node has no Ready pod there."""
    ref = daemonset.ref
    command = (
        f"kubectl -n {ref.namespace} describe pod {pods[0].ref.name}"
        if pods
        else f"kubectl -n {ref.namespace} describe daemonset {ref.name}"
    )
    return {
        "summary": f"DaemonSet {ref.namespace}/{ref.name}: why its pods are not Ready",
        "command": command,
    }


def agent_pods_by_node(snapshot: Snapshot) -> Mapping[ObjRef, Mapping[str, list[Resource]]]:
    """Controller -> node name -> its Pods there that have a status (live data), built once
    per snapshot, so that each node's agent pods are a lookup, not a pass over every Pod. A
    controller absent from it has no live pod in the input: whether it is Ready cannot be
    told."""

    def build(snap: Snapshot) -> dict[ObjRef, dict[str, list[Resource]]]:
        index: dict[ObjRef, dict[str, list[Resource]]] = {}
        for pod in snap.of("Pod"):
            if pod.status and (owner := controller_owner(snap, pod)) is not None:
                by_node = index.setdefault(owner.ref, {})
                by_node.setdefault(str(pod.spec.get("nodeName") or ""), []).append(pod)
        return index

    return snapshot.derived("stack.agent_pods_by_node", build)


def pod_is_ready(pod: Resource) -> bool:
    """The pod's Ready condition is True."""
    return any(
        as_mapping(c).get("type") == "Ready" and as_mapping(c).get("status") == "True"
        for c in as_list(pod.status.get("conditions"))
    )


def operator_deployed(snapshot: Snapshot) -> bool:
    """A Deployment runs a gpu-operator image: the GPU Operator runs, and may be about to
    create the operands its ClusterPolicy asks for (also when that is not in the input)."""
    return any(
        "gpu-operator" in str(c.get("image", ""))
        for deployment in snapshot.of("Deployment")
        for c in containers(deployment)
    )
