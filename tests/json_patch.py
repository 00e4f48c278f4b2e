"""RFC 6902 JSON patch, applied to plain dicts the way the apiserver (evanphx/json-patch) and
`kubectl patch --local` apply it: the operations in order, all or nothing, a failed `test`
fails the patch. For tests that apply gpu-audit's remediations without an apiserver."""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import Any


class PatchError(ValueError):
    pass


def _tokens(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise PatchError(f"not a JSON pointer: {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    *head, last = _tokens(pointer)
    node = doc
    for token in head:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise PatchError(f"{pointer}: no {token!r} on the way")
    return node, last


def _get(doc: Any, pointer: str) -> Any:
    node, last = _parent(doc, pointer)
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node[int(last)]
    raise PatchError(f"{pointer}: not found")


def apply_json_patch(doc: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """The patched copy of `doc`; PatchError when an operation fails (nothing is changed)."""
    out = copy.deepcopy(doc)
    for op in operations:
        kind, path = op["op"], str(op["path"])
        if kind == "test":
            if _get(out, path) != op["value"]:
                raise PatchError(f"test {path}: {_get(out, path)!r} != {op['value']!r}")
            continue
        node, last = _parent(out, path)
        if kind == "remove":
            _get(out, path)
            if isinstance(node, dict):
                del node[last]
            else:
                del node[int(last)]
        elif kind in ("add", "replace"):
            value = copy.deepcopy(op["value"])
            if kind == "replace":
                _get(out, path)
            if isinstance(node, dict):
                node[last] = value
            elif not isinstance(node, list):
                raise PatchError(f"{path}: the parent is not a map or list")
            elif last == "-" and kind == "add":
                node.append(value)
            elif last.isdigit() and int(last) <= len(node) - (kind == "replace"):
                if kind == "add":
                    node.insert(int(last), value)
                else:
                    node[int(last)] = value
            else:
                raise PatchError(f"{path}: index out of range")
        else:
            raise PatchError(f"unsupported operation {kind!r}")
    return out


def remediation_operations(remediation: str) -> list[dict[str, Any]]:
    """The JSON patch of a custom resource's remediation: the `-p` word of its `kubectl patch
    --type=json` (alone, or in `kubectl get | kubectl patch --local | kubectl replace`)."""
    words = shlex.split(remediation, comments=True)
    at = words.index("--type=json")
    assert words[0] == "kubectl" and "patch" in words[:at], remediation
    operations: list[dict[str, Any]] = json.loads(words[words.index("-p", at) + 1])
    return operations


def remediated(remediation: str, obj: Mapping[str, Any]) -> Any:
    """`obj` (a custom resource as the test wrote it) with the remediation's patch applied."""
    return apply_json_patch(obj, remediation_operations(remediation))


# --------------------------------------------------------------------------- what a patch lost


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()
# What a user writes in metadata (the rest the apiserver sets on every write).
USER_METADATA = frozenset({"name", "namespace", "labels", "annotations"})
# Annotations the apiserver writes itself: a DaemonSet's template generation, counted up on
# each change of its pod template (kubernetes pkg/apis/apps/v1 conversion.go, from
# spec.templateGeneration, which the DaemonSet strategy increments).
SERVER_ANNOTATIONS = frozenset({"deprecated.daemonset.template.generation"})


def leaves(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every scalar of `value` with its path; an empty map or list counts as a value."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, (*at, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from leaves(item, (*at, index))
    else:
        yield at, value


def lists(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], int]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from lists(item, (*at, key))
    elif isinstance(value, list):
        yield at, len(value)
        for index, item in enumerate(value):
            yield from lists(item, (*at, index))


def get(value: Any, path: tuple[Any, ...]) -> Any:
    for token in path:
        found = (isinstance(value, dict) and token in value) or (
            isinstance(value, list) and isinstance(token, int) and token < len(value)
        )
        if found:
            value = value[token]
        else:
            return ABSENT
    return value


def changed_paths(operations: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """The paths a patch changes (an append to a list changes no existing value)."""
    return [
        tuple(int(t) if t.isdigit() else t for t in _tokens(str(op["path"])))
        for op in operations
        if op["op"] != "test" and not str(op["path"]).endswith("/-")
    ]


def lost(
    before: dict[str, Any], after: dict[str, Any], operations: Sequence[Mapping[str, Any]]
) -> list[str]:
    """What the patch changed or dropped beyond the paths its operations name."""
    touched = changed_paths(operations)
    problems = []
    for path, value in leaves(before):
        server_set = path[:1] == ("metadata",) and path[1:2] and path[1] not in USER_METADATA
        if path[:2] == ("metadata", "annotations") and len(path) == 3:
            server_set = path[2] in SERVER_ANNOTATIONS
        if path[:1] == ("status",) or server_set:
            continue
        if any(path[: len(t)] == t for t in touched):
            continue
        if get(after, path) != value:
            problems.append(f"{'/'.join(map(str, path))}: {value!r} -> {get(after, path)!r}")
    for path, length in lists(before):
        now = get(after, path)
        if isinstance(now, list) and len(now) < length:
            problems.append(f"{'/'.join(map(str, path))}: {length} items -> {len(now)}")
    return problems
