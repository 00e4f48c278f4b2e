"""Bytes to JSON-like documents, read as a stream within limits that keep hostile input cheap.

YAML is turned into what the Kubernetes API would hold: string keys, no timestamps, bytes or
sets, no NaN or infinity, no duplicate keys, no alias cycles. Each document is built straight
from libyaml's parser events, never first as a node graph of the whole document (that graph
cost 40 times the size of a `kubectl get -o yaml` dump), and every limit (see README,
"Limits") is checked as the input is read: a huge input, a flood of documents or values, a deep
nesting or an alias bomb is an error that names the file, reached after reading no more than
the limit allows, instead of an exhausted machine. JSON is parsed whole (about 6 times its
size) by msgspec, or by the standard library when msgspec cannot vouch for the result (see
_fast_json), then held to the same rules.
"""

from __future__ import annotations

import base64
import codecs
import datetime
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, NoReturn

import msgspec
import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from gpu_audit.bounded import remember
from gpu_audit.errors import InputError

MIB = 1024 * 1024
CHUNK = 64 * 1024  # read ahead to tell JSON from YAML; libyaml asks for 16 KiB at a time


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what the loader reads (the defaults are documented in README, "Limits")."""

    # Room for a dump of Kubernetes' published limits (5,000 nodes, 150,000 pods and their
    # controllers: about 260,000 objects, 30 million values, 0.6-1 GiB of JSON; see README,
    # "Performance").
    file_bytes: int = 1024 * MIB  # one file, or stdin
    total_bytes: int = 2048 * MIB  # all inputs of one scan together
    objects: int = 300_000  # documents and List items of one scan
    values: int = 40_000_000  # scalars, mappings and lists of one scan, aliases expanded
    depth: int = 100  # nesting of mappings and lists in one document
    alias_nodes: int = 100_000  # values reached again through YAML aliases, per document
    problems: int = 100  # problems listed before the rest are only counted


@dataclass(slots=True)
class Tally:
    """What the inputs read so far in one scan have used of the limits that span files."""

    bytes: int = 0
    values: int = 0


class DocumentError(Exception):
    """A document that cannot be a Kubernetes object; the message names the field."""


class LimitError(Exception):
    """A limit of the whole scan is reached: nothing further is read."""


def _values_limit(where: str, limits: Limits) -> NoReturn:
    raise LimitError(
        f"{where}: more than {limits.values} values in the input (the value limit); "
        "scan it in parts"
    )


class Source:
    """A binary input, read in chunks and refused as soon as it passes its byte budget or stops
    being UTF-8: libyaml pulls it through `read`, JSON reads it whole."""

    def __init__(self, name: str, stream: IO[bytes], budget: int, too_big: str) -> None:
        self.name = name
        self.size = 0  # bytes read so far
        self._stream = stream
        self._budget = budget
        self._too_big = too_big
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._ahead: list[bytes] = []  # read by starts_like_json, not yet returned

    def read(self, size: int = CHUNK) -> bytes:
        if self._ahead:
            return self._ahead.pop(0)
        data = self._stream.read(min(size, self._budget + 1 - self.size))
        start = self.size - len(self._decoder.getstate()[0])
        self.size += len(data)
        if self.size > self._budget:
            raise InputError([self._too_big])
        try:
            self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise InputError([f"{self.name}: not UTF-8 text (byte {start + exc.start})"]) from None
        return data

    def read_all(self) -> bytes:
        """The rest of the input (all of it, when only starts_like_json read before)."""
        rest = self._stream.read(self._budget + 1 - self.size)
        self.size += len(rest)
        if self.size > self._budget:
            raise InputError([self._too_big])
        data = b"".join([*self._ahead, rest]) if self._ahead else rest
        self._ahead = []
        return data

    def starts_like_json(self) -> bool:
        """The first character after white space (and a byte-order mark) opens a JSON object
        or array."""
        while chunk := self.read():
            self._ahead.append(chunk)
            head = b"".join(self._ahead).removeprefix(codecs.BOM_UTF8).lstrip()
            if head:
                return head[:1] in (b"{", b"[")
        return False


def parse(source: Source, is_json: bool, limits: Limits, tally: Tally) -> Iterator[tuple[int, Any]]:
    """(index, document) for each non-empty document of `source`, as plain JSON data, or
    (index, DocumentError) for a document that cannot be a Kubernetes object (the next ones
    are still read). An unreadable input is an InputError naming it; a limit of the whole scan
    is LimitError."""
    if is_json:
        document = _parse_json(source, limits, tally)
        if document is not None:
            yield 0, document
        return
    yield from _YamlReader(source, limits, tally).documents()


# --------------------------------------------------------------------------- JSON


# The largest float64 has 309 integer digits: a JSON number beyond it is out of range.
_FLOAT_DIGITS = 309
# Every integer smaller in magnitude fits a float64 (at most 1.8e308): _fast_json leaves the
# larger ones to _json_int.
_FLOAT_SAFE = 10**308
# A \u escape of a UTF-16 surrogate: only then can a lone one hide in the parsed strings.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# The places of _key_bound: a quote, then JSON white space (RFC 8259: space, tab, line feed,
# carriage return), then a colon.
_SPACED_COLON = re.compile(rb'"[ \t\n\r]+:')
_QUOTE_COLON = re.compile(rb'"[ \t\n\r]*:')
_BACKSLASHES_QUOTE_COLON = re.compile(rb'(\\+)"[ \t\n\r]*:')
# A quote-colon place, then a string that starts with spaces and a colon.
_COLON_STRING = {
    False: re.compile(rb'":[ \t\n\r]*" *:'),
    True: re.compile(rb'"[ \t\n\r]*:[ \t\n\r]*" *:'),
}


def _parse_json(source: Source, limits: Limits, tally: Tally) -> Any:
    """The one document of a JSON input; InputError for a syntax error or a bad value.

    _fast_json reads it when it can vouch for the result (a valid document: nearly always);
    else json.loads, with a hook for each rule, reads it again and words the error. At the
    peak, the bytes and the document are held (and on the way to json.loads, the bytes and
    their text, then the text and the document)."""
    data = source.read_all()
    name = source.name
    fast = _fast_json(data, limits)
    if fast is not None:
        del data
        document, count = fast
    else:
        text = _text(name, data)
        del data
        document = _loads(name, text)
        surrogates = _SURROGATE_ESCAPE.search(text) is not None
        del text
        if not isinstance(document, dict | list):
            return document
        try:
            count = _values(document, limits, surrogates)
        except _FieldError as exc:
            raise InputError([f"{name}: document 1: {_at(_join(exc.path))}{exc}"]) from None
    tally.values += 1 + count
    if tally.values > limits.values:
        _values_limit(f"{name}: document 1", limits)
    return document


def _text(name: str, data: bytes) -> str:
    """`data` as text, without a leading byte-order mark."""
    try:
        # utf-8-sig: a byte-order mark is allowed, and editors on Windows write one.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        raise InputError([f"{name}: not UTF-8 text (byte {bom + exc.start})"]) from None


def _loads(name: str, text: str) -> Any:
    """json.loads, refusing what the API server refuses: a duplicate key, NaN and infinity,
    a number out of a float64's range."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping = dict(items)
        if len(mapping) != len(items):
            keys = [k for k, _ in items]
            duplicate = next(k for k in keys if keys.count(k) > 1)
            raise DocumentError(f"duplicate key {duplicate!r}")
        return mapping

    def constant(value: str) -> Any:
        raise DocumentError(f"{value} is not a JSON number")

    try:
        return json.loads(
            text,
            object_pairs_hook=pairs,
            parse_constant=constant,
            parse_int=_json_int,
            parse_float=_json_float,
        )
    except json.JSONDecodeError as exc:
        raise InputError(
            [f"{name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"]
        ) from None
    except DocumentError as exc:
        raise InputError([f"{name}: invalid JSON: {exc}"]) from None
    except RecursionError:
        raise InputError([f"{name}: invalid JSON: nested too deeply"]) from None


