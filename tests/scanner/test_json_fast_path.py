"""The JSON fast path (documents._fast_json, msgspec) against the exact path (json.loads with
hooks): the same document, types included, the same value count and the same error for every
input, and each reason to fall back taken where it must be."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpu_audit.cli import main
from gpu_audit.errors import InputError
from gpu_audit.sources import documents
from gpu_audit.sources.documents import DocumentError, Limits, Source, Tally

ROOT = Path(__file__).resolve().parents[2]
LIMITS = Limits()


def outcome(data: bytes, limits: Limits = LIMITS) -> tuple[str, Any, int]:
    """What _parse_json makes of `data`: the document's repr (which tells 1 from 1.0 and True,
    and -0.0 from 0.0, and shows key order) and the values it counted, or the problems."""
    tally = Tally()
    source = Source("in.json", io.BytesIO(data), len(data) + 1, "too big")
    try:
        document = documents._parse_json(source, limits, tally)
    except InputError as exc:
        return "error", exc.problems, tally.values
    return "document", repr(document), tally.values


def exact(data: bytes, limits: Limits = LIMITS) -> tuple[str, Any, int]:
    """outcome(), with the fast path refusing every input."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(documents, "_fast_json", lambda data, limits: None)
        return outcome(data, limits)


def fast(data: bytes, limits: Limits = LIMITS) -> bool:
    """Whether the fast path vouches for `data`."""
    return documents._fast_json(data, limits) is not None


def assert_same(data: bytes, limits: Limits = LIMITS) -> tuple[str, Any, int]:
    result = outcome(data, limits)
    assert result == exact(data, limits)
    return result


# --------------------------------------------------------------------------- fixture corpus


def _corpus() -> Iterator[tuple[str, Any]]:
    """The documents of every YAML fixture, read by the loader, as one List per file (the
    repository holds no JSON fixture)."""
    for path in sorted((ROOT / "fixtures").rglob("*.y*ml")):
        source = Source(path.name, io.BytesIO(path.read_bytes()), 1 << 30, "too big")
        try:
            items = [
                d
                for _, d in documents.parse(source, False, LIMITS, Tally())
                if not isinstance(d, DocumentError)
            ]
        except InputError:
            continue  # the hostile-input fixtures
        if items:
            yield str(path.relative_to(ROOT)), {"kind": "List", "items": items}


STYLES: dict[str, dict[str, Any]] = {
    "compact": {"separators": (",", ":")},
    "default": {},
    "kubectl": {"indent": 4, "ensure_ascii": False},
    "tabs": {"indent": "\t"},
    "spaced": {"separators": (" ,\r\n", " \t: ")},  # white space before every colon
}


def test_fixture_corpus_reads_the_same_both_ways() -> None:
    seen = 0
    for name, document in _corpus():
        for style, options in STYLES.items():
            data = json.dumps(document, **options).encode()
            kind, _, _ = assert_same(data)
            assert kind == "document", (name, style)
            seen += 1
            # A string that starts with a colon (as ":8080") makes the key bound loose.
            if not re.search(rb'[\[{,:]\s*"\s*:', data):
                assert fast(data), (name, style)
    assert seen > 1000


def test_escaped_json_in_annotations_keeps_the_fast_path() -> None:
    applied = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "a\\": "\\"}}
    text = json.dumps(applied)
    twice = json.dumps({"annotations": {"last-applied-configuration": text}})
    for inner in (text, twice, json.dumps(applied, separators=(",", ":"))):
        obj = {"metadata": {"annotations": {"kubectl.kubernetes.io/last": inner, "b\\": 1}}}
        for options in STYLES.values():
            data = json.dumps(obj, **options).encode()
            assert b'\\":' in data or b'\\" :' in data or b'\\" \t:' in data
            assert fast(data)
            assert_same(data)


# --------------------------------------------------------------------------- generated JSON


class Obj(list[tuple[str, Any]]):
    """An object as its members, so that a key can repeat."""


class Raw(str):
    """A number or constant, written as it is."""


_KEY_CHARS = st.sampled_from(['"', "\\", ":", " ", "\t", "{", "}", ",", "[", "a", "b", "é"])
_KEYS = st.text(_KEY_CHARS, max_size=4)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(_KEY_CHARS, max_size=6),
    st.sampled_from(
        ["-0", "-0.0", "1.0", "1E5", "0.1e-5", "1e-400", "1e400", "NaN", "-Infinity"]
    ).map(Raw),
    st.sampled_from([10**308 - 1, 10**308, -(10**308), 2**1024, 10**309, 10**400]),
)


_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.lists(st.tuples(_KEYS, inner), max_size=4).map(Obj)
    ),
    max_leaves=12,
)


