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
peak is what is kept. Parts are looked up whole, top down, by their JSON text (written by
msgspec, in C): at 20,000 pods, 480 thousand parts are visited instead of 2.7 million, the
listing's CPU went from 4.0 to 3.6 s and the peak traced memory of the listing from 188 to
152 MiB. Files are not shared: their peak is the parse of the whole file, which
sharing afterwards would not lower (measured at 50k pods with the texts shared as they were
redacted: the same peak RSS, 3-5% more time).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Set
from typing import Any

import msgspec

from gpu_audit.redact import list_under_credential

# The JSON text of a part: what the report would print of it, so two parts with the same text
# read the same to every reader (key order kept, true / 1 / 1.0 and -0.0 / 0.0 apart). Parts
# come from a JSON decoder: their keys are strings.
_JSON_TEXT = msgspec.json.Encoder().encode


class SharedParts:
    """The parts seen so far, each under the hash of its JSON text. A part is looked up whole,
    before its own parts: when an equal one was seen, the whole part is replaced and nothing
    in it is visited (most of a pod is its workload's, seen before); else it is kept and its
    own parts are looked up in turn. A part found under its hash is taken only when its text
    is the new one's (no trust in the hash): a part sanitize has changed since (a credential
    redacted) is no longer found, and the new part is kept apart. A list under a key
    that names a credential is looked up in a table of its own (sanitize redacts it whole
    there, not elsewhere). The table holds its parts, so an identity in it is not reused
    while it lives; it is dropped after the load, and the objects keep their parts."""

    def __init__(self) -> None:
        self._parts: dict[int, Any] = {}
        self._credential_lists: dict[int, Any] = {}
        # The parts kept apart from the one under their hash: held as the tables hold theirs,
        # so that the id of a sanitized part is not reused while the table lives.
        self._apart: list[Any] = []
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
            try:
                self._share_items(obj)
                yield self._sanitized
                self._sanitized.update(self._new)
            finally:
                self._new.clear()

    def _part(self, part: Any, under_credential: bool) -> Any:
        """The part equal to this mapping or list: one seen before, or this one, its own
        parts shared."""
        table = self._credential_lists if under_credential else self._parts
        text = _JSON_TEXT(part)
        key = hash(text)
        seen = table.get(key)
        if seen is None:
            table[key] = part
        elif _JSON_TEXT(seen) == text:
            return seen
        else:
            self._apart.append(part)
        self._new.append(id(part))
        self._share_items(part)
        return part

    def _share_items(self, part: Any) -> None:
        texts = self._texts
        is_map = part.__class__ is dict
        for at, value in part.items() if is_map else enumerate(part):
            kind = value.__class__
            if kind is str:
                text = texts.setdefault(value, value)
                if text is not value:
                    part[at] = text
            elif kind is dict:
                part[at] = self._part(value, False)
            elif kind is list:
                part[at] = self._part(value, is_map and list_under_credential(at))
