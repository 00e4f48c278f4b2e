from collections.abc import Iterator

from gpu_audit.api import (
    NODEPOOL,
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
    gpu_quantities,
    has_resource_status,
    nodepool_gpu_scope,
    owner_kinds,
    passed,
)
from gpu_audit.checks.cost._common import pod_gpus, tenants

_TRAINING_OWNERS = frozenset({"Job", "PyTorchJob", "TFJob", "MPIJob", "TrainJob", "PodGroup"})
# Policies that also repack nodes that still run pods (v1 WhenEmptyOrUnderutilized, its v1beta1
# name WhenUnderutilized, and the newer Balanced).
_REPACKING = frozenset({"WhenEmptyOrUnderutilized", "WhenUnderutilized", "Balanced"})
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
Problem = tuple[Severity, str, str, str]


@check(
    id="GPU-COST-003",
    title="Karpenter NodePools that can launch GPU instances are bounded and remove idle nodes",
    category=Category.COST,
    severity=Severity.MEDIUM,
    requires=(NODEPOOL,),
    rationale="""
        A NodePool without spec.limits lets one runaway job or mis-set replica count launch
        an unbounded number of 8-GPU instances. One that never consolidates (consolidateAfter
        Never, or a disruption budget of zero nodes) keeps empty GPU nodes billing after the
        pods scale down. And consolidation that repacks underutilised nodes evicts multi-hour
        training runs unless their pods opt out with karpenter.sh/do-not-disrupt.
    """,
    detection="""
        Karpenter NodePools whose requirements allow GPU instance types (only GPU types, or
        requirements that do not exclude them). Static NodePools (spec.replicas) are already
        bounded and skip the limits and consolidation parts. Fails when spec.limits is
        missing or empty; when disruption.consolidateAfter is Never; when a budget allows 0
        nodes with no schedule and no reasons (or the Empty reason). Live: GPU pods of
        training jobs (Job, PyTorchJob, TFJob, MPIJob, TrainJob owners) on nodes of a pool
        whose consolidationPolicy repacks nodes (WhenEmptyOrUnderutilized by default,
        WhenUnderutilized, Balanced) without karpenter.sh/do-not-disrupt fail. Limits with
        only cpu/memory pass: they bound GPUs indirectly.
    """,
    severity_evidence="""
        No limits: medium on a pool that launches only GPU instances (nothing else caps how
        many), low on one that merely can. Never removing empty nodes (consolidateAfter Never,
        a 0-node budget): medium when a live node of the pool in the input advertises GPUs
        that no pod requests, low otherwise (often deliberate for slow-starting GPU nodes).
        Training pods a repacking policy may evict: low.
    """,
    remediation="""
        # $kind $name: $problem
        apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata:
          name: $name
        $snippet
    """,
    fix_kind=FixKind.MANIFEST,
    remediation_generic="""
        # NodePool <name>: each finding gives the part for its problem
        apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata:
          name: <name>
        spec:
          limits:                  # no spec.limits: nothing caps how many GPU nodes it creates
            nvidia.com/gpu: "32"   # the team's GPU budget
            cpu: "1000"
          disruption:
            consolidationPolicy: WhenEmpty   # repacking evicts running GPU training pods; or annotate them karpenter.sh/do-not-disrupt: "true"
            consolidateAfter: 10m            # consolidateAfter Never never removes empty GPU nodes
            budgets:                         # a budget of 0 nodes at all times: freeze only in business hours
              - nodes: "10%"
              - nodes: "0"
                schedule: "0 9 * * mon-fri"
                duration: 8h
    """,
    references=(
        "https://karpenter.sh/docs/concepts/nodepools/",
        "https://karpenter.sh/docs/concepts/disruption/",
        "https://github.com/kubernetes-sigs/karpenter/blob/a559e048b507d6024a1a43b7dc925708fc38c901/pkg/apis/v1/nodepool.go",
    ),
)
def gpu_nodepools_bounded_and_consolidated(snapshot: Snapshot) -> Iterator[Result]:
    for pool in snapshot.of(NODEPOOL):
        scope = nodepool_gpu_scope(pool)
        if scope == "none":
            continue
        idle = _idle_nodes(snapshot, pool)
        problems = list(_config_problems(pool, scope, idle)) + list(
            _training_at_risk(snapshot, pool)
        )
        if not problems:
            static = pool.spec.get("replicas") is not None
            yield passed(
                pool,
                "is a static pool of fixed size" if static else "is bounded and removes idle nodes",
            )
            continue
        worst = max(problems, key=lambda p: p[0].rank)
        yield failed(
            pool,
            "; ".join(p[1] for p in problems),
            path=worst[2],
            severity=worst[0],
            fix={"problem": worst[1], "snippet": worst[3]},
        )


