from collections.abc import Iterator

from gpu_audit.api import (
    NODEPOOL,
    WORKLOAD_TYPES,
    Category,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    Taint,
    check,
    failed,
    gpu_hosts,
    gpu_pod_templates,
    nodepool_gpu_scope,
    passed,
)
from gpu_audit.checks.scheduling._common import (
    CandidateNode,
    auto_tolerated,
    blocking_taints,
    candidate_nodes,
    extended_resources,
    placement_key,
)

_SHOWN = 3


@check(
    id="GPU-SCHED-001",
    title="GPU pods tolerate every NoSchedule/NoExecute taint of at least one GPU node they may land on",
    category=Category.SCHEDULING,
    severity=Severity.HIGH,
    requires=("Node", WORKLOAD_TYPES),
    rationale="""
        GPU node pools are usually tainted so that CPU pods stay off. A GPU pod that does not
        tolerate the taints of any GPU node its selectors allow stays Pending forever ("had
        untolerated taint"), or is evicted again on a NoExecute taint, and nothing in the
        manifest says why. The automatic toleration of ExtendedResourceToleration only covers a
        NoSchedule taint keyed by the requested resource name.
    """,
    detection="""
        For every pod template requesting GPUs: the GPU nodes that pass its nodeSelector and
        required node affinity, plus the Karpenter NodePools that may launch GPU instances
        satisfying them (permanent taints only; startupTaints are removed after boot). Fails
        when every such candidate has a NoSchedule/NoExecute taint the pod does not tolerate.
        Not counted as blocking: PreferNoSchedule, lifecycle taints (node.kubernetes.io/*,
        node.cloudprovider.kubernetes.io/*, karpenter.sh/disrupted, cluster-autoscaler's), and a
        NoSchedule taint whose key is an extended resource the pod requests, which the
        ExtendedResourceToleration admission plugin tolerates on GKE, EKS >= 1.19 and AKS (the
        pass message says when that was assumed). When no node or NodePool in the input is
        recognisable as GPU capacity (a node whose device plugin never started advertises no
        GPU and may carry no GPU label), every node the selectors allow is a candidate.
        Templates with no candidate node at all are left to GPU-SCHED-002; pods that request
        no GPU are not evaluated.
    """,
    severity_evidence="""
        High whenever it fails: the taints in the input show that no node the pod may land on
        accepts it, so it stays Pending (or is evicted again by a NoExecute taint). Taints that
        are transient (node lifecycle, cluster-autoscaler, Karpenter disruption) or that the
        ExtendedResourceToleration plugin tolerates never count, so there is no weaker case.
    """,
    remediation="""
        # $kind $namespace/$name: add under $path (taints on the GPU nodes:
        # kubectl get nodes -l nvidia.com/gpu.present=true -o jsonpath='{..taints}')
        tolerations:
          - key: "$key"
            operator: Exists
            effect: $effect
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/",
        "https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#extendedresourcetoleration",
        "https://github.com/kubernetes/kubernetes/pull/55839",
        "https://karpenter.sh/docs/concepts/nodepools/",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/421",
    ),
    remediation_root="pod_spec",
)
def gpu_pods_tolerate_taints_of_some_gpu_node(snapshot: Snapshot) -> Iterator[Result]:
    # Without any recognisable GPU node or GPU NodePool, every node is a candidate: the GPU
    # nodes are there, but nothing (no advertised GPU, no label) says which they are.
    gpu_only = bool(gpu_hosts(snapshot)) or any(
        nodepool_gpu_scope(p) != "none" for p in snapshot.of(NODEPOOL)
    )
    for template in gpu_pod_templates(snapshot):
        candidates = candidate_nodes(snapshot, template.spec, gpu_only=gpu_only)
        if candidates:
            yield _verdict(snapshot, template, candidates, gpu_only)


Blocking = tuple[int | None, tuple[tuple[Taint, ...], ...]]


def _blocking(
    snapshot: Snapshot, template: PodTemplate, candidates: list[CandidateNode], gpu_only: bool
) -> Blocking:
    """The index of the first candidate whose hard taints the template tolerates (None when
    none does), and the taints that block the first _SHOWN candidates before it. Templates
    alike in placement, tolerations and extended resources have the same candidates and
    verdicts: they share one pass over the nodes."""
    tolerations = template.spec.get("tolerations")
    extended = sorted(extended_resources(template))
    key = ("GPU-SCHED-001.blocking", gpu_only, placement_key(template.spec, tolerations, extended))

    def compute(_: Snapshot) -> Blocking:
        # Nodes of one pool share their taints: judge each distinct set once (5,000 nodes).
        judged: dict[tuple[Taint, ...], tuple[Taint, ...]] = {}
        shown: list[tuple[Taint, ...]] = []
        for index, candidate in enumerate(candidates):
            taints = judged.get(candidate.taints)
            if taints is None:
                taints = judged[candidate.taints] = tuple(
                    blocking_taints(template, candidate.taints)
                )
            if not taints:
                return index, tuple(shown)
            if len(shown) < _SHOWN:
                shown.append(taints)
        return None, tuple(shown)

    return snapshot.derived(key, compute)


def _verdict(
    snapshot: Snapshot, template: PodTemplate, candidates: list[CandidateNode], gpu_only: bool
) -> Result:
    path = f"{template.path}.tolerations"
    open_index, shown = _blocking(snapshot, template, candidates, gpu_only)
    if open_index is not None:
        return passed(template, _pass_message(template, candidates[open_index]), path=path)
    first = shown[0][0]
    details = "; ".join(
        f"{c.label}: {', '.join(map(str, t))}" for c, t in zip(candidates, shown, strict=False)
    )
    more = f" (and {len(candidates) - _SHOWN} more)" if len(candidates) > _SHOWN else ""
    which = "candidate GPU node's" if gpu_only else "node's (no node is recognisably a GPU node)"
    return failed(
        template,
        f"tolerates no {which} taints: {details}{more}",
        path=path,
        fix={"key": first.key, "effect": first.effect, "path": template.path},
    )


def _pass_message(template: PodTemplate, candidate: CandidateNode) -> str:
    message = f"tolerates every hard taint of {candidate.label}"
    assumed = auto_tolerated(template, candidate.taints)
    if assumed:
        names = ", ".join(str(t) for t in assumed)
        message += (
            f" ({names} assumed tolerated by the ExtendedResourceToleration admission plugin)"
        )
    return message