def _fast_json(data: bytes, limits: Limits) -> tuple[dict[str, Any] | list[Any], int] | None:
    """The document of `data` and the number of values under its root, equal (types
    included) to what json.loads with _loads' hooks and then _values give, when msgspec
    (about 3 times faster than json.loads with them) can vouch for them; else None.

    msgspec.json.decode reads strict JSON (RFC 8259) as json.loads does, after the same
    UTF-8 decoding; where they differ, msgspec refuses and the exact path runs: NaN and
    Infinity, invalid UTF-8, and a \\u escape of a lone UTF-16 surrogate (json.loads keeps
    it, for _check_json to refuse) are errors, as is nesting beyond Python's recursion limit.
    It reads numbers with a fraction or an exponent with float_hook: _json_float, what
    json.loads calls (an infinite one raises DocumentError); it reads integers of any size
    as json.loads does, and those of 10**308 or more in magnitude, which _json_int may
    refuse, are left to it. A document nested deeper than the limit is left to the exact
    path, which words the error. msgspec keeps the last value of a duplicate key, which the
    exact path refuses: _key_bound bounds the number of keys in the text, and a document
    with fewer keys is read again (as is one with a list item or a key that starts with a
    colon, which the bound counts twice). tests/scanner/test_json_fast_path.py compares
    both."""
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        document = _DECODER.decode(memoryview(data)[start:] if start else data)
    except (msgspec.DecodeError, DocumentError, RecursionError):
        return None
    if document.__class__ is not dict and document.__class__ is not list:
        return None  # no Kubernetes object: the exact path has it, at no cost to speak of
    seen = [0, 0]
    try:
        count = _count(document, limits.depth, seen)
    except _TooDeepError:
        return None
    keys, large = seen
    if large or keys != _key_bound(data, keys):
        return None
    return document, count


