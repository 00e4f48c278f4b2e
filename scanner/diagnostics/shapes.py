"""One Pending pod shape against every node, in time linear in the nodes.

A Pending pod's per-node verdicts depend on the node through few facts: whether it is
cordoned, its taints (with those of a not-Ready condition), the values of the labels the pod's
selectors, affinity and topology terms name, and its free capacity. Nodes that agree on all
but the last are one shape (a 5,000-node cluster has tens): the predicates that read no
capacity are evaluated once per shape, NodeResourcesFit's reasons once per node, and the full
verdicts, with their per-node texts, only for the nodes a report shows. Which node fits, how
many predicates fail on it and the reasons it adds to the scheduler's histogram are the same
as those of the full verdicts (tests/diagnostics/test_shapes.py compares them on generated
clusters).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

from gpu_audit.diagnostics.fit import NodeUsage
from gpu_audit.diagnostics.predicates import (
    NODE_AFFINITY,
    InterPodRules,
    SchedulingContext,
    SpreadConstraint,
    Verdict,
    condition_taints,
    inter_pod_affinity,
    node_unschedulable,
    node_verdicts,
    pod_topology_spread,
    resource_fit_reasons,
    taint_toleration,
)
from gpu_audit.k8s.dra import NVIDIA_GPU_DRIVER, node_devices
from gpu_audit.k8s.gpu_hosts import is_gpu_node
from gpu_audit.k8s.scheduling import node_affinity_keys, node_affinity_of
from gpu_audit.redact import redact_text, redact_tree

Outcome = tuple[bool, tuple[str, ...]]  # a verdict without its texts: passed, reasons


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    node: str
    gpu_node: bool
    verdicts: tuple[Verdict, ...]

    @property
    def fits(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def failed(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed)

    def as_dict(self) -> dict[str, Any]:
        first = self.failed[0] if self.failed else None
        return {
            "node": self.node,
            "gpu_node": self.gpu_node,
            "fits": self.fits,
            "scheduler_reasons": list(first.reasons) if first else [],
            "predicates": [v.as_dict() for v in self.verdicts],
        }


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """Per node, what no pod changes: computed once per SchedulingContext."""

    usages: tuple[NodeUsage, ...]
    gpu: tuple[bool, ...]
    shown_names: tuple[str, ...]  # the names as the report shows them (redacted)
    static: tuple[Hashable, ...]  # cordoned, taints: the label-free part of a node's shape
    by_gpu_then_name: tuple[int, ...]  # the nodes' indexes, GPU nodes first, by shown name


def node_facts(ctx: SchedulingContext) -> NodeFacts:
    key = ("node-facts",)
    if key not in ctx.memo:
        usages = tuple(ctx.usage.nodes.values())
        dra_gpu_nodes = node_devices(ctx.snapshot, NVIDIA_GPU_DRIVER)
        gpu = tuple(is_gpu_node(u.node) or u.node.ref.name in dra_gpu_nodes for u in usages)
        names = tuple(redact_text(u.node.ref.name) for u in usages)
        ctx.memo[key] = NodeFacts(
            usages,
            gpu,
            names,
            tuple(
                (u.node.spec.get("unschedulable") is True, condition_taints(u.node)) for u in usages
            ),
            tuple(sorted(range(len(usages)), key=lambda i: (not gpu[i], names[i]))),
        )
    facts: NodeFacts = ctx.memo[key]
    return facts


def _named_label_keys(
    spec: Mapping[str, Any], spread: Sequence[SpreadConstraint], rules: InterPodRules
) -> tuple[tuple[str, ...], bool]:
    """The node label keys the pod's placement rules read, and whether a node affinity term
    selects nodes by name (matchFields): then every node is a shape of its own."""
    named, by_name = node_affinity_keys(spec)
    keys = set(named)
    keys.update(c.key for c in spread)
    keys.update(t.key for t in (*rules.affinity, *rules.anti_affinity))
    keys.update(key for key, _, _ in rules.existing)
    return tuple(sorted(keys)), by_name


def node_shapes(
    ctx: SchedulingContext, keys: tuple[str, ...], by_name: bool
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(each node's shape, the first node of each shape), for pods that read `keys`."""
    memo_key = ("node-shapes", keys, by_name)
    if memo_key not in ctx.memo:
        facts = node_facts(ctx)
        index: dict[Hashable, int] = {}
        shape_of = []
        first: list[int] = []
        for i, (usage, static) in enumerate(zip(facts.usages, facts.static, strict=True)):
            labels = usage.node.labels
            shape: Hashable = (
                static,
                tuple(labels.get(k) for k in keys),
                usage.node.ref.name if by_name else "",
            )
            found = index.get(shape)
            if found is None:
                found = index[shape] = len(first)
                first.append(i)
            shape_of.append(found)
        ctx.memo[memo_key] = (tuple(shape_of), tuple(first))
    shapes: tuple[tuple[int, ...], tuple[int, ...]] = ctx.memo[memo_key]
    return shapes


