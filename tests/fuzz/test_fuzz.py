"""Property tests: hostile text and objects through the loader and the full scan.

The seeds are the repository's own fixtures (every check has pass and fail cases there, so every
check meets objects it applies to), cut and corrupted, with fields of the wrong type, numbers of
any size, text of every Unicode category (surrogates included) in any string or key, and under
file names of any bytes. The properties: the loader either reads the input or raises InputError
naming it, and then every check runs without raising, and every renderer's report is UTF-8.

In the test suite each property runs `GPU_AUDIT_FUZZ_EXAMPLES` (default 150) derandomized
examples; `make fuzz` (tests/fuzz/run_fuzz.py) runs them with many more.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import math
import os
import tempfile
import textwrap
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_audit.engine import run_checks
from gpu_audit.errors import InputError
from gpu_audit.model import Check, CheckStatus
from gpu_audit.postscan.exemptions import apply_exemptions
from gpu_audit.registry import load_checks
from gpu_audit.report import build_report
from gpu_audit.reports import RENDERERS
from gpu_audit.reports.table import render_table
from gpu_audit.reports.terminal import MAX_CHARS
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files

# The Unicode general categories: a string of any one of them, surrogates (Cs) included.
CATEGORIES: tuple[Any, ...] = (
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn",
)  # fmt: skip

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TODAY = dt.date(2026, 1, 1)  # exemption expiry is judged on a fixed day: runs are reproducible
MAX_JUNK_DEPTH = 60  # below the loader's nesting limit, so that the checks get to see it
# Renderers read only the report document, whose types the JSON Schema fixes; the HTML page
# costs 60 ms, twenty times a scan, so every renderer but JSON runs on one case in this many.
RENDER_ALL_EVERY = 25

FUZZ = settings(
    max_examples=int(os.environ.get("GPU_AUDIT_FUZZ_EXAMPLES", "150")),
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Cases run per property (run_fuzz.py prints them).
CASES: Counter[str] = Counter()

# Text spliced into YAML and JSON: the syntax that changes what a document means.
SNIPPETS = (
    "&a ", "*a", "<<: *a\n", "!!binary ", "!!set ", "!!timestamp ", "!!python/object:os.system ",
    "!!str ", "!!int ", "!!float ", "? ", ": ", "- ", "{", "}", "[", "]", ",", "\t", "\n",
    "---\n", "...\n", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", '"', "'", "\\", "\x00", "\ufeff",
    "#", "|\n", ">-\n", "2024-01-01", "2024-01-01T00:00:00Z", ".nan", ".inf", "-.inf", "~",
    "null", "0x1F", "0o17", "1e999", "NaN", "Infinity", "-0", "1_000", "yes", "on", "0.5",
    "1Gi", "nvidia.com/gpu: ", "kind: List\nitems: ", "kind: Snapshot\n",
    "apiVersion: gpu-audit.io/v1\n", "metadata:\n", "  name: x\n", "\u202e", "\U0001f600",
)  # fmt: skip
BAD_BYTES = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80")

# Values of the wrong type for whatever field they replace.
WRONG_VALUES: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2**63, -(2**63), 0.5, -1.5, 1e300, "", "0", "1", "-1", "0.5",
    "abc", "1Gi", "100m", "true", "null", "Exists", "NoSchedule", "nvidia.com/gpu", "*", "=",
    " ", "\x00", "x" * 100_000, [], [None], [1], ["x"], [{}], [[]], {}, {"": None}, {"a": 1},
    {"name": None}, {"0": [None]},
)  # fmt: skip
# Fields the loader needs to accept an object at all: mutating them only tests the loader.
IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
IDENTITY |= {("metadata", "generateName")}


# --------------------------------------------------------------------------- the full scan


@cache
def checks() -> dict[str, Check]:
    return load_checks(plugins=False)


@cache
def fixture_files() -> tuple[Path, ...]:
    return tuple(
        sorted(
            p
            for p in FIXTURES.rglob("*")
            if p.suffix in (".yaml", ".yml") and p.name != "expected.yaml"
        )
    )


@cache
def fixture_objects(path: Path) -> tuple[dict[str, Any], ...] | None:
    """The objects of a fixture file as plain JSON data; None for a file that holds no
    Kubernetes objects (fixtures/secrets/planted.yaml lists planted values)."""
    try:
        snapshot = load_files([str(path)])
    except InputError:
        return None
    return tuple(json.loads(json.dumps(dict(r.raw))) for r in snapshot.all())


@cache
def fixture_groups() -> tuple[tuple[dict[str, Any], ...], ...]:
    """The objects of each fixture file that holds Kubernetes objects."""
    return tuple(g for g in map(fixture_objects, fixture_files()) if g is not None)


def load_or_reject(data: bytes) -> Snapshot | None:
    """The snapshot of `data` given on stdin, or None when the loader rejected it as it must:
    an InputError whose every problem names the input."""
    try:
        return load_files([STDIN], io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    except InputError as exc:
        assert exc.problems, "an InputError without problems"
        unnamed = [p for p in exc.problems if not p.startswith(("<stdin>", "... and "))]
        assert not unnamed, unnamed
        return None


def full_scan(snapshot: Snapshot, case: int) -> None:
    """Every check, exemptions, the report and its renderers; fails on a check that raised."""
    runs = run_checks(checks().values(), snapshot)
    errors = [f"{r.check.id}: {r.error_detail}" for r in runs if r.status is CheckStatus.ERROR]
    assert not errors, "\n".join(errors)
    runs, exemptions = apply_exemptions(runs, snapshot, checks().keys(), None, TODAY)
    document = build_report(snapshot, runs, exemptions=exemptions)
    for name, renderer in RENDERERS.items():
        if name == "json" or case % RENDER_ALL_EVERY == 1:
            renderer.render(document, False).encode("utf-8")  # no lone surrogate got through


# --------------------------------------------------------------------------- strategies


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


wrong_values = st.one_of(
    st.sampled_from(WRONG_VALUES),
    st.text(max_size=30),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(1, MAX_JUNK_DEPTH).map(_nested),
    st.lists(st.sampled_from(WRONG_VALUES[:26]), max_size=4),
    st.dictionaries(st.text(max_size=8), st.sampled_from(WRONG_VALUES[:26]), max_size=4),
)


def _field(draw: st.DrawFn, obj: dict[str, Any]) -> tuple[Any, Any, tuple[Any, ...]] | None:
    """A field of `obj` drawn by walking down from the top: (its container, its key, the
    path to the container); None when only identity fields are left."""
    node: Any = obj
    path: tuple[Any, ...] = ()
    while True:
        keys = list(range(len(node))) if isinstance(node, list) else sorted(node)
        keys = [k for k in keys if (*path, k) not in IDENTITY]
        if not keys:
            return None
        key = draw(st.sampled_from(keys))
        child = node[key]
        descend = isinstance(child, dict | list) and child
        if descend and ((*path, key) == ("metadata",) or draw(st.integers(0, 3)) > 0):
            node, path = child, (*path, key)
            continue
        return node, key, path


def _mutate(draw: st.DrawFn, obj: dict[str, Any]) -> None:
    """Replace one field of `obj`, delete it or wrap it in a list."""
    found = _field(draw, obj)
    if found is None:
        return
    node, key, path = found
    action = draw(st.sampled_from(("replace", "replace", "delete", "wrap")))
    if action == "delete" and (*path, key) != ("metadata",):
        del node[key]
    elif action == "wrap":
        node[key] = [node[key]]
    else:  # a copy: WRONG_VALUES must not change under a later mutation
        node[key] = copy.deepcopy(draw(wrong_values))


@st.composite
def wrong_typed_objects(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects = copy.deepcopy(list(draw(st.sampled_from(fixture_groups()))))
    for _ in range(draw(st.integers(1, 6))):
        _mutate(draw, draw(st.sampled_from(objects)))
    return objects


@cache
def _seed_text(path: Path) -> bytes:
    return path.read_bytes()


@st.composite
def hostile_text(draw: st.DrawFn) -> bytes:
    """A fixture file (as YAML or as a JSON List) cut, spliced and corrupted."""
    path = draw(st.sampled_from(fixture_files()))
    data = _seed_text(path)
    items = fixture_objects(path)
    if items is not None and draw(st.booleans()):
        data = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}).encode()
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(("cut", "splice", "splice", "drop", "repeat", "bytes")))
        if op == "cut":
            data = data[:at]
        elif op == "splice":
            snippet = draw(st.sampled_from(SNIPPETS) | st.text(max_size=12))
            data = data[:at] + snippet.encode("utf-8", "surrogatepass") + data[at:]
        elif op == "drop":
            data = data[:at] + data[at + draw(st.integers(1, 40)) :]
        elif op == "repeat":  # a repeated line: duplicate keys, or a second document
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            line = data[start : end if end >= 0 else len(data)]
            data = data[:start] + line + b"\n" + data[start:]
        else:
            data = data[:at] + draw(st.sampled_from(BAD_BYTES)) + data[at:]
    return data


# --------------------------------------------------------------------------- properties


@FUZZ
@given(hostile_text())
def test_hostile_text_is_read_or_rejected_and_then_scanned(data: bytes) -> None:
    CASES["hostile text"] += 1
    snapshot = load_or_reject(data)
    if snapshot is not None:
        full_scan(snapshot, CASES["hostile text"])


@FUZZ
@given(wrong_typed_objects(), st.sampled_from(("json", "yaml")))
def test_every_check_survives_wrong_typed_fields(objects: list[dict[str, Any]], fmt: str) -> None:
    CASES["wrong-typed objects"] += 1
    document = {"apiVersion": "v1", "kind": "List", "items": objects}
    data = (
        json.dumps(document).encode()
        if fmt == "json"
        else yaml.safe_dump(document, allow_unicode=True).encode()
    )
    snapshot = load_or_reject(data)
    assert snapshot is not None, "the loader rejected objects whose identity fields are intact"
    full_scan(snapshot, CASES["wrong-typed objects"])


# --------------------------------------------------------------------------- numbers, text, names

NUMBER = "gpu-audit-fuzz-number"  # a placeholder no fixture holds, replaced in the JSON text


@st.composite
def number_literals(draw: st.DrawFn) -> str:
    """A JSON number of any size: up to 6,000 digits, exponents far past a float64's."""
    digits = draw(
        st.one_of(
            st.integers(0, 10**30).map(str),
            st.integers(300, 6000).map(lambda n: "9" * n),
            st.text("0123456789", min_size=1, max_size=400).map(lambda t: t.lstrip("0") or "0"),
        )
    )
    fraction = draw(st.sampled_from(("", ".5", ".000001", ".99999999999999999999")))
    exponent = draw(st.one_of(st.just(""), st.integers(-5000, 5000).map(lambda n: f"e{n:+d}")))
    return draw(st.sampled_from(("", "-"))) + digits + fraction + exponent


