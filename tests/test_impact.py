"""GPU impact (gpu_audit.impact): GPUs, GPU-hours a day, product and cost of each finding.

Expected numbers come from the sources the module cites, not from running it: a MIG slice
<g>g.* is g/7 of an A100/H100 and g/4 of an A30 (NVIDIA MIG user guide, Supported MIG
Profiles: "MIG 1g.10gb ... 1/7", "MIG 2g.12gb ... 2/4"); a time-sliced replica is
1/nvidia.com/gpu.replicas of the GPU (GFD labels), and GFD appends -SHARED to the product.
"""

from __future__ import annotations

import io
import json
from decimal import Context, Decimal, localcontext
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.errors import InputError
from gpu_audit.impact import finding_impact, load_prices, priced
from gpu_audit.model import ObjRef, RelatedRef, RelatedRole
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import (
    container,
    deployment,
    gpu_node,
    job,
    namespace,
    pod,
    pod_spec,
    pytorchjob,
    service,
)

A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
PRICES = {"NVIDIA-A100-SXM4-80GB": Decimal("4"), "NVIDIA-L4": Decimal("0.8")}


def snapshot(*docs: dict[str, Any]) -> Snapshot:
    text = yaml.safe_dump_all(list(docs))
    return load_files([STDIN], stdin=io.StringIO(text))


def impact(snap: Snapshot, kind: str, name: str, ns: str = "ml", *related: RelatedRef) -> Any:
    return finding_impact(snap, ObjRef(kind, ns, name), related).as_dict(PRICES)


def test_deployment_counts_replicas_times_gpus_on_the_node_it_selects() -> None:
    spec = pod_spec(container(gpus=2), nodeSelector=A100)
    snap = snapshot(
        deployment("llm", spec, replicas=4),
        gpu_node("a100-1", 8, A100),
        gpu_node("l4-1", 1, {"nvidia.com/gpu.product": "NVIDIA-L4"}),
    )
    found = impact(snap, "Deployment", "llm")
    # a manifest (no status): it runs all day once applied, 4 x 2 GPUs
    assert found["gpus"] == 8 and found["gpu_hours_per_day"] == 192
    assert found["product"] == "NVIDIA-A100-SXM4-80GB"
    assert found["cost_per_day"] == 768.0  # 192 GPU-hours x $4


@pytest.mark.parametrize(
    ("resource", "product", "expected"),
    [
        ("nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB", 0.143),  # 1/7
        ("nvidia.com/mig-3g.40gb", "NVIDIA-H100-80GB-HBM3", 0.429),  # 3/7
        ("nvidia.com/mig-2g.12gb", "NVIDIA-A30", 0.5),  # 2/4
        ("nvidia.com/mig-7g.80gb", "NVIDIA-A100-SXM4-80GB", 1),  # the whole GPU
    ],
)
def test_mig_slices_are_fractions_of_the_gpu(resource: str, product: str, expected: float) -> None:
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/mig.strategy": "mixed"}
    snap = snapshot(
        gpu_node("mig-1", 7, labels, resource=resource),
        pod(
            "p", pod_spec(container(gpus=1, resource=resource)), node_name="mig-1", phase="Running"
        ),
    )
    found = impact(snap, "Pod", "p")
    assert found["gpus"] == expected
    assert found["gpu_hours_per_day"] == pytest.approx(expected * 24, abs=0.01)
    assert found["product"] == product


def test_single_strategy_mig_gpu_and_time_sliced_replicas() -> None:
    single = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"}
    shared = {"nvidia.com/gpu.product": "NVIDIA-L4-SHARED", "nvidia.com/gpu.replicas": "4"}
    snap = snapshot(
        gpu_node("mig-1", 14, single),
        gpu_node("l4-1", 4, shared, resource="nvidia.com/gpu.shared"),
        pod("mig", pod_spec(container(gpus=2)), node_name="mig-1", phase="Running"),
        pod("ts", pod_spec(container(resource="nvidia.com/gpu.shared")), node_name="l4-1"),
    )
    mig = impact(snap, "Pod", "mig")
    assert (mig["gpus"], mig["product"]) == (0.857, "NVIDIA-A100-SXM4-40GB")  # 2 x 3/7
    ts = impact(snap, "Pod", "ts")
    assert (ts["gpus"], ts["gpu_hours_per_day"], ts["product"]) == (0.25, 6, "NVIDIA-L4")
    assert ts["cost_per_day"] == 4.8
    l4 = impact(snap, "Node", "l4-1", "")
    assert (l4["gpus"], l4["gpu_hours_per_day"]) == (1, 24)  # 4 replicas of one L4


