"""Nodes alike for a pod spec: a pod spec is matched against node shapes, not nodes.

A cluster of thousands of nodes has few distinct shapes as far as one pod spec's placement
goes (the values of the labels its nodeSelector and required node affinity name, the node's
name when a term selects by field, its taints, whether it reports resources), so a question
asked of every node (does this template schedule there?) is asked once per shape. Checks and
the fabric and sharing knowledge share the shapes through the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import partial
from typing import Any

from gpu_audit.k8s.gpu_hosts import gpu_nodes, has_resource_status
from gpu_audit.k8s.scheduling import (
    NodeAffinity,
    Taint,
    node_affinity_keys,
    node_affinity_of,
    node_taints,
    schedules_on,
    schedules_on_key,
)
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot


def nodes_alike(
    snapshot: Snapshot, spec: Mapping[str, Any], accept: Callable[[Resource], bool]
) -> tuple[Resource, ...]:
    """The Nodes that pass `accept`, in order, where `accept` reads of a node only the labels
    the pod spec's nodeSelector and required node affinity name, its name when a term selects
    by field, its taints and whether it has resource status: it is called once per node shape
    (nodes that agree on those), and a cluster of thousands of nodes has few shapes."""
    keys, by_field = node_affinity_keys(spec)
    named = tuple(sorted(keys))
    shape_of, first = snapshot.derived(
        ("scheduling.node_shapes", named, by_field), lambda s: _node_shapes(s, named, by_field)
    )
    passing = [False] * len(first)
    for shape in _may_match(snapshot, named, by_field, first, node_affinity_of(spec)):
        passing[shape] = accept(first[shape])
    nodes = snapshot.of("Node")
    return tuple(n for n, shape in zip(nodes, shape_of, strict=True) if passing[shape])


def gpu_nodes_admitting(snapshot: Snapshot, spec: Mapping[str, Any]) -> tuple[Resource, ...]:
    """The GPU nodes, in order, the pod spec schedules on (selectors, required node affinity,
    taints): found once per snapshot for the pod specs alike in what schedules_on reads."""

    def find(s: Snapshot) -> tuple[Resource, ...]:
        admitting = {id(n) for n in nodes_alike(s, spec, partial(schedules_on, spec))}
        return tuple(n for n in gpu_nodes(s) if id(n) in admitting)

    return snapshot.derived(("gpu_nodes_admitting", schedules_on_key(spec)), find)


def _may_match(
    snapshot: Snapshot,
    keys: tuple[str, ...],
    by_field: bool,
    first: tuple[Resource, ...],
    affinity: NodeAffinity,
) -> Iterable[int]:
    """The node shapes that may match `affinity`: those with the values of its most selective
    required label (a cluster of hundreds of node shapes has few with a given GPU product or
    pool), or every shape when it requires none. `accept` implies a match, so the others
    fail."""
    required = affinity.required_values()
    if not required:
        return range(len(first))
    index = snapshot.derived(
        ("scheduling.node_shapes_by_label", keys, by_field), lambda s: _shapes_by_label(keys, first)
    )
    options = (
        sorted(i for value in allowed for i in index[key].get(value, ()))
        for key, allowed in required.items()
    )
    return min(options, key=len)


def _shapes_by_label(
    keys: tuple[str, ...], first: tuple[Resource, ...]
) -> dict[str, dict[str | None, list[int]]]:
    """Per label key, per value: the node shapes (their first nodes) with that value."""
    index: dict[str, dict[str | None, list[int]]] = {key: {} for key in keys}
    for shape, node in enumerate(first):
        labels = node.labels
        for key in keys:
            index[key].setdefault(labels.get(key), []).append(shape)
    return index


def taints_of(snapshot: Snapshot, node: Resource) -> tuple[Taint, ...]:
    """node_taints, read once per snapshot and node."""
    return snapshot.fact("scheduling.node_taints", node, node_taints)


def _node_shapes(
    snapshot: Snapshot, keys: tuple[str, ...], by_field: bool
) -> tuple[tuple[int, ...], tuple[Resource, ...]]:
    """Each Node's shape for nodes_alike, and the first node of each shape."""
    index: dict[Hashable, int] = {}
    shape_of: list[int] = []
    first: list[Resource] = []
    for node in snapshot.of("Node"):
        labels = node.labels
        shape = (
            tuple(labels.get(k) for k in keys),
            node.ref.name if by_field else "",
            taints_of(snapshot, node),
            has_resource_status(node),
        )
        found = index.get(shape)
        if found is None:
            found = index[shape] = len(first)
            first.append(node)
        shape_of.append(found)
    return tuple(shape_of), tuple(first)
