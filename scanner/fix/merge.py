"""Merging a remediation into an object as `kubectl patch` would: a strategic-merge-like
patch (lists of named items merged item by item) and RFC 6902 JSON patches.

Both work on the round-trip data of gpu_audit.fix.documents (ruamel.yaml's CommentedMap and
CommentedSeq, which are a MutableMapping and a MutableSequence), so that what the patch does
not touch keeps its comments, order and quoting.

The strategic merge follows Kubernetes' rules where they exist: a null deletes a key, an item
with `$patch: delete` deletes the item it matches, lists of objects with a patch merge key
(containers, env and volumes by `name`, volumeMounts by `mountPath`, ports by `containerPort`)
are merged item by item, and other lists are replaced. `tolerations` has no merge key in the
API (it is replaced whole by `kubectl patch`); a file fix adds to it instead (an item equal
to one already there is not added again), so that a fix does not drop the tolerations already
there. A list that a deletion leaves empty is removed.

New strings are written so that a YAML 1.1 reader (kubectl, Helm: sigs.k8s.io/yaml) reads them
back as strings: "true", "0400" or "1.0" in double quotes, text of several lines as a literal
block.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

import yaml
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

# The patch merge keys of the Kubernetes API for the lists a remediation may touch: the
# `patchStrategy:"merge" patchMergeKey:"..."` tags of k8s.io/api core/v1 types.go
# (https://github.com/kubernetes/api/blob/master/core/v1/types.go). PodSpec.Tolerations has
# no patchStrategy in its field tag, so a strategic merge patch replaces it whole (the
# tolerations example of https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-
# api-object-kubectl-patch/); see the module's doc for what a file fix does instead.
MERGE_KEYS: Mapping[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "imagePullSecrets": ("name",),
    "resourceClaims": ("name",),
    "hostAliases": ("ip",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "ports": ("containerPort",),
    "tolerations": (),  # the whole item (see the module's doc)
}
# Strategic-merge-patch directives: `$patch: delete` is honoured, the others mean nothing to a
# file and are dropped.
DELETE = "$patch"
_DIRECTIVE_PREFIXES = ("$setElementOrder/", "$deleteFromPrimitiveList/", "$retainKeys")


class PatchError(ValueError):
    """A patch that does not apply to the object (a JSON pointer to nothing, a type clash)."""


def strategic_merge(target: MutableMapping[str, Any], patch: Mapping[str, Any]) -> None:
    """Merge `patch` into `target` in place (see the module's doc)."""
    for key, value in patch.items():
        if key.startswith(_DIRECTIVE_PREFIXES) or key == DELETE:
            continue
        if value is None:
            target.pop(key, None)
            continue
        current = target.get(key)
        if isinstance(value, Mapping) and value and not _plain(value) and current is None:
            continue  # only deletions, of keys that are not there: nothing to write
        if isinstance(value, Mapping) and isinstance(current, MutableMapping):
            strategic_merge(current, value)
        elif (
            isinstance(value, Sequence)
            and not isinstance(value, str)
            and isinstance(current, MutableSequence)
            and key in MERGE_KEYS
        ):
            _merge_list(current, value, MERGE_KEYS[key])
            if not current:
                del target[key]
        else:
            target[key] = _plain(value)


def _merge_list(target: MutableSequence[Any], patch: Sequence[Any], keys: tuple[str, ...]) -> None:
    for item in patch:
        if not isinstance(item, Mapping):
            if item not in target:
                target.append(_plain(item))
            continue
        at = next(
            (
                i
                for i, old in enumerate(target)
                if isinstance(old, Mapping) and _same_item(old, item, keys)
            ),
            None,
        )
        if item.get(DELETE) == "delete":
            if at is not None:
                del target[at]
            continue
        if at is None:
            target.append(_plain({k: v for k, v in item.items() if v is not None}))
        else:
            strategic_merge(target[at], item)


def _same_item(old: Mapping[str, Any], new: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    if keys:
        return all(old.get(k) == new.get(k) for k in keys)
    wanted = {k: v for k, v in new.items() if k != DELETE and v is not None}
    return dict(old) == wanted


def _string(text: str) -> str:
    """A new string as it is to be written (see the module's doc)."""
    if type(text) is not str:  # a ScalarString of the patch: written as it was quoted
        return text
    if "\n" in text.rstrip("\n"):
        literal: str = LiteralScalarString(text)
        return literal
    try:
        plain = isinstance(yaml.safe_load(text), str)
    except yaml.YAMLError:
        plain = False
    return text if plain else DoubleQuotedScalarString(text)


def _plain(value: Any) -> Any:
    """A patch value to insert: a deep copy without directives, and without the nulls (a
    null deletes a key: where nothing is, it writes nothing)."""
    if isinstance(value, Mapping):
        return {
            k: _plain(v)
            for k, v in value.items()
            if not (k == DELETE or k.startswith(_DIRECTIVE_PREFIXES) or v is None)
        }
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return _string(value)
    return copy.copy(value)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer {path!r} does not start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _step(node: Any, token: str, path: str) -> Any:
    if isinstance(node, Mapping):
        if token not in node:
            raise PatchError(f"{path}: no {token!r}")
        return node[token]
    if isinstance(node, Sequence) and not isinstance(node, str):
        return node[_index(node, token, path, append=False)]
    raise PatchError(f"{path}: {token!r} of a scalar")


def _index(node: Sequence[Any], token: str, path: str, *, append: bool) -> int:
    if append and token == "-":
        return len(node)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"{path}: {token!r} is not a list index")
    index = int(token)
    if index > len(node) or (index == len(node) and not append):
        raise PatchError(f"{path}: index {index} is past the end of the list")
    return index


def json_patch(document: Any, operations: Sequence[Mapping[str, Any]]) -> None:
    """Apply RFC 6902 operations (add, remove, replace, test, move, copy) to `document` in
    place; the document root itself cannot be replaced. Raises PatchError."""
    for op in operations:
        name, path = op.get("op"), op.get("path")
        if not isinstance(path, str) or name not in (
            "add",
            "remove",
            "replace",
            "test",
            "move",
            "copy",
        ):
            raise PatchError(f"not a JSON patch operation: {dict(op)!r}")
        if name == "test":
            if _get(document, path) != op.get("value"):
                raise PatchError(f"{path}: test failed")
            continue
        if name in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(f"{name} {path}: no from")
            value = copy.deepcopy(_get(document, source))
            if name == "move":
                _remove(document, source)
            _add(document, path, value)
            continue
        if name == "remove":
            _remove(document, path)
            continue
        if "value" not in op:
            raise PatchError(f"{name} {path}: no value")
        if name == "replace":
            _replace(document, path, _plain(op["value"]))
        else:
            _add(document, path, _plain(op["value"]))


def _get(document: Any, path: str) -> Any:
    node = document
    for token in _pointer(path):
        node = _step(node, token, path)
    return node


def _parent(document: Any, path: str) -> tuple[Any, str]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("the document root cannot be replaced or removed")
    node = document
    for token in tokens[:-1]:
        node = _step(node, token, path)
    return node, tokens[-1]


def _add(document: Any, path: str, value: Any) -> None:
    parent, token = _parent(document, path)
    if isinstance(parent, MutableMapping):
        parent[token] = value
    elif isinstance(parent, MutableSequence):
        parent.insert(_index(parent, token, path, append=True), value)
    else:
        raise PatchError(f"{path}: the parent is a scalar")


def _replace(document: Any, path: str, value: Any) -> None:
    """The value at `path` replaced where it is (a key keeps its place in its mapping)."""
    parent, token = _parent(document, path)
    if isinstance(parent, MutableMapping):
        if token not in parent:
            raise PatchError(f"{path}: no {token!r}")
        parent[token] = value
    elif isinstance(parent, MutableSequence):
        parent[_index(parent, token, path, append=False)] = value
    else:
        raise PatchError(f"{path}: the parent is a scalar")


def _remove(document: Any, path: str) -> None:
    parent, token = _parent(document, path)
    if isinstance(parent, MutableMapping):
        if token not in parent:
            raise PatchError(f"{path}: no {token!r}")
        del parent[token]
    elif isinstance(parent, MutableSequence):
        del parent[_index(parent, token, path, append=False)]
    else:
        raise PatchError(f"{path}: the parent is a scalar")
