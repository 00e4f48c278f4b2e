"""Equal parts of loaded objects held once.

A cluster's objects repeat themselves: the pods of one workload carry the same containers,
tolerations, probes and resources, and most small mappings (`{operator: Exists}`, an env
entry, a port) recur across the whole cluster. A parser makes a new dict, list and string
for every one of them. The 34,600 objects of a 20,000-pod test cluster, as listed, are 2.7
million dicts, lists, strings and numbers in 274 MiB; shared, 420 thousand in 62 MiB (the
scan's peak RSS went from 485 to 266 MiB).

Sharing is sound because a snapshot is read-only (tests/test_snapshot_read_only.py runs every
check, the diagnostics and the report on every fixture and asserts no object changed): a
shared part is only ever read. Parts are shared only between objects that are equal as JSON,
in the same key order, so what any reader sees, and what the report prints, is unchanged.

The live loader shares each object as it comes, before it is redacted, and a part seen
before is not redacted again (gpu_audit.redact.sanitize says why that is the same), so the
peak is what is kept. Files are not shared: their peak is the parse of the whole file, which
sharing afterwards would not lower (measured at 50k pods with the texts shared as they were
redacted: the same peak RSS, 3-5% more time).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Set
from typing import Any

from gpu_audit.redact import list_under_credential


class SharedParts:
    """The parts seen so far, each under a key built from its items: a flat tuple of its
    keys, its texts, True, False and None as they are, its numbers with their class (True ==
    1 and -0.0 == 0.0, but the report prints them apart), and the identity of each of its
    (already shared) children. A child's identity is never 0 or 1, and a number is always in
    a tuple, so no two kinds of item can be taken for each other. A list under a key that
    names a credential is known apart (sanitize redacts it whole there, not elsewhere). A key
    holds its part, so an identity in a key is not reused while the table lives; the table
    is dropped after the load (its keys take about as much memory as the parts they stand
    for), and the objects keep their parts."""

    def __init__(self) -> None:
        self._parts: dict[tuple[Any, ...], Any] = {}
        # Texts too: a parser makes a new string for every value (1.9 million string objects
        # at 20,000 pods, 135 thousand of them distinct).
        self._texts: dict[str, str] = {}
        self._sanitized: set[int] = set()  # the parts of the objects sanitized so far
        self._new: list[int] = []  # the parts first seen in the object being shared
        # Threads of the live loader share one table; an object is shared and sanitized as a
        # whole, so that no thread reads a part another has not sanitized yet.
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def shared(self, obj: dict[str, Any]) -> Iterator[Set[int]]:
        """Replace each part of `obj` (not `obj` itself: two objects are never equal, name
        and namespace differ) by an equal one seen before, if any; yield the ids of the parts
        that are sanitized already, for the caller to sanitize the rest. Once it has, they are
        sanitized too."""
        with self._lock:
            for key, value in obj.items():
                if value.__class__ is dict or value.__class__ is list:
                    obj[key] = self._part(value, False)
            try:
                yield self._sanitized
                self._sanitized.update(self._new)
            finally:
                self._new.clear()

    def _part(self, part: Any, under_credential: bool) -> Any:
        """The part equal to this mapping or list: one seen before, or this one, its own
        parts shared first. One loop reads both (a mapping's keys go into its key)."""
        is_map = part.__class__ is dict
        items: list[Any] = ["{" if is_map else "[!" if under_credential else "["]
        append = items.append
        texts = self._texts
        for at, value in part.items() if is_map else enumerate(part):
            if is_map:
                append(at)
            kind = value.__class__
            if kind is str:  # first: most values are
                text = texts.setdefault(value, value)
                if text is not value:
                    part[at] = text
                append(text)
            elif kind is bool or value is None:
                append(value)
            elif kind is dict:
                value = part[at] = self._part(value, False)
                append(id(value))
            elif kind is list:
                value = part[at] = self._part(value, is_map and list_under_credential(at))
                append(id(value))
            else:  # the class keeps 1 apart from 1.0; repr keeps -0.0 apart from 0.0
                append((float, repr(value)) if kind is float else (kind, value))
        shared = self._parts.setdefault(tuple(items), part)
        if shared is part:
            self._new.append(id(part))
        return shared
