"""GPU node checks (GPU-NODE-003/007/008) on cases the fixtures do not cover."""

from __future__ import annotations

import yaml

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    Doc,
    cluster_policy,
    config_map,
    container,
    deployment,
    gpu_node,
    pod_spec,
    run_check_on,
    verdicts,
    verdicts_of,
)

# --------------------------------------------------------------------------- GPU-NODE-003

MIG_CAPABLE = {"nvidia.com/mig.capable": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def test_mig_profile_without_its_configmap_is_assumed_only_by_name() -> None:
    single = {
        **MIG_CAPABLE,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.config.state": "pending",
    }
    objects = [
        gpu_node("balanced", labels={**single, "nvidia.com/mig.config": "all-balanced"}),
        gpu_node("custom", labels={**single, "nvidia.com/mig.config": "my-profile"}),
    ]
    assert verdicts_of("GPU-NODE-003", objects) == [
        ("Node balanced", Outcome.FAIL, Severity.MEDIUM),
        ("Node custom", Outcome.PASS, None),
    ]


def test_mig_stale_gfd_and_stale_mixed_capacity_are_medium() -> None:
    policy = cluster_policy("cp", mig={"strategy": "mixed"})
    node = gpu_node(
        "n",
        "7",
        labels={**MIG_CAPABLE, "nvidia.com/mig.strategy": "single"},
        resource="nvidia.com/mig-1g.10gb",
    )
    run = run_check_on("GPU-NODE-003", [policy, node])
    assert verdicts(run) == [
        ("Node n", Outcome.FAIL, Severity.MEDIUM),
        ("Node n", Outcome.FAIL, Severity.MEDIUM),
    ]
    messages = sorted(r.message for r in run.results)
    assert "ClusterPolicy cp sets mixed" in messages[0]
    assert "advertises nvidia.com/mig-1g.10gb under mig.strategy single" in messages[1]


def test_mig_entries_for_other_gpu_models_do_not_mix() -> None:
    config = {
        "version": "v1",
        "mig-configs": {
            "all-1g.10gb": [
                {
                    "device-filter": ["0x20B210DE"],
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.10gb": 7},
                },
                {
                    "device-filter": "0x233010DE",
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.12gb": 7},
                },
            ]
        },
    }
    mig_parted = config_map(
        "default-mig-parted-config", "gpu-operator", {"config.yaml": yaml.safe_dump(config)}
    )
    labels = {
        **MIG_CAPABLE,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.config": "all-1g.10gb",
    }
    assert verdicts_of("GPU-NODE-003", [mig_parted, gpu_node("n", labels=labels)]) == [
        ("Node n", Outcome.PASS, None)
    ]


def test_mig_request_with_a_nodepool_in_the_input_is_medium() -> None:
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}}
    pool["spec"] = {}
    mig_pod = pod_spec(container("x:1", name="m", resource="nvidia.com/mig-2g.20gb"))
    objects = [pool, gpu_node("full"), deployment("d", mig_pod)]
    assert verdicts_of("GPU-NODE-003", objects) == [
        ("Deployment ml/d", Outcome.FAIL, Severity.MEDIUM)
    ]


# --------------------------------------------------------------------------- GPU-NODE-007

GFD_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-L4",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.memory": "23034",
    "nvidia.com/cuda.driver-version.major": "560",
}


def test_gfd_disabled_or_absent_is_not_evaluated() -> None:
    objects = [cluster_policy("cp", gfd={"enabled": False}), gpu_node("bare", "1")]
    assert run_check_on("GPU-NODE-007", objects).results == ()


def test_gfd_staleness_threshold_follows_the_sleep_interval() -> None:
    # a 3h sleep interval makes a 30h threshold; the nodes' labels are 26h apart.
    policy = cluster_policy("cp", gfd={"env": [{"name": "GFD_SLEEP_INTERVAL", "value": "3h"}]})
    newest = gpu_node("a", "1", labels={**GFD_LABELS, "nvidia.com/gfd.timestamp": "1764669600"})
    older = gpu_node("b", "1", labels={**GFD_LABELS, "nvidia.com/gfd.timestamp": "1764576000"})
    assert verdicts_of("GPU-NODE-007", [policy, newest, older]) == [
        ("Node a", Outcome.PASS, None),
        ("Node b", Outcome.PASS, None),
    ]


def test_gfd_skips_nodes_still_joining() -> None:
    unregistered = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
    joining = gpu_node("new", "1", taints=[unregistered])
    assert run_check_on("GPU-NODE-007", [cluster_policy("cp", gfd={}), joining]).results == ()


# --------------------------------------------------------------------------- GPU-NODE-008


def _slice(node: str) -> Doc:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def test_dra_with_mig_capacity_fails_and_unknown_nodes_are_skipped() -> None:
    node = gpu_node("mig", "7", resource="nvidia.com/mig-1g.10gb")
    assert verdicts_of("GPU-NODE-008", [node, _slice("mig"), _slice("not-in-input")]) == [
        ("Node mig", Outcome.FAIL, Severity.HIGH)
    ]
