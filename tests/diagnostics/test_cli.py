"""The inventory and why-pending commands, and the diagnostics section of scan reports."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.report import SCHEMA_FILE
from tests.builders import GPU, container, gpu_node, pod, pod_spec
from tests.diagnostics.conftest import CASES


def test_inventory_on_the_sample_cluster(runner: CliRunner, sample_cluster: Path) -> None:
    result = runner.invoke(main, ["inventory", "--from-file", str(sample_cluster), "-o", "json"])
    assert result.exit_code == 0, result.output
    pools = json.loads(result.stdout)["inventory"]["pools"]
    assert [
        (p["pool"], p["resources"][0]["resource"], p["resources"][0]["allocatable"]) for p in pools
    ] == [
        ("a100", "nvidia.com/gpu", 16),
        ("l4-shared", "nvidia.com/gpu.shared", 8),
    ]
    table = runner.invoke(main, ["inventory", "--from-file", str(sample_cluster)]).stdout
    assert "time-slicing x4" in table and "NVIDIA-A100-SXM4-40GB" in table


def test_why_pending_on_a_sample_workload(runner: CliRunner, sample_cluster: Path) -> None:
    args = ["why-pending", "ml-training/Job/nightly-embeddings", "--from-file", str(sample_cluster)]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert (
        "0/6 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: true}, "
        "4 node(s) didn't match Pod's node affinity/selector." in result.stdout
    )
    (explained,) = json.loads(runner.invoke(main, [*args, "-o", "json"]).stdout)["pending_pods"]
    assert explained["template"] == {
        "kind": "Job",
        "namespace": "ml-training",
        "name": "nightly-embeddings",
        "path": "spec.template.spec",
    }


def test_why_pending_flags_pods_the_api_server_rejects(
    runner: CliRunner, sample_cluster: Path
) -> None:
    args = ["why-pending", "ml-training/Job/tokenizer-eval", "--from-file", str(sample_cluster)]
    out = runner.invoke(main, args).stdout
    assert (
        "[FAIL] PodValidation: container eval: nvidia.com/gpu limit 0.5 is not a whole number"
        in out
    )


def test_why_pending_on_a_pod_with_events(runner: CliRunner) -> None:
    args = ["why-pending", "ml/trainer", "--from-file", str(CASES / "taint")]
    out = runner.invoke(main, args).stdout
    assert "-> agrees with the evaluation above" in out
    assert out.index("-> agrees") < out.index("  Fix:") < out.index('key: "nvidia.com/gpu"')


def test_unknown_pod_is_a_usage_error(runner: CliRunner, sample_cluster: Path) -> None:
    result = runner.invoke(main, ["why-pending", "ml/nope", "--from-file", str(sample_cluster)])
    assert result.exit_code == 2
    assert "pod ml/nope is not in the input" in result.stderr
    result = runner.invoke(main, ["why-pending", "a/b/c/d", "--from-file", str(sample_cluster)])
    assert (
        result.exit_code == 2 and "expected NAMESPACE/POD or NAMESPACE/KIND/NAME" in result.stderr
    )


def test_input_without_nodes_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec: {containers: []}\n"
    )
    result = runner.invoke(main, ["inventory", "--from-file", str(tmp_path)])
    assert result.exit_code == 2 and "the input has no Nodes" in result.stderr


def test_scan_report_has_a_valid_diagnostics_section(runner: CliRunner) -> None:
    case = CASES / "combined-taint-and-capacity"
    result = runner.invoke(main, ["scan", "--from-file", str(case), "-o", "json"])
    report = json.loads(result.stdout)
    jsonschema.validate(report, json.loads(SCHEMA_FILE.read_text()))
    (pending,) = report["diagnostics"]["pending_pods"]
    assert pending["pod"] == {"namespace": "ml", "name": "trainer"}
    assert pending["summary"].startswith("0/12 nodes are available: 4 Insufficient nvidia.com/gpu")
    assert report["diagnostics"]["inventory"]["totals"][0]["allocatable"] == 80
    table = runner.invoke(main, ["scan", "--from-file", str(case)]).stdout
    assert "Pending GPU pods (1):" in table and "GPU inventory" in table


NODE_SIZE = {"cpu": "8", "memory": "64Gi", "pods": "110"}


def test_scan_reports_list_the_nearest_nodes_and_why_pending_lists_all(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A report of pending pods x nodes would not scale to 5,000 nodes: the scan keeps the
    nodes nearest to taking the pod and counts the rest; why-pending shows every node."""
    # 15 cordoned nodes fail two predicates, 16 fail only for want of GPUs.
    nodes = [
        gpu_node(f"gpu-{i:02}", allocatable={**NODE_SIZE, GPU: 1}, ready=True, unschedulable=i < 15)
        for i in range(30)
    ]
    nodes.append(
        gpu_node("gpu-big", allocatable={**NODE_SIZE, GPU: 4}, ready=True, unschedulable=False)
    )
    trainer = pod("trainer", pod_spec(container("x:1", name="t", gpus=8)), phase="Pending")
    dump = tmp_path / "cluster.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*nodes, trainer]}))
    report = json.loads(
        runner.invoke(main, ["scan", "--from-file", str(dump), "-o", "json"]).stdout
    )
    (pending,) = report["diagnostics"]["pending_pods"]
    assert pending["nodes_evaluated"] == 31
    assert len(pending["nodes"]) == 20
    kept = [n["node"] for n in pending["nodes"]]
    assert kept[:16] == [f"gpu-{i}" for i in range(15, 30)] + ["gpu-big"]
    assert kept[16:] == ["gpu-00", "gpu-01", "gpu-02", "gpu-03"]
    assert pending["summary"].startswith("0/31 nodes are available: ")
    args = ["why-pending", "ml/trainer", "--from-file", str(dump), "-o", "json"]
    (full,) = json.loads(runner.invoke(main, args).stdout)["pending_pods"]
    assert len(full["nodes"]) == 31 and "nodes_evaluated" not in full