class NodeTable:
    """One pod shape against every node: each node's outcome (fits, failed predicates, the
    reasons it adds to the histogram); the full verdicts of a node made when asked for."""

    def __init__(
        self,
        facts: NodeFacts,
        failed: Sequence[int],
        first_reasons: Sequence[tuple[str, ...]],
        verdicts: Callable[[NodeUsage], tuple[Verdict, ...]],
    ) -> None:
        """`failed`: per node, how many filters fail; `first_reasons`: the reasons of the first
        that fails."""
        self._facts = facts
        self._verdicts = verdicts
        self._made: dict[int, NodeExplanation] = {}
        # Pods of one shape share the table: what they ask of it is found once.
        self._closest: dict[int, list[NodeExplanation]] = {}
        self._closest_shown: dict[int, list[dict[str, Any]]] = {}
        self._candidates: dict[bool, list[NodeExplanation]] = {}
        self.failed = tuple(failed)
        self.first_reasons = tuple(first_reasons)
        self.fitting = tuple(
            u.node.ref.name for u, f in zip(facts.usages, self.failed, strict=True) if not f
        )
        # Counted per distinct reasons, in the order of their first node: the reasons come out
        # in the order a count node by node would give them.
        counts: dict[str, int] = {}
        for reasons, nodes in Counter(self.first_reasons).items():
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + nodes
        self._histogram = counts

    def __len__(self) -> int:
        return len(self.failed)

    def histogram(self) -> dict[str, int]:
        """The scheduler's histogram: each node adds the reasons of its first failing filter
        (read-only)."""
        return self._histogram

    def explanation(self, index: int) -> NodeExplanation:
        found = self._made.get(index)
        if found is None:
            usage = self._facts.usages[index]
            found = self._made[index] = NodeExplanation(
                usage.node.ref.name, self._facts.gpu[index], self._verdicts(usage)
            )
        return found

    def explanations(self, indexes: Sequence[int] | None = None) -> list[NodeExplanation]:
        return [self.explanation(i) for i in (range(len(self)) if indexes is None else indexes)]

    def best_candidates(self, wants_gpu: bool) -> list[NodeExplanation]:
        """The nodes closest to fitting (fewest failing predicates), GPU nodes first for a
        GPU pod: their failing predicates are the changes worth making."""
        if wants_gpu not in self._candidates:
            self._candidates[wants_gpu] = self._best_candidates(wants_gpu)
        return self._candidates[wants_gpu]

    def _best_candidates(self, wants_gpu: bool) -> list[NodeExplanation]:
        gpu = self._facts.gpu
        pool = [i for i in range(len(self)) if gpu[i]] if wants_gpu and any(gpu) else None
        pool = list(range(len(self))) if pool is None else pool
        if not pool:
            return []
        fewest = min(self.failed[i] for i in pool)
        return self.explanations([i for i in pool if self.failed[i] == fewest][:3])

    def closest(self, count: int) -> list[NodeExplanation]:
        """The `count` nodes nearest to taking the pod: those that fit, then GPU nodes with
        the fewest failed predicates, by name as shown."""
        if count not in self._closest:
            self._closest[count] = self._nearest(count)
        return self._closest[count]

    def closest_shown(self, count: int) -> list[dict[str, Any]]:
        """closest(count) as the report shows them (redacted), made once for the pods of
        this shape: read-only, as every pod's explanation holds the same list."""
        if count not in self._closest_shown:
            shown = [n.as_dict() for n in self.closest(count)]
            self._closest_shown[count] = redact_tree(shown)
        return self._closest_shown[count]

    def _nearest(self, count: int) -> list[NodeExplanation]:
        """The first `count` nodes by (fails at all, not a GPU node, failed predicates, shown
        name): the nodes are visited GPU nodes first by name, so each (fails at all, not a GPU
        node, failed predicates) class keeps its first `count` in order, with no sort per
        pod shape."""
        gpu, failed = self._facts.gpu, self.failed
        classes: dict[tuple[bool, bool, int], list[int]] = {}
        for i in self._facts.by_gpu_then_name:
            found = failed[i]
            kept = classes.setdefault((found > 0, not gpu[i], found), [])
            if len(kept) < count:
                kept.append(i)
        nearest = [i for key in sorted(classes) for i in classes[key]]
        return self.explanations(nearest[:count])