def _key_bound(data: bytes, keys: int) -> int:
    """At least the number of members (key-value pairs) of the objects in `data`, a valid
    JSON text whose document has `keys` keys; equal to `keys` unless a key repeats in an
    object (the document then has fewer keys) or a list item or a key starts with spaces and
    a colon.

    Proof. In JSON, '\\' appears only inside strings; outside them, between tokens, only
    white space (space, tab, line feed, carriage return); '"' delimits strings and ':' ends
    a member's key and its white space. Inside a string, '"' and '\\' appear only escaped (\\"
    and \\\\), and of the white space only the space appears unescaped. Count the places
    where a '"' is followed by white space and a ':'. Each member has one, the quote that
    closes its key. Any other is (a) the opening quote of a string that starts with spaces
    and a colon (as ":9400"), or (b) an escaped quote inside a string, as in escaped JSON
    ("{\\"a\\":1}"): an opening quote follows white space or one of [{,: and a closing quote
    that is not a key's follows the end of a value (white space then one of ,]} or the end of
    the text, no colon). An escaped quote follows an odd run of backslashes, and no closing
    quote does: a run of backslashes inside a string starts an escape (the character before
    it is no backslash, so nothing escapes its first one), so its backslashes pair into \\\\
    escapes, and the last one escapes the quote exactly when the run is odd. The places less
    those after an odd run of backslashes are the members plus (a). Without white space
    between a quote and a colon anywhere, the places are the occurrences of '":' (bytes.count:
    a pattern that cannot overlap itself), and when '\\\\":' does not occur, every run before
    one is a single backslash.

    When that exceeds `keys`, strings of kind (a) that are members' values (as dcgm-exporter's
    listen address) are found and taken off: in a match of _COLON_STRING (a place, white
    space, a quote, spaces and a colon) whose first quote follows no backslash, that quote is
    no escaped one, so it either opens a string of kind (a), or closes a key, and then the
    second quote opens its value, a string of kind (a). Matches do not overlap, so no string
    is found twice, and the bound stays at least the number of members."""
    spaced = _SPACED_COLON.search(data) is not None
    if spaced:
        places = sum(1 for _ in _QUOTE_COLON.finditer(data))
        odd = sum(len(found[1]) % 2 for found in _BACKSLASHES_QUOTE_COLON.finditer(data))
    else:
        places = data.count(b'":')
        odd = data.count(b'\\":') if b"\\" in data else 0  # memchr: fast when absent
        if odd and b'\\\\":' in data:
            odd = sum(len(found[1]) % 2 for found in _BACKSLASHES_QUOTE_COLON.finditer(data))
    bound = places - odd
    if bound > keys:
        bound -= sum(
            data[found.start() - 1 : found.start()] != b"\\"
            for found in _COLON_STRING[spaced].finditer(data)
        )
    return bound


