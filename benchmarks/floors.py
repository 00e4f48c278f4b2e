"""The least an offline scan of a dump can cost in this interpreter, stage by stage.

Usage: floors.py DUMP.json [DUMP.yaml] (the same objects, as benchmarks/generate.py writes
them). Prints one JSON object, in seconds:

* `json_loads`: `json.loads` of the file with the garbage collector running, in a process of
  its own: the floor `make bench` compares a scan with (issue 18's goals are ratios to it);
* `msgspec_decode`: the fastest JSON reader there is for Python, collector paused, as the
  loader reads;
* `visit_every_value`: a bare recursive visit of every mapping and list of the document, doing
  nothing: what any pass over the whole document costs in Python, at least;
* `redaction`: `sanitize` of every object, alone: the walk that keeps credentials out of the
  scanner (every string of every object is looked at);
* `yaml_events` (with a YAML file): a bare loop over the events of PyYAML's libyaml parser,
  building nothing: the least any YAML reader built on PyYAML costs.

`benchmarks/phases.py` gives what the scan spends after the load on the same file (index,
checks, diagnostics, render); README "Eighth pass" sets the two side by side.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from gpu_audit.redact import sanitize

T = TypeVar("T")
_JSON_LOADS = """
import json, sys, time
data = open(sys.argv[1], "rb").read()
started = time.perf_counter()
json.loads(data)
print(time.perf_counter() - started)
"""


def _seconds(call: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = call()
    return round(time.perf_counter() - started, 4), result


def _visit(value: Any) -> int:
    count = len(value)
    for item in value.values() if value.__class__ is dict else value:
        if item.__class__ is dict or item.__class__ is list:
            count += _visit(item)
    return count


def _redact_all(document: dict[str, Any]) -> None:
    for obj in document["items"]:
        sanitize(obj)


def _yaml_events(path: Path) -> int:
    with path.open("rb") as stream:
        parser = yaml.CSafeLoader(stream)
        try:
            events = 1
            while parser.get_event().__class__ is not yaml.StreamEndEvent:
                events += 1
            return events
        finally:
            parser.dispose()


def measure(json_path: Path, yaml_path: Path | None) -> dict[str, Any]:
    loads = subprocess.run(
        [sys.executable, "-c", _JSON_LOADS, str(json_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, Any] = {"json_loads": round(float(loads.stdout), 4)}
    gc.disable()  # as gpu_audit.scan loads
    figures.update(_json_stages(json_path.read_bytes()))
    if yaml_path is not None:
        figures["yaml_events"], figures["events"] = _seconds(lambda: _yaml_events(yaml_path))
    return figures


def _json_stages(data: bytes) -> dict[str, Any]:
    decode, document = _seconds(lambda: msgspec.json.decode(data))
    visit, values = _seconds(lambda: _visit(document))
    redaction, _ = _seconds(lambda: _redact_all(document))
    return {
        "msgspec_decode": decode,
        "visit_every_value": visit,
        "values": values,
        "redaction": redaction,
    }


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]]
    if not 1 <= len(paths) <= 2:
        sys.exit("usage: floors.py DUMP.json [DUMP.yaml]")
    print(json.dumps(measure(paths[0], paths[1] if len(paths) == 2 else None)))


if __name__ == "__main__":
    main()