def test_pods_in_the_snapshot_say_what_runs() -> None:
    """A Deployment read from a cluster: one pod bound and running, one Pending unbound."""
    dep = deployment("llm", pod_spec(container(gpus=2)), replicas=2)
    dep["metadata"]["uid"] = "u1"
    dep["status"] = {"replicas": 2}
    owner = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "llm",
            "uid": "u1",
            "controller": True,
        }
    ]
    snap = snapshot(
        dep,
        gpu_node("a100-1", 8, A100),
        pod(
            "llm-a",
            pod_spec(container(gpus=2)),
            node_name="a100-1",
            phase="Running",
            ownerReferences=owner,
        ),
        pod("llm-b", pod_spec(container(gpus=2)), phase="Pending", ownerReferences=owner),
        pod("done", pod_spec(container(gpus=8)), node_name="a100-1", phase="Succeeded"),
    )
    found = impact(snap, "Deployment", "llm")
    assert (found["gpus"], found["gpu_hours_per_day"]) == (4, 48)  # holds 2, requests 2 more
    assert impact(snap, "Pod", "done")["gpus"] == 0  # a finished pod holds nothing


def test_suspended_or_scaled_to_zero_runs_nothing() -> None:
    snap = snapshot(
        job("batch", pod_spec(container(gpus=2)), parallelism=3, suspend=True),
        deployment("idle", pod_spec(container(gpus=2)), replicas=0),
        pytorchjob("train", workers=3),
    )
    batch = impact(snap, "Job", "batch")
    assert (batch["gpus"], batch["gpu_hours_per_day"], batch["cost_per_day"]) == (6, 0, 0.0)
    assert impact(snap, "Deployment", "idle")["gpus"] == 0
    train = impact(snap, "PyTorchJob.kubeflow.org", "train")
    assert (train["gpus"], train["product"], train["cost_per_day"]) == (32, None, None)


def test_objects_without_gpus_take_their_symptoms_or_what_they_reach() -> None:
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}},
    }
    snap = snapshot(
        namespace("ml"),
        deployment("llm", pod_spec(container(gpus=2)), replicas=2),
        deployment("small", pod_spec(container(gpus=1))),
        hpa,
        service("llm-svc", selector={"app": "llm"}),
        service("headless"),
    )
    assert impact(snap, "HorizontalPodAutoscaler", "llm")["gpus"] == 4
    assert impact(snap, "Service", "llm-svc")["gpus"] == 4  # the pods it selects
    assert impact(snap, "Service", "headless")["gpus"] == 0  # no selector: selects nothing
    assert impact(snap, "Namespace", "ml", "")["gpus"] == 5  # every GPU workload in it
    victim = RelatedRef(ObjRef("Deployment", "ml", "small"), RelatedRole.SYMPTOM)
    assert impact(snap, "Namespace", "ml", "", victim)["gpus"] == 1  # the one it names
    assert impact(snap, "ConfigMap", "absent")["gpus"] == 0


