"""gpu-audit inventory on the fixture clusters: exact counts per pool and GPU resource."""

from __future__ import annotations

from typing import Any

from gpu_audit.diagnostics import build_inventory
from tests.diagnostics.conftest import LoadCase


def inventory(load_case: LoadCase, case: str) -> dict[str, Any]:
    return build_inventory(load_case(case)).as_dict()


def counts(res: dict[str, Any]) -> tuple[Any, ...]:
    fits = tuple(res["fits"][size] for size in ("1", "2", "4", "8"))
    return (
        res["resource"],
        res["capacity"],
        res["allocatable"],
        res["requested"],
        res["idle"],
        res["held_by_finished"],
        fits,
    )


def test_init_containers_and_finished_pods(load_case: LoadCase) -> None:
    found = inventory(load_case, "insufficient-gpu")
    (pool,) = found["pools"]
    assert (pool["pool"], pool["product"], pool["ready"], pool["cordoned"]) == (
        "h100",
        "NVIDIA-H100-80GB-HBM3",
        1,
        0,
    )
    # prep holds max(init 4, containers 2) = 4, serve 2; the Succeeded pod holds nothing.
    assert [counts(r) for r in pool["resources"]] == [
        ("nvidia.com/gpu", 8, 8, 6, 2, 0, (2, 1, 0, 0))
    ]
    assert found["finished_gpu_pods"] == ["ml/done"]


def test_gpus_held_by_exited_containers_and_cordoned_nodes(load_case: LoadCase) -> None:
    found = inventory(load_case, "held-gpus")
    (pool,) = found["pools"]
    assert (pool["ready"], pool["cordoned"]) == (2, 1)
    # gpu-1: 2 held by finished-train (its GPU container exited); gpu-2 cordoned: 7 idle that
    # fit nothing. The Failed pod's 4 GPUs are free.
    assert [counts(r) for r in pool["resources"]] == [
        ("nvidia.com/gpu", 16, 16, 3, 13, 2, (6, 3, 1, 0))
    ]
    assert found["finished_gpu_pods"] == ["ml/crashed"]


def test_mig_mixed_profiles(load_case: LoadCase) -> None:
    (pool,) = inventory(load_case, "mig-mixed")["pools"]
    assert pool["mig"] == {"strategy": "mixed", "profiles": {"1g.5gb": 14, "3g.20gb": 2}}
    assert [counts(r) for r in pool["resources"]] == [
        ("nvidia.com/mig-1g.5gb", 14, 14, 1, 13, 0, (13, 6, 3, 1)),
        ("nvidia.com/mig-3g.20gb", 2, 2, 0, 2, 0, (2, 1, 0, 0)),
    ]


def test_mig_single_profile_from_the_product_label(load_case: LoadCase) -> None:
    (pool,) = inventory(load_case, "mig-single")["pools"]
    assert pool["mig"] == {"strategy": "single", "profiles": {"1g.5gb": 56}}
    assert [r["resource"] for r in pool["resources"]] == ["nvidia.com/gpu"]


def test_time_slicing_renamed_resource(load_case: LoadCase) -> None:
    (pool,) = inventory(load_case, "shared-renamed")["pools"]
    assert pool["sharing"] == {"mode": "time-slicing", "replicas": "4"}
    assert [counts(r) for r in pool["resources"]] == [
        ("nvidia.com/gpu.shared", 4, 4, 3, 1, 0, (1, 0, 0, 0))
    ]


def test_pools_and_totals(load_case: LoadCase) -> None:
    found = inventory(load_case, "combined-everything")
    assert [(p["pool"], len(p["nodes"]), p["ready"], p["cordoned"]) for p in found["pools"]] == [
        ("a10g", 1, 1, 0),
        ("h100", 5, 4, 1),
    ]
    # h100: 40 GPUs, 8 requested on "full"; fits only on ready, uncordoned nodes
    # (tainted + small: 16 free), not on cordoned or broken.
    assert counts(found["pools"][1]["resources"][0]) == (
        "nvidia.com/gpu",
        40,
        40,
        8,
        32,
        0,
        (16, 8, 4, 2),
    )
    assert [counts(t) for t in found["totals"]] == [
        ("nvidia.com/gpu", 48, 48, 8, 40, 0, (24, 12, 6, 3))
    ]
    # CPU nodes are not part of the GPU inventory.
    assert all("cpu-1" not in p["nodes"] for p in found["pools"])
