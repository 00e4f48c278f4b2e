"""SharedParts holds equal parts of objects once, and never joins parts a reader can tell
apart: by value, by JSON type (True and 1, 1.0 and 1, -0.0 and 0.0), by key order, or a
mapping from a list."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpu_audit.redact import REDACTED, sanitize
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


def _share(table: SharedParts, obj: dict[str, Any]) -> dict[str, Any]:
    with table.shared(obj):
        return obj


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
    shared = [_share(table, o) for o in objects]
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
    _share(table, pod)
    _share(table, other)
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
        _share(table, obj)
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
    _share(table, first)
    _share(table, second)
    assert second["metadata"]["labels"] is first["metadata"]["labels"]
    assert second["spec"]["args"][0] is first["spec"]["args"][0]
    assert second["spec"]["args"] == ["--epochs=90", "b"]
    assert second["metadata"]["name"] == "b"


# Sanitize with a shared table (a live listing) must give every object exactly what sanitize
# gives it alone, whatever was shared with which object before: the redaction of a part may
# not depend on the object it was first seen in.
_WORDS = st.sampled_from(
    [
        "",
        "a",
        "x1",
        "--password",
        "--api-key",
        "hunter2xyz",
        "https://u:pw@host/x",
        "Bearer abcdefghijklmnop",
        "nvcr.io/nvidia/x:1",
        "DB_PASSWORD",
        "HF_TOKEN",
        "ghp_" + "a1B2" * 9,
        "plain words here",
        "export TOKEN=abc123 && run",
    ]
)
_NAMES = st.sampled_from(["name", "value", "token", "args", "image", "password", "env", "x"])
_CLUSTER_TREES = st.recursive(
    st.one_of(_WORDS, st.integers(0, 2), st.booleans()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_NAMES, inner, max_size=4)
    ),
    max_leaves=16,
)
_CLUSTER_OBJECTS = st.lists(
    st.fixed_dictionaries({"kind": st.just("Pod")}, optional={"spec": _CLUSTER_TREES}).map(
        lambda o: {**o, "metadata": {"name": "p"}}
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=500, deadline=None)
@given(_CLUSTER_OBJECTS)
@example(
    [
        {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"token": ["x1", "a"]}},
        {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"args": ["x1", "a"]}},
    ]
)
@example(
    [
        {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": {"a": "ghp_" + "a1B2" * 9}}},
        {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": {"a": "plain words here"}}},
    ]
)
def test_sanitize_with_shared_parts_is_sanitize_alone(objects: list[dict[str, Any]]) -> None:
    alone = [json.dumps(sanitize(copy.deepcopy(o))) for o in objects]
    table = SharedParts()
    assert [json.dumps(sanitize(copy.deepcopy(o), table)) for o in objects] == alone


def test_a_list_under_a_credential_name_is_not_shared_with_the_same_list_elsewhere() -> None:
    table = SharedParts()
    monitor = sanitize({"kind": "ServiceMonitor", "spec": {"params": {"token": ["abc123"]}}}, table)
    job = sanitize({"kind": "Job", "spec": {"args": ["abc123"]}}, table)
    assert monitor["spec"]["params"]["token"] == [REDACTED]
    assert job["spec"]["args"] == ["abc123"]


def test_a_list_under_a_credential_name_at_the_top_of_an_object_is_kept_apart_too() -> None:
    # A custom resource's own top-level field: sanitize redacts the list in place there.
    table = SharedParts()
    first = sanitize({"kind": "Custom", "metadata": {"name": "a"}, "token": ["abc123"]}, table)
    second = sanitize({"kind": "Custom", "metadata": {"name": "b"}, "args": ["abc123"]}, table)
    assert first["token"] == [REDACTED]
    assert second["args"] == ["abc123"]


def test_the_planted_credential_corpus_sanitizes_the_same_through_a_shared_table() -> None:
    # Every form of credential gpu_audit.redact knows, in every field of every kind: each
    # object read twice (a second pod of the workload), so that every part is shared once.
    corpus = Path(__file__).resolve().parents[2] / "fixtures" / "secrets" / "corpus.yaml"
    objects = [o for o in yaml.safe_load_all(corpus.read_text(encoding="utf-8")) if o]
    twice = [copy.deepcopy(o) for o in objects for _ in range(2)]
    alone = [json.dumps(sanitize(copy.deepcopy(o))) for o in twice]
    table = SharedParts()
    assert [json.dumps(sanitize(o, table)) for o in twice] == alone
    assert len(alone) > 50
