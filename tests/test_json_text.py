"""The fast canonical JSON text (gpu_audit.json_text) is the reference text, byte for byte.

The reference is json.dumps(sort_keys=True, indent=2, ensure_ascii=False) plus a newline. Two
proofs: generated documents holding every value kind json.dumps writes or refuses (the same
text, or the same error), and every document the commands write for the fixtures (scan,
inventory, why-pending, fleet, diff, render), compared as the commands write them.
"""

from __future__ import annotations

import enum
import math
import sys
import types
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gpu_audit.report as report_module
from gpu_audit.cli import main
from gpu_audit.json_text import canonical_json, reference_json
from tests.builders import fixture_clusters

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
PRICES = ROOT / "docs" / "gpu-prices.example.yaml"


def _outcome(encode: Callable[[object], str], document: object) -> tuple[str, ...]:
    """The text, or the error's type and message: what a caller of the encoder sees."""
    try:
        return ("text", encode(document))
    except Exception as exc:  # the comparison is the point: any error must be the same one
        return ("error", type(exc).__name__, str(exc))


class Colour(enum.Enum):  # json.dumps refuses a plain Enum
    RED = "red"


class Level(enum.IntEnum):  # written as its int
    HIGH = 3


class Tier(enum.StrEnum):  # written as its str
    GOLD = "gold"


class Tag(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


class Record(dict[Any, Any]):
    pass


class Items(list[Any]):
    pass


# Strings: every code point kind json.dumps treats apart: controls, quote and backslash, DEL,
# U+2028/U+2029, non-ASCII (keys sort by code point), astral, and lone surrogates (written into
# the text by json.dumps; msgspec cannot encode them).
_CHARS = st.one_of(
    st.sampled_from(list('\x00\x01\x08\t\n\x0c\r\x1f "\\/\x7f\x80\xe9\u2028\u2029\ufeff\uffff')),
    st.characters(codec="utf-8"),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.characters(min_codepoint=0x10000),
)
_TEXT = st.text(_CHARS, max_size=8)
_FLOATS = st.one_of(
    st.floats(),  # NaN and infinities included
    st.sampled_from([1e-05, 2.5e-05, 1e-07, 1e16, 1e22, -0.0, 5e-324, 1.7976931348623157e308]),
    st.builds(lambda m, e: m * 10.0**e, st.floats(1, 10), st.integers(-30, 30)),
)
_INTS = st.one_of(
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**40, -(10**40)]),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _INTS,
    _FLOATS,
    _TEXT,
    st.builds(Tag, _TEXT),
    st.builds(Count, _INTS),
    st.builds(Ratio, _FLOATS),
    st.sampled_from([Level.HIGH, Tier.GOLD]),
)
# What json.dumps refuses, kept rare so that most generated documents are written.
_REFUSED = st.sampled_from([{1, 2}, frozenset(), b"x", Colour.RED, types.MappingProxyType({})])
_KEYS = st.one_of(
    _TEXT,
    st.builds(Tag, _TEXT),
    st.sampled_from(["", "a", "B", "é", "\U0001f600", "\uffff", "10", "9"]),
)
# Mixed key types: written as strings when they sort (ints among ints), else a TypeError.
_ODD_KEYS = st.one_of(st.none(), st.booleans(), _INTS, _FLOATS, st.tuples(st.integers()))


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(Items),
        st.dictionaries(_KEYS, children, max_size=5),
        st.dictionaries(_KEYS, children, max_size=3).map(Record),
        st.dictionaries(_KEYS, children, max_size=3).map(OrderedDict),
        st.dictionaries(st.one_of(_INTS, _FLOATS), children, max_size=3),
        st.dictionaries(_ODD_KEYS, children, max_size=3),
    )


_LEAVES = st.integers(0, 19).flatmap(lambda draw: _REFUSED if draw == 0 else _SCALARS)
_DOCUMENTS = st.recursive(_LEAVES, _containers, max_leaves=40)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_DOCUMENTS)
@example({"f": [1e-05, 1e16, 1e22, float("nan"), float("inf"), -float("inf"), -0.0]})
@example({"s": "\ud800"})
@example({"é": 1, "e": 2, "\U0001f600": 3, "\uffff": 4, "Z": 5})
@example({10: "a", 9: "b", 2.5: "c", True: "d", None: "e"})
@example({1: "a", "b": 2})
@example({"a": {}, "b": [], "c": [[], {}], "d": ()})
@example({"big": 10**5000})
@example({"p": types.MappingProxyType({"a": 1})})
def test_generated_documents_get_the_reference_text_or_error(document: object) -> None:
    assert _outcome(canonical_json, document) == _outcome(reference_json, document)


