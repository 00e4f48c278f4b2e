"""The loader's limits and its YAML-to-JSON rules, one hostile input each (see README, Limits)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.errors import InputError
from gpu_audit.sources.documents import MIB, Limits
from gpu_audit.sources.files import DEFAULT_LIMITS, load_files

CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n"


def stdin(data: bytes) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


def problems(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[str, ...]:
    with pytest.raises(InputError) as info:
        load_files(["-"], stdin(data), limits)
    return info.value.problems


def alias_bomb(width: int, depth: int) -> bytes:
    levels = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    for level in range(1, depth + 1):
        refs = ", ".join([f"*l{level - 1}"] * width)
        levels.append(f"l{level}: &l{level} [{refs}]")
    return (CONFIG_MAP + "data:\n" + "".join(f"  {line}\n" for line in levels)).encode()


def test_alias_bomb_stops_at_the_expansion_limit() -> None:
    # 9 levels of 9: 387 million values once expanded, from 500 bytes.
    found = problems(alias_bomb(9, 9))
    assert found == (
        "<stdin>: document 1: data.l5[0]: YAML aliases expand to more than 100000 values",
    )


def test_a_few_aliases_are_expanded_into_independent_copies() -> None:
    snapshot = load_files(["-"], stdin(alias_bomb(3, 2)))
    data = snapshot.of("ConfigMap")[0].raw["data"]
    assert data["l2"] == [[["x"] * 3] * 3] * 3
    assert data["l2"][0] is not data["l2"][1]  # the sanitizer may edit one without the other


@pytest.mark.parametrize(
    "text",
    ["metadata: &m {name: cm, self: *m}\n", "spec: &s [*s]\n"],
)
def test_an_alias_cycle_is_an_error(text: str) -> None:
    data = "apiVersion: v1\nkind: ConfigMap\n" + text
    if "metadata" not in text:
        data += "metadata: {name: cm}\n"
    (problem,) = problems(data.encode())
    assert problem.startswith("<stdin>: document 1: ") and "alias refers to itself" in problem


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_nesting_deeper_than_the_limit_is_an_error(fmt: str) -> None:
    deep = "[" * 150 + "]" * 150
    if fmt == "json":
        data = f'{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "cm"}}, "x": {deep}}}'
    else:
        data = CONFIG_MAP + f"x: {deep}\n"
    (problem,) = problems(data.encode())
    # The root is level 1 and x level 2: the list at x[0]*98 is the 101st level.
    assert problem == f"<stdin>: document 1: x{'[0]' * 99}: nested deeper than 100 levels"


@pytest.mark.parametrize(
    "data",
    [b"[" * 100_000, b"a: " + b"[" * 100_000, b"".join(b" " * i + b"- \n" for i in range(2000))],
)
def test_nesting_beyond_what_the_parsers_accept_is_an_error(data: bytes) -> None:
    (problem,) = problems(data)
    assert problem.startswith("<stdin>: ")


def test_invalid_utf8_on_stdin_names_the_byte() -> None:
    assert problems(CONFIG_MAP.encode() + b"data: {a: \xff}\n") == (
        "<stdin>: not UTF-8 text (byte 62)",
    )


def test_a_lone_surrogate_in_a_text_stream_is_not_utf8() -> None:
    with pytest.raises(InputError) as info:
        load_files(["-"], io.StringIO("kind: \ud800\n"))
    assert info.value.problems == ("<stdin>: not UTF-8 text (character 6)",)


def test_a_byte_order_mark_is_allowed(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}).encode()
    )
    assert len(load_files([str(path)])) == 1


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (CONFIG_MAP + "data: {a: 1, a: 2}\n", "line 4 column 14: duplicate key 'a'"),
        (CONFIG_MAP + "kind: Secret\n", "line 4 column 1: duplicate key 'kind'"),
        ('{"kind": "Pod", "kind": "Node"}', "invalid JSON: duplicate key 'kind'"),
        (CONFIG_MAP + "data: {1: a, '1': b}\n", "line 4 column 14: duplicate key '1'"),
    ],
)
def test_duplicate_keys_are_errors(data: str, expected: str) -> None:
    (problem,) = problems(data.encode())
    assert expected in problem, problem


def test_merge_keys_may_be_overridden() -> None:
    text = CONFIG_MAP + "base: &b {a: 1, b: 2}\ndata:\n  <<: *b\n  a: 3\n"
    data = load_files(["-"], stdin(text.encode())).of("ConfigMap")[0].raw["data"]
    assert data == {"a": 3, "b": 2}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
        ("2024-01-01 10:00:00+02:00", "2024-01-01T10:00:00+02:00"),
        ("2024-01-01", "2024-01-01"),
        ("!!binary aGVsbG8=", "aGVsbG8="),
        ("!!set {b, a}", {"a": None, "b": None}),
        ("{1: x, true: y, null: z, 1.5: w}", {"1": "x", "true": "y", "null": "z", "1.5": "w"}),
    ],
)
def test_yaml_values_become_what_the_api_would_hold(value: str, expected: object) -> None:
    text = CONFIG_MAP + f"x: {value}\n"
    assert load_files(["-"], stdin(text.encode())).of("ConfigMap")[0].raw["x"] == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (CONFIG_MAP + "x: .nan\n", "document 1: x: nan is not a valid number"),
        (CONFIG_MAP + "x: [-.inf]\n", "document 1: x[0]: -inf is not a valid number"),
        ('{"a": NaN}', "invalid JSON: NaN is not a JSON number"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: 5}\n", "Pod metadata.name is a int"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: [a]}\n",
            "Pod metadata.namespace is a list",
        ),
    ],
)
def test_values_no_kubernetes_object_can_hold_are_errors(data: str, expected: str) -> None:
    (problem,) = problems(data.encode())
    assert expected in problem, problem


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(CONFIG_MAP.encode() + b"#" * MIB)
    with pytest.raises(InputError) as info:
        load_files([str(path)], limits=Limits(file_bytes=MIB))
    assert info.value.problems == (f"{path}: larger than 1 MiB (the input size limit)",)


def test_stdin_over_the_size_limit_is_refused() -> None:
    found = problems(b"#" * (MIB + 1), Limits(file_bytes=MIB))
    assert found == ("<stdin>: larger than 1 MiB (the input size limit)",)


def test_inputs_over_the_total_size_limit_are_refused(tmp_path: Path) -> None:
    paths = []
    for index in range(3):
        path = tmp_path / f"cm{index}.yaml"
        path.write_text(CONFIG_MAP.replace("cm", f"cm{index}") + "#" * (MIB // 2))
        paths.append(str(path))
    with pytest.raises(InputError) as info:
        load_files(paths, limits=Limits(file_bytes=MIB, total_bytes=MIB))
    assert info.value.problems == (
        f"{paths[1]}: the inputs together are larger than 1 MiB (the total input size limit)",
        f"{paths[2]}: the inputs together are larger than 1 MiB (the total input size limit)",
    )


def test_the_object_limit_stops_reading() -> None:
    text = "".join(CONFIG_MAP.replace("cm", f"cm{i}") + "---\n" for i in range(20))
    found = problems(text.encode(), Limits(objects=10))
    assert found == (
        "<stdin>: document 11: more than 10 documents and objects in the input (the object "
        "limit); scan it in parts",
    )


def test_problems_are_listed_up_to_the_limit_then_counted() -> None:
    text = "".join(f"- {i}\n---\n" for i in range(30))
    found = problems(text.encode(), Limits(problems=5))
    assert len(found) == 6 and found[-1] == "... and 25 more problems"


def test_the_cli_reports_hostile_stdin_without_a_traceback() -> None:
    result = CliRunner().invoke(main, ["scan", "--from-file", "-"], input=b"kind: \xff\n")
    assert result.exit_code == 2, result.output
    assert "<stdin>: not UTF-8 text (byte 6)" in result.output
    assert "Traceback" not in result.output
