"""A tiny run of the benchmark (benchmarks/run.py): the generator, the offline measurements
and the stage timings work end to end and the JSON result has its fields. No timing is
asserted: the figures depend on the machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_smoke_run_writes_every_offline_figure(tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "run.py"),
            *("--scales", "200,400", "--sweep-pods", "300", "--yaml-pods", "200"),
            *("--pending-shares", "0,0.01,0.05", "--node-classes", "2,5,50"),
            *("--namespaces", "10,40", "--live-pods", "0", "--checkov-pods", "0"),
            *("--work", str(tmp_path / "work"), "--output", str(output)),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    results = json.loads(output.read_text())
    cases = {row["case"]: row for row in results["offline"]["cases"]}
    # The base shape at each scale, one axis varied at a time, then YAML.
    assert list(cases) == [
        "200 pods, base shape",
        "400 pods, base shape",
        "pending 0.00% of pods",
        "pending 5.00% of pods",
        "2 node classes",
        "50 node classes",
        "10 namespaces",
        "40 namespaces",
        "200 pods, YAML",
    ]
    small, large = cases["200 pods, base shape"], cases["400 pods, base shape"]
    # The scale is a budget: workloads whose pods the API server would refuse have none.
    assert 0 < small["pods"] <= 200 < large["pods"] <= 400
    for row in cases.values():
        for run in ("json_loads", "scan", "stages_process"):
            assert row[run]["seconds"] > 0
            assert row[run]["peak_rss_mib"] > 0
        assert row["time_ratio"] > 0
        assert row["rss_ratio"] > 0
        assert set(row["stages"]) == {"load", "index", "checks", "diagnostics", "render"}
        assert all(row["stage_peak_rss_mib"][stage] > 0 for stage in row["stages"])
        assert row["findings"] > 0  # the generated misconfigurations are found
    # Pending pods follow their share; the YAML dump holds the JSON one's objects.
    assert cases["pending 0.00% of pods"]["pending_pods"] == 0
    assert cases["pending 5.00% of pods"]["pending_pods"] > small["pending_pods"] > 0
    assert cases["10 namespaces"]["namespaces"] == 13  # and kube-system, gpu-operator...
    yaml_row = cases["200 pods, YAML"]
    assert (yaml_row["objects"], yaml_row["findings"]) == (small["objects"], small["findings"])
    assert yaml_row["time_ratio_vs_json_scan"] > 0
    # The floors of the same objects: the YAML's events outnumber the JSON's values.
    yaml_floors = yaml_row["floors"]
    assert yaml_floors["events"] > yaml_floors["values"] > 0
    assert all(
        yaml_floors[stage] > 0
        for stage in ("json_loads", "msgspec_decode", "visit_every_value", "redaction")
    )
    assert yaml_row["yaml_events_vs_json_scan"] > 0
    assert results["offline"]["per_object_cost_growth"] > 0
    phases = results["offline"]["phases"]
    assert 0 < phases["check_engine_share"] < 1
    assert phases["profile_top"]
    largest_floors = results["offline"]["floors"]
    assert largest_floors["values"] > yaml_floors["values"]  # 400 pods, not 200
    assert "yaml_events" not in largest_floors
    assert largest_floors["after_load"] > 0
    assert largest_floors["case_json_loads"] == large["json_loads"]["seconds"]
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


def test_generated_yaml_holds_the_json_objects_without_aliases(tmp_path: Path) -> None:
    # kubectl never writes a YAML anchor: a mapping two fields share (a Deployment's labels,
    # selector and template labels) is written out at each, as the loader's alias limit expects.
    dumps = {}
    for fmt in ("json", "yaml"):
        path = tmp_path / f"dump.{fmt}"
        subprocess.run(
            [
                sys.executable,
                str(REPO / "benchmarks" / "generate.py"),
                *("--pods", "300", "--seed", "7", "--format", fmt, "--output", str(path)),
            ],
            check=True,
            capture_output=True,
        )
        dumps[fmt] = path.read_text()
    events = list(yaml.parse(dumps["yaml"], Loader=yaml.SafeLoader))
    assert not any(isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None) for e in events)
    assert yaml.safe_load(dumps["yaml"]) == json.loads(dumps["json"])
