"""YAML files as round-trip documents: each object found again in the file it came from,
changed in place, and the file written back with every other document byte for byte.

A file is split at its `---` lines and only the documents a fix changed are written again
(by ruamel.yaml, which keeps their comments, key order, quoting and flow style, with the
indentation the document uses most); the others are kept as they were read. ruamel.yaml writes
a whole document in one indentation, so a document that mixes two (upstream manifests do:
`- ` under its key in one list, indented in the next) would be re-indented throughout: its
lines that the change does not touch are kept as they were instead, and the new lines are
indented like their neighbours, when the result reads back as the same data.
"""

from __future__ import annotations

import difflib
import functools
import io
import itertools
import re
from collections import Counter
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gpu_audit.model import ObjRef

_SEPARATOR = re.compile(r"^---[ \t]*(#.*)?$")
_UNSUPPORTED = re.compile(r"^(\.\.\.|%|--- *[^ #\n])")
TODO_PREFIX = "# TODO(gpu-audit "


class NotEditableError(ValueError):
    """Why an object cannot be changed in its file."""


@dataclass
class Chunk:
    """One document of a file: its `---` line (or "" for the first) and its text."""

    head: str
    body: str
    data: Any = None
    loaded: bool = False
    changed: bool = False
    rendered: str | None = None  # `data` written out, once it has changed
    # TODO comments to put above the object: (the comment up to its reason, the reason).
    todos: list[tuple[str, str]] = field(default_factory=list)
    added: list[Any] = field(default_factory=list)  # new objects written after it


def _yaml(mapping: int = 2, offset: int = 2) -> YAML:
    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long line that was not folded
    yaml.allow_duplicate_keys = True
    yaml.indent(mapping=mapping, sequence=offset + 2, offset=offset)
    return yaml