def test_a_namespace_or_service_reaches_the_gpu_workloads_of_its_own_namespace_only() -> None:
    # The same names and labels in two namespaces: the per-namespace index must keep them apart.
    snap = snapshot(
        namespace("ml"),
        namespace("research"),
        deployment("llm", pod_spec(container(gpus=2)), replicas=3),
        deployment("llm", pod_spec(container(gpus=1)), namespace="research"),
        deployment(
            "eval", pod_spec(container(gpus=4)), namespace="research", labels={"app": "llm"}
        ),
        service("llm-svc", selector={"app": "llm"}),
        service("llm-svc", "research", selector={"app": "llm"}),
    )
    assert impact(snap, "Namespace", "ml", "")["gpus"] == 6
    assert impact(snap, "Namespace", "research", "")["gpus"] == 5
    assert impact(snap, "Namespace", "empty", "")["gpus"] == 0
    assert impact(snap, "Service", "llm-svc")["gpus"] == 6
    assert impact(snap, "Service", "llm-svc", "research")["gpus"] == 5  # both match app=llm


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a\n- b\n", "maps GPU products to $/GPU-hour"),
        ("NVIDIA-L4: -1\n", "'NVIDIA-L4': the price must be a number >= 0"),
        ("NVIDIA-L4: cheap\n", "'NVIDIA-L4': the price must be a number >= 0"),
        ("NVIDIA-L4: [\n", "not a valid price table"),
    ],
)
def test_bad_price_tables_name_the_file_and_entry(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as raised:
        load_prices(str(path))
    assert any(p.startswith(f"{path}: ") and problem in p for p in raised.value.problems)


def test_example_price_file_loads(repo_root: Path) -> None:
    prices = load_prices(str(repo_root / "docs" / "gpu-prices.example.yaml"))
    assert prices and all(v >= 0 for v in prices.values())


def test_sample_scan_ranks_by_severity_then_gpus_and_prices(
    runner: CliRunner, repo_root: Path, tmp_path: Path
) -> None:
    sample = str(repo_root / "fixtures" / "clusters" / "sample")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"NVIDIA-A100-SXM4-40GB": 3.5, "NVIDIA-L4": 0.8}), "utf-8")
    args = ["scan", "--from-file", sample, "--format", "json"]
    first = runner.invoke(main, [*args, "--gpu-prices", str(prices)])
    again = runner.invoke(main, [*args, "--gpu-prices", str(prices)])
    assert first.exit_code == 0, first.output
    assert first.stdout == again.stdout  # byte-identical
    findings = json.loads(first.stdout)["findings"]
    keys = [(f["severity"], f["impact"]["gpus"]) for f in findings]
    rank = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}
    assert keys == sorted(keys, key=lambda k: (rank[k[0]], -k[1]))
    # llama-finetune's master holds the 8 A100s of a100-1, its worker waits for 8 more
    # (fixtures/clusters/sample/README.md): 16 GPUs, 8 of them running all day.
    (dist,) = [f for f in findings if f["check_id"] == "GPU-DIST-001"]
    assert dist["impact"] == {
        "gpus": 16,
        "gpu_hours_per_day": 192,
        "product": "NVIDIA-A100-SXM4-40GB",
        "by_product": [{"product": "NVIDIA-A100-SXM4-40GB", "gpus": 16, "gpu_hours_per_day": 192}],
        "cost_per_day": 672.0,
    }
    plain = json.loads(runner.invoke(main, args).stdout)
    assert {f["impact"]["cost_per_day"] for f in plain["findings"]} == {None}
    repriced = priced(plain, {"NVIDIA-A100-SXM4-40GB": Decimal("3.5"), "NVIDIA-L4": Decimal("0.8")})
    assert repriced["findings"] == findings


def test_a_missing_price_file_is_a_usage_error(runner: CliRunner, repo_root: Path) -> None:
    sample = str(repo_root / "fixtures" / "clusters" / "sample")
    result = runner.invoke(main, ["scan", "--from-file", sample, "--gpu-prices", "/nope.yaml"])
    assert result.exit_code == 2
    assert "/nope.yaml: cannot read" in result.output


def test_render_prices_a_saved_report(runner: CliRunner, repo_root: Path, tmp_path: Path) -> None:
    sample = str(repo_root / "fixtures" / "clusters" / "sample")
    saved = tmp_path / "report.json"
    scanned = runner.invoke(main, ["scan", "--from-file", sample, "-o", "json"])
    saved.write_text(scanned.stdout, encoding="utf-8")
    example = str(repo_root / "docs" / "gpu-prices.example.yaml")
    rendered = runner.invoke(main, ["render", str(saved), "-o", "json", "--gpu-prices", example])
    assert rendered.exit_code == 0, rendered.output
    findings = json.loads(rendered.stdout)["findings"]
    nodes = [f for f in findings if f["resource"]["type"] == "Node"]
    # an L4 node: 1 GPU all day at the example's $0.80 per GPU-hour
    assert nodes and all(f["impact"]["cost_per_day"] == 19.2 for f in nodes)
    bad = runner.invoke(main, ["render", str(saved), "--gpu-prices", str(saved)])
    assert bad.exit_code == 2 and f"{saved}: " in bad.output


def test_counts_beyond_the_default_decimal_precision_are_reported_whole() -> None:
    # Found by the fuzzer: counts of more than 28 digits made round() raise InvalidOperation.
    replicas = int("9" * 300)  # JSON holds integers up to a float's range
    gpus = 2**63 - 1  # the largest quantity
    spec = pod_spec(container(gpus=gpus), nodeSelector=A100)
    snap = snapshot(deployment("huge", spec, replicas=replicas), gpu_node("a100-1", 8, A100))
    found = impact(snap, "Deployment", "huge")
    # Whole numbers, right to the 28 digits the arithmetic keeps, and JSON can hold them.
    assert isinstance(found["gpus"], int) and isinstance(found["cost_per_day"], int)
    assert _close(found["gpus"], replicas * gpus)
    assert _close(found["cost_per_day"], replicas * gpus * 24 * 4)  # $4 an A100-hour
    json.loads(json.dumps(found, allow_nan=False))


def _close(value: int, exact: int) -> bool:
    with localcontext(Context(prec=1000)):
        return abs(Decimal(value) - Decimal(exact)) <= Decimal(exact) * Decimal("1e-25")
