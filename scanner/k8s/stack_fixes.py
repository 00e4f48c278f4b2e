"""The fixes several checks render when a GPU-stack agent does not run on the GPU nodes: let
a DaemonSet, or every GPU Operator operand, tolerate their taints; find why its pods are not
Ready."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.scheduling import Taint
from gpu_audit.model import Resource


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
