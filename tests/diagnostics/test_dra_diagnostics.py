"""inventory and why-pending with DRA: GPUs published in ResourceSlices and held by
ResourceClaims, and kube-scheduler's DynamicResources plugin for Pending pods.

fixtures/clusters/diagnostics/dra: h100-a and h100-b publish 4 H100s each through the NVIDIA DRA
driver and advertise no nvidia.com/gpu; serve-0 holds h100-a's gpu-0/1, done-0 holds gpu-2
although its container exited, the claim `pinned` holds h100-b's gpu-0, h100-b is cordoned.
Reasons are the plugin's strings (pkg/scheduler/framework/plugins/dynamicresources).
"""

from __future__ import annotations

import io
import json
from typing import Any

from gpu_audit.diagnostics import build_inventory, explain_targets
from gpu_audit.diagnostics.fit import cluster_usage
from gpu_audit.diagnostics.pending import pending_gpu_pods
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.diagnostics.conftest import CASES, LoadCase

DRA_ROW = "gpu.nvidia.com/gpu (DRA)"


def explain(snapshot: Snapshot, target: str) -> dict[str, Any]:
    (found,) = explain_targets(snapshot, target)
    return found.as_dict()


def node(explanation: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in explanation["nodes"] if n["node"] == name)


def predicate(entry: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in entry["predicates"] if p["predicate"] == name)


def test_inventory_counts_published_and_claimed_dra_gpus(load_case: LoadCase) -> None:
    inventory = build_inventory(load_case("dra")).as_dict()
    (pool,) = inventory["pools"]
    assert (pool["pool"], pool["product"], pool["nodes"]) == (
        "p5.48xlarge",
        "NVIDIA-H100-80GB-HBM3",
        ["h100-a", "h100-b"],
    )
    (row,) = pool["resources"]
    assert row == {
        "resource": DRA_ROW,
        "capacity": 8,
        "allocatable": 8,
        "requested": 4,
        "idle": 4,
        "held_by_finished": 1,
        "fits": {"1": 1, "2": 0, "4": 0, "8": 0},  # h100-b is cordoned: its 3 free GPUs do not fit
    }
    assert inventory["totals"] == [row]


def load(text: str) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(text))


SLICE = """
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}-slice}}
spec:
  driver: gpu.nvidia.com
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices:
{devices}
"""


def device(name: str, **attributes: str) -> str:
    """A ResourceSlice device entry (flow YAML) with string attributes."""
    attrs = ", ".join(
        f"{key}: {{string: {json.dumps(value)}}}" for key, value in attributes.items()
    )
    return f"  - {{name: {name}, attributes: {{{attrs}}}}}"


def cluster(devices: list[str], claim: str, extra: str = "") -> Snapshot:
    return load(
        """
apiVersion: v1
kind: Node
metadata: {name: dra-0}
status:
  capacity: {cpu: "64", memory: 512Gi, pods: "110"}
  allocatable: {cpu: "64", memory: 512Gi, pods: "110"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com'"}
---
"""
        + SLICE.format(node="dra-0", devices="\n".join(devices))
        + "---\n"
        + claim
        + """
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  resourceClaims: [{name: c, resourceClaimName: c}]
  containers: [{name: main, image: busybox, resources: {claims: [{name: c}]}}]
status: {phase: Pending}
"""
        + extra
    )


def claim(requests: str, constraints: str = "") -> str:
    return (
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c, namespace: ml}\n"
        f"spec:\n  devices:\n    requests:\n{requests}\n{constraints}"
    )


def test_a_node_without_gpu_labels_counts_by_its_slices_and_product_name() -> None:
    snapshot = cluster(
        [device("gpu-0", type="gpu", productName="NVIDIA L4")],
        claim("    - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}"),
    )
    (pool,) = build_inventory(snapshot).as_dict()["pools"]
    assert (pool["product"], pool["resources"][0]["resource"], pool["resources"][0]["idle"]) == (
        "NVIDIA L4",
        DRA_ROW,
        1,
    )


def test_a_claim_that_cannot_be_allocated_anywhere(load_case: LoadCase) -> None:
    explanation = explain(load_case("dra"), "ml/train-0")
    assert explanation["summary"] == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 cannot allocate all claims."
    )
    verdict = predicate(node(explanation, "h100-a"), "DynamicResources")
    assert verdict["detail"] == (
        "request gpu of ResourceClaim train-0-gpu-q2w3e: wants 2, 1 free, 3 held by other claims"
    )
    (message,) = explanation["scheduler_messages"]
    assert message["agrees"] is True, message  # the DRA PostFilter part is not a reason


def test_a_claim_that_does_not_exist_blocks_the_pod(load_case: LoadCase) -> None:
    explanation = explain(load_case("dra"), "ml/typo-0")
    (check,) = [c for c in explanation["pod_checks"] if c["predicate"] == "DynamicResources"]
    assert (check["passed"], check["detail"]) == (
        False,
        'resourceclaim.resource.k8s.io "shared-gpu" not found',
    )
    assert explanation["summary"].endswith(
        'but: resourceclaim.resource.k8s.io "shared-gpu" not found'
    )


