"""Text from the cluster made safe and bounded for a terminal.

Names, messages and reasons come from objects anyone with write access to the cluster (or to
an input file) chose. Printed raw, `ESC ]52;c;...` writes the reader's clipboard, `ESC ]0;...`
sets the window title, CSI sequences move the cursor over earlier lines, and a carriage return
or a newline forges rows. `printable` shows every such character instead: C0 controls (newline
and tab too: in a cell or a one-line message they are content, not layout), DEL, C1 controls,
Unicode line and paragraph separators, bidirectional embeddings and overrides, and lone
surrogates (which no terminal encoding can write), each as a Python-style escape (`\\x1b`,
`\\u202e`). The renderers apply it to each value before they add layout of their own (the
lines of a multi-line cell, colours).

`clip` bounds a value: tabulate wraps a column with textwrap, whose cost grows with the square
of an unbroken word, so a 1 MiB name took 98 s; values over MAX_CHARS are cut with a marker
that says how much was left out (the JSON and HTML reports keep them whole).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

from tabulate import tabulate

# Long enough for every message the built-in checks write (the longest fixture message has
# about 600 characters), short enough that wrapping it costs nothing.
MAX_CHARS = 2000

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str) -> str:
    """`text` with every control character, separator, bidi override and lone surrogate
    written as a visible escape; nothing else changes."""
    return _UNSAFE.sub(_escape, text)


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """`text` cut to `limit` characters, with a marker of how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit} chars)"


def cell(value: object, limit: int = MAX_CHARS) -> str:
    """A value as it may appear in a table cell or a one-line message: clipped, then made
    printable (the marker counts the characters of the value, not of their escapes)."""
    return printable(clip(str(value), limit))


def block(text: str) -> str:
    """`cell` for text whose newlines are layout (a rendered YAML fix): each line on its own."""
    return "\n".join(cell(line) for line in text.split("\n"))


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    widths: Sequence[int | None] | None = None,
    numbers: Collection[int] = (),
) -> str:
    """tabulate's "simple" table of cells the caller made safe with `cell`; only the columns in
    `numbers` are read as numbers (a pool named 1e3 stays 1e3, not 1000); `widths` wraps."""
    text_columns = [i for i in range(len(headers)) if i not in numbers]
    return tabulate(
        rows,
        headers=list(headers),
        tablefmt="simple",
        maxcolwidths=list(widths) if widths is not None else None,
        disable_numparse=text_columns,
    )
