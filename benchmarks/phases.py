"""Time each stage of an offline scan in one process: load, index, checks, diagnostics, render.

The stages are those of `gpu-audit scan --from-file FILE -o json` (scanner/cli.py), called
in the same order with the garbage collector paused and frozen as gpu_audit.scan.run_scan does, so the shares add up to the scan: `load` reads, parses, validates and
redacts the documents; `index` is the Snapshot's construction at the end of the load (its
type, name and label indexes; the indexes checks derive from it are built lazily, in
`checks`); `render` builds the report and its JSON text. With --profile, a cProfile of the
whole run is written too. Prints one JSON object: seconds per stage, the peak RSS of the
process at the end of each stage, and the check engine's share.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpu_audit.diagnostics import diagnostics_section
from gpu_audit.engine import CheckRun, run_check
from gpu_audit.model import Check
from gpu_audit.postscan.exemptions import (
    apply_exemptions,
    evaluation_date,
)
from gpu_audit.registry import load_checks
from gpu_audit.report import build_report, dumps
from gpu_audit.scan import _gc_paused
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources import files

T = TypeVar("T")


def _peak_mib() -> float:
    """The process's peak RSS so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def _timed(times: dict[str, float], stage: str, call: Callable[[], T]) -> T:
    started = time.perf_counter()
    result = call()
    times[stage] = round(time.perf_counter() - started, 3)
    return result


def _load(path: str, times: dict[str, float]) -> Snapshot:
    """files.load_files, with the Snapshot's construction timed apart as `index`."""

    def indexed(*args: Any, **kwargs: Any) -> Snapshot:
        return _timed(times, "index", lambda: Snapshot(*args, **kwargs))

    files.Snapshot = indexed  # type: ignore[assignment,misc]
    try:
        snapshot = _timed(times, "load", lambda: files.load_files([path]))
    finally:
        files.Snapshot = Snapshot  # type: ignore[misc]
    times["load"] = round(times["load"] - times["index"], 3)
    times["index"] = times.pop("index")  # after load, in the order of the stages
    return snapshot


def measure(path: str, output: str | None) -> dict[str, Any]:
    times: dict[str, float] = {}
    peaks: dict[str, float] = {}
    registry = load_checks(plugins=False)
    with _gc_paused():  # as gpu_audit.scan.frozen_snapshot loads
        snapshot = _load(path, times)
        gc.freeze()
    peaks["load"] = peaks["index"] = _peak_mib()
    try:  # as run_scan checks, diagnoses and reports
        return _after_load(snapshot, registry, times, peaks, output)
    finally:
        gc.unfreeze()


def _after_load(
    snapshot: Snapshot,
    registry: dict[str, Check],
    times: dict[str, float],
    peaks: dict[str, float],
    output: str | None,
) -> dict[str, Any]:
    per_check: dict[str, float] = {}
    runs: list[CheckRun] = []
    for check_id, check in registry.items():  # sorted by id, as run_checks runs them
        started = time.perf_counter()
        runs.append(run_check(check, snapshot))
        per_check[check_id] = time.perf_counter() - started
    times["checks"] = round(sum(per_check.values()), 3)
    peaks["checks"] = _peak_mib()
    runs_, exempted = apply_exemptions(runs, snapshot, registry, None, evaluation_date(None, None))
    diagnostics = _timed(times, "diagnostics", lambda: diagnostics_section(snapshot))
    peaks["diagnostics"] = _peak_mib()
    document = _timed(
        times,
        "render",
        lambda: build_report(snapshot, runs_, exemptions=exempted, diagnostics=diagnostics),
    )
    built = times["render"]
    text = _timed(times, "render", lambda: dumps(document))
    times["render"] = round(built + times["render"], 3)
    peaks["render"] = _peak_mib()
    if output:
        Path(output).write_text(text, encoding="utf-8")
    total = sum(times.values())
    slowest = sorted(per_check.items(), key=lambda pair: (-pair[1], pair[0]))[:5]
    return {
        "objects": len(snapshot),
        "seconds": times,
        "peak_rss_mib": peaks,
        "total_seconds": round(total, 3),
        "check_engine_share": round(times["checks"] / total, 3) if total else 0.0,
        "slowest_checks": [{"id": i, "seconds": round(s, 3)} for i, s in slowest],
        "check_seconds": {i: round(s, 3) for i, s in per_check.items()},
        "findings": len(document["findings"]),
        "report_bytes": len(text.encode()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--profile", help="write a cProfile of the run to this file")
    parser.add_argument("--output", help="write the JSON report here")
    args = parser.parse_args()
    if args.profile:
        profiler = cProfile.Profile()
        result = profiler.runcall(measure, args.path, args.output)
        profiler.dump_stats(args.profile)
    else:
        result = measure(args.path, args.output)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