def test_an_allocated_claim_keeps_the_pod_on_its_node(load_case: LoadCase) -> None:
    explanation = explain(load_case("dra"), "ml/pinned-0")
    assert explanation["summary"] == (
        "0/3 nodes are available: 1 node(s) were unschedulable, "
        "2 resourceclaim not available on the node."
    )
    assert node(explanation, "h100-b")["scheduler_reasons"] == ["node(s) were unschedulable"]


def test_extended_resources_a_device_class_serves_are_allocated_from_slices(
    load_case: LoadCase,
) -> None:
    explanation = explain(load_case("dra"), "ml/ext-0")
    assert explanation["fitting_nodes"] == ["h100-a"]
    fit = predicate(node(explanation, "h100-a"), "NodeResourcesFit")
    assert fit["passed"] is True  # no "Insufficient nvidia.com/gpu": DRA serves it there
    assert node(explanation, "cpu-0")["scheduler_reasons"] == ["cannot allocate all claims"]


def test_selectors_outside_the_cel_subset_are_not_evaluated(load_case: LoadCase) -> None:
    explanation = explain(load_case("dra"), "ml/mig-0")
    detail = predicate(node(explanation, "h100-a"), "DynamicResources")["detail"]
    assert detail.startswith("not evaluated: request gpu of ResourceClaimTemplate mig-profile")
    (check,) = [c for c in explanation["pod_checks"] if c["predicate"] == "DynamicResources"]
    assert "not evaluated" in check["detail"] and check["passed"] is True


def test_pods_that_claim_gpus_are_pending_gpu_pods(load_case: LoadCase) -> None:
    snapshot = load_case("dra")
    found = [p.ref.name for p in pending_gpu_pods(snapshot, cluster_usage(snapshot))]
    # typo-0's claim does not exist, so nothing says it is for GPUs; ext-0 asks for nvidia.com/gpu
    assert found == ["ext-0", "mig-0", "pinned-0", "train-0"]


def test_the_search_backtracks_where_greedy_picking_fails() -> None:
    # `any` could take gpu-0 first and leave `h100` nothing; the allocator backtracks.
    snapshot = cluster(
        [
            device("gpu-0", type="gpu", productName="NVIDIA H100 80GB HBM3"),
            device("gpu-1", type="gpu", productName="NVIDIA L4"),
        ],
        claim(
            "    - {name: any, exactly: {deviceClassName: gpu.nvidia.com}}\n"
            "    - name: h100\n      exactly:\n        deviceClassName: gpu.nvidia.com\n"
            "        selectors:\n"
            "        - cel: {expression: \"device.attributes['gpu.nvidia.com'].productName"
            ".contains('H100')\"}"
        ),
    )
    assert explain(snapshot, "ml/p")["fitting_nodes"] == ["dra-0"]


def test_match_attribute_constraints_hold_within_a_claim() -> None:
    slices = [
        device("mig-0", type="mig", parentUUID="GPU-a"),
        device("mig-1", type="mig", parentUUID="GPU-b"),
    ]
    same_parent = "    constraints:\n    - {matchAttribute: gpu.nvidia.com/parentUUID}\n"
    two = "    - {name: s, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}"
    explanation = explain(cluster(slices, claim(two, same_parent)), "ml/p")
    assert node(explanation, "dra-0")["scheduler_reasons"] == ["cannot allocate all claims"]
    assert explain(cluster(slices, claim(two)), "ml/p")["fitting_nodes"] == ["dra-0"]


def test_a_workload_template_claim_is_evaluated_as_a_new_claim() -> None:
    deployment = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: pair, namespace: ml}
spec:
  selector: {matchLabels: {app: pair}}
  template:
    metadata: {labels: {app: pair}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: two-gpus}]
      containers: [{name: main, image: busybox, resources: {claims: [{name: gpu}]}}]
"""
    text = (CASES / "dra" / "cluster.yaml").read_text(encoding="utf-8")
    explanation = explain(load(text + "---\n" + deployment), "ml/Deployment/pair")
    verdict = predicate(node(explanation, "h100-a"), "DynamicResources")
    assert verdict["detail"] == (
        "request gpu of ResourceClaimTemplate two-gpus: wants 2, 1 free, 3 held by other claims"
    )


def test_clusters_without_dra_show_nothing_of_it(load_case: LoadCase) -> None:
    """The other diagnostics cases (and so their outputs) are untouched by DRA."""
    for case in sorted(p.name for p in CASES.iterdir() if p.is_dir() and p.name != "dra"):
        snapshot = load_case(case)
        inventory = build_inventory(snapshot).as_dict()
        rows = [r["resource"] for p in inventory["pools"] for r in p["resources"]]
        assert not [r for r in rows if r.endswith("(DRA)")], case
        for explanation in explain_targets(snapshot, None):
            found = explanation.as_dict()
            names = {c["predicate"] for c in found["pod_checks"]} | {
                p["predicate"] for n in found["nodes"] for p in n["predicates"]
            }
            assert "DynamicResources" not in names, (case, found["pod"])