def _fit_reasons(
    ctx: SchedulingContext, request: Mapping[str, Decimal], dra_served: frozenset[str]
) -> tuple[tuple[str, ...], ...]:
    """NodeResourcesFit's reasons on every node, once per request: pod shapes that differ in
    their placement rules often ask for the same resources."""
    key = ("fit", tuple(sorted(request.items())), dra_served)
    if key not in ctx.memo:
        usages = node_facts(ctx).usages
        ctx.memo[key] = tuple(resource_fit_reasons(request, u, dra_served) for u in usages)
    reasons: tuple[tuple[str, ...], ...] = ctx.memo[key]
    return reasons


_PASSED: Outcome = (True, ())
_ShapeFailures = tuple[int, tuple[str, ...] | None, int, tuple[str, ...] | None]


def _placement_by_shape(
    facts: NodeFacts,
    first: Sequence[int],
    spec: Mapping[str, Any],
    spread: Sequence[SpreadConstraint],
    rules: InterPodRules,
) -> list[_ShapeFailures]:
    """The outcomes of the filters that read no capacity, per node shape (its first node):
    NodeUnschedulable, TaintToleration, NodeAffinity, PodTopologySpread, InterPodAffinity.
    A shape is keyed by every label any of them reads, so a cluster has as many shapes as
    label combinations; each filter is run once per value of what it alone reads (cordoned,
    taints) and node affinity is matched without building its texts. Per shape: how many of
    the filters before NodeResourcesFit fail and the reasons of the first that does (None when
    none does), the same for those after it."""
    affinity = node_affinity_of(spec)
    # The filters before the fit read only what `static` holds and whether affinity matches:
    # their failures are counted once per pair (a cluster of 500 node classes has thousands
    # of shapes for a pod that spreads or selects by class, and a handful of such pairs).
    before_by_static: dict[tuple[Hashable, bool], tuple[int, tuple[str, ...] | None]] = {}
    places_by_labels = bool(spread or rules.affinity or rules.anti_affinity or rules.existing)
    after = _failures((_PASSED, _PASSED))
    out: list[_ShapeFailures] = []
    for i in first:
        node = facts.usages[i].node
        matches = affinity.matches(node)
        key = (facts.static[i], matches)
        before = before_by_static.get(key)
        if before is None:
            matched: Outcome = _PASSED if matches else (False, (NODE_AFFINITY,))
            before = before_by_static[key] = _failures(
                (
                    _outcome(node_unschedulable(spec, node)),
                    _outcome(taint_toleration(spec, node)),
                    matched,
                )
            )
        if places_by_labels:
            after = _failures(
                (
                    _outcome(pod_topology_spread(spread, node)),
                    _outcome(inter_pod_affinity(rules, node)),
                )
            )
        out.append((*before, *after))
    return out


def _failures(outcomes: Sequence[Outcome]) -> tuple[int, tuple[str, ...] | None]:
    """How many of `outcomes` failed, and the reasons of the first that did (None: none)."""
    failed = [reasons for passed, reasons in outcomes if not passed]
    return len(failed), (failed[0] if failed else None)


def _outcome(verdict: Verdict) -> Outcome:
    return (verdict.passed, verdict.reasons)


def node_table(
    ctx: SchedulingContext,
    spec: Mapping[str, Any],
    request: Mapping[str, Decimal],
    spread: Sequence[SpreadConstraint],
    rules: InterPodRules,
    dra: Callable[[NodeUsage], Verdict] | None = None,
    dra_served: frozenset[str] = frozenset(),
) -> NodeTable:
    """node_verdicts on every node (same arguments) as a NodeTable: the outcomes of its
    filters, in its order, those that read no capacity once per node shape, NodeResourcesFit
    and DynamicResources per node."""
    facts = node_facts(ctx)
    shape_of, first = node_shapes(ctx, *_named_label_keys(spec, spread, rules))
    per_shape = _placement_by_shape(facts, first, spec, spread, rules)
    failed: list[int] = []
    first_reasons: list[tuple[str, ...]] = []
    for usage, shape, reasons in zip(
        facts.usages, shape_of, _fit_reasons(ctx, request, dra_served), strict=True
    ):
        # node_verdicts' order (test_shapes.py compares the two on every node): the shape's
        # filters before NodeResourcesFit, the fit, the shape's after it, DynamicResources.
        before_failed, before_first, after_failed, after_first = per_shape[shape]
        count = before_failed + after_failed + (1 if reasons else 0)
        why = before_first if before_first is not None else (reasons or after_first)
        if dra is not None:
            verdict = dra(usage)
            if not verdict.passed:
                count += 1
                why = tuple(verdict.reasons) if why is None else why
        failed.append(count)
        first_reasons.append(() if why is None else why)
    return NodeTable(
        facts,
        failed,
        first_reasons,
        partial(
            node_verdicts,
            ctx,
            spec,
            request,
            spread=spread,
            rules=rules,
            dra=dra,
            dra_served=dra_served,
        ),
    )
