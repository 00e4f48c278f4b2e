"""Helpers shared by the fabric checks: multi-node GPU templates with the nodes they land on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    Landing,
    MultiNodeTemplate,
    NodeShape,
    Snapshot,
    landing,
    multi_node_templates,
    node_shape,
)


@dataclass(frozen=True, slots=True)
class OnFabric:
    """A multi-node GPU template whose pods run on (or can only be placed on) fabric nodes."""

    item: MultiNodeTemplate
    landing: Landing
    shape: NodeShape

    @property
    def where(self) -> str:
        nodes = self.landing.nodes
        verb = "runs on" if self.landing.scheduled else "can only be placed on"
        names = ", ".join(n.ref.name for n in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
        return f"{verb} {len(nodes)} fabric node{'s' if len(nodes) > 1 else ''} ({names})"


def on_fabric(snapshot: Snapshot) -> Iterator[OnFabric]:
    """Multi-node GPU templates whose every landing node advertises a fabric resource (found
    once per snapshot: several checks ask)."""
    return iter(snapshot.derived("fabric.on_fabric", lambda s: tuple(_on_fabric(s))))


def _on_fabric(snapshot: Snapshot) -> Iterator[OnFabric]:
    for item in multi_node_templates(snapshot):
        where = landing(snapshot, item)
        if where.all_fabric:
            shape = node_shape(where.nodes)
            if shape.resources:
                yield OnFabric(item, where, shape)
