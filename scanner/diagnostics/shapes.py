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

import heapq
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

from gpu_audit.diagnostics.fit import NodeUsage
from gpu_audit.diagnostics.predicates import (
    InterPodRules,
    SchedulingContext,
    SpreadConstraint,
    Verdict,
    condition_taints,
    inter_pod_affinity,
    node_affinity,
    node_unschedulable,
    node_verdicts,
    pod_topology_spread,
    resource_fit_reasons,
    taint_toleration,
)
from gpu_audit.k8s.dra import NVIDIA_GPU_DRIVER, node_devices
from gpu_audit.k8s.gpu_hosts import is_gpu_node
from gpu_audit.k8s.scheduling import node_affinity_keys
from gpu_audit.redact import redact_text

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


def node_facts(ctx: SchedulingContext) -> NodeFacts:
    key = ("node-facts",)
    if key not in ctx.memo:
        usages = tuple(ctx.usage.nodes.values())
        dra_gpu_nodes = node_devices(ctx.snapshot, NVIDIA_GPU_DRIVER)
        ctx.memo[key] = NodeFacts(
            usages,
            tuple(is_gpu_node(u.node) or u.node.ref.name in dra_gpu_nodes for u in usages),
            tuple(redact_text(u.node.ref.name) for u in usages),
            tuple(
                (u.node.spec.get("unschedulable") is True, condition_taints(u.node)) for u in usages
            ),
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
        self._candidates: dict[bool, list[NodeExplanation]] = {}
        self.failed = tuple(failed)
        self.first_reasons = tuple(first_reasons)
        self.fitting = tuple(
            u.node.ref.name for u, f in zip(facts.usages, self.failed, strict=True) if not f
        )
        counts: dict[str, int] = {}
        for reasons in self.first_reasons:
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
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

    def _nearest(self, count: int) -> list[NodeExplanation]:
        gpu, names = self._facts.gpu, self._facts.shown_names

        def distance(i: int) -> tuple[bool, bool, int, str]:
            return (self.failed[i] > 0, not gpu[i], self.failed[i], names[i])

        return self.explanations(heapq.nsmallest(count, range(len(self)), key=distance))


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
    per_shape: list[tuple[Outcome, ...]] = []
    for i in first:
        node = facts.usages[i].node
        placed = (
            node_unschedulable(spec, node),
            taint_toleration(spec, node),
            node_affinity(spec, node),
            pod_topology_spread(spread, node),
            inter_pod_affinity(rules, node),
        )
        per_shape.append(tuple((v.passed, v.reasons) for v in placed))
    # Nodes of one shape with the same fit (and DynamicResources) outcome share a row.
    rows: dict[Hashable, tuple[int, tuple[str, ...]]] = {}
    failed: list[int] = []
    first_reasons: list[tuple[str, ...]] = []
    for usage, shape, reasons in zip(
        facts.usages, shape_of, _fit_reasons(ctx, request, dra_served), strict=True
    ):
        claimed: Outcome | None = None
        if dra is not None:
            verdict = dra(usage)
            claimed = (verdict.passed, tuple(verdict.reasons))
        key = (shape, reasons, claimed)
        found = rows.get(key)
        if found is None:
            unschedulable, taints, affinity, spreading, inter_pod = per_shape[shape]
            # node_verdicts' order (test_shapes.py compares the two on every node).
            row = [unschedulable, taints, affinity, (not reasons, reasons), spreading, inter_pod]
            if claimed is not None:
                row.append(claimed)
            found = rows[key] = (
                sum(1 for passed, _ in row if not passed),
                next((why for passed, why in row if not passed), ()),
            )
        failed.append(found[0])
        first_reasons.append(found[1])
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