def _indents(text: str) -> tuple[int, int]:
    """The mapping indentation and the dash offset of block sequences that `text` uses most
    (2 and 2 when it shows none)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    mapping: Counter[int] = Counter()
    offset: Counter[int] = Counter()
    for line, after in itertools.pairwise(lines):
        if not line.rstrip().endswith(":"):
            continue
        column = len(line) - len(line.lstrip())
        if line.lstrip().startswith("- "):
            column += 2
        below = len(after) - len(after.lstrip())
        if after.lstrip().startswith("- ") and below >= column:
            offset[below - column] += 1
        elif below > column:
            mapping[below - column] += 1
    return (
        mapping.most_common(1)[0][0] if mapping else 2,
        offset.most_common(1)[0][0] if offset else 2,
    )


def split_documents(text: str) -> list[Chunk]:
    lines = text.splitlines(keepends=True)
    chunks = [Chunk("", "")]
    for line in lines:
        if _SEPARATOR.match(line.rstrip("\r\n")):
            chunks.append(Chunk(line, ""))
        else:
            chunks[-1].body += line
    return chunks


def dump(data: Any, like: str = "") -> str:
    """`data` as YAML, indented the way `like` is."""
    out = io.StringIO()
    _yaml(*_indents(like)).dump(data, out)
    return out.getvalue()


def _identity(obj: Any) -> tuple[str, str, str] | None:
    if not isinstance(obj, MutableMapping):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, MutableMapping):
        return None
    name = metadata.get("name") or metadata.get("generateName")
    namespace = metadata.get("namespace")
    return (str(obj.get("kind", "")), str(name or ""), str(namespace or ""))


def _matches(obj: Any, ref: ObjRef) -> bool:
    identity = _identity(obj)
    if identity is None:
        return False
    kind, name, namespace = identity
    return (
        kind == ref.kind_name
        and name == ref.name
        and (namespace == ref.namespace or (not namespace and ref.namespace in ("", "default")))
    )


class YamlFile:
    """One input file, read once; `text()` is what it holds after the changes."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.original = text
        # Worked on with \n line ends; a file of \r\n line ends gets them back.
        self.crlf = "\r\n" in text
        self.chunks = split_documents(text.replace("\r\n", "\n"))
        bad = next((ln for ln in text.splitlines() if _UNSUPPORTED.match(ln)), None)
        self.problem = ""
        if bad is not None:
            self.problem = (
                f"{path}: uses {bad.strip()[:20]!r} (document end markers, directives or "
                "content on a --- line), which this fixer does not rewrite"
            )
        elif self.crlf and "\n" in text.replace("\r\n", ""):
            self.problem = f"{path}: mixes \\r\\n and \\n line ends"

    def _load(self, chunk: Chunk) -> Any:
        if not chunk.loaded:
            chunk.loaded = True
            try:
                chunk.data = _yaml().load(chunk.body)
            except YAMLError as exc:
                chunk.data = exc
        return chunk.data

    def _objects(self, chunk: Chunk) -> Iterator[MutableMapping[str, Any]]:
        """The object of a document, or the items of a List."""
        data = self._load(chunk)
        if not isinstance(data, MutableMapping):
            return
        items = data.get("items")
        if str(data.get("kind", "")).endswith("List") and isinstance(items, list):
            yield from (item for item in items if isinstance(item, MutableMapping))
        else:
            yield data

    def find(self, ref: ObjRef, document: int) -> tuple[Chunk, MutableMapping[str, Any]]:
        """The document of `ref` and the object in it (an item of a List document). Raises
        NotEditableError when the file cannot be rewritten or does not hold the object."""
        if self.problem:
            raise NotEditableError(self.problem)
        # The scan's document index counts every document; the text before the first ---
        # is one only when it holds more than comments. Only that document is read, unless
        # the object is not there.
        at = _chunk_of(self.chunks[0].body, document)
        if at < len(self.chunks):
            chunk = self.chunks[at]
            obj = next((o for o in self._objects(chunk) if _matches(o, ref)), None)
            if obj is not None:
                return chunk, obj
        found = [
            (i, c, o)
            for i, c in enumerate(self.chunks)
            for o in self._objects(c)
            if _matches(o, ref)
        ]
        if not found:
            raise NotEditableError(f"{self.path}: {ref} not found again in the file")
        # Two objects of the same identity (a List and a document, say): the one nearest the
        # document the scan read it from.
        _, chunk, obj = min(found, key=lambda f: (abs(f[0] - document), f[0]))
        return chunk, obj

    def text(self) -> str:
        parts: list[str] = []
        for chunk in self.chunks:
            if chunk.changed and chunk.rendered is None:
                chunk.rendered = _keep_layout(chunk.body, dump(chunk.data, chunk.body))
            body = chunk.rendered if chunk.rendered is not None else chunk.body
            if chunk.changed and not chunk.body.endswith("\n"):
                body = body.rstrip("\n")
            body = _with_todos(body, chunk.todos)
            parts.append(chunk.head + body)
            for obj in chunk.added:
                if parts and not parts[-1].endswith("\n"):
                    parts.append("\n")
                parts.append("---\n" + dump(obj, chunk.body))
        text = "".join(parts)
        return text.replace("\n", "\r\n") if self.crlf else text


def _chunk_of(first: str, document: int) -> int:
    """The chunk of the scan's document index: the index counts every document, and the text
    before the first --- (`first`) is one only when it holds more than comments."""
    return document + (0 if any(not is_comment(ln) for ln in first.splitlines()) else 1)


@functools.lru_cache(maxsize=4)
def _bodies(text: str) -> tuple[str, ...]:
    """The documents of a file's text, split once for all the objects asked about."""
    return tuple(chunk.body for chunk in split_documents(text.replace("\r\n", "\n")))


def opening_comments(text: str, document: int) -> list[str]:
    """The comment lines that open the scan's document `document` of a file's text (`helm
    template` writes `# Source: <chart>/templates/<file>` there), stripped."""
    bodies = _bodies(text)
    at = _chunk_of(bodies[0], document)
    if at >= len(bodies):
        return []
    opening = itertools.takewhile(is_comment, bodies[at].splitlines())
    return [line.strip() for line in opening if line.strip()]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _level(line: str) -> int:
    """How deep a line is: its indentation, and a list item under its key one deeper (an
    unindented `- ` stands at its key's column)."""
    return _indent(line) + (1 if line.lstrip(" ").startswith("- ") else 0)


