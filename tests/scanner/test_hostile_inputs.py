"""Hostile and unlucky input (issue 17): numbers and strings no Kubernetes object can hold,
file names that are not UTF-8, YAML read as a stream within its limits, wrong-typed fields
and unreadable directory entries named as warnings."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit import cli
from gpu_audit.cli import main
from gpu_audit.errors import InputError
from gpu_audit.report import build_report
from gpu_audit.scan import Inputs, ScanOptions, run_scan
from gpu_audit.sources.documents import MIB, Limits
from gpu_audit.sources.files import load_files

ROOT = Path(__file__).resolve().parents[2]
CONFIG_MAP = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": %s}'


DEFAULTS = Limits()


def problems(data: bytes, limits: Limits = DEFAULTS) -> tuple[str, ...]:
    with pytest.raises(InputError) as info:
        load_files(["-"], io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"), limits)
    return info.value.problems


def loads(data: bytes) -> dict[str, object]:
    snapshot = load_files(["-"], io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    (only,) = snapshot.all()
    return dict(only.raw)


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    "number",
    [
        "1" * 5000,  # past Python's 4,300-digit limit: a ValueError traceback before
        "-" + "9" * 400,  # Python reads it; a float64 cannot hold it
        "1" + "0" * 308 + "0",  # 1e309
        "1e1000",  # float('1e1000') is inf: accepted as inf before
        "-1e1000",
        "1.5E+400",
    ],
)
def test_json_numbers_out_of_float64_range_are_input_errors(number: str) -> None:
    (problem,) = problems((CONFIG_MAP % f'{{"x": {number}}}').encode())
    assert problem.startswith("<stdin>: invalid JSON: the number ")
    assert problem.endswith("is out of range (more than a 64-bit float holds)"), problem


@pytest.mark.parametrize(
    ("number", "value"),
    [
        (str(2**63), 2**63),  # the API server reads it as a float64; exact here
        ("1" + "0" * 308, 10**308),
        ("1e308", 1e308),
        ("1e-1000", 0.0),  # underflow is not an error, for the API server either
    ],
)
def test_json_numbers_a_float64_holds_are_read(number: str, value: float) -> None:
    assert loads((CONFIG_MAP % f'{{"x": {number}}}').encode())["data"] == {"x": value}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1" * 5000, "data.x: the number 11111111111111111111... (5000 characters) is out of"),
        ("0x" + "f" * 300, "data.x: the number 0xffffffffffffffffff... (302 characters) is out"),
        ("1.0e+1000", "data.x: the number 1.0e+1000 is out of range"),
        (".inf", "data.x: inf is not a valid number"),
    ],
)
def test_yaml_numbers_out_of_range_are_input_errors(text: str, expected: str) -> None:
    data = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\ndata:\n  x: {text}\n"
    (problem,) = problems(data.encode())
    assert problem.startswith("<stdin>: document 1: ") and expected in problem, problem


# --------------------------------------------------------------------------- surrogates


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ('{"x": "p\\udc80"}', "data.x: 'p' is followed by \\udc80"),
        ('{"x": ["a", "\\ud800"]}', "data.x[1]: '' is followed by \\ud800"),
        ('{"p\\uDBFFq": "v"}', "data: the key 'p' is followed by \\udbff"),
        ('{"x": "\\ude00\\ud83d"}', "data.x: '' is followed by \\ude00"),  # the pair reversed
    ],
)
def test_a_lone_surrogate_in_a_json_string_is_an_input_error(data: str, path: str) -> None:
    (problem,) = problems((CONFIG_MAP % data).encode())
    assert problem.startswith(f"<stdin>: document 1: {path}"), problem
    assert problem.endswith("half of a UTF-16 surrogate pair: not a character")


def test_a_surrogate_pair_is_one_character() -> None:
    assert loads((CONFIG_MAP % '{"x": "\\ud83d\\ude00"}').encode())["data"] == {"x": "\U0001f600"}


def test_a_document_with_a_lone_surrogate_gets_no_report(tmp_path: Path) -> None:
    path = tmp_path / "cm.json"
    path.write_text(CONFIG_MAP % '{"x": "\\udc80"}')
    with pytest.raises(InputError):
        run_scan(ScanOptions(Inputs(files=(str(path),)), plugins=False))


# --------------------------------------------------------------------------- file names


@pytest.fixture
def non_utf8_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "in"
    directory.mkdir()
    name = os.fsdecode(b"pod-\xff\xfe.yaml")  # Python holds the bytes as lone surrogates
    (directory / name).write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n")
    yield directory


def test_a_file_name_that_is_not_utf8_is_shown_escaped(non_utf8_dir: Path) -> None:
    snapshot = load_files([str(non_utf8_dir)])
    (cm,) = snapshot.all()
    assert cm.source.file == f"{non_utf8_dir}/pod-\\xff\\xfe.yaml"
    text = json.dumps(build_report(snapshot, []), ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogate left to fail on


@pytest.mark.parametrize("where", ["stdout", "--output-file", "--output-dir"])
def test_reports_of_a_non_utf8_file_name_are_utf8(
    non_utf8_dir: Path, tmp_path: Path, where: str
) -> None:
    (path,) = non_utf8_dir.iterdir()  # named on the command line: it is in source.inputs
    args = ["scan", "--no-plugins", "--from-file", str(path), "-o", "json"]
    target = tmp_path / "out" / "report.json"
    target.parent.mkdir()
    if where == "--output-file":
        args += ["--output-file", str(target)]
    elif where == "--output-dir":
        args += ["-o", "sarif", "--output-dir", str(target.parent)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = result.stdout_bytes if where == "stdout" else target.read_bytes()
    report = json.loads(data.decode("utf-8"))  # strict UTF-8
    assert report["source"]["inputs"] == [f"{non_utf8_dir}/pod-\\xff\\xfe.yaml"]
    if where == "--output-dir":
        json.loads((target.parent / "report.sarif").read_bytes().decode("utf-8"))


def test_a_string_no_utf8_holds_is_written_escaped_not_as_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    cli._write("name: p\udc80\n", str(target))
    assert target.read_bytes() == b"name: p\\udc80\n"


# --------------------------------------------------------------------------- streaming YAML


class _Stream(io.RawIOBase):
    """`head` then `filler` repeated up to `size` bytes, counting what is read."""

    def __init__(self, head: bytes, filler: bytes, size: int) -> None:
        self.data = head
        self.filler = filler
        self.size = size
        self.position = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.size - self.position)
        head = self.data[self.position : self.position + count]
        offset = max(self.position + len(head) - len(self.data), 0) % len(self.filler)
        repeats = (count - len(head)) // len(self.filler) + 2
        chunk = head + (self.filler * repeats)[offset : offset + count - len(head)]
        buffer[:count] = chunk
        self.position += count
        return count


def stream_problems(stream: _Stream, limits: Limits = DEFAULTS) -> tuple[str, ...]:
    text = io.TextIOWrapper(io.BufferedReader(stream), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_files(["-"], text, limits)
    return info.value.problems


def test_a_duplicate_key_ends_a_huge_document_after_reading_little_of_it() -> None:
    # 1 GiB of `a: b`: the old loader built the whole document (1.4 GB of RSS per 10 MB)
    # before it found the duplicate key on line 2.
    stream = _Stream(b"", b"a: b\n", 1024 * MIB)
    assert stream_problems(stream) == (
        "<stdin>: document 1: invalid YAML at line 2 column 1: duplicate key 'a' "
        "(the rest of the file is not read)",
    )
    assert stream.position < 4 * MIB


def test_the_value_limit_stops_the_reading() -> None:
    stream = _Stream(b"items:\n", b"- {a: b}\n", 1024 * MIB)
    found = stream_problems(stream, Limits(values=10_000))
    assert found == (
        "<stdin>: document 1: more than 10000 values in the input (the value limit); "
        "scan it in parts",
    )
    assert stream.position < 4 * MIB


def test_the_value_limit_spans_files_and_counts_json(tmp_path: Path) -> None:
    paths = []
    for index in range(2):
        path = tmp_path / f"cm{index}.json"
        path.write_text(CONFIG_MAP.replace('"cm"', f'"cm{index}"') % json.dumps(list(range(30))))
        paths.append(str(path))
    assert len(load_files(paths, limits=Limits(values=80))) == 2
    with pytest.raises(InputError) as info:
        load_files(paths, limits=Limits(values=60))
    assert info.value.problems == (
        f"{paths[1]}: document 1: more than 60 values in the input (the value limit); "
        "scan it in parts",
    )


def test_the_size_limit_stops_a_stream_as_it_is_read() -> None:
    stream = _Stream(b"", b"# comment\n", 1024 * MIB)
    assert stream_problems(stream, Limits(file_bytes=MIB)) == (
        "<stdin>: larger than 1 MiB (the input size limit)",
    )
    assert stream.position <= 2 * MIB


def test_nesting_is_refused_at_the_limit_while_reading() -> None:
    stream = _Stream(b"x: ", b"[", 1024 * MIB)  # YAML (a JSON input is read whole)
    (problem,) = stream_problems(stream)
    assert problem.startswith("<stdin>: document 1: ") and "nest" in problem, problem
    assert stream.position < MIB


def test_an_alias_bomb_stops_before_it_expands() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 12)]
    data = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata:\n"
    (problem,) = problems((data + "".join(f"  {line}\n" for line in levels)).encode())
    assert problem.endswith("YAML aliases expand to more than 100000 values")


def test_a_bad_document_does_not_hide_the_next_ones() -> None:
    data = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: .nan}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, name: c}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\ndata: !!python/object:os.system x\n"
    )
    assert problems(data.encode()) == (
        "<stdin>: document 1: data.x: nan is not a valid number",
        "<stdin>: document 2: invalid YAML at line 8 column 21: duplicate key 'name'",
        "<stdin>: document 3: invalid YAML at line 13 column 7: the tag "
        "'tag:yaml.org,2002:python/object:os.system' is not supported on a scalar",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{<<: {a: 1, b: 1}, b: 2}", {"a": 1, "b": 2}),
        ("{<<: [{a: 1}, {a: 2, b: 2}], c: 3}", {"a": 1, "b": 2, "c": 3}),
        ("[<<, =, '<<']", ["<<", "=", "<<"]),  # text where they are no merge key
        ("{? !!str 1 : a, 2: b, false: c, ~: d}", {"1": "a", "2": "b", "false": "c", "null": "d"}),
        ("!!set {b, a}", {"a": None, "b": None}),
        ("{a: !!binary aGk=, t: 2024-01-02T03:04:05Z}", {"a": "aGk=", "t": "2024-01-02T03:04:05Z"}),
        # YAML 1.1: 017 is octal, 1:30 base 60, and 1e3 (no dot) is text.
        ("[017, 0x1f, 1_000, 1:30, +5, -0.5, 1e3]", [15, 31, 1000, 90, 5, -0.5, "1e3"]),
    ],
)
def test_yaml_values_as_the_api_would_hold_them(text: str, expected: object) -> None:
    data = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\nx: {text}\n"
    assert loads(data.encode())["x"] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x: !!python/name:os.system ''", "could not determine|is not supported on a scalar"),
        ("x: !!python/object/apply:os.system [ls]", "is not supported on a list"),
        ("x: !!omap [{a: 1}]", "'tag:yaml.org,2002:omap' is not supported on a list"),
        ("x: !custom {a: 1}", "'!custom' is not supported on a mapping"),
        ("x: *nowhere", "found undefined alias 'nowhere'"),
        ("x: {<<: [a, b]}", "expected a mapping or list of mappings for merging"),
        ("x: {[a]: b}", "a mapping key must be a string, not a collection"),
        ("x: &k {a: *k}", "x.a: YAML alias refers to itself"),
    ],
)
def test_yaml_a_kubernetes_object_cannot_hold_is_refused(text: str, expected: str) -> None:
    data = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\n{text}\n"
    (problem,) = problems(data.encode())
    assert problem.startswith("<stdin>: document 1: "), problem
    assert any(part in problem for part in expected.split("|")), problem


def _load_growth_mib(path: Path) -> float:
    """How much the peak RSS of a fresh process grows while it loads `path` (VmHWM: unlike
    ru_maxrss it starts afresh at exec, not at the size of the process that forked)."""
    code = (
        "import sys\nfrom gpu_audit.sources.files import load_files\n"
        "def peak():\n"
        "    status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "    return int(status.split()[0])\n"
        "before = peak()\nload_files([sys.argv[1]])\nprint(peak() - before)\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, check=True)
    return int(run.stdout) / 1024


def test_peak_memory_of_a_yaml_dump_is_a_small_multiple_of_its_size(tmp_path: Path) -> None:
    # A `kubectl get -o yaml` dump cost about 40 times its size (1.95 GB for 49 MB): the whole
    # node graph of the document was built before its objects.
    dump = tmp_path / "dump.json"
    generate = ROOT / "benchmarks" / "generate.py"
    command = [sys.executable, str(generate), "--pods", "1500", "--output", str(dump)]
    subprocess.run(command, check=True, capture_output=True)
    as_yaml = tmp_path / "dump.yaml"
    with as_yaml.open("w") as out:
        yaml.dump(json.loads(dump.read_text()), out, Dumper=yaml.CSafeDumper)
    size = as_yaml.stat().st_size / MIB
    assert size > 5
    growth = _load_growth_mib(as_yaml)
    assert growth < 12 * size, f"{growth:.0f} MiB for {size:.1f} MiB of YAML"


# --------------------------------------------------------------------------- wrong types

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: train
  namespace: ml
  labels: {app: train, replicas: 3}
  annotations: {enabled: true}
spec:
  template:
    metadata:
      labels: [app]
    spec:
      nodeSelector: [gpu]
      affinity: anywhere
      tolerations: {key: nvidia.com/gpu}
      volumes:
      - name: data
      - data
      containers:
      - name: trainer
        image: trainer:1
        env: {HF_HOME: /cache}
        resources:
          limits: [nvidia.com/gpu]
          requests: {cpu: 4, memory: [1Gi], nvidia.com/gpu: null}
      initContainers: setup
"""