def _json_int(text: str) -> int:
    # Python reads integers of any size (up to 4,300 digits, then raises ValueError); the API
    # server reads one that does not fit an int64 as a float64, and refuses it when it
    # overflows that too ("cannot unmarshal number ... into Go value of type float64").
    if len(text.lstrip("-")) > _FLOAT_DIGITS:
        raise DocumentError(_out_of_range(text))
    value = int(text)
    if len(text) >= _FLOAT_DIGITS and not _fits_float(value):
        raise DocumentError(_out_of_range(text))
    return value


def _json_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise DocumentError(_out_of_range(text))
    return value


# msgspec's JSON reader, reading numbers with a fraction or an exponent as json.loads does.
_DECODER = msgspec.json.Decoder(float_hook=_json_float)


def _fits_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _out_of_range(text: str) -> str:
    shown = text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
    return f"the number {shown} is out of range (more than a 64-bit float holds)"


class _FieldError(Exception):
    """A problem at a field; `path` is filled in (outermost first) as it propagates."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str | int] = []


def _check_json(
    value: dict[str, Any] | list[Any], depth: int, limits: Limits, surrogates: bool
) -> int:
    """How many values `value` holds, once it nests no deeper than the limit and (when
    `surrogates`: the text escapes one) none of its strings holds half of a UTF-16 surrogate
    pair, which no UTF-8 text, and so no Kubernetes object, can hold. JSON has no aliases,
    sets, timestamps or bytes, and the parser refused NaN, infinity and duplicate keys, so
    nothing needs converting: the document is checked in place, not copied."""
    if depth > limits.depth:
        raise _FieldError(f"nested deeper than {limits.depth} levels")
    count = len(value)
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if surrogates and isinstance(key, str) and _SURROGATE.search(key):
            raise _FieldError(f"the key {_lone_surrogate(key)}")
        try:
            if isinstance(item, dict | list):
                count += _check_json(item, depth + 1, limits, surrogates)
            elif surrogates and isinstance(item, str) and _SURROGATE.search(item):
                raise _FieldError(_lone_surrogate(item))
        except _FieldError as exc:
            exc.path.insert(0, key)
            raise
    return count


class _TooDeepError(Exception):
    """_count went deeper than the limit."""


def _values(document: dict[str, Any] | list[Any], limits: Limits, surrogates: bool) -> int:
    """How many values `document` holds, checked by _check_json. When the text escapes no
    surrogate, only the depth is left to check: _count does that without the per-value work,
    and a document nested too deep is walked again by _check_json, for the path of the
    error."""
    if not surrogates:
        try:
            return _count(document, limits.depth, [0, 0])
        except _TooDeepError:
            pass
    return _check_json(document, 1, limits, surrogates)


def _count(value: dict[str, Any] | list[Any], levels: int, seen: list[int]) -> int:
    """How many values `value` holds, or _TooDeepError when it nests more than `levels`
    deep; adds to seen[0] the number of its keys, to seen[1] that of its integers of at least
    _FLOAT_SAFE in magnitude."""
    if levels <= 0:
        raise _TooDeepError
    count = len(value)
    items: Iterable[Any] = value
    if value.__class__ is dict:
        seen[0] += count
        items = value.values()
    for item in items:
        kind = item.__class__
        if kind is dict or kind is list:
            count += _count(item, levels - 1, seen)
        elif kind is int and not -_FLOAT_SAFE < item < _FLOAT_SAFE:
            seen[1] += 1
    return count


def _lone_surrogate(text: str) -> str:
    found = _SURROGATE.search(text)
    assert found is not None
    before = text[: found.start()][-20:]
    return (
        f"{before!a} is followed by \\u{ord(found.group()):04x}, half of a UTF-16 surrogate "
        "pair: not a character"
    )


def _join(path: list[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _at(path: str) -> str:
    return f"{path}: " if path else ""


# --------------------------------------------------------------------------- YAML

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed
_CONSTRUCTOR = SafeConstructor()  # for its scalar constructors, which keep no state
_IMPLICIT: dict[Any, list[tuple[str, re.Pattern[str]]]] = Resolver.yaml_implicit_resolvers
_TAG = "tag:yaml.org,2002:"
NULL, BOOL, INT, FLOAT = (f"{_TAG}{t}" for t in ("null", "bool", "int", "float"))
STR, TIMESTAMP, BINARY, MERGE = (f"{_TAG}{t}" for t in ("str", "timestamp", "binary", "merge"))
MAP, SEQ, SET = (f"{_TAG}{t}" for t in ("map", "seq", "set"))
_CONSTRUCTORS: dict[str, Callable[[SafeConstructor, ScalarNode], Any]] = {
    BOOL: SafeConstructor.construct_yaml_bool,
    INT: SafeConstructor.construct_yaml_int,
    FLOAT: SafeConstructor.construct_yaml_float,
    TIMESTAMP: SafeConstructor.construct_yaml_timestamp,
    BINARY: SafeConstructor.construct_yaml_binary,
}
# Tags PyYAML resolves plain scalars to but constructs nothing for (`=`): text, as the API
# server's YAML reader has it.
_TEXT_TAGS = frozenset({f"{_TAG}value", f"{_TAG}yaml"})
# After a problem, the rest of its document is skipped to read the next one, but only so far:
# a huge bad document ends the file instead of being parsed to its end for nothing.
SKIP_EVENTS = 100_000
_NO_KEY: Any = object()  # a mapping waiting for its next key
_MERGE_KEY: Any = object()  # the key `<<`: its value is merged into the mapping


class _EventError(Exception):
    """What is wrong at the current event. With `at_mark`, a YAML-level problem shown with
    its line and column; else one shown with its field path."""

    def __init__(self, message: str, *, at_mark: bool = False) -> None:
        super().__init__(message)
        self.at_mark = at_mark
        self.mark: Any = None
        self.path: list[str | int] = []  # innermost first: added by each collection it leaves


class _SkippedError(DocumentError):
    """A bad document too long to skip: the rest of its file is not read."""


class _YamlReader:
    def __init__(self, source: Source, limits: Limits, tally: Tally) -> None:
        self.source = source
        self.limits = limits
        self.tally = tally
        self.read = 0  # documents read to their end

    def documents(self) -> Iterator[tuple[int, Any]]:
        loader = _BaseLoader(self.source)
        try:
            while not isinstance(event := loader.get_event(), yaml.StreamEndEvent):
                if isinstance(event, DocumentStartEvent):
                    document = self._document(loader)
                    self.read += 1
                    if document is not None:
                        yield self.read - 1, document
                    if isinstance(document, _SkippedError):
                        return
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or str(exc)
            raise InputError(
                [
                    f"{self.source.name}: document {self.read + 1}: invalid YAML{_where(mark)}: "
                    f"{problem}"
                ]
            ) from None
        finally:
            loader.dispose()

    def _document(self, loader: Any) -> Any:
        """The document whose start event was just read, read to its end event; or the
        DocumentError of its first problem, once the rest of it is skipped."""
        try:
            return self._build(loader.get_event)
        except _EventError as exc:
            if exc.at_mark:
                message = f"invalid YAML{_where(exc.mark)}: {exc}"
            else:
                message = f"{_at(_join(exc.path[::-1]))}{exc}"
        for _ in range(SKIP_EVENTS):
            if isinstance(loader.get_event(), DocumentEndEvent):
                return DocumentError(message)
        return _SkippedError(f"{message} (the rest of the file is not read)")

    def _build(self, get_event: Callable[[], Any]) -> Any:
        """The document's value, read by recursive descent: a call per mapping and list keeps
        its state (container, key, merges) in local variables, and the value count is a
        variable of this call, where a stack of frame objects read and wrote attributes at each
        of the millions of events of a large dump (with _PLAIN, the load of a 5,000-pod dump
        went from 2.2 to 1.7 s). The recursion is as deep as the nesting, which the depth limit
        bounds.

        The scalar path is written out in the loop instead of called: 1.5 of the 2.3 million
        events of that dump are scalars. An _EventError takes the mark of the event being read
        when it is raised, and its path from the collections it unwinds through: the message a
        stack of frames gave. The value count is written back to the tally however the
        document ends."""
        limits, plain = self.limits, _PLAIN
        max_values, max_depth = limits.values, limits.depth
        anchors: dict[str, tuple[Any, int]] = {}
        open_anchors: set[str] = set()
        values = self.tally.values
        aliased = 0  # values reached again through aliases
        ended: Any = None  # the end event of the collection read last

        def too_many() -> NoReturn:
            _values_limit(f"{self.source.name}: document {self.read + 1}", limits)

        def alias(event: Any, level: int) -> Any:
            nonlocal values, aliased
            anchor = event.anchor
            if anchor in open_anchors:
                raise _EventError("YAML alias refers to itself")
            if anchor not in anchors:
                raise _EventError(f"found undefined alias {anchor!r}", at_mark=True)
            value, size = anchors[anchor]
            aliased += size
            if aliased > limits.alias_nodes:
                raise _EventError(f"YAML aliases expand to more than {limits.alias_nodes} values")
            values += size
            if isinstance(value, dict | list):
                value = _copy(value, max_depth - level, max_depth)
            if values > max_values:
                too_many()
            return value

        def collection(start: Any, level: int, is_map: bool) -> Any:
            """The mapping or list `start` opens, read to its end; `level` collections hold
            it. One loop reads both: a mapping alternates keys and values."""
            nonlocal values, ended
            values += 1
            if level >= max_depth:
                raise _EventError(f"nested deeper than {max_depth} levels")
            is_set = start.tag is not None and _is_set(start.tag, is_map)
            anchor = start.anchor
            if anchor is not None:
                open_anchors.add(anchor)
            first = values
            level += 1
            container: Any = {} if is_map else []
            merges: list[dict[str, Any]] | None = None
            key: Any = _NO_KEY  # in a list, never set
            event = start
            try:
                while True:
                    event = get_event()
                    kind = event.__class__
                    if kind is ScalarEvent:
                        values += 1
                        value = event.value
                        # Quoted or known plain scalars (most) without the call, as _scalar has
                        # them; the event is the default as no known scalar's value is one.
                        if event.tag is not None or (
                            event.implicit[0] and (value := plain.get(value, event)) is event
                        ):
                            value = _scalar(event)
                        if event.anchor is not None:
                            anchors[event.anchor] = (value, 1)
                        if values > max_values:
                            too_many()
                    elif kind is MappingStartEvent or kind is SequenceStartEvent:
                        if is_map and key is _NO_KEY:
                            values += 1
                            raise _EventError(
                                "a mapping key must be a string, not a collection", at_mark=True
                            )
                        value = collection(event, level, kind is MappingStartEvent)
                        event = ended
                    elif kind is AliasEvent:
                        value = alias(event, level)
                    else:  # the end of the collection
                        break
                    if not is_map:
                        container.append("<<" if value is _MERGE_KEY else value)
                    elif key is _NO_KEY:
                        key = value if value.__class__ is str else _key(value)
                        if key in container:
                            raise _EventError(f"duplicate key {key!r}", at_mark=True)
                    else:
                        if key is _MERGE_KEY:
                            if merges is None:
                                merges = []
                            merges.extend(_merged(value))
                        else:
                            container[key] = "<<" if value is _MERGE_KEY else value
                        key = _NO_KEY
            except _EventError as exc:
                if exc.mark is None:
                    exc.mark = event.start_mark
                if not is_map:
                    exc.path.append(len(container))
                elif key is not _NO_KEY:
                    exc.path.append("<<" if key is _MERGE_KEY else key)
                raise
            if merges is not None or is_set:
                container = _finish(container, merges, is_set)
            if anchor is not None:
                open_anchors.discard(anchor)
                anchors[anchor] = (container, values - first + 1)
            if values > max_values:
                too_many()
            ended = event
            return container

        event = get_event()
        kind = event.__class__
        root: Any
        try:
            if kind is MappingStartEvent or kind is SequenceStartEvent:
                root = collection(event, 0, kind is MappingStartEvent)
            elif kind is ScalarEvent:
                values += 1
                root = _scalar(event)
                if values > max_values:
                    too_many()
            else:  # an alias: the document has no anchor yet
                root = alias(event, 0)
        except _EventError as exc:
            if exc.mark is None:
                exc.mark = event.start_mark
            raise
        finally:
            self.tally.values = values
        get_event()  # the document's end: libyaml gives one node per document
        return "<<" if root is _MERGE_KEY else root


def _where(mark: Any) -> str:
    return f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _is_set(tag: str, is_map: bool) -> bool:
    """Whether a mapping with a tag is a `!!set`; a collection with any other tag than its
    own is refused (`!!omap`, `!!pairs`, `!!python/...`, `!foo`)."""
    if tag == "!" or tag == (MAP if is_map else SEQ):
        return False
    if is_map and tag == SET:
        return True
    raise _EventError(
        f"the tag {tag!r} is not supported on a {'mapping' if is_map else 'list'}", at_mark=True
    )


def _finish(container: dict[str, Any], merges: list[dict[str, Any]] | None, is_set: bool) -> Any:
    if merges:  # the pairs of `<<: *base` first: the mapping's own keys override them
        merged: dict[str, Any] = {}
        for mapping in merges:
            merged.update(mapping)
        merged.update(container)
        container = merged
    if is_set:  # !!set: a mapping whose values are all null
        return dict.fromkeys(sorted(container))
    return container


def _merged(value: Any) -> list[dict[str, Any]]:
    """The mappings a `<<` value merges, in the order they apply (a later one wins)."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return list(reversed(value))  # in `<<: [*a, *b]`, a's keys win over b's
    raise _EventError("expected a mapping or list of mappings for merging", at_mark=True)


