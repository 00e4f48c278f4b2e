"""Tables that remember what was computed for the texts a scan repeats, bounded in size."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(table: dict[K, V], key: K, value: V, size: int) -> None:
    """table[key] = value, the table emptied first when it holds `size` entries: memory stays
    bounded, and a lookup stays a plain dict read."""
    if len(table) >= size:
        table.clear()
    table[key] = value