def test_wrong_typed_fields_are_named_as_warnings_per_object(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(DEPLOYMENT)
    warnings = load_files([str(path)]).source.warnings
    where = f"{path}: document 1: Deployment ml/train: "
    assert warnings == tuple(
        where + w
        for w in (
            "metadata.labels.replicas: expected a string, got a number",
            "metadata.annotations.enabled: expected a string, got a boolean",
            "spec.template.metadata.labels: expected an object, got a list",
            "spec.template.spec.containers[0].env: expected a list, got an object",
            "spec.template.spec.containers[0].resources.requests.memory: expected a quantity "
            "(a string or a number), got a list",
            "spec.template.spec.containers[0].resources.limits: expected an object, got a list",
            "spec.template.spec.initContainers: expected a list, got a string",
            "spec.template.spec.volumes[1]: expected an object, got a string",
            "spec.template.spec.tolerations: expected a list, got an object",
            "spec.template.spec.nodeSelector: expected an object, got a list",
            "spec.template.spec.affinity: expected an object, got a string",
        )
    )


def test_wrong_typed_fields_reach_the_report_and_fail_a_strict_scan(tmp_path: Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\n"
        "spec: {containers: trainer}\n"
    )
    warning = f"{path}: document 1: Pod ml/p: spec.containers: expected a list, got a string"
    result = run_scan(ScanOptions(Inputs(files=(str(path),)), plugins=False))
    assert result.document["source"]["warnings"] == [warning]
    with pytest.raises(InputError) as info:
        run_scan(ScanOptions(Inputs(files=(str(path),)), plugins=False, strict=True))
    assert info.value.problems == (warning,)
    strict = CliRunner().invoke(
        main, ["scan", "--no-plugins", "--strict", "--from-file", str(path)]
    )
    assert strict.exit_code == 2, strict.output
    assert f"gpu-audit: error: {warning}" in strict.output


def test_warnings_are_listed_up_to_the_limit_then_counted() -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: 1, b: 2, c: 3, d: 4}}\n"
    warnings = load_files(["-"], io.StringIO(pod), Limits(problems=3)).source.warnings
    assert len(warnings) == 4 and warnings[-1] == "... and 1 more warnings"