@st.composite
def _texts(draw: st.DrawFn, plant: bool = True) -> bytes:
    """A JSON text with random white space, escapes and duplicate keys (some planted)."""
    spaces = st.sampled_from(["", " ", "\n  ", "\t", " \r\n"])
    escape = draw(st.sampled_from(["none", "unicode", "ascii"]))

    def string(text: str) -> str:
        out = json.dumps(text, ensure_ascii=escape == "ascii")
        if escape == "unicode":  # \u0022 for '"', \u003a for ':', \u0020 for ' '
            body = out[1:-1].replace('\\"', "\\u0022").replace(":", "\\u003a")
            out = '"' + body.replace(" ", "\\u0020") + '"'
        return out

    def write(value: Any) -> str:
        if isinstance(value, Obj):
            members = list(value)
            duplicate: bool = draw(st.booleans())
            if plant and members and duplicate:
                members.append((draw(st.sampled_from(members))[0], None))
            return (
                "{"
                + ",".join(
                    f"{draw(spaces)}{string(k)}{draw(spaces)}:{draw(spaces)}{write(v)}"
                    for k, v in members
                )
                + draw(spaces)
                + "}"
            )
        if isinstance(value, list):
            return "[" + ",".join(draw(spaces) + write(v) for v in value) + draw(spaces) + "]"
        if isinstance(value, Raw):
            return str(value)
        if isinstance(value, str):
            return string(value)
        return json.dumps(value)

    root = draw(
        st.one_of(st.lists(_VALUES, max_size=3), st.lists(st.tuples(_KEYS, _VALUES)).map(Obj))
    )
    return write(root).encode()


def _has_duplicate(value: Any) -> bool:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in items}) != len(items):
            raise DocumentError
        return dict(items)

    try:
        json.loads(value, object_pairs_hook=pairs)
    except DocumentError:
        return True
    return False


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_texts())
@example(b'{"a\\\\":1,"a\\\\":2}')
@example(b'{"x":"{\\"a\\":1,\\"a\\":2}","a":1,"a":2}')
@example(b'{"x":":8080","a":1}')
@example(b'{"\\":":1,"b":2,"b":3}')  # an escaped quote then '":' is no string of kind (a)
@example(b'{"a":1, "a" :2}')
def test_generated_texts_read_the_same_both_ways(data: bytes) -> None:
    assert_same(data)
    if fast(data):
        assert not _has_duplicate(data)


@settings(max_examples=400, deadline=None)
@given(_texts(plant=False), st.data())
def test_damaged_texts_read_the_same_both_ways(data: bytes, draw: st.DataObject) -> None:
    """Random bytes written over, inserted or cut: msgspec refuses what json.loads refuses."""
    for _ in range(draw.draw(st.integers(1, 3))):
        at = draw.draw(st.integers(0, len(data)))
        byte = draw.draw(
            st.one_of(st.sampled_from(b'"\\:,{}[] \t\x0c\x00\x7fe.-+0u'), st.integers(0, 255))
        )
        cut = draw.draw(st.integers(0, 1))
        data = data[:at] + bytes([byte]) + data[at + cut :]
    assert_same(data)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [b"\\u", b"\\ud83d", b"\\ude00", b"\\uD800", b"\\udfff", b"\\\\", b'\\"', b"\\/"]
            ),
            st.sampled_from([b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"]),
            st.binary(max_size=3),
            st.text(max_size=3).map(str.encode),
        ),
        max_size=6,
    ).map(b"".join)
)
@example(b"\\ud800")
@example(b"\\ud83d\\ude00")
def test_string_bytes_read_the_same_both_ways(body: bytes) -> None:
    """Escapes, control characters, invalid UTF-8 and lone surrogates in a key and a value."""
    data = b'{"' + body + b'": "' + body + b'"}'
    assert_same(data)
    assert_same(b'["' + body + b'"]')


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.from_regex(rb"\A-?(0|[1-9][0-9]{0,400})(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,4})?\Z"),
        st.binary(max_size=6),
    )
)
@example(b"1" + b"0" * 308)
@example(b"17976931348623157" + b"0" * 292)
@example(b"17976931348623159" + b"0" * 292)
@example(b"-0")
def test_numbers_read_the_same_both_ways(number: bytes) -> None:
    data = b'{"n": [' + number + b"]}"
    assert_same(data)


# --------------------------------------------------------------------------- each fallback

DEEP = Limits(depth=3)