def _keep_layout(original: str, changed: str) -> str:
    """`changed` (a document as ruamel.yaml writes it after the change) with the lines of
    `original` it did not change kept as they were (a run of lines ruamel.yaml writes
    otherwise, such as a flow list on the line after its key, is kept whole when the change
    leaves all of it alone), and each other line placed as ruamel.yaml placed it relative to
    the line above it at its level (its sibling) or above it (its parent); `changed` itself
    when that does not read back as the same data."""
    written = dump(_yaml().load(original), original).splitlines(keepends=True)
    before, after = original.splitlines(keepends=True), changed.splitlines(keepends=True)
    # Where the lines as written stand in the original, by their text without indentation:
    # each line as written -> (its block, the block's lines as written and in the original).
    blocks = difflib.SequenceMatcher(
        None, [ln.strip() for ln in written], [ln.strip() for ln in before], autojunk=False
    ).get_opcodes()
    origin = {i: block for block in blocks for i in range(block[1], block[2])}
    steps = difflib.SequenceMatcher(None, written, after, autojunk=False).get_opcodes()
    unchanged = {i for op, i1, i2, _, _ in steps if op == "equal" for i in range(i1, i2)}
    out: list[str] = []
    placed: list[tuple[str, int]] = []  # (line as written, its indentation in `out`)

    def place(line: str) -> None:
        anchor = next(
            (
                (w, at)
                for w, at in reversed(placed)
                if not is_comment(w) and _level(w) <= _level(line)
            ),
            None,
        )
        at = _indent(line) if anchor is None else anchor[1] + _indent(line) - _indent(anchor[0])
        out.append(" " * max(at, 0) + line.lstrip(" "))
        placed.append((line, max(at, 0)))

    for op, i1, i2, j1, j2 in steps:
        if op != "equal":
            # ruamel.yaml keeps the blank lines and comments that end a block with its last
            # key, so keys added to the block come after them; they belong to what follows.
            gap = _gap_before(out, after[j1:j2], after[j2:]) if op == "insert" else 0
            tail = out[len(out) - gap :]
            del out[len(out) - gap :]
            for line in after[j1:j2]:
                place(line)
            out.extend(tail)
            continue
        for i in range(i1, i2):
            tag, a1, a2, b1, b2 = origin[i]
            if tag == "equal":
                out.append(before[b1 + i - a1])
                placed.append((written[i], _indent(before[b1 + i - a1])))
            elif all(k in unchanged for k in range(a1, a2)):
                if i == a1:  # the original's lines for the whole block, once
                    out.extend(before[b1:b2])
                shift = _indent(before[b1]) - _indent(written[a1]) if b2 > b1 else 0
                placed.append((written[i], _indent(written[i]) + shift))
            else:
                place(written[i])
    text = "".join(out)
    try:
        same = yaml.safe_load(text) == yaml.safe_load(changed)
    except yaml.YAMLError:
        same = False
    return text if same else changed


def _gap_before(out: list[str], inserted: list[str], rest: list[str]) -> int:
    """How many blank and comment lines at the end of `out` the `inserted` lines go above:
    all of them when the inserted lines are deeper than the line that follows (the gap then
    separates the block they join from its next sibling), none otherwise."""
    gap = len(out) - next((i + 1 for i in range(len(out) - 1, -1, -1) if not is_comment(out[i])), 0)
    first = next((ln for ln in inserted if not is_comment(ln)), None)
    following = next((ln for ln in rest if not is_comment(ln)), None)
    if not gap or first is None:
        return 0
    return gap if following is None or _level(following) < _level(first) else 0


def is_comment(line: str) -> bool:
    """A blank line or a comment line."""
    return not line.strip() or line.lstrip().startswith("#")


def _with_todos(body: str, todos: list[tuple[str, str]]) -> str:
    """The TODO comments not yet in `body` (whatever reason an earlier run gave), put above
    its first line of YAML (after the comments that open the document). A check's TODOs are
    there when `body` holds as many of its TODO lines as this run has: the message an earlier
    run wrote can differ, as another fix of that run changed what the object's scan says."""
    lines = body.splitlines(keepends=True)
    heads = list(dict.fromkeys(todos))
    present = Counter(ln.split(")", 1)[0] for ln in lines if ln.startswith(TODO_PREFIX))
    wanted = Counter(head.split(")", 1)[0] for head, _ in heads)
    new = [
        f"{head} ({reason})\n"
        for head, reason in heads
        if present[head.split(")", 1)[0]] < wanted[head.split(")", 1)[0]]
        and not any(line.startswith(f"{head} (") for line in lines)
    ]
    if not new:
        return body
    at = next((i for i, ln in enumerate(lines) if not is_comment(ln)), len(lines))
    return "".join([*lines[:at], *new, *lines[at:]])
