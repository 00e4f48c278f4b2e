"""Pod-spec fixes of built-in kinds that a strategic merge patch would apply with a loss.

A check writes a pod-spec fix once, as a strategic-merge fragment, and for a built-in kind
`kubectl patch` sends it as a strategic merge patch (its default type). Such a patch merges a
list item by item only where the field's Go type declares `patchStrategy:"merge"` and a
`patchMergeKey` (k8s.io/api core/v1 types.go, v0.37.2: containers, env, volumes,
volumeMounts... are cr_patches.MERGE_KEYS); it replaces every other list whole
(https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/
#notes-on-the-strategic-merge-patch). Among them:

- PodSpec.tolerations: `Tolerations []Toleration json:"tolerations,omitempty"`, no patch
  strategy (types.go line 4513);
- NodeSelector.nodeSelectorTerms and NodeSelectorTerm.matchExpressions / matchFields
  (lines 3997, 4008);
- Container.command and args (lines 3144, 3155), readinessGates (line 4548).

A fix of tolerations or of node affinity means "also this one" (cr_patches.ADDITIVE_LISTS):
`tolerations: [the new one]` sent as a strategic merge patch drops the tolerations the pod
template has, and a new nodeSelectorTerm replaces the terms it has (so the pods lose the
placement they had). `lost_lists` finds those lists; the engine then writes the fix as the
guarded JSON patch a custom resource gets (cr_patches.json_patch: tolerations appended at
`.../tolerations/-`, or the whole list added where the object has none; the expressions
ANDed into every existing term). Lists a fix replaces on purpose (a container's args) are
written whole by the check, from the object, and stay a strategic merge patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_audit.k8s.cr_patches import (
    ADDITIVE_LISTS,
    MERGE_KEYS,
    Pointer,
    at,
    dotted,
    plain,
    pointer,
)
from gpu_audit.k8s.objects import as_list, as_mapping

_TOLERATIONS = "tolerations"
_TERM_SECTIONS = ("matchExpressions", "matchFields")


def lost_lists(obj: Mapping[str, Any], path: str, fragment: Mapping[str, Any]) -> list[str]:
    """The JSON pointers of the lists of `fragment` (a pod-spec fix of the pod spec at the
    dotted `path` of `obj`) that a strategic merge patch would replace whole although the fix
    adds to them, where the object has an item the fragment does not keep."""
    out: list[str] = []
    _walk(obj, dotted(path), fragment, "", out)
    return out


def _walk(obj: Mapping[str, Any], tokens: Pointer, value: Any, key: str, out: list[str]) -> None:
    base = at(obj, tokens)
    if isinstance(value, Mapping) and isinstance(base, Mapping):
        for name, item in value.items():
            if not str(name).startswith("$"):
                _walk(obj, (*tokens, str(name)), item, str(name), out)
        return
    if not isinstance(value, list) or not isinstance(base, list | tuple) or not base:
        return
    merge_key = MERGE_KEYS.get(key)
    if merge_key:
        for item in map(as_mapping, value):
            index = next(
                (
                    i
                    for i, old in enumerate(base)
                    if as_mapping(old).get(merge_key) == item.get(merge_key)
                ),
                None,
            )
            if index is not None:
                for name, field in item.items():
                    if name != merge_key and not str(name).startswith("$"):
                        _walk(obj, (*tokens, index, str(name)), field, str(name), out)
    elif key in ADDITIVE_LISTS and not all(_kept(key, old, value) for old in base):
        out.append(pointer(tokens))


def _kept(key: str, old: Any, new: list[Any]) -> bool:
    """Whether the list `new` keeps the item `old`: a toleration as it is (a toleration with
    more fields tolerates less); a node selector term by a term that has all of its
    expressions and fields (more of them only narrow it, which is what the fix adds)."""
    items = [plain(item) for item in new]
    if key == _TOLERATIONS:
        return old in items
    term = as_mapping(old)
    return any(
        all(
            expression in as_list(as_mapping(candidate).get(section))
            for section in _TERM_SECTIONS
            for expression in as_list(term.get(section))
        )
        for candidate in items
    )