def _idle_nodes(snapshot: Snapshot, pool: Resource) -> list[str]:
    """Live nodes of the pool that advertise GPUs no pod requests."""
    return sorted(
        node.ref.name
        for node in snapshot.with_label("Node", "karpenter.sh/nodepool", pool.ref.name)
        if has_resource_status(node)
        and sum(gpu_quantities(node, "allocatable").values()) > 0
        and not any(pod_gpus(p) > 0 for p in tenants(snapshot, node.ref.name))
    )


def _config_problems(pool: Resource, scope: str, idle: list[str]) -> Iterator[Problem]:
    spec = pool.spec
    if spec.get("replicas") is not None:
        return  # static pool: fixed size, only limits.nodes allowed, no consolidation
    what = "launches only GPU instances" if scope == "only" else "can launch GPU instances"
    if not as_mapping(spec.get("limits")):
        yield (
            Severity.MEDIUM if scope == "only" else Severity.LOW,
            f"{what} and has no spec.limits: nothing caps how many it creates",
            "spec.limits",
            'spec:\n  limits:\n    nvidia.com/gpu: "32"   # the team\'s GPU budget\n    cpu: "1000"',
        )
    disruption = as_mapping(spec.get("disruption"))
    kept = Severity.MEDIUM if idle else Severity.LOW
    seen = (
        f" (now: {', '.join(idle[:3])}{' and more' if len(idle) > 3 else ''} with GPUs no pod requests)"
        if idle
        else ""
    )
    if str(disruption.get("consolidateAfter", "")) == "Never":
        yield (
            kept,
            f"has consolidateAfter Never: empty GPU nodes are never removed{seen}",
            "spec.disruption.consolidateAfter",
            "spec:\n  disruption:\n    consolidationPolicy: WhenEmpty\n    consolidateAfter: 10m",
        )
    for index, budget in enumerate(map(as_mapping, as_list(disruption.get("budgets")))):
        reasons = {str(r) for r in as_list(budget.get("reasons"))}
        blocks_empty = not reasons or "Empty" in reasons
        if (
            str(budget.get("nodes", "")) in ("0", "0%")
            and not budget.get("schedule")
            and blocks_empty
        ):
            yield (
                kept,
                f"disruption budget {index} allows 0 nodes at all times: empty GPU nodes are "
                f"never removed{seen}",
                f"spec.disruption.budgets[{index}]",
                'spec:\n  disruption:\n    budgets:\n      - nodes: "10%"\n'
                '      - nodes: "0"                 # freeze only in business hours\n'
                '        schedule: "0 9 * * mon-fri"\n        duration: 8h',
            )


def _training_at_risk(snapshot: Snapshot, pool: Resource) -> Iterator[Problem]:
    disruption = as_mapping(pool.spec.get("disruption"))
    policy = str(disruption.get("consolidationPolicy") or "WhenEmptyOrUnderutilized")
    if pool.spec.get("replicas") is not None or policy not in _REPACKING:
        return
    exposed = sorted(
        str(pod.ref)
        for node in snapshot.with_label("Node", "karpenter.sh/nodepool", pool.ref.name)
        for pod in tenants(snapshot, node.ref.name)
        if owner_kinds(pod) & _TRAINING_OWNERS
        and pod_gpus(pod) > 0
        and pod.annotations.get(DO_NOT_DISRUPT) != "true"
    )
    if exposed:
        yield (
            Severity.LOW,
            f"consolidates with {policy}, which may evict the running GPU training pods "
            f"{', '.join(exposed[:3])}{' and more' if len(exposed) > 3 else ''} "
            f"(no {DO_NOT_DISRUPT})",
            "spec.disruption.consolidationPolicy",
            "spec:\n  disruption:\n    consolidationPolicy: WhenEmpty   # or annotate training pods "
            f'{DO_NOT_DISRUPT}: "true"\n    consolidateAfter: 10m',
        )
