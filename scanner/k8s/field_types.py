"""The types of the fields the checks read, as the API server decodes them.

The checks read objects defensively (a field of the wrong type reads as empty, see
`objects.py`), so a manifest with `containers: "trainer"` is scanned without a crash, but also
without a finding about the container it meant. The API server would refuse that object
("json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type
[]v1.Container"), so the loader names each such field as an input warning. The types are those
of the Kubernetes API reference (https://kubernetes.io/docs/reference/kubernetes-api/:
ObjectMeta, PodSpec, Container, EnvVar, ResourceRequirements, Toleration). null is accepted
everywhere: the API server decodes it as the field's zero value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from gpu_audit.k8s.pods import templates_of
from gpu_audit.model import Resource

# What a field holds: a name from _SCALARS, an object with known fields, a list or a map.
Schema: TypeAlias = "str | _Object | _ListOf | _MapOf"


@dataclass(frozen=True, slots=True)
class _Object:
    fields: Mapping[str, Schema]
    # (name, schema, (what a scalar is called, whether a value is one) or None): the fields in
    # order, a scalar's test found once (most fields are scalars; _check reads them inline).
    checks: tuple[tuple[str, Schema, tuple[str, Callable[[object], bool]] | None], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        checks = tuple(
            (name, schema, _SCALARS[schema] if isinstance(schema, str) else None)
            for name, schema in self.fields.items()
        )
        object.__setattr__(self, "checks", checks)


@dataclass(frozen=True, slots=True)
class _ListOf:
    item: Schema


@dataclass(frozen=True, slots=True)
class _MapOf:
    value: Schema


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_quantity(value: object) -> bool:  # resource.Quantity reads a JSON string or number
    return isinstance(value, str) or _is_number(value)


# name -> (what it is called in a warning, whether a value is one)
_SCALARS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "string": ("a string", lambda v: isinstance(v, str)),
    "boolean": ("a boolean", lambda v: isinstance(v, bool)),
    "integer": ("an integer", _is_integer),
    "quantity": ("a quantity (a string or a number)", _is_quantity),
    "object": ("an object", lambda v: isinstance(v, dict)),
}

_STRINGS = _MapOf("string")
_QUANTITIES = _MapOf("quantity")
METADATA = _Object(
    {"labels": _STRINGS, "annotations": _STRINGS, "ownerReferences": _ListOf("object")}
)
_CONTAINER = _Object(
    {
        "name": "string",
        "image": "string",
        "command": _ListOf("string"),
        "args": _ListOf("string"),
        "env": _ListOf(_Object({"name": "string", "value": "string", "valueFrom": "object"})),
        "envFrom": _ListOf("object"),
        "resources": _Object({"requests": _QUANTITIES, "limits": _QUANTITIES}),
        "ports": _ListOf("object"),
        "volumeMounts": _ListOf("object"),
        "securityContext": "object",
        "livenessProbe": "object",
        "readinessProbe": "object",
        "startupProbe": "object",
    }
)
_TOLERATION = _Object(
    {
        "key": "string",
        "operator": "string",
        "value": "string",
        "effect": "string",
        "tolerationSeconds": "integer",
    }
)
POD_SPEC = _Object(
    {
        "containers": _ListOf(_CONTAINER),
        "initContainers": _ListOf(_CONTAINER),
        "ephemeralContainers": _ListOf(_CONTAINER),
        "volumes": _ListOf("object"),
        "tolerations": _ListOf(_TOLERATION),
        "nodeSelector": _STRINGS,
        "affinity": "object",
        "topologySpreadConstraints": _ListOf("object"),
        "securityContext": "object",
        "hostNetwork": "boolean",
        "hostPID": "boolean",
        "hostIPC": "boolean",
        "nodeName": "string",
        "schedulerName": "string",
        "priorityClassName": "string",
        "runtimeClassName": "string",
        "serviceAccountName": "string",
    }
)
_TOP = _Object({"metadata": METADATA, "spec": "object"})


def wrong_typed_fields(resource: Resource) -> list[str]:
    """`path: expected a list, got a string` for each field of `resource` (its metadata and
    every pod spec it carries) whose value has a type the API server would refuse."""
    out: list[str] = []
    _check(resource.raw, _TOP, "", out)
    for template in templates_of(resource):
        if template.path != "spec":  # not a Pod, whose metadata is the object's
            holder = template.path.removesuffix(".spec")
            _check(template.metadata, METADATA, f"{holder}.metadata", out)
        _check(template.spec, POD_SPEC, template.path, out)
    return out


# Where a value sits: the path of the object's field it starts from ("", "spec",
# "spec.template.spec"), then (parent, key or index) pairs. A field's path is written out only
# when the field is wrong: most fields are right, and formatting each path cost more than
# checking its value.
_Path: TypeAlias = "str | tuple[_Path, str | int]"


def _text(path: _Path) -> str:
    if isinstance(path, str):
        return path
    parent, step = path
    head = _text(parent)
    if isinstance(step, int):
        return f"{head}[{step}]"
    return f"{head}.{step}" if head else step


def _check(value: Any, schema: Schema, path: _Path, out: list[str]) -> None:
    if value is None:
        return
    if isinstance(schema, str):
        expected, fits = _SCALARS[schema]
        if not fits(value):
            out.append(f"{_text(path)}: expected {expected}, got {_json_type(value)}")
        return
    if isinstance(schema, _ListOf):
        if not isinstance(value, list):
            out.append(f"{_text(path)}: expected a list, got {_json_type(value)}")
        else:
            _check_items(enumerate(value), schema.item, path, out)
        return
    if not isinstance(value, dict):
        out.append(f"{_text(path)}: expected an object, got {_json_type(value)}")
    elif isinstance(schema, _MapOf):
        _check_items(value.items(), schema.value, path, out)
    else:
        for name, field_schema, scalar in schema.checks:
            item = value.get(name)
            if item is None:
                continue
            if scalar is None:
                _check(item, field_schema, (path, name), out)
            elif not scalar[1](item):
                out.append(f"{_text((path, name))}: expected {scalar[0]}, got {_json_type(item)}")


def _check_items(
    items: Iterable[tuple[str | int, Any]], schema: Schema, path: _Path, out: list[str]
) -> None:
    """The items of a list or the values of a map, all of one schema."""
    if not isinstance(schema, str):
        for step, item in items:
            _check(item, schema, (path, step), out)
        return
    expected, fits = _SCALARS[schema]  # labels, annotations, args: no call per value
    for step, item in items:
        if item is not None and not fits(item):
            out.append(f"{_text((path, step))}: expected {expected}, got {_json_type(item)}")


def _json_type(value: object) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