def _key(value: Any) -> Any:
    """A mapping key as the API server reads it: a JSON string (`1: x` is "1")."""
    if isinstance(value, str) or value is _MERGE_KEY:
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    raise _EventError(f"a mapping key must be a string, not {type(value).__name__}", at_mark=True)


def _copy(value: Any, levels: int, limit: int) -> Any:
    """An independent copy of an aliased collection (the sanitizer may then edit one use
    without the others), refused when it would nest deeper than the limit."""
    if levels <= 0:
        raise _EventError(f"nested deeper than {limit} levels")
    if isinstance(value, dict):
        return {
            k: _copy(v, levels - 1, limit) if isinstance(v, dict | list) else v
            for k, v in value.items()
        }
    return [_copy(v, levels - 1, limit) if isinstance(v, dict | list) else v for v in value]


# Plain scalars resolved to JSON values, by their text: every key of a document is one, and
# keys and many values (numbers, booleans, names) repeat from object to object, so most are
# resolved once instead of against the patterns and constructors again (and equal texts share
# one string). At most 64 Ki scalars of at most 256 characters are kept; cleared when full.
_PLAIN: dict[str, Any] = {}
_PLAIN_SIZE = 1 << 16
_PLAIN_LENGTH = 256


def _scalar(event: Any) -> Any:
    """The JSON value of a scalar. Its tag decides the type: a plain scalar's is resolved as
    YAML 1.1 resolves it (as PyYAML's safe loader did, and the API server's YAML reader)."""
    value: str = event.value
    tag = event.tag
    if tag is None:
        if not event.implicit[0]:  # quoted (_build also returns known ones without a call)
            return value
        result = _plain(value)
        if len(value) <= _PLAIN_LENGTH:
            remember(_PLAIN, value, result, _PLAIN_SIZE)
        return result
    if tag == "!" or tag == STR:
        return value
    return _tagged(tag, value)


