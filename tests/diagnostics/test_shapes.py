"""The shape-grouped evaluation of Pending pods against nodes (gpu_audit.diagnostics.shapes)
against the straightforward one, on generated clusters of varied shape.

The reference evaluates every predicate of node_verdicts on every (pod, node) pair with the
pod's own spec and labels, counts the histogram from the full verdicts and sorts every node's
report entry, as the diagnostics did before nodes and pods were grouped by shape. Both must
agree on every node's verdicts, the histogram, the fitting nodes, the report's closest nodes
and the whole why-pending explanation.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpu_audit.diagnostics import REPORT_NODES_PER_POD, diagnostics_section, explain_targets
from gpu_audit.diagnostics.fit import cluster_usage
from gpu_audit.diagnostics.pending import pending_gpu_pods
from gpu_audit.diagnostics.predicates import (
    inter_pod_rules,
    node_verdicts,
    scheduling_context,
    spread_constraints,
)
from gpu_audit.diagnostics.shapes import NodeExplanation
from gpu_audit.k8s.gpu_hosts import is_gpu_node
from gpu_audit.redact import redact_tree
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import Doc, container, node, pod, pod_spec

ZONES = ("a", "b", "c")
POOLS = ("x", "y")
PRODUCTS = ("A100", "H100")
TAINTS = (
    {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
    {"key": "spot", "effect": "PreferNoSchedule"},
)
APPS = ("web", "train", "infer")
# Running and Pending pods carry app and index labels; selectors pick either.
selectors = st.sampled_from(APPS).map(lambda a: {"matchLabels": {"app": a}}) | st.just(
    {"matchLabels": {"index": "0"}}
)


@st.composite
def nodes(draw: st.DrawFn) -> list[Doc]:
    out = []
    for i in range(draw(st.integers(1, 14))):
        labels = {"zone": draw(st.sampled_from(ZONES))}
        if draw(st.booleans()):
            labels["pool"] = draw(st.sampled_from(POOLS))
        gpus = draw(st.sampled_from((0, 0, 4, 8)))
        if gpus:
            labels["nvidia.com/gpu.present"] = "true"
            labels["nvidia.com/gpu.product"] = draw(st.sampled_from(PRODUCTS))
        resources = {
            "cpu": str(draw(st.sampled_from((4, 16)))),
            "pods": str(draw(st.integers(1, 6))),
        }
        if gpus:
            resources["nvidia.com/gpu"] = str(gpus)
        out.append(
            node(
                f"n{i:02d}",
                labels,
                ready=draw(st.sampled_from((None, True, True, False))),
                taints=draw(st.sampled_from(((), (), (TAINTS[0],), TAINTS[1:]))),
                unschedulable=draw(st.sampled_from((None, None, True))),
                capacity=resources,
                allocatable=resources,
            )
        )
    return out


def _affinity(draw: st.DrawFn, node_names: list[str]) -> Doc:
    affinity: Doc = {}
    if draw(st.booleans()):
        term: Doc = {
            "matchExpressions": [
                {
                    "key": draw(st.sampled_from(("zone", "pool", "nvidia.com/gpu.product"))),
                    "operator": draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist"))),
                    "values": draw(st.lists(st.sampled_from(ZONES + POOLS + PRODUCTS), max_size=2)),
                }
            ]
        }
        if draw(st.integers(0, 4)) == 0:
            term["matchFields"] = [
                {"key": "metadata.name", "operator": "In", "values": node_names[:2]}
            ]
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    for kind in ("podAffinity", "podAntiAffinity"):
        if draw(st.integers(0, 3)) == 0:
            affinity[kind] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": draw(selectors),
                        "topologyKey": draw(st.sampled_from(("zone", "kubernetes.io/hostname"))),
                    }
                ]
            }
    return affinity


@st.composite
def pod_specs(draw: st.DrawFn, node_names: list[str], gpu: bool) -> Doc:
    limits = {"cpu": str(draw(st.sampled_from((1, 2, 12))))}
    if gpu:
        limits["nvidia.com/gpu"] = str(draw(st.sampled_from((1, 4, 8))))
    fields: Doc = {}
    if draw(st.booleans()):
        fields["nodeSelector"] = {
            draw(st.sampled_from(("zone", "pool", "nvidia.com/gpu.product"))): draw(
                st.sampled_from(ZONES + POOLS + PRODUCTS)
            )
        }
    tolerations = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=str))
    if tolerations:
        fields["tolerations"] = [{**t, "operator": "Equal"} for t in tolerations]
    affinity = _affinity(draw, node_names)
    if affinity:
        fields["affinity"] = affinity
    if draw(st.integers(0, 3)) == 0:
        fields["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": draw(st.sampled_from(("zone", "pool"))),
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": draw(selectors),
                "matchLabelKeys": draw(st.sampled_from(([], ["index"]))),
            }
        ]
    return pod_spec(container(gpus=None, resources={"limits": limits}), **fields)


@st.composite
def clusters(draw: st.DrawFn) -> list[Doc]:
    node_docs = draw(nodes())
    names = [n["metadata"]["name"] for n in node_docs]
    docs = list(node_docs)
    for i in range(draw(st.integers(0, 16))):
        spec = draw(pod_specs(names, draw(st.booleans())))
        labels = {"app": draw(st.sampled_from(APPS)), "index": str(draw(st.integers(0, 1)))}
        docs.append(
            pod(
                f"run-{i}",
                spec,
                labels=labels,
                node_name=draw(st.sampled_from(names)),
                phase="Running",
            )
        )
    # Pending pods come in groups of one spec (a controller's replicas) whose labels differ.
    for g in range(draw(st.integers(1, 4))):
        spec = draw(pod_specs(names, True))
        app = draw(st.sampled_from(APPS))
        for r in range(draw(st.integers(1, 3))):
            labels = {"app": app, "index": str(draw(st.integers(0, 1))), "replica": str(r)}
            docs.append(pod(f"wait-{g}-{r}", spec, labels=labels, phase="Pending"))
    return docs


def _load(docs: list[Doc]) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(docs)))


def _reference(snapshot: Snapshot) -> list[tuple[dict[str, Any], list[NodeExplanation]]]:
    """Every Pending GPU pod against every node, one pair at a time."""
    usage = cluster_usage(snapshot)
    ctx = scheduling_context(snapshot, usage)
    out = []
    for p in pending_gpu_pods(snapshot, usage):
        request = usage.request_of(p)
        spread = spread_constraints(ctx, p, p.spec)
        rules = inter_pod_rules(ctx, p, p.spec)
        explained = [
            NodeExplanation(
                u.node.ref.name,
                is_gpu_node(u.node),
                node_verdicts(ctx, p.spec, request, u, spread, rules),
            )
            for u in usage.nodes.values()
        ]
        histogram: dict[str, int] = {}
        for n in explained:
            for reason in n.failed[0].reasons if n.failed else ():
                histogram[reason] = histogram.get(reason, 0) + 1
        out.append(({"histogram": dict(sorted(histogram.items()))}, explained))
    return out


def _closest(nodes: list[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    def distance(n: Mapping[str, Any]) -> tuple[bool, bool, int, str]:
        failed = sum(1 for v in n["predicates"] if not v["passed"])
        return (not n["fits"], not n["gpu_node"], failed, n["node"])

    return sorted(nodes, key=distance)[:count]


def _spread_on_zones() -> list[Doc]:
    """Three alike nodes but for their zone; two matching pods run in zone a: only the node
    in zone b passes the spread constraint."""
    size = {"cpu": "16", "pods": "10", "nvidia.com/gpu": "8"}
    docs = [
        node(f"n{i}", {"zone": z}, capacity=size, allocatable=size) for i, z in enumerate("aab")
    ]
    docs += [
        pod(f"r{i}", pod_spec(container(gpus=None)), labels={"app": "web"}, node_name="n0")
        for i in range(2)
    ]
    spread = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    spec = pod_spec(container(), topologySpreadConstraints=[spread])
    return [*docs, pod("w", spec, labels={"app": "web"}, phase="Pending")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
@example(_spread_on_zones())
def test_grouped_evaluation_matches_pair_by_pair(docs: list[Doc]) -> None:
    snapshot = _load(docs)
    reference = _reference(snapshot)
    explained = explain_targets(snapshot, None)
    report = diagnostics_section(snapshot)["pending_pods"]
    assert len(explained) == len(reference) == len(report)
    for (expected, nodes), got, reported in zip(reference, explained, report, strict=True):
        full = got.as_dict()
        assert full["nodes"] == [redact_tree(n.as_dict()) for n in nodes]
        assert full["histogram"] == expected["histogram"]
        assert full["fitting_nodes"] == [n.node for n in nodes if n.fits]
        assert reported == {
            **full,
            "nodes": _closest(full["nodes"], REPORT_NODES_PER_POD),
            "nodes_evaluated": len(nodes),
        }
        # Clusters here have fewer nodes than a report shows: keep 3 of them too.
        assert got.as_dict(3)["nodes"] == _closest(full["nodes"], 3)


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CLUSTERS = sorted(
    [
        FIXTURES / "clusters" / "sample",
        *(FIXTURES / "clusters" / "diagnostics").iterdir(),
        *(p / "cluster" for p in (FIXTURES / "scenarios").iterdir() if (p / "cluster").is_dir()),
    ]
)


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_reports_agree_with_full_verdicts(path: Path) -> None:
    """On every fixture cluster (RuntimeClasses, DRA claims, gangs included): the histogram,
    fitting nodes and report nodes made from the grouped outcomes are those the full verdicts
    of every node give."""
    snapshot = load_files([str(path)], io.StringIO())
    report = diagnostics_section(snapshot)["pending_pods"] or []
    explained = explain_targets(snapshot, None)
    assert len(report) == len(explained)
    for got, reported in zip(explained, report, strict=True):
        full = got.as_dict()
        histogram: dict[str, int] = {}
        for n in full["nodes"]:
            for reason in n["scheduler_reasons"]:
                histogram[reason] = histogram.get(reason, 0) + 1
        assert full["histogram"] == dict(sorted(histogram.items()))
        assert full["fitting_nodes"] == [n["node"] for n in full["nodes"] if n["fits"]]
        assert reported["nodes"] == _closest(full["nodes"], REPORT_NODES_PER_POD)
        assert got.as_dict(1)["nodes"] == _closest(full["nodes"], 1)
