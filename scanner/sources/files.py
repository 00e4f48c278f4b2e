"""Offline input: files, directories, multi-document YAML, JSON, `kind: List` dumps, stdin.

Every problem is collected with the file and document it is in, and all of them are reported
at once; a loader that stopped at the first bad document would make users fix one at a time.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from gpu_audit.errors import InputError
from gpu_audit.k8s.field_types import wrong_typed_fields
from gpu_audit.k8s.kinds import (
    KNOWN_KINDS,
    resource_type,
)
from gpu_audit.model import ObjRef, Resource, SourceLocation
from gpu_audit.redact import sanitize
from gpu_audit.snapshot import CollectionGap, Snapshot, SourceInfo
from gpu_audit.sources.documents import (
    MIB,
    DocumentError,
    LimitError,
    Limits,
    Source,
    Tally,
    parse,
)
from gpu_audit.sources.snapshot_file import is_snapshot_document

SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_LIMITS = Limits()
STDIN = "-"
# How messages and reports name what was read from stdin: in angle brackets, as no file is.
STDIN_NAME = "<stdin>"


@dataclass
class _Collected:
    resources: dict[ObjRef, Resource] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # From snapshot files: types collected even when empty, and types that could not be.
    available: set[str] = field(default_factory=set)
    gaps: list[CollectionGap] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    limits: Limits = DEFAULT_LIMITS
    objects: int = 0


def expand_paths(paths: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """Files to read, in order, problems with the given paths, and warnings about what a
    directory holds but cannot be read. Directories are walked in sorted order; hidden files
    and folders inside them are skipped, and so are the entries with a .yaml, .yml or .json
    name that are no regular file (a FIFO, a socket, a device, a dangling link or a link
    loop), with a warning each; links to directories are not followed, with a warning."""
    files: list[str] = []
    problems: list[str] = []
    warnings: list[str] = []
    for raw in paths:
        if raw == STDIN:
            files.append(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            found: list[Path] = []
            for entry in sorted(path.rglob("*")):
                if any(part.startswith(".") for part in entry.relative_to(path).parts):
                    continue
                skipped = _not_read(entry)
                if skipped:
                    warnings.append(f"{_display(str(entry))}: skipped: {skipped}")
                elif entry.suffix.lower() in SUFFIXES and entry.is_file():
                    found.append(entry)
            if not found:
                problems.append(f"{_display(raw)}: directory has no .yaml, .yml or .json files")
            files.extend(str(p) for p in found)
        elif path.is_file():
            files.append(raw)
        elif path.exists():
            problems.append(f"{_display(raw)}: not a regular file or directory")
        else:
            problems.append(f"{_display(raw)}: no such file or directory")
    return files, problems, warnings


def _not_read(entry: Path) -> str | None:
    """Why a directory entry that could hold manifests is not read; None for a regular file
    or a directory, and for other names (notes.txt)."""
    try:
        mode = entry.lstat().st_mode
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if stat.S_ISLNK(mode):
        try:
            mode = entry.stat().st_mode
        except OSError as exc:  # a dangling link, or a loop of links
            return f"a symbolic link that leads nowhere ({exc.strerror})"
        if stat.S_ISDIR(mode):
            return "a symbolic link to a directory (not followed)"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or entry.suffix.lower() not in SUFFIXES:
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO, not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    return "not a regular file"


def _documents(source: Source, limits: Limits, tally: Tally) -> Iterator[tuple[int, Any]]:
    """(index, document) of every non-empty document; a document that cannot be a Kubernetes
    object is an InputError naming it, raised once the next ones are read."""
    is_json = source.name.lower().endswith(".json") or source.starts_like_json()
    problems: list[str] = []
    try:
        for index, document in parse(source, is_json, limits, tally):
            if isinstance(document, DocumentError):
                problems.append(f"{source.name}: document {index + 1}: {document}")
            else:
                yield index, document
    except InputError as exc:
        problems.extend(exc.problems)
    if problems:
        raise InputError(problems)


def _describe(name: str, doc: int, item: int | None) -> str:
    where = f"{name}: document {doc + 1}"
    return where if item is None else f"{where}, item {item + 1}"


def _add_object(out: _Collected, obj: Any, name: str, doc: int, item: int | None) -> None:
    where = _describe(name, doc, item)
    out.objects += 1
    if out.objects > out.limits.objects:
        raise LimitError(
            f"{where}: more than {out.limits.objects} documents and objects in the input (the object limit); "
            "scan it in parts"
        )
    if not isinstance(obj, dict):
        out.problems.append(f"{where}: is a {type(obj).__name__}, not a Kubernetes object")
        return
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        out.problems.append(f"{where}: missing kind")
        return
    if item is None and is_snapshot_document(obj):
        _add_snapshot_extras(out, obj, where)
    if item is None and (kind.endswith("List") or is_snapshot_document(obj)) and "items" in obj:
        items = obj["items"]
        if not isinstance(items, list):
            out.problems.append(f"{where}: {kind}.items is a {type(items).__name__}, not a list")
            return
        for index, child in enumerate(items):
            _add_object(out, child, name, doc, index)
        return
    if not isinstance(api_version, str) or not api_version:
        out.problems.append(f"{where}: {kind} has no apiVersion")
        return
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        out.problems.append(f"{where}: {kind} has no metadata")
        return
    obj_name = metadata.get("name") or metadata.get("generateName")
    if obj_name is not None and not isinstance(obj_name, str):
        out.problems.append(
            f"{where}: {kind} metadata.name is a {type(obj_name).__name__}, not a string"
        )
        return
    if not obj_name:
        out.problems.append(f"{where}: {kind} has no metadata.name")
        return
    type_ = resource_type(api_version, kind)
    info = KNOWN_KINDS.get(type_)
    namespace = metadata.get("namespace")
    if info is not None and not info.namespaced:
        namespace = ""
    elif namespace is not None and not isinstance(namespace, str):
        out.problems.append(
            f"{where}: {kind} metadata.namespace is a {type(namespace).__name__}, not a string"
        )
        return
    elif not namespace:
        # kubectl and Helm put namespaced objects without a namespace into the current one.
        namespace = "default" if info is not None else ""
    ref = ObjRef(type_, namespace, obj_name)
    resource = Resource(ref, api_version, sanitize(obj), SourceLocation(name, doc))
    first = out.resources.get(ref)
    if first is not None:
        out.warnings.append(f"{where}: {ref} also in {first.source}; the first one is used")
        return
    out.resources[ref] = resource
    out.warnings.extend(f"{where}: {ref}: {field}" for field in wrong_typed_fields(resource))


def _add_snapshot_extras(out: _Collected, obj: dict[str, Any], where: str) -> None:
    available, gaps = obj.get("available", []), obj.get("gaps", [])
    if not isinstance(available, list) or not isinstance(gaps, list):
        out.problems.append(f"{where}: snapshot available/gaps must be lists")
        return
    out.available.update(str(t) for t in available)
    for gap in gaps:
        if not isinstance(gap, dict) or "type" not in gap or "reason" not in gap:
            out.problems.append(f"{where}: snapshot gap {gap!r} needs type and reason")
            continue
        out.gaps.append(CollectionGap(str(gap["type"]), str(gap["reason"])))
    source = obj.get("source")
    if isinstance(source, dict) and isinstance(source.get("details"), dict):
        out.details.update(source["details"])


@contextlib.contextmanager
def _source(
    name: str, stdin: IO[str] | None, stdin_name: str, budget: int, limits: Limits
) -> Iterator[Source]:
    """A file or stdin (shown as `stdin_name`) as a Source: one over budget is refused before
    it is read, when its size is known, and else as soon as the budget is passed."""
    display = stdin_name if name == STDIN else _display(name)
    too_big = (
        f"{display}: larger than {_mib(limits.file_bytes)} (the input size limit)"
        if budget >= limits.file_bytes
        else f"{display}: the inputs together are larger than "
        f"{_mib(limits.total_bytes)} (the total input size limit)"
    )
    if name == STDIN:
        yield Source(display, _stdin_bytes(stdin, display, budget, too_big), budget, too_big)
        return
    try:
        handle = Path(name).open("rb")  # noqa: SIM115 - closed below, after the reading
    except OSError as exc:
        raise InputError([f"{display}: cannot read: {exc.strerror}"]) from None
    with handle:
        if os.fstat(handle.fileno()).st_size > budget:
            raise InputError([too_big])
        yield Source(display, handle, budget, too_big)


def _stdin_bytes(stdin: IO[str] | None, display: str, budget: int, too_big: str) -> IO[bytes]:
    stream = stdin if stdin is not None else sys.stdin
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        return cast(IO[bytes], buffer)
    # A text stream without bytes under it (StringIO): its text, encoded back.
    text = stream.read(budget + 1)
    if len(text) > budget:
        raise InputError([too_big])
    try:
        return io.BytesIO(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 text holds one
        raise InputError([f"{display}: not UTF-8 text (character {exc.start})"]) from None


def _display(name: str) -> str:
    """A path as messages and reports show it. Python holds the bytes of a file name that are
    not UTF-8 as lone surrogates, which no UTF-8 report can hold: they are shown as
    backslash escapes (`bad\\xff.yaml`)."""
    if name == STDIN:
        return STDIN_NAME
    if name.isascii():
        return name
    try:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that did not come from the file system
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _mib(size: int) -> str:
    return f"{size / MIB:g} MiB"


def _capped(messages: list[str], limit: int, noun: str = "problems") -> list[str]:
    if len(messages) <= limit:
        return messages
    return [*messages[:limit], f"... and {len(messages) - limit} more {noun}"]


def load_files(
    paths: Sequence[str],
    stdin: IO[str] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    stdin_name: str = STDIN_NAME,
) -> Snapshot:
    """Read every path into one snapshot; "-" reads `stdin` (default: sys.stdin), which
    messages and the report call `stdin_name`. Raises InputError listing every problem
    found."""
    files, problems, warnings = expand_paths(paths)
    out = _Collected(problems=problems, warnings=warnings, limits=limits)
    tally = Tally()
    for name in files:
        budget = min(limits.file_bytes, limits.total_bytes - tally.bytes)
        try:
            with _source(name, stdin, stdin_name, budget, limits) as source:
                try:
                    for doc, document in _documents(source, limits, tally):
                        _add_object(out, document, source.name, doc, None)
                finally:
                    tally.bytes += source.size
        except InputError as exc:
            out.problems.extend(exc.problems)
        except LimitError as exc:
            out.problems.append(str(exc))
            break
    if out.problems:
        raise InputError(_capped(out.problems, limits.problems))
    inputs = tuple(stdin_name if p == STDIN else _display(p) for p in paths)
    present = {ref.kind for ref in out.resources}
    return Snapshot(
        out.resources.values(),
        available=present | out.available,
        gaps=out.gaps,
        source=SourceInfo(
            "files", inputs, tuple(_capped(out.warnings, limits.problems, "warnings")), out.details
        ),
    )
