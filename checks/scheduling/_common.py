"""Placement logic shared by the SCHED checks: where a GPU pod template may land, among the
Nodes of the snapshot and the nodes Karpenter NodePools could launch."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

from gpu_audit.api import (
    NODEPOOL,
    PodTemplate,
    Resource,
    Snapshot,
    Taint,
    as_list,
    as_mapping,
    containers,
    dedicating_taints,
    effective_pod_request,
    gpu_hosts,
    has_resource_status,
    is_extended_resource,
    node_affinity_matches,
    nodepool_gpu_scope,
    nodepool_requirements,
    nodepool_taints,
    nodepool_template_labels,
    nodes_alike,
    quantities,
    str_map,
    taints_of,
    tolerates,
)

# Labels Karpenter itself puts on the nodes it launches, so a pod may select on them without
# the NodePool declaring them (karpenter.sh/docs/concepts/scheduling, "Well-Known Labels").
_WELL_KNOWN_PREFIXES = (
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "karpenter.azure.com/",
    "topology.kubernetes.io/",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "kubernetes.io/hostname",
)


@dataclass(frozen=True, slots=True)
class CandidateNode:
    """Where a pod may land: a node, or a NodePool standing for the nodes it would launch."""

    target: Resource
    taints: tuple[Taint, ...]

    @property
    def is_nodepool(self) -> bool:
        return self.target.ref.kind == NODEPOOL

    @property
    def label(self) -> str:
        kind = "NodePool" if self.is_nodepool else "node"
        return f"{kind} {self.target.ref.name}"


def candidate_nodes(
    snapshot: Snapshot, spec: Mapping[str, Any], *, gpu_only: bool = True
) -> list[CandidateNode]:
    """Nodes that pass the pod's nodeSelector/required affinity, then the Karpenter NodePools
    that could launch one (ignoring taints and resources). With `gpu_only`, GPU nodes and
    NodePools that may launch GPU instances only."""
    # Only the selector and node affinity decide, and many templates share them: each
    # distinct pair is matched against the nodes once per snapshot.
    key = ("scheduling.candidate_nodes", gpu_only, placement_key(spec))
    return list(snapshot.derived(key, lambda s: tuple(_candidate_nodes(s, spec, gpu_only))))


def placement_key(spec: Mapping[str, Any], *more: object) -> str:
    """The parts of a pod spec that node matching reads (nodeSelector, node affinity), and
    `more`, as one comparable string."""
    affinity = as_mapping(spec.get("affinity")).get("nodeAffinity")
    return json.dumps([spec.get("nodeSelector"), affinity, *more], sort_keys=True, default=str)


def _candidate_nodes(
    snapshot: Snapshot, spec: Mapping[str, Any], gpu_only: bool
) -> list[CandidateNode]:
    nodes = gpu_hosts(snapshot) if gpu_only else snapshot.of("Node")
    matching = {id(n) for n in nodes_alike(snapshot, spec, partial(node_affinity_matches, spec))}
    out = [CandidateNode(n, taints_of(snapshot, n)) for n in nodes if id(n) in matching]
    out.extend(
        CandidateNode(p, nodepool_taints(p))
        for p in snapshot.of(NODEPOOL)
        if not (gpu_only and nodepool_gpu_scope(p) == "none") and nodepool_may_satisfy(spec, p)
    )
    return out


def extended_resources(template: PodTemplate) -> set[str]:
    names: set[str] = set()
    for container in template.containers():
        names.update(str(k) for k in (*container.requests, *container.limits))
    return {n for n in names if is_extended_resource(n)}


def blocking_taints(template: PodTemplate, taints: tuple[Taint, ...]) -> list[Taint]:
    """Hard, permanent taints the template does not tolerate.

    A NoSchedule taint keyed by an extended resource the pod requests counts as tolerated: the
    ExtendedResourceToleration admission plugin (GKE, EKS >= 1.19, AKS) adds that toleration.
    It adds it for NoSchedule only, so the same key with NoExecute still blocks.
    """
    tolerations = as_list(template.spec.get("tolerations"))
    auto = extended_resources(template)
    return [
        t
        for t in dedicating_taints(taints)
        if not tolerates(tolerations, t) and not (t.effect == "NoSchedule" and t.key in auto)
    ]


def auto_tolerated(template: PodTemplate, taints: tuple[Taint, ...]) -> list[Taint]:
    auto = extended_resources(template)
    tolerations = as_list(template.spec.get("tolerations"))
    return [
        t
        for t in dedicating_taints(taints, ("NoSchedule",))
        if t.key in auto and not tolerates(tolerations, t)
    ]


# --------------------------------------------------------------------------- NodePool matching


def nodepool_may_satisfy(spec: Mapping[str, Any], pool: Resource) -> bool:
    """Whether some node of the pool could pass the pod's nodeSelector and required node
    affinity. Permissive where undecidable: a false "no" would be a false finding."""
    labels = nodepool_template_labels(pool)
    requirements = {str(r.get("key", "")): r for r in nodepool_requirements(pool)}
    for key, value in str_map(spec.get("nodeSelector")).items():
        if not _admits(key, "In", [value], labels, requirements):
            return False
    required = as_mapping(
        as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms = [as_mapping(t) for t in as_list(required.get("nodeSelectorTerms"))]
    if not terms:
        return True
    return any(_term_admitted(t, labels, requirements) for t in terms)


def _term_admitted(
    term: Mapping[str, Any], labels: Mapping[str, str], reqs: Mapping[str, Mapping[str, Any]]
) -> bool:
    expressions = [as_mapping(e) for e in as_list(term.get("matchExpressions"))]
    if not expressions and not as_list(term.get("matchFields")):
        return False
    return all(
        _admits(
            str(e.get("key", "")),
            str(e.get("operator", "")),
            [str(v) for v in as_list(e.get("values"))],
            labels,
            reqs,
        )
        for e in expressions
    )


def _admits(
    key: str,
    operator: str,
    values: list[str],
    labels: Mapping[str, str],
    reqs: Mapping[str, Mapping[str, Any]],
) -> bool:
    if key in labels:
        return _static_admits(operator, values, labels[key])
    req = reqs.get(key)
    known = req is not None or key.startswith(_WELL_KNOWN_PREFIXES)
    if operator == "DoesNotExist":
        return req is None or str(req.get("operator")) == "DoesNotExist"
    if operator == "NotIn":
        return True
    if not known:
        return False  # Karpenter never launches a node with a label it does not know
    if req is None or operator != "In":
        return True
    req_op = str(req.get("operator", ""))
    req_values = {str(v) for v in as_list(req.get("values"))}
    if req_op == "In":
        return bool(req_values & set(values))
    if req_op == "NotIn":
        return bool(set(values) - req_values)
    return req_op != "DoesNotExist"


def _static_admits(operator: str, values: list[str], have: str) -> bool:
    if operator == "In":
        return have in values
    if operator == "NotIn":
        return have not in values
    if operator == "DoesNotExist":
        return False
    if operator in ("Gt", "Lt") and values:
        try:
            return int(have) > int(values[0]) if operator == "Gt" else int(have) < int(values[0])
        except ValueError:
            return False
    return True


def autoscaler_present(snapshot: Snapshot) -> bool:
    """A cluster-autoscaler Deployment in the input: node groups it can scale from zero are
    invisible in the API, so "no node matches" is not proof that none ever will."""
    return any(
        "cluster-autoscaler" in str(container.get("image", ""))
        for deployment in snapshot.of("Deployment")
        for container in containers(deployment)
    )


def is_daemonset(template: PodTemplate) -> bool:
    return template.owner.ref.kind == "DaemonSet"


# --------------------------------------------------------------------------- node shapes

# Absent from a node's allocatable in some dumps; unknown is not zero for these.
STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


def allocatable(node: Resource) -> dict[str, Decimal]:
    return quantities(node.status.get("allocatable"))


def node_allocatable(snapshot: Snapshot, node: Resource) -> Mapping[str, Decimal]:
    """`allocatable(node)`, parsed once per snapshot and node (read-only)."""
    return snapshot.fact("scheduling.allocatable", node, allocatable)


def resources_short(request: Mapping[str, Decimal], have: Mapping[str, Decimal]) -> list[str]:
    """Requested resources a node of allocatable `have` cannot hold even when empty."""
    return [
        name
        for name, want in request.items()
        if not (name in STANDARD_RESOURCES and name not in have)
        and have.get(name, Decimal(0)) < want
    ]


def _eligibility_key(template: PodTemplate) -> str:
    tolerations = template.spec.get("tolerations")
    return placement_key(template.spec, tolerations, sorted(extended_resources(template)))


def eligible_nodes(snapshot: Snapshot, template: PodTemplate) -> tuple[Resource, ...]:
    """Nodes with resource status the template may land on (selectors, affinity, hard
    taints); templates alike in what that reads share one pass over the nodes."""

    def eligible(node: Resource) -> bool:
        return (
            has_resource_status(node)
            and node_affinity_matches(template.spec, node)
            and not blocking_taints(template, taints_of(snapshot, node))
        )

    return snapshot.derived(
        ("scheduling.eligible_nodes", _eligibility_key(template)),
        lambda s: nodes_alike(s, template.spec, eligible),
    )


def first_fitting_node(
    snapshot: Snapshot, template: PodTemplate, request: Mapping[str, Decimal]
) -> Resource | None:
    """The first eligible node (by name) that could hold `request` if nothing else ran there;
    templates alike in placement and request share one pass over the nodes."""
    key = ("scheduling.first_fit", _eligibility_key(template), tuple(sorted(request.items())))
    return snapshot.derived(
        key,
        lambda s: next(
            (
                n
                for n in eligible_nodes(s, template)
                if not resources_short(request, node_allocatable(s, n))
            ),
            None,
        ),
    )


def fits_some_node(snapshot: Snapshot, template: PodTemplate) -> bool | None:
    """Whether some eligible node could hold the pod if nothing else ran there; None when
    the input has no node with resource status to tell."""
    statuses = snapshot.derived(
        "scheduling.any_resource_status",
        lambda s: any(has_resource_status(n) for n in s.of("Node")),
    )
    if not statuses:
        return None
    return first_fitting_node(snapshot, template, effective_pod_request(template)) is not None