def _plain(value: str) -> Any:
    """The value of a plain scalar, which depends on its text alone."""
    for tag, pattern in _IMPLICIT.get(value[:1], ()):
        if pattern.match(value):
            return _MERGE_KEY if tag == MERGE else _tagged(tag, value)
    return value


def _tagged(tag: str, value: str) -> Any:
    if tag == NULL:
        return None
    if tag in _TEXT_TAGS:
        return value
    constructor = _CONSTRUCTORS.get(tag)
    if constructor is None:
        raise _EventError(f"the tag {tag!r} is not supported on a scalar", at_mark=True)
    return _typed(tag, value, constructor)


def _typed(tag: str, value: str, constructor: Callable[[SafeConstructor, ScalarNode], Any]) -> Any:
    if tag == INT and _decimal_digits(value) > _FLOAT_DIGITS:
        raise _EventError(_out_of_range(value))
    try:
        result = constructor(_CONSTRUCTOR, ScalarNode(tag, value))
    except (yaml.YAMLError, AttributeError, TypeError, ValueError, LookupError) as exc:
        # PyYAML's constructors raise these for a value that does not fit its explicit tag
        # (`!!timestamp` or `!!int` with no value, `!!int x`).
        raise _EventError(f"a value does not fit its tag ({exc})", at_mark=True) from None
    if isinstance(result, float) and not math.isfinite(result):
        if value.lower().lstrip("+-") in (".inf", ".nan"):
            raise _EventError(f"{result} is not a valid number")
        raise _EventError(_out_of_range(value))
    if isinstance(result, int) and not isinstance(result, bool) and not _fits_float(result):
        raise _EventError(_out_of_range(value))
    if isinstance(result, datetime.datetime):
        return _rfc3339(result)
    if isinstance(result, datetime.date):
        return result.isoformat()
    if isinstance(result, bytes):  # !!binary: the API holds bytes as base64 strings
        return base64.b64encode(result).decode("ascii")
    return result


def _decimal_digits(value: str) -> int:
    """The digits of a YAML 1.1 decimal integer (0 for the other bases: Python reads those at
    any length, and _fits_float judges the result)."""
    digits = value.replace("_", "").lstrip("+-")
    if digits.startswith("0") or ":" in digits:
        return 0
    return len(digits)


def _rfc3339(value: datetime.datetime) -> str:
    if value.tzinfo is None:  # PyYAML returns UTC timestamps as naive datetimes
        value = value.replace(tzinfo=datetime.UTC)
    return value.isoformat().replace("+00:00", "Z")
