from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
    AdmissionRule,
    Category,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    node_affinity_matches,
    passed,
    pod_templates,
    str_map,
)

_PLACEMENT_KEYS = frozenset(
    {
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "beta.kubernetes.io/instance-type",
        "kubernetes.io/hostname",
        "karpenter.sh/capacity-type",
        "eks.amazonaws.com/capacityType",
        "nvidia.com/gpu.product",
        "cloud.google.com/gke-accelerator",
    }
)
_PLACEMENT_SUFFIXES = ("/zone", "availability-zone")


@check(
    id="GPU-SCHED-003",
    title="Zone, region and instance placement is expressed with node selectors, not annotations",
    category=Category.SCHEDULING,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        kube-scheduler ignores annotations. A training job "pinned" to us-east-1a or to an
        A100 by annotation spreads across zones and GPU types: cross-AZ NCCL traffic, data
        transfer charges, or pods far from their zonal EBS/FSx volume. Only nodeSelector, node
        affinity and topology spread constraints on node labels control placement.
    """,
    detection="""
        Every pod template and the workload object itself: annotations whose key is a
        well-known placement node label (zone, region, instance type, hostname, capacity
        type, nvidia.com/gpu.product, gke-accelerator) or ends in /zone or availability-zone,
        and that the pod's nodeSelector, node affinity (required or preferred) and topology
        spread keys do not use. Labels are not flagged (a common selection convention),
        nor annotations duplicated in the selectors, nor system or behavioural annotations
        (volume.kubernetes.io/selected-node, cluster-autoscaler.kubernetes.io/*,
        karpenter.sh/do-not-disrupt). Templates without placement annotations are not evaluated.
    """,
    severity_evidence="""
        Medium when a GPU pod template's annotation is contradicted by the nodes in the input:
        a node its selectors allow carries another value of that label (or none), so the pod
        can land outside the zone or GPU type it names. Low otherwise: no nodes in the input,
        every allowed node already has that value, or a pod without GPUs.
    """,
    remediation="""
        # $kind $namespace/$name: annotation $key does not influence scheduling; under $path:
        nodeSelector:
          $key: "$value"
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/",
        "https://kubernetes.io/docs/reference/labels-annotations-taints/",
    ),
    remediation_root="pod_spec",
    admission=AdmissionRule(
        scope="pod",
        valid=f"""
            [object.metadata.?annotations.orValue({{}}), t.?metadata.?annotations.orValue({{}})]
            .all(a, a.all(k,
              !(k in {sorted(_PLACEMENT_KEYS)}
                || {list(_PLACEMENT_SUFFIXES)}.exists(s, k.endsWith(s)))
              || k in t.spec.?nodeSelector.orValue({{}})
              || t.spec.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution
                   .?nodeSelectorTerms.orValue([]).exists(term,
                     term.?matchExpressions.orValue([]).exists(e, e.key == k))
              || t.spec.?affinity.?nodeAffinity.?preferredDuringSchedulingIgnoredDuringExecution
                   .orValue([]).exists(p,
                     p.?preference.?matchExpressions.orValue([]).exists(e, e.key == k))
              || t.spec.?topologySpreadConstraints.orValue([]).exists(c, c.topologyKey == k)))
        """,
        message="a zone, region, instance-type or GPU-product annotation is not mirrored in the "
        "pod's node selectors: the scheduler ignores annotations",
        note="medium when a node in the input contradicts the annotation, else low",
    ),
)
def placement_uses_node_labels_not_annotations(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        annotations = {**template.owner.annotations, **template.annotations}
        placement = {k: v for k, v in annotations.items() if _is_placement(k)}
        if not placement:
            continue
        used = _keys_used(template.spec)
        ignored = sorted(k for k in placement if k not in used)
        if not ignored:
            yield passed(template, "placement annotations are mirrored in its selectors")
            continue
        key = ignored[0]
        elsewhere = _node_elsewhere(snapshot, template, {k: placement[k] for k in ignored})
        bites = ""
        if elsewhere:
            label, node = elsewhere
            bites = f": node {node.ref.name} it may land on has {label}=" + (
                node.labels.get(label) or "(none)"
            )
        yield failed(
            template,
            f"annotation {key}={placement[key]} does not influence scheduling"
            + (f" (also: {', '.join(ignored[1:])})" if len(ignored) > 1 else "")
            + bites,
            severity=None if elsewhere else Severity.LOW,
            fix={"key": key, "value": placement[key], "path": template.path},
        )


def _node_elsewhere(
    snapshot: Snapshot, template: PodTemplate, wanted: dict[str, str]
) -> tuple[str, Resource] | None:
    """(label key, node) for a node the GPU pod may land on whose label differs from what an
    ignored annotation asks for; None for pods without GPUs or when every node agrees."""
    if not template.requests_gpu:
        return None
    for node in snapshot.of("Node"):
        if not node_affinity_matches(template.spec, node):
            continue
        for key, value in sorted(wanted.items()):
            if node.labels.get(key) != value:
                return key, node
    return None


def _is_placement(key: str) -> bool:
    return key in _PLACEMENT_KEYS or key.endswith(_PLACEMENT_SUFFIXES)


def _keys_used(spec: Mapping[str, Any]) -> set[str]:
    keys = set(str_map(spec.get("nodeSelector")))
    affinity = as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = as_mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = [as_mapping(t) for t in as_list(required.get("nodeSelectorTerms"))]
    preferred = as_list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
    terms.extend(as_mapping(as_mapping(p).get("preference")) for p in preferred)
    for term in terms:
        expressions = map(as_mapping, as_list(term.get("matchExpressions")))
        keys.update(str(e.get("key", "")) for e in expressions)
    for constraint in map(as_mapping, as_list(spec.get("topologySpreadConstraints"))):
        keys.add(str(constraint.get("topologyKey", "")))
    return keys
