"""The renderer interface: a name, a file extension and a pure render function."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Document = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Renderer:
    name: str
    extension: str
    render: Callable[[Document, bool], str]  # (document, colour) -> text
    description: str = ""
