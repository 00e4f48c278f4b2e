"""NodeAffinity (a pod spec's nodeSelector and required node affinity, read once) against the
scheduler's rules written out expression by expression, and the label values it says a
matching node must have (nodes_alike evaluates only the node shapes that have them)."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpu_audit.k8s.scheduling import node_affinity_matches, node_affinity_of
from gpu_audit.k8s.selectors import expression_matches, map_selector_matches
from gpu_audit.model import ObjRef, Resource, SourceLocation

KEYS = ("pool", "gpu", "zone")
VALUES = ("a", "b", "c", "1", "7")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus")


def _node(name: str, labels: dict[str, str]) -> Resource:
    raw = {"kind": "Node", "metadata": {"name": name, "labels": labels}}
    return Resource(ObjRef("Node", "", name), "v1", raw, SourceLocation("n.yaml"))


def _reference(spec: dict[str, Any], node: Resource) -> bool:
    """The rules as the API documents them: nodeSelector AND (any term: all of its
    expressions and fields; an empty term matches nothing)."""
    if not map_selector_matches(spec.get("nodeSelector"), node.labels):
        return False
    affinity = spec.get("affinity", {}).get("nodeAffinity", {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    for term in required.get("nodeSelectorTerms", []):
        expressions = term.get("matchExpressions", [])
        fields = term.get("matchFields", [])
        if not expressions and not fields:
            continue
        if all(expression_matches(e, node.labels) for e in expressions) and all(
            expression_matches(f, {"metadata.name": node.ref.name}) for f in fields
        ):
            return True
    return False


expressions = st.fixed_dictionaries(
    {
        "key": st.sampled_from(KEYS),
        "operator": st.sampled_from(OPERATORS),
        "values": st.lists(st.sampled_from(VALUES), max_size=3),
    }
)
fields = st.fixed_dictionaries(
    {
        "key": st.just("metadata.name"),
        "operator": st.sampled_from(("In", "NotIn")),
        "values": st.lists(st.sampled_from(("n1", "n2")), max_size=2),
    }
)
terms = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.lists(expressions, max_size=3),
        "matchFields": st.lists(fields, max_size=1),
    },
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
        "affinity": st.fixed_dictionaries(
            {
                "nodeAffinity": st.fixed_dictionaries(
                    {
                        "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
                            {"nodeSelectorTerms": st.lists(terms, max_size=3)}
                        )
                    }
                )
            }
        ),
    },
)
nodes = st.tuples(
    st.sampled_from(("n1", "n2", "n3")),
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
)


@settings(max_examples=400, deadline=None)
@given(specs, st.lists(nodes, min_size=1, max_size=6))
# A node that matches through the second of two ORed terms, lacking the first term's value.
@example(
    {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                    ]
                }
            }
        }
    },
    [("n1", {"zone": "b"})],
)
def test_matches_as_the_scheduler_and_names_values_every_match_has(
    spec: dict[str, Any], raw_nodes: list[tuple[str, dict[str, str]]]
) -> None:
    affinity = node_affinity_of(spec)
    required = affinity.required_values()
    for name, labels in raw_nodes:
        node = _node(name, labels)
        expected = _reference(spec, node)
        assert affinity.matches(node) is expected
        assert node_affinity_matches(spec, node) is expected
        if expected:
            assert all(node.labels.get(key) in allowed for key, allowed in required.items())


def test_required_values_of_a_selector_and_a_single_term() -> None:
    spec: dict[str, Any] = {
        "nodeSelector": {"gpu": "a"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "pool", "operator": "In", "values": ["a", "b"]},
                                {"key": "pool", "operator": "In", "values": ["b", "c"]},
                                {"key": "zone", "operator": "NotIn", "values": ["a"]},
                            ]
                        }
                    ]
                }
            }
        },
    }
    assert node_affinity_of(spec).required_values() == {
        "gpu": frozenset({"a"}),
        "pool": frozenset({"b"}),
    }
    # Terms are ORed: with two, neither term's values are required.
    required: dict[str, list[Any]] = {"nodeSelectorTerms": []}
    spec["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
    }
    required["nodeSelectorTerms"] += [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
    ]
    assert node_affinity_of(spec).required_values() == {"gpu": frozenset({"a"})}
