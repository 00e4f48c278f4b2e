from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_pod_templates,
    passed,
    str_map,
)
from gpu_audit.checks.scheduling._common import (
    autoscaler_present,
    candidate_nodes,
    is_daemonset,
)

_VALUES_SHOWN = 5


@check(
    id="GPU-SCHED-002",
    title="Required node selectors and node affinity of GPU pods match an existing or provisionable node",
    category=Category.SCHEDULING,
    severity=Severity.HIGH,
    requires=("Node", WORKLOAD_TYPES),
    rationale="""
        A required nodeSelector or node affinity that no node satisfies leaves the pod Pending
        with "didn't match Pod's node affinity/selector". The usual cause is a GFD label value
        typed by hand (nvidia.com/gpu.product: A100 instead of NVIDIA-A100-SXM4-80GB) or a label
        copied from another cluster. Karpenter only launches nodes for labels it knows, so a
        selector on an undeclared label matches no future node either.
    """,
    detection="""
        Every GPU pod template with a nodeSelector or required node affinity (terms ORed,
        expressions ANDed, all operators): passes when some Node in the input matches, or a
        Karpenter NodePool could launch a matching node (template labels, requirements, or
        Karpenter's well-known labels). Otherwise fails high, with the values the nodes do carry
        for each selected key; medium when a cluster-autoscaler Deployment is in the input, since
        its scale-from-zero groups are invisible. Preferred affinity never blocks and is ignored.
        DaemonSets are not evaluated: a DaemonSet for optional hardware may match no node.
    """,
    severity_evidence="""
        High when no Node in the input and no Karpenter NodePool could match the selection:
        the pod stays Pending. Medium when a cluster-autoscaler Deployment is in the input,
        since a node group it scales from zero has no Node to show its labels.
    """,
    remediation="""
        kubectl get nodes -L $keys
        # then set $path.nodeSelector / nodeAffinity of $kind $namespace/$name to values the
        # nodes carry: GFD values are exact (NVIDIA-A100-SXM4-80GB, not A100)
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/",
        "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/README.md",
        "https://karpenter.sh/docs/concepts/scheduling/",
    ),
)
def gpu_pod_node_selectors_match_a_node(snapshot: Snapshot) -> Iterator[Result]:
    scaler = autoscaler_present(snapshot)
    for template in gpu_pod_templates(snapshot):
        keys = _selected_keys(template.spec)
        if keys and not is_daemonset(template):
            yield _verdict(snapshot, template, keys, scaler)


def _verdict(snapshot: Snapshot, template: PodTemplate, keys: list[str], scaler: bool) -> Result:
    path = template.path
    candidates = candidate_nodes(snapshot, template.spec, gpu_only=False)
    if candidates:
        first = candidates[0]  # nodes come before NodePools
        message = (
            f"no node matches yet; {first.label} can launch one"
            if first.is_nodepool
            else f"node selection matches {first.label}"
        )
        return passed(template, message, path=path)
    seen = "; ".join(f"{k}: {_values(snapshot, k)}" for k in keys)
    fix = {"keys": ",".join(keys), "path": path}
    if scaler:
        return failed(
            template,
            f"no node in the input matches its node selection ({seen}); confirm that an "
            "autoscaled node group carries these labels",
            path=path,
            severity=Severity.MEDIUM,
            fix=fix,
        )
    return failed(template, f"no node matches its node selection ({seen})", path=path, fix=fix)


def _selected_keys(spec: Mapping[str, Any]) -> list[str]:
    # A map's keys in the order the API server writes them (Go's encoding/json sorts them), so
    # a manifest and the live object (or a snapshot file) give the same message.
    keys = sorted(str_map(spec.get("nodeSelector")))
    required = as_mapping(
        as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    for term in map(as_mapping, as_list(required.get("nodeSelectorTerms"))):
        expressions = map(as_mapping, as_list(term.get("matchExpressions")))
        keys.extend(str(e.get("key", "")) for e in expressions)
    return list(dict.fromkeys(k for k in keys if k))


def _values(snapshot: Snapshot, key: str) -> str:
    # Once per key and snapshot: templates that match no node often name the same keys.
    return snapshot.derived(("GPU-SCHED-002.values", key), lambda s: _label_values(s, key))


def _label_values(snapshot: Snapshot, key: str) -> str:
    values = sorted({n.labels[key] for n in snapshot.of("Node") if key in n.labels})
    if not values:
        return "no node has this label"
    shown = ", ".join(values[:_VALUES_SHOWN])
    return f"nodes have {shown}" + (", ..." if len(values) > _VALUES_SHOWN else "")