@pytest.mark.parametrize(
    ("trigger", "contrast", "limits"),
    [
        (b'{"a": 1,}', b'{"a": 1}', LIMITS),  # a syntax error
        (b'{"a": NaN}', b'{"a": 0}', LIMITS),
        (b'{"a": -Infinity}', b'{"a": -1}', LIMITS),
        (b'{"a": 1e400}', b'{"a": 1e300}', LIMITS),  # float_hook: infinite
        (b'{"a": 1%s}' % (b"0" * 308), b'{"a": 9%s}' % (b"9" * 306), LIMITS),  # 1e308: fits
        (b'{"a": [-1%s]}' % (b"0" * 309), b'{"a": [-9%s]}' % (b"9" * 306), LIMITS),  # 1e309
        (b'{"a": "\xff"}', b'{"a": "\xc3\xbf"}', LIMITS),  # invalid UTF-8
        (b'{"a": "\\udc00"}', b'{"a": "\\ud83d\\ude00"}', LIMITS),  # a lone surrogate
        (b'{"a": [[[1]]]}', b'{"a": [[1]]}', DEEP),  # nested deeper than the limit
        (b"[" * 100_000 + b"]" * 100_000, b"[" * 100 + b"]" * 100, Limits(depth=101)),
        (b'"text"', b'["text"]', LIMITS),  # not an object or a list
        (b'{"a": 1, "a": 2}', b'{"a": 1, "b": 2}', LIMITS),  # a duplicate key
        (b'{"a\\\\": 1, "a\\\\" : 2}', b'{"a\\\\": 1, "b\\\\" : 2}', LIMITS),
        # A string that starts with a colon, not a member's value: a loose key bound.
        (b'{"x": [":8080"]}', b'{"x": ":8080"}', LIMITS),
        (b'{"x": [1, "  :"]}', b'{"x": "  :", "y": 1}', LIMITS),
        (b'{":x": 1}', b'{"x:": ":"}', LIMITS),
    ],
)
def test_each_reason_to_fall_back(trigger: bytes, contrast: bytes, limits: Limits) -> None:
    assert not fast(trigger, limits)
    assert fast(contrast, limits)
    assert_same(trigger, limits)
    assert assert_same(contrast, limits)[0] == "document"


def test_a_byte_order_mark_is_skipped() -> None:
    data = b'\xef\xbb\xbf{"a": ["b"]}'
    assert fast(data)
    assert outcome(data) == ("document", "{'a': ['b']}", 3) == exact(data)


@pytest.mark.parametrize(
    ("data", "bound"),
    [
        (b'{"a":1}', 1),
        (b'{"a\\"":1}', 1),  # an escaped quote in a key
        (b'{"a\\\\":1}', 1),  # a key ending in a backslash: an even run
        (b'{"a\\\\\\"":1}', 1),  # ...and an escaped quote after it: an odd run
        (b'{"a\\\\\\\\":1}', 1),
        (b'{"x":"{\\"a\\":{\\"b\\":1}}"}', 1),  # escaped JSON
        (b'{"x":"{\\"a\\\\\\":1}"}', 1),  # an odd run of 3 before an escaped quote
        (b'{"x" : "{\\"a\\" :1}"}', 1),
        (b'{"x":"\\u0022:"}', 1),  # an escaped quote written \\u0022
        (b'{"a" :1,"b"\t:2,"c"\r\n:3,"d":4}', 4),
        (b'{"x":":","y" : " :"}', 2),  # member values that start with a colon
        (b'{"x\\\\":":"}', 2),  # a key that ends in a backslash: its value is not counted
        (b'{"x":[":"]}', 2),  # a list item that starts with a colon: loose
        (b'{" :":1}', 1),  # a key " :": its opening quote starts the match
        (b'{":x":1}', 2),  # a key ":x": loose
    ],
)
def test_key_bound(data: bytes, bound: int) -> None:
    seen = [0, 0]
    documents._count(json.loads(data), 100, seen)
    assert documents._key_bound(data, seen[0]) == bound


# --------------------------------------------------------------------------- the whole scan


def test_a_scan_report_is_the_same_bytes_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [
        item
        for name, document in _corpus()
        if name.startswith(("fixtures/clusters/sample/", "fixtures/scenarios/serve-vllm-platform/"))
        and not name.endswith("expected.yaml")
        for d in document["items"]
        for item in (d["items"] if d["kind"] == "List" else [d])
    ]
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=4)
    assert len(items) > 10 and '": ":9400"' in text  # dcgm-exporter's listen address
    dump = tmp_path / "dump.json"
    dump.write_text(text)
    args = ["scan", "--from-file", str(dump), "-o", "json"]
    taken: list[bool] = []
    fast_json = documents._fast_json

    def spy(data: bytes, limits: Limits) -> Any:
        found = fast_json(data, limits)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(documents, "_fast_json", spy)
    first = CliRunner().invoke(main, args)
    assert taken == [True]
    monkeypatch.setattr(documents, "_fast_json", lambda data, limits: None)
    second = CliRunner().invoke(main, args)
    assert first.exit_code == second.exit_code == 0
    assert first.stdout_bytes == second.stdout_bytes
    assert json.loads(first.stdout)["findings"]