def test_a_circular_document_raises_the_reference_error() -> None:
    document: dict[str, Any] = {"a": []}
    document["a"].append(document)
    assert _outcome(canonical_json, document) == _outcome(reference_json, document)
    assert _outcome(reference_json, document)[1] == "ValueError"


def _nested(depth: int) -> object:
    document: object = 0
    for level in range(depth):
        document = [document] if level % 2 else {"k": document}
    return document


def _deepest(encode: Callable[[object], str]) -> int:
    low, high = 1, sys.getrecursionlimit() + 10
    while low < high:
        middle = (low + high + 1) // 2
        try:
            encode(_nested(middle))
            low = middle
        except RecursionError:
            high = middle - 1
    return low


def test_nesting_near_the_recursion_limit_gives_the_reference_outcome() -> None:
    deepest = _deepest(reference_json)
    assert deepest < sys.getrecursionlimit()  # the search found the limit, not its own bound
    for depth in (deepest - 1, deepest, deepest + 1):
        document = _nested(depth)
        assert _outcome(canonical_json, document) == _outcome(reference_json, document)


def test_float_and_string_forms_that_differ_between_libraries() -> None:
    """The cases where msgspec's own encoder writes other text than json.dumps: the fast
    path must still give json.dumps's (1e-05, 1e+16, NaN, a raw U+2028, \\u001f)."""
    document = {"x": [1e-05, 1e16, float("nan"), "\u2028\x1f\x7f"], "y": {}}
    assert canonical_json(document) == (
        "{\n"
        '  "x": [\n'
        "    1e-05,\n"
        "    1e+16,\n"
        "    NaN,\n"
        '    "\u2028\\u001f\x7f"\n'
        "  ],\n"
        '  "y": {}\n'
        "}\n"
    )


def test_every_document_the_commands_write_for_the_fixtures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[str] = []
    differ: list[str] = []

    def both(document: object) -> str:
        text = canonical_json(document)
        compared.append(str(len(compared)))
        if text != reference_json(document):
            differ.append(str(document)[:200])
        return text

    monkeypatch.setattr(report_module, "canonical_json", both)
    runner = CliRunner()

    written = 0

    def run(*args: str) -> None:
        nonlocal written
        result = runner.invoke(main, list(args))
        if result.exit_code == 2 and "the input has no Nodes" in result.output:
            return  # inventory and why-pending need Nodes; many check fixtures hold none
        assert result.exit_code in (0, 1), (args, result.output, result.exception)
        written += 1

    reports: list[Path] = []
    for name, path in fixture_clusters():
        reports.append(tmp_path / f"{name}.json")
        scan = ("scan", "--from-file", str(path), "--cluster-name", name, "-o", "json")
        run(*scan, "--output-file", str(reports[-1]), "--gpu-prices", str(PRICES))
        for command in ("inventory", "why-pending"):
            run(command, "--from-file", str(path), "-o", "json")
    hostile = str(FIXTURES / "clusters" / "hostile")
    framework = ("--framework", "nvidia-gpu-operator", "--framework", "eks-aiml")
    run("scan", "--from-file", hostile, "-o", "json", "--baseline", str(reports[0]), *framework)
    run("fleet", *map(str, reports), "-o", "json")
    run("diff", str(reports[0]), str(reports[1]), "-o", "json")
    run("render", str(reports[0]), "-o", "json")
    assert written > 2 * len(reports)
    assert len(compared) == written  # one document per command, each compared
    assert differ == []


def test_dumps_writes_the_reference_text() -> None:
    """report.dumps, which every command writes JSON with, is the canonical text."""
    document = {"b": [1, 2.5, None, True], "a": {"é": "\u2028"}, "c": math.pi}
    assert report_module.dumps(document) == reference_json(document)
