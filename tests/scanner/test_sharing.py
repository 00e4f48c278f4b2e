"""SharedParts holds equal parts of objects once, and never joins parts a reader can tell
apart: by value, by JSON type (True and 1, 1.0 and 1, -0.0 and 0.0), by key order, or a
mapping from a list."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpu_audit.sharing import SharedParts

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 1.0, 2.5]),
    st.sampled_from(["", "a", "b", "1", "true"]),
)
_KEYS = st.sampled_from(["a", "b", "c"])
_TREES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=12,
)
_OBJECTS = st.lists(st.dictionaries(_KEYS, _TREES, max_size=3), min_size=1, max_size=6)


def _typed(value: Any) -> Any:
    """A value as a reader can tell it: every scalar with its class, every key in order."""
    if isinstance(value, dict):
        return ("{", [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("[", [_typed(v) for v in value])
    return (type(value).__name__, repr(value))


def _parts(value: Any, into: list[Any]) -> list[Any]:
    if isinstance(value, dict | list):
        into.append(value)
        for child in value.values() if isinstance(value, dict) else value:
            _parts(child, into)
    return into


@settings(max_examples=400, deadline=None)
@given(_OBJECTS)
@example([{"a": {"b": True}}, {"a": {"b": 1}}, {"a": {"b": 1.0}}])
@example([{"a": [0.0]}, {"a": [-0.0]}, {"a": {"b": 0.0}}])
@example([{"a": {"b": 1, "c": 2}}, {"a": {"c": 2, "b": 1}}])
@example([{"a": {}}, {"a": []}, {"a": [{}]}, {"a": [[]]}])
def test_shared_objects_read_as_they_were_and_only_equal_parts_are_joined(
    objects: list[dict[str, Any]],
) -> None:
    before = [_typed(o) for o in objects]
    table = SharedParts()
    shared = [table.share(o) for o in objects]
    assert all(s is o for s, o in zip(shared, objects, strict=True))
    assert [_typed(o) for o in objects] == before
    parts = [(p, _typed(p)) for o in objects for p in _parts(o, [])[1:]]
    for one, read_one in parts:
        for other, read_other in parts:
            # Joined when, and only when, they read the same.
            assert (one is other) == (read_one == read_other)


def test_equal_parts_of_different_objects_are_one_object() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "a", "labels": {"app": "train"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    other = copy.deepcopy(pod)
    other["metadata"]["name"] = "b"
    table = SharedParts()
    table.share(pod)
    table.share(other)
    assert other["spec"] is pod["spec"]
    assert other["metadata"]["labels"] is pod["metadata"]["labels"]
    assert other["metadata"] is not pod["metadata"]
    assert json.loads(json.dumps(other))["metadata"]["name"] == "b"


def test_parts_a_reader_tells_apart_stay_apart() -> None:
    objects: list[dict[str, Any]] = [
        {"x": {"replicas": True}},
        {"x": {"replicas": 1}},
        {"x": {"replicas": 1.0}},
        {"x": {"weight": 0.0}},
        {"x": {"weight": -0.0}},
        {"x": {"a": "1", "b": "2"}},
        {"x": {"b": "2", "a": "1"}},
        {"x": ["a", "b"]},
        {"x": {"a": "b"}},
    ]
    table = SharedParts()
    for obj in objects:
        table.share(obj)
    assert len({id(o["x"]) for o in objects}) == len(objects)
    assert [json.dumps(o) for o in objects] == [
        '{"x": {"replicas": true}}',
        '{"x": {"replicas": 1}}',
        '{"x": {"replicas": 1.0}}',
        '{"x": {"weight": 0.0}}',
        '{"x": {"weight": -0.0}}',
        '{"x": {"a": "1", "b": "2"}}',
        '{"x": {"b": "2", "a": "1"}}',
        '{"x": ["a", "b"]}',
        '{"x": {"a": "b"}}',
    ]


def test_equal_texts_are_one_object() -> None:
    # Parsers make a new string for every value: an equal text that is another object.
    def fresh(text: str) -> str:
        return "".join(list(text))

    def job(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": fresh(name), "labels": {"team": fresh("vision")}},
            "spec": {"args": [fresh("--epochs=90"), fresh(name)]},
        }

    first, second = job("a"), job("b")
    assert second["metadata"]["labels"]["team"] is not first["metadata"]["labels"]["team"]
    table = SharedParts()
    table.share(first)
    table.share(second)
    assert second["metadata"]["labels"] is first["metadata"]["labels"]
    assert second["spec"]["args"][0] is first["spec"]["args"][0]
    assert second["spec"]["args"] == ["--epochs=90", "b"]
    assert second["metadata"]["name"] == "b"