def test_fields_of_the_right_type_or_null_give_no_warning() -> None:
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: null, annotations: {a: 'b'}}\n"
        "spec:\n  nodeSelector: null\n  tolerations: [{key: k, tolerationSeconds: 30}, null]\n"
        "  containers:\n  - {name: c, image: i, env: null, resources: {limits: {cpu: 1.5, "
        "memory: 1Gi}, requests: null}, command: [sh, -c]}\n"
    )
    assert load_files(["-"], io.StringIO(pod)).source.warnings == ()
    assert load_files([str(ROOT / "fixtures" / "clusters" / "sample")]).source.warnings == ()


# --------------------------------------------------------------------------- directories


def test_directory_entries_that_cannot_be_read_are_warnings(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n"
    )
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    (tmp_path / "gone.json").symlink_to("missing.json")
    (tmp_path / "back").symlink_to(tmp_path)
    (tmp_path / "notes.txt").write_text("not read, no warning")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "socket.yml"))
        snapshot = load_files([str(tmp_path)])
    assert len(snapshot) == 1
    assert snapshot.source.warnings == (
        f"{tmp_path}/back: skipped: a symbolic link to a directory (not followed)",
        f"{tmp_path}/fifo.yaml: skipped: a FIFO, not a regular file",
        f"{tmp_path}/gone.json: skipped: a symbolic link that leads nowhere "
        "(No such file or directory)",
        f"{tmp_path}/loop.yaml: skipped: a symbolic link that leads nowhere "
        "(Too many levels of symbolic links)",
        f"{tmp_path}/socket.yml: skipped: a socket, not a regular file",
    )
