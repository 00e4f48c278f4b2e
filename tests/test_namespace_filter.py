"""`scan -n/--namespace` on files (issue 19): every object is read and every check runs on the
whole input, then only the findings on that namespace's objects are shown, with the filter
recorded in `output_filter` as --min-severity records its own. Node-level checks (idle GPUs,
CPU tenants of GPU nodes) so judge a node with the pods of every namespace: a namespace filter
applied to the input made the sample's busy A100 nodes look idle. The live side, where only
that namespace is listed, is tests/live/test_namespace_live.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from click.testing import CliRunner, Result

from gpu_audit.cli import main
from gpu_audit.engine import run_check
from gpu_audit.model import CheckStatus
from gpu_audit.report import SCHEMA_FILE
from gpu_audit.snapshot import Snapshot, SourceInfo
from gpu_audit.sources.files import load_files
from tests.builders import checks, container, gpu_node, pod, pod_spec

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "clusters" / "sample"
NAMESPACES = ("ml-serving", "ml-training")  # the sample's namespaces of GPU workloads
IDLE_GPU = "GPU-COST-001"  # GPU nodes kept busy by GPU pods (reads the Pods of a Node)


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["scan", "--from-file", str(SAMPLE), *args])


def on_namespace(finding: dict[str, Any], namespace: str) -> bool:
    """A finding on an object of the namespace, or on the Namespace itself."""
    res = finding["resource"]
    return res["namespace"] == namespace or (res["kind"], res["name"]) == ("Namespace", namespace)


def scan_json(*args: str) -> dict[str, Any]:
    result = run("-o", "json", *args)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def sample_objects() -> list[dict[str, Any]]:
    """The objects of the sample's files, the items of a List included."""
    docs = [d for p in sorted(SAMPLE.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())]
    return [item for d in docs if d for item in (d["items"] if d["kind"] == "List" else [d])]


def gpu_pods_by_node() -> dict[str, set[str]]:
    """Node -> the namespaces of the bound pods there that request GPUs, read from the
    sample's files, not from the scanner."""
    found: dict[str, set[str]] = {}
    for doc in sample_objects():
        spec = doc.get("spec") or {}
        if doc.get("kind") != "Pod" or not spec.get("nodeName"):
            continue
        limits = [(c.get("resources") or {}).get("limits") or {} for c in spec["containers"]]
        if any(int(lim.get("nvidia.com/gpu", 0)) > 0 for lim in limits):
            found.setdefault(spec["nodeName"], set()).add(doc["metadata"]["namespace"])
    return found


def test_a_namespace_shows_that_namespace_s_findings_of_the_whole_scan() -> None:
    everything = scan_json()
    schema = json.loads(SCHEMA_FILE.read_text())
    for namespace in NAMESPACES:
        shown = scan_json("-n", namespace)
        expected = [f for f in everything["findings"] if on_namespace(f, namespace)]
        assert expected and shown["findings"] == expected
        # The sample's Namespace objects have findings (GPU-QUOTA-001): shown with their own.
        assert any(f["resource"]["kind"] == "Namespace" for f in expected)
        hidden = len(everything["findings"]) - len(expected)
        assert shown["output_filter"] == {"namespace": namespace, "hidden_findings": hidden}
        # What was read, checked and scored is the whole input.
        for same in ("source", "score", "coverage", "summary", "checks"):
            assert shown[same] == everything[same], same
        jsonschema.validate(shown, schema)


def test_no_idle_gpu_finding_for_nodes_busy_with_other_namespaces_pods() -> None:
    # GPU nodes whose GPU pods are all of ml-training: filtering the input to ml-serving made
    # them look idle (GPU-COST-001 on a100-1 and a100-2).
    busy = {n for n, spaces in gpu_pods_by_node().items() if spaces == {"ml-training"}}
    assert busy
    everything = scan_json()
    flagged = {f["resource"]["name"] for f in everything["findings"] if f["check_id"] == IDLE_GPU}
    assert not busy & flagged
    shown = scan_json("-n", "ml-serving")
    assert all(on_namespace(f, "ml-serving") for f in shown["findings"])
    assert not [f for f in shown["findings"] if f["check_id"] == IDLE_GPU]
    (idle_check,) = [c for c in shown["checks"] if c["id"] == IDLE_GPU]
    assert idle_check["results"]["passed"] >= len(busy) and idle_check["reason"] is None


def test_namespace_and_min_severity_compose() -> None:
    everything = scan_json()
    both = scan_json("-n", "ml-serving", "--min-severity", "high")
    expected = [
        f
        for f in everything["findings"]
        if on_namespace(f, "ml-serving") and f["severity"] in ("high", "critical")
    ]
    assert expected and both["findings"] == expected
    assert both["output_filter"] == {
        "namespace": "ml-serving",
        "min_severity": "high",
        "hidden_findings": len(everything["findings"]) - len(expected),
    }
    table = run("-n", "ml-serving", "--min-severity", "high").stdout
    assert (
        "Showing findings on objects of namespace ml-serving at or above high: "
        f"{len(everything['findings']) - len(expected)} others not shown"
    ) in table


def test_fail_on_and_baseline_see_only_the_namespace(tmp_path: Path) -> None:
    everything = scan_json()
    assert any(f["severity"] in ("low", "medium") for f in everything["findings"])
    assert run("--fail-on", "low").exit_code == 1
    # A namespace without objects: nothing of it fails, whatever the rest of the cluster has.
    assert run("-n", "no-such-namespace", "--fail-on", "low").exit_code == 0
    # A baseline of the whole cluster compares that namespace's findings only.
    saved = tmp_path / "all.json"
    saved.write_text(json.dumps(everything))
    compared = scan_json("-n", "ml-serving", "--baseline", str(saved))
    assert compared["baseline"]["findings"]["new"] == []
    assert compared["baseline"]["findings"]["resolved"] == []


def test_a_listing_of_one_namespace_leaves_node_verdicts_drawn_from_pods_unassessed(
    tmp_path: Path,
) -> None:
    # A snapshot listed with --namespace a (live, or a snapshot file `collect -n a` wrote):
    # the node's GPU pods of other namespaces are missing, so its CPU tenant of `a` would make
    # it look like a GPU node kept by CPU pods.
    manifest = tmp_path / "listed.yaml"
    web = pod(
        "web", pod_spec(container(gpus=None)), namespace="a", node_name="gpu-1", phase="Running"
    )
    manifest.write_text(yaml.safe_dump_all([gpu_node("gpu-1", 8, ready=True), web]))
    read = load_files([str(manifest)])
    whole = run_check(checks()[IDLE_GPU], read)
    assert whole.status is CheckStatus.FAILED  # what the partial list would claim
    listed = Snapshot(read.all(), source=SourceInfo("live", ("ctx",), (), {"namespace": "a"}))
    limited = run_check(checks()[IDLE_GPU], listed)
    assert limited.status is CheckStatus.NOT_EVALUATED and limited.applicable
    assert limited.findings == () and limited.results == ()
    assert limited.reason == (
        "pods of other namespaces were not listed (--namespace a): "
        "its verdicts on cluster-scoped objects are not assessed"
    )
    # A check that reads only cluster-scoped kinds still judges the node.
    assert "not listed" not in run_check(checks()["GPU-NODE-001"], listed).reason
