"""The immutable snapshot every check reads: objects indexed by type, name and labels."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from gpu_audit.model import ObjRef, Resource

CRD_NOT_INSTALLED = "CRD not installed:"
API_NOT_SERVED = "API not served:"
T = TypeVar("T")
# Snapshot.derived's marker of a key not computed yet (a derived value may be None).
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class CollectionGap:
    """A resource type the source could not provide, and why ("forbidden: list pods")."""

    type: str
    reason: str

    @property
    def api_absent(self) -> bool:
        """The cluster does not serve the type at all: its checks are not evaluated, but
        nothing failed, so the scan is still complete (no Volcano installed is not an error)."""
        return self.reason.startswith((CRD_NOT_INSTALLED, API_NOT_SERVED))


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What the snapshot was read from. Renderers show it; checks never look at it."""

    kind: str  # "files" or "live"
    inputs: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


class Snapshot:
    """All objects of one scan, sorted, with indexes built once.

    `available` is the set of resource types the source could speak for: for files, the
    types that occur in them; for a live cluster, every type that was listed successfully,
    even when the list was empty. A check whose inputs are not available is not evaluated.
    `complete` is false when a gap is a failure (forbidden, an error), not an API the cluster
    does not serve.
    """

    __slots__ = (
        "_by_labels",
        "_by_ref",
        "_by_type",
        "_by_type_ns",
        "_derived",
        "_facts",
        "available",
        "complete",
        "gaps",
        "source",
    )

    def __init__(
        self,
        resources: Iterable[Resource],
        *,
        available: Iterable[str] | None = None,
        gaps: Iterable[CollectionGap] = (),
        source: SourceInfo | None = None,
    ) -> None:
        ordered = sorted(resources, key=lambda r: r.ref.sort_key)
        by_type: dict[str, list[Resource]] = defaultdict(list)
        by_type_ns: dict[tuple[str, str], list[Resource]] = defaultdict(list)
        by_ref: dict[ObjRef, Resource] = {}
        by_labels: dict[tuple[str, str, str], list[Resource]] = defaultdict(list)
        for resource in ordered:
            by_ref.setdefault(resource.ref, resource)
            by_type[resource.ref.kind].append(resource)
            by_type_ns[(resource.ref.kind, resource.ref.namespace)].append(resource)
            for key, value in resource.labels.items():
                by_labels[(resource.ref.kind, key, value)].append(resource)
        self._by_type = MappingProxyType({k: tuple(v) for k, v in by_type.items()})
        self._by_type_ns = MappingProxyType({k: tuple(v) for k, v in by_type_ns.items()})
        self._by_ref = MappingProxyType(by_ref)
        self._by_labels = MappingProxyType({k: tuple(v) for k, v in by_labels.items()})
        self.gaps: tuple[CollectionGap, ...] = tuple(sorted(gaps, key=lambda g: g.type))
        self.complete = not any(not g.api_absent for g in self.gaps)
        present = set(self._by_type) if available is None else set(available)
        self.available: frozenset[str] = frozenset(present - {g.type for g in self.gaps})
        self.source = source or SourceInfo(kind="files")
        self._derived: dict[Hashable, Any] = {}
        self._facts: dict[Hashable, dict[int, tuple[Resource, Any]]] = {}

    def derived(self, key: Hashable, compute: Callable[[Snapshot], T]) -> T:
        """`compute(self)`, computed once per snapshot and key: an index built from the
        objects (pods by node, templates by namespace) that several checks look up, so that
        a cross-object match is a lookup instead of a loop over every object. The snapshot
        is immutable, so the result never goes stale; it must be treated as read-only."""
        # No call beyond the lookup (not even typing.cast): asked millions of times.
        found: T = self._derived.get(key, _MISSING)
        if found is _MISSING:
            found = self._derived[key] = compute(self)
        return found

    def fact(self, key: Hashable, resource: Resource, compute: Callable[[Resource], T]) -> T:
        """`compute(resource)`, computed once per snapshot, key and object: a fact about one
        object that several checks ask for (its controlling owner, whether it requests GPUs),
        so that no check walks every object's containers or owner chain again. `resource` may
        be an object the snapshot does not hold (a pod made from a template): facts are kept
        per object, not per name. The result must be treated as read-only."""
        known = self._facts.get(key)
        if known is None:
            known = self._facts[key] = {}
        found = known.get(id(resource))
        if found is None:
            # The object is kept with its fact, so its id is not reused while the entry lives.
            found = known[id(resource)] = (resource, compute(resource))
        fact: T = found[1]
        return fact

    def __len__(self) -> int:
        return len(self._by_ref)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_type))

    def count(self, type_: str) -> int:
        return len(self._by_type.get(type_, ()))

    def all(self) -> tuple[Resource, ...]:
        return tuple(r for t in self.types for r in self._by_type[t])

    def of(self, *types: str) -> tuple[Resource, ...]:
        """Every object of the given types, in type then namespace/name order."""
        if len(types) == 1:
            return self._by_type.get(types[0], ())
        return tuple(r for t in types for r in self._by_type.get(t, ()))

    def in_namespace(self, type_: str, namespace: str) -> tuple[Resource, ...]:
        return self._by_type_ns.get((type_, namespace), ())

    def get(self, type_: str, namespace: str, name: str) -> Resource | None:
        return self._by_ref.get(ObjRef(type_, namespace, name))

    def with_label(self, type_: str, key: str, value: str) -> tuple[Resource, ...]:
        return self._by_labels.get((type_, key, value), ())

    def has(self, type_: str) -> bool:
        return type_ in self.available
