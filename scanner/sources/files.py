"""Offline input: files, directories, multi-document YAML, JSON, `kind: List` dumps, stdin.

Every problem is collected with the file and document it is in, and all of them are reported
at once; a loader that stopped at the first bad document would make users fix one at a time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpu_audit.errors import InputError
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
    Limits,
    check_json_depth,
    normalize,
    parse,
)
from gpu_audit.sources.snapshot_file import is_snapshot_document

SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_LIMITS = Limits()
STDIN = "-"


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


class _ObjectLimitError(Exception):
    """The object limit is reached: nothing further is read."""


def expand_paths(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """Files to read, in order, and problems with the given paths. Directories are walked
    in sorted order; hidden files and folders inside them are skipped."""
    files: list[str] = []
    problems: list[str] = []
    for raw in paths:
        if raw == STDIN:
            files.append(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix.lower() in SUFFIXES
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                problems.append(f"{raw}: directory has no .yaml, .yml or .json files")
            files.extend(str(p) for p in found)
        elif path.is_file():
            files.append(raw)
        elif path.exists():
            problems.append(f"{raw}: not a regular file or directory")
        else:
            problems.append(f"{raw}: no such file or directory")
    return files, problems


def _documents(name: str, text: str, limits: Limits) -> Iterator[tuple[int, Any]]:
    """(index, normalized document) of every non-empty document; a document that cannot be a
    Kubernetes object is an InputError naming it, and the next ones are still read."""
    is_json = name.lower().endswith(".json") or text.lstrip().startswith(("{", "["))
    problems: list[str] = []
    try:
        for index, raw in parse(name, text, is_json):
            if raw is None:  # an empty document between two `---`
                continue
            try:
                yield index, check_json_depth(raw, limits) if is_json else normalize(raw, limits)
            except DocumentError as exc:
                problems.append(f"{name}: document {index + 1}: {exc}")
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
        raise _ObjectLimitError(
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


def _read(name: str, stdin: IO[str] | None, budget: int, limits: Limits) -> str:
    """The text of a file or stdin, refused without reading it all when it is over budget."""
    too_big = (
        f"{_display(name)}: larger than {_mib(limits.file_bytes)} (the input size limit)"
        if budget >= limits.file_bytes
        else f"{_display(name)}: the inputs together are larger than "
        f"{_mib(limits.total_bytes)} (the total input size limit)"
    )
    if name == STDIN:
        stream = stdin if stdin is not None else sys.stdin
        buffer = getattr(stream, "buffer", None)
        if buffer is None:  # a text stream without bytes under it (StringIO)
            text = stream.read(budget + 1)
            if len(text) > budget:
                raise InputError([too_big])
            try:
                data = text.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 text holds one
                raise InputError([f"<stdin>: not UTF-8 text (character {exc.start})"]) from None
        else:
            data = buffer.read(budget + 1)
    else:
        try:
            with Path(name).open("rb") as handle:
                if os.fstat(handle.fileno()).st_size > budget:
                    raise InputError([too_big])
                data = handle.read(budget + 1)
        except OSError as exc:
            raise InputError([f"{name}: cannot read: {exc.strerror}"]) from None
    if len(data) > budget:
        raise InputError([too_big])
    try:
        # utf-8-sig: a byte-order mark is allowed in YAML, and editors on Windows write one.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError([f"{_display(name)}: not UTF-8 text (byte {exc.start})"]) from None


def _display(name: str) -> str:
    return "<stdin>" if name == STDIN else name


def _mib(size: int) -> str:
    return f"{size / MIB:g} MiB"


def _capped(problems: list[str], limit: int) -> list[str]:
    if len(problems) <= limit:
        return problems
    return [*problems[:limit], f"... and {len(problems) - limit} more problems"]


def load_files(
    paths: Sequence[str], stdin: IO[str] | None = None, limits: Limits = DEFAULT_LIMITS
) -> Snapshot:
    """Read every path into one snapshot. Raises InputError listing every problem found."""
    files, problems = expand_paths(paths)
    out = _Collected(problems=problems, limits=limits)
    read = 0
    for name in files:
        display = _display(name)
        try:
            text = _read(name, stdin, min(limits.file_bytes, limits.total_bytes - read), limits)
            read += len(text)
            for doc, document in _documents(display, text, limits):
                _add_object(out, document, display, doc, None)
        except InputError as exc:
            out.problems.extend(exc.problems)
        except _ObjectLimitError as exc:
            out.problems.append(str(exc))
            break
    if out.problems:
        raise InputError(_capped(out.problems, limits.problems))
    inputs = tuple(_display(p) for p in paths)
    present = {ref.kind for ref in out.resources}
    return Snapshot(
        out.resources.values(),
        available=present | out.available,
        gaps=out.gaps,
        source=SourceInfo("files", inputs, tuple(out.warnings), out.details),
    )