@st.composite
def objects_with_a_number(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str]:
    objects = copy.deepcopy(list(draw(st.sampled_from(fixture_groups()))))
    obj = draw(st.sampled_from(objects))
    node, key, _ = _field(draw, obj) or (obj, "number", ())  # metadata holds only identity
    node[key] = NUMBER
    return objects, draw(number_literals())


@FUZZ
@given(objects_with_a_number())
def test_json_numbers_of_any_size(case: tuple[list[dict[str, Any]], str]) -> None:
    CASES["JSON numbers of any size"] += 1
    objects, number = case
    document = {"apiVersion": "v1", "kind": "List", "items": objects}
    data = json.dumps(document).replace(f'"{NUMBER}"', number).encode()
    snapshot = load_or_reject(data)
    # The API server reads a number as an int64 or a float64, and refuses one neither holds.
    assert (snapshot is not None) == math.isfinite(float(number)), number
    if snapshot is not None:
        full_scan(snapshot, CASES["JSON numbers of any size"])


def _string_sites(value: Any, path: tuple[Any, ...], out: list[tuple[Any, Any, bool]]) -> None:
    """Every string value and every mapping key of `value` but the identity fields, as
    (container, key, whether the key itself is the site)."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in list(items):
        if (*path, key) in IDENTITY:
            continue
        if isinstance(value, dict) and (*path, key) != ("metadata",):
            out.append((value, key, True))
        if isinstance(item, str):
            out.append((value, key, False))
        elif isinstance(item, dict | list):
            _string_sites(item, (*path, key), out)


@st.composite
def objects_with_any_text(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str]:
    objects = copy.deepcopy(list(draw(st.sampled_from(fixture_groups()))))
    category = draw(st.sampled_from((*CATEGORIES, "Cs", "Cs", "Cs")))  # surrogates more often
    text = draw(st.text(st.characters(categories=[category]), min_size=1, max_size=8))
    text = draw(st.sampled_from(("", "x"))) + text + draw(st.sampled_from(("", "y")))
    _put_text(draw, draw(st.sampled_from(objects)), text)
    return objects, text


def _put_text(draw: st.DrawFn, obj: dict[str, Any], text: str) -> None:
    """`text` in place of one string value or mapping key of `obj` (not an identity field)."""
    sites: list[tuple[Any, Any, bool]] = []
    _string_sites(obj, (), sites)
    if sites:
        container, key, is_key = draw(st.sampled_from(sites))
        if is_key:
            container[text] = container.pop(key)
        else:
            container[key] = text


@FUZZ
@given(objects_with_any_text(), st.sampled_from(("json", "json-raw", "yaml")))
def test_any_unicode_in_every_string_field(
    case: tuple[list[dict[str, Any]], str], fmt: str
) -> None:
    CASES["text of every Unicode category"] += 1
    objects, text = case
    document = {"apiVersion": "v1", "kind": "List", "items": objects}
    if fmt == "yaml":
        data = yaml.safe_dump(document, allow_unicode=True).encode("utf-8", "surrogatepass")
    else:  # surrogates as \u escapes, or (raw) as the bytes no UTF-8 decoder accepts
        data = json.dumps(document, ensure_ascii=fmt == "json").encode("utf-8", "surrogatepass")
    snapshot = load_or_reject(data)
    has_surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    assert snapshot is not None or has_surrogate, "a string of real characters was refused"
    if snapshot is not None:  # and no lone surrogate got in, to fail an encoder later
        json.dumps([dict(r.raw) for r in snapshot.all()], ensure_ascii=False).encode("utf-8")
        full_scan(snapshot, CASES["text of every Unicode category"])


file_name_bytes = st.binary(min_size=1, max_size=60).filter(
    lambda b: b"/" not in b and b"\0" not in b and not b.startswith(b".")
)


@FUZZ
@given(file_name_bytes, file_name_bytes, st.sampled_from(fixture_groups()))
def test_file_names_of_any_bytes(
    folder: bytes, name: bytes, objects: tuple[dict[str, Any], ...]
) -> None:
    CASES["file names of any bytes"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / os.fsdecode(folder)
        directory.mkdir()
        document = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        (directory / os.fsdecode(name + b".json")).write_text(json.dumps(document))
        snapshot = load_files([tmp])
        for resource in snapshot.all():
            resource.source.file.encode("utf-8")  # shown escaped, never as lone surrogates
        full_scan(snapshot, CASES["file names of any bytes"])


# --------------------------------------------------------------------------- long strings

# The longest text textwrap may be handed: a clipped value whose every character took the
# longest escape (\uXXXX), plus the marker. Wrapping costs the square of a word's length.
WRAP_BOUND = 6 * MAX_CHARS + 32


@st.composite
def objects_with_a_long_string(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str]:
    """A string of 100 KiB to 1.5 MiB (past the 1 MiB that redaction parses) in any string
    field or key, the names the table shows on every row more often than the rest."""
    objects = copy.deepcopy(list(draw(st.sampled_from(fixture_groups()))))
    obj = draw(st.sampled_from(objects))
    unit = draw(
        st.sampled_from(("n", "a b ", "-", "x@y:", "\x1b]0;", "\u202e\U0001f600"))
        | st.text(min_size=1, max_size=6)
    )
    size = draw(st.sampled_from((100 * 1024, 150 * 1024, 300 * 1024, 1536 * 1024)))
    text = (unit * (size // len(unit) + 1))[:size]
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and draw(st.booleans()):
        metadata[draw(st.sampled_from(("name", "namespace")))] = text
    else:
        _put_text(draw, obj, text)
    return objects, text


@FUZZ
@given(objects_with_a_long_string(), st.sampled_from(("json", "yaml")))
def test_long_strings_in_every_field_are_clipped_not_wrapped(
    case: tuple[list[dict[str, Any]], str], fmt: str
) -> None:
    CASES["long strings in every field"] += 1
    objects, text = case
    document = {"apiVersion": "v1", "kind": "List", "items": objects}
    data = (  # libyaml's emitter: PyYAML's own takes a second per MiB
        json.dumps(document)
        if fmt == "json"
        else yaml.dump(document, Dumper=yaml.CSafeDumper, allow_unicode=True)
    ).encode("utf-8", "surrogatepass")
    snapshot = load_or_reject(data)
    if snapshot is None:
        return
    runs = run_checks(checks().values(), snapshot)
    errors = [f"{r.check.id}: {r.error_detail}" for r in runs if r.status is CheckStatus.ERROR]
    assert not errors, "\n".join(errors)
    original = textwrap.TextWrapper.wrap
    handed: list[int] = []

    def wrap(self: textwrap.TextWrapper, value: str) -> list[str]:
        handed.append(len(value))
        return original(self, value)

    with mock.patch.object(textwrap.TextWrapper, "wrap", wrap):
        table = render_table(build_report(snapshot, runs))
    assert max(handed, default=0) <= WRAP_BOUND, f"textwrap handed {max(handed)} characters"
    assert max(len(line) for line in table.splitlines()) <= 2 * WRAP_BOUND
    assert text not in table
