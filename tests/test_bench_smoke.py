"""A tiny run of the benchmark (benchmarks/run.py): the generator, the offline measurements
and the stage timings work end to end and the JSON result has its fields. No timing is
asserted: the figures depend on the machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_smoke_run_writes_every_offline_figure(tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "run.py"),
            "--scales",
            "200,400",
            "--live-pods",
            "0",
            "--checkov-pods",
            "0",
            "--pending-scales",
            "300",
            "--work",
            str(tmp_path / "work"),
            "--output",
            str(output),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    results = json.loads(output.read_text())
    scales = results["offline"]["scales"]
    # The scale is a budget: workloads whose pods the API server would refuse have none.
    assert 0 < scales[0]["pods"] <= 200 < scales[1]["pods"] <= 400
    for row in scales:
        for run in ("json_loads", "scan"):
            assert row[run]["seconds"] > 0
            assert row[run]["peak_rss_mib"] > 0
        assert row["time_ratio"] > 0
        assert row["rss_ratio"] > 0
        assert row["findings"] > 0  # the generated misconfigurations are found
    phases = results["offline"]["phases"]
    assert set(phases["seconds"]) == {"load", "checks", "diagnostics", "report", "json"}
    assert 0 < phases["check_engine_share"] < 1
    assert phases["profile_top"]
    (pending,) = results["pending_diagnostics"]
    assert pending["pending_pods"] > 0
    assert pending["seconds"]["diagnostics"] > 0
    assert "live" not in results and "checkov" not in results


def test_generator_is_deterministic_and_bounds_pods(tmp_path: Path) -> None:
    outputs = []
    for name in ("a.json", "b.json"):
        path = tmp_path / name
        subprocess.run(
            [
                sys.executable,
                str(REPO / "benchmarks" / "generate.py"),
                "--pods",
                "300",
                "--output",
                str(path),
                "--seed",
                "7",
            ],
            check=True,
            capture_output=True,
        )
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1]
    dump = json.loads(outputs[0])
    assert dump["kind"] == "List"
    pods = [o for o in dump["items"] if o["kind"] == "Pod"]
    assert 0 < len(pods) <= 300
    nodes = {o["metadata"]["name"] for o in dump["items"] if o["kind"] == "Node"}
    assert all(p["spec"].get("nodeName", next(iter(nodes))) in nodes for p in pods)
    meta = json.loads((tmp_path / "a.json.meta.json").read_text())
    assert meta["pods"] == len(pods)
    assert meta["misconfigured_gpu_workloads"] == sum(meta["faults"].values())
