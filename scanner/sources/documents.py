"""Text to JSON-like documents, within limits that keep hostile input cheap to reject.

YAML is turned into what the Kubernetes API would hold: string keys, no timestamps, bytes or
sets, no NaN, no duplicate keys, no alias cycles. The limits (see README, "Limits") make a huge
file, a flood of documents, a deep nesting or an alias bomb an error that names the file
instead of an exhausted machine.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from gpu_audit.errors import InputError

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what the loader reads (the defaults are documented in README, "Limits")."""

    # Room for a dump of Kubernetes' published limits (5,000 nodes, 150,000 pods and their
    # controllers: about 260,000 objects, 0.6-1 GiB of JSON; see README, "Performance").
    file_bytes: int = 1024 * MIB  # one file, or stdin
    total_bytes: int = 2048 * MIB  # all inputs of one scan together
    objects: int = 300_000  # documents and List items of one scan
    depth: int = 100  # nesting of mappings and lists in one document
    alias_nodes: int = 100_000  # values reached again through YAML aliases, per document
    problems: int = 100  # problems listed before the rest are only counted


# The YAML 1.1 merge key: its keys are meant to be overridden, so it is no duplicate.
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):  # type: ignore[misc]
    """libyaml's safe loader (several times faster than PyYAML's own) that reads mappings as
    the API server does: keys become JSON strings (`1: x` is "1"), and a key given twice is
    an error. YAML requires unique keys, and a silently dropped second `privileged:` would hide
    exactly what the checks look for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(
                None, None, f"expected a mapping, found {node.id}", node.start_mark
            )
        own = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
        self.flatten_mapping(node)  # pairs of `<<: *base` first: the node's own keys override
        merged = len(node.value) - own
        mapping: dict[str, Any] = {}
        own_keys: set[str] = set()
        for index, (key_node, value_node) in enumerate(node.value):
            key = _json_key(self.construct_object(key_node, deep=True), key_node)
            if index >= merged:
                if key in own_keys:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                own_keys.add(key)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def _json_key(key: Any, node: yaml.Node) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    if isinstance(key, int) or (isinstance(key, float) and math.isfinite(key)):
        return str(key)
    if isinstance(key, datetime.datetime):
        return _rfc3339(key)
    if isinstance(key, datetime.date):
        return key.isoformat()
    raise yaml.constructor.ConstructorError(
        None, None, f"a mapping key must be a string, not {type(key).__name__}", node.start_mark
    )


class DocumentError(Exception):
    """A document that is valid YAML but cannot be a Kubernetes object; names the field."""


def parse(name: str, text: str, is_json: bool) -> Iterator[tuple[int, Any]]:
    """(index, raw document) for each document of `text`, or InputError for a syntax error."""
    if is_json:
        yield 0, _parse_json(name, text)
        return
    index = -1
    try:
        for index, document in enumerate(yaml.load_all(text, Loader=_StrictLoader)):
            yield index, document
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(
            [f"{name}: document {index + 2}: invalid YAML{where}: {problem}"]
        ) from None
    except RecursionError:  # only PyYAML's pure-Python parser recurses; libyaml stops at 1000
        raise InputError([f"{name}: document {index + 2}: nested too deeply"]) from None
    except (AttributeError, TypeError, ValueError, OverflowError, IndexError) as exc:
        # PyYAML's constructors raise these for a value that does not fit its explicit tag
        # (`!!timestamp` or `!!int` with no value, `!!int x`) instead of a YAMLError.
        raise InputError(
            [f"{name}: document {index + 2}: invalid YAML: a value does not fit its tag ({exc})"]
        ) from None


def _parse_json(name: str, text: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping = dict(items)
        if len(mapping) != len(items):
            keys = [k for k, _ in items]
            duplicate = next(k for k in keys if keys.count(k) > 1)
            raise DocumentError(f"duplicate key {duplicate!r}")
        return mapping

    def constant(value: str) -> Any:
        raise DocumentError(f"{value} is not a JSON number")

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            [f"{name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"]
        ) from None
    except DocumentError as exc:
        raise InputError([f"{name}: invalid JSON: {exc}"]) from None
    except RecursionError:
        raise InputError([f"{name}: invalid JSON: nested too deeply"]) from None


def check_json_depth(document: Any, limits: Limits) -> Any:
    """`document` itself, parsed from JSON, once its nesting is within the limit.

    JSON has no aliases, sets, timestamps or bytes, and _parse_json already refused NaN and
    duplicate keys, so unlike YAML nothing needs converting: only the depth is checked, and
    without copying (the copy was most of the time and half the memory of a large dump).
    """
    path = _too_deep(document, 1, limits.depth) if isinstance(document, _CONTAINERS) else None
    if path is not None:
        raise DocumentError(f"{_at(_join(path))}nested deeper than {limits.depth} levels")
    return document


_CONTAINERS = (dict, list)


def _too_deep(value: Any, depth: int, limit: int) -> list[str | int] | None:
    """The path (outermost first) to the first container nested deeper than `limit`."""
    if depth > limit:
        return []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, _CONTAINERS):
            path = _too_deep(item, depth + 1, limit)
            if path is not None:
                path.insert(0, key)
                return path
    return None


def _join(path: list[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def normalize(document: Any, limits: Limits) -> Any:
    """A fresh copy of `document` as plain JSON data; DocumentError names the bad field.

    The copy undoes YAML aliases (the sanitizer and the checks may then treat every object as
    its own) and counts what they expand to, so that an alias bomb stops at the limit.
    """
    return _Normalizer(limits).value(document, "", set())


class _Normalizer:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.expanded: set[int] = set()  # containers already copied once
        self.alias_nodes = 0

    def value(self, value: Any, path: str, ancestors: set[int]) -> Any:
        if isinstance(value, dict | list | set):
            return self._container(value, path, ancestors)
        if value is None or isinstance(value, str | bool | int):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise DocumentError(f"{_at(path)}{value} is not a valid number")
            return value
        if isinstance(value, datetime.datetime):
            return _rfc3339(value)
        if isinstance(value, datetime.date):
            return value.isoformat()
        if isinstance(value, bytes):  # !!binary: the API holds bytes as base64 strings
            return base64.b64encode(value).decode("ascii")
        raise DocumentError(f"{_at(path)}unsupported value of type {type(value).__name__}")

    def _container(
        self, value: dict[Any, Any] | list[Any] | set[Any], path: str, ancestors: set[int]
    ) -> Any:
        identity = id(value)
        if identity in ancestors:
            raise DocumentError(f"{_at(path)}YAML alias refers to itself")
        depth = len(ancestors) + 1
        if depth > self.limits.depth:
            raise DocumentError(f"{_at(path)}nested deeper than {self.limits.depth} levels")
        if identity in self.expanded:
            self.alias_nodes += len(value)
            if self.alias_nodes > self.limits.alias_nodes:
                raise DocumentError(
                    f"YAML aliases expand to more than {self.limits.alias_nodes} values"
                )
        self.expanded.add(identity)
        ancestors.add(identity)
        try:
            if isinstance(value, list):
                return [self.value(v, f"{path}[{i}]", ancestors) for i, v in enumerate(value)]
            if isinstance(value, set):  # !!set: a mapping whose values are all null
                return dict.fromkeys(sorted(value))
            # Keys are strings: JSON has no others, and the YAML loader makes them so.
            return {
                key: self.value(item, f"{path}.{key}" if path else key, ancestors)
                for key, item in value.items()
            }
        finally:
            ancestors.discard(identity)


def _at(path: str) -> str:
    return f"{path}: " if path else ""


def _rfc3339(value: datetime.datetime) -> str:
    if value.tzinfo is None:  # PyYAML returns UTC timestamps as naive datetimes
        value = value.replace(tzinfo=datetime.UTC)
    return value.isoformat().replace("+00:00", "Z")
