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
import textwrap
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
    width: int | None = None,
) -> str:
    """tabulate's "simple" table of cells the caller made safe with `cell`; only the columns in
    `numbers` are read as numbers (a pool named 1e3 stays 1e3, not 1000); `widths` wraps.
    With `width`, a table wider than that is given as one record per row instead (`records`)."""
    text_columns = [i for i in range(len(headers)) if i not in numbers]
    cells = rows
    if widths is not None:
        cells = [
            [_wrapped(value, limit) for value, limit in zip(row, widths, strict=True)]
            for row in rows
        ]
    text = tabulate(cells, headers=list(headers), tablefmt="simple", disable_numparse=text_columns)
    if width is not None and natural_width([text]) > width:
        return records(rows, headers, width)
    return text


def _wrapped(value: Any, width: int | None) -> Any:
    """A text cell wrapped to `width` at spaces only. tabulate's own wrapping (maxcolwidths)
    also breaks at hyphens, which cuts most Kubernetes names (`nvidia-dcgm-` / `exporter`)
    into pieces that no longer copy as a name."""
    if width is None or not isinstance(value, str) or len(value) <= width:
        return value
    return "\n".join(
        line
        for part in value.split("\n")
        for line in textwrap.wrap(part, width, break_on_hyphens=False) or [""]
    )


def records(rows: Sequence[Sequence[Any]], headers: Sequence[str], width: int) -> str:
    """A table too wide for the terminal, one row per paragraph: the first cell, then
    "header value" for each other non-empty cell, wrapped to `width`."""
    lines = []
    for first, *rest in rows:
        pairs = [
            f"{header.lower()} {value}"
            for header, value in zip(headers[1:], rest, strict=True)
            if str(value) != ""
        ]
        lines.append(" ".join(f"{first}: {', '.join(pairs)}".split("\n")))
    return wrap_lines("\n".join(lines), width)


def wrap_lines(text: str, width: int, yaml: bool = False) -> str:
    """Each line longer than `width` (not counting the renderers' colour codes) wrapped at
    spaces, its continuation lines indented two more than the line itself (a `# ` comment's
    go on as comments); shorter lines unchanged. With `yaml`, only comments are wrapped: any
    other line of YAML stays whole, as it must to keep its meaning."""
    out: list[str] = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        comment = body.startswith("# ")
        if len(strip_colour(line)) <= width or (yaml and not comment):
            out.append(line)
            continue
        lead = line[: len(line) - len(body)]
        out.extend(
            textwrap.wrap(
                body,
                width,
                initial_indent=lead,
                subsequent_indent=lead + ("# " if comment else "  "),
                break_on_hyphens=False,
            )
        )
    return "\n".join(out)


# The width of the table written to a file or a pipe: the same bytes whatever terminal ran
# the command. On a terminal the table is laid out to its width instead.
DEFAULT_WIDTH = 120
MIN_COLUMN = 10  # a wrapped column narrower than this is unreadable
_GUTTER = 2  # tabulate's "simple" format puts two spaces between columns


def natural_width(texts: Sequence[str]) -> int:
    """The widest line of these cells (cells of several lines count line by line)."""
    return max((len(line) for text in texts for line in text.split("\n")), default=0)


def fit_widths(width: int, natural: Sequence[int], shares: Sequence[int]) -> list[int | None]:
    """Column widths (tabulate's maxcolwidths) for a table `width` characters wide: a column
    of share 0 keeps its natural width (None: not wrapped); the others split what is left of
    the line in proportion to their shares, a column that needs less than its part keeping its
    natural width and leaving the rest to the others; none goes below MIN_COLUMN, so a very
    narrow terminal gets a table wider than itself rather than an unreadable one."""
    widths: list[int | None] = [None] * len(natural)
    space = width - _GUTTER * (len(natural) - 1)
    space -= sum(n for n, share in zip(natural, shares, strict=True) if share == 0)
    flexible = {i for i, share in enumerate(shares) if share > 0}
    settled = True
    while flexible and settled:
        settled = False
        total = sum(shares[i] for i in flexible)
        for i in sorted(flexible):
            if natural[i] <= space * shares[i] // total:
                widths[i] = natural[i]
                space -= natural[i]
                flexible.discard(i)
                settled = True
                break
    total = sum(shares[i] for i in flexible)
    for i in sorted(flexible):
        widths[i] = max(MIN_COLUMN, space * shares[i] // total)
    return widths


_SGR = re.compile("\x1b\\[[0-9;]*m")


def strip_colour(text: str) -> str:
    """`text` without the colour codes the renderers themselves add (SGR sequences; any ESC
    from the cluster was already escaped by `cell`)."""
    return _SGR.sub("", text)
