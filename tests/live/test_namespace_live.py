"""`scan -n` against a real kube-apiserver (see conftest.py): only that namespace's objects of
the namespaced kinds are listed (what a namespaced RBAC user can read), so a node whose GPUs
are held by pods of another namespace must not be judged idle: the checks that judge nodes by
the pods they read are reported not evaluated, saying that the other namespaces' pods were not
listed, and only the findings on the namespace's objects are shown."""

from __future__ import annotations

import json
import secrets
from typing import Any

from click.testing import CliRunner

from gpu_audit.cli import main
from tests.builders import container, gpu_node, namespace, pod, pod_spec
from tests.live.harness import ControlPlane, KubeRequest
from tests.live.test_diagnostics_live import seeded

IDLE_GPU = "GPU-COST-001"  # GPU nodes kept busy by GPU pods: reads every Pod bound to a Node


def scan(kubeconfig: str, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        main, ["scan", "--kubeconfig", kubeconfig, "-q", "-o", "json", *args]
    )
    assert result.exit_code in (0, 1), result.output  # 1: findings at or above --fail-on
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_a_namespace_scan_does_not_judge_nodes_busy_with_other_namespaces(
    control_plane: ControlPlane, kube_request: KubeRequest
) -> None:
    tag = secrets.token_hex(3)
    mine, theirs, node_name = f"a-{tag}", f"b-{tag}", f"gpu-{tag}"
    objects = [
        namespace(mine),
        namespace(theirs),
        gpu_node(node_name, 8, ready=True),
        # The node's 8 GPUs are all held by a pod of the other namespace; a CPU pod of mine
        # shares the node, which, seen alone, looks like a GPU node kept by CPU tenants.
        pod(
            "trainer",
            pod_spec(container(gpus=8)),
            namespace=theirs,
            node_name=node_name,
            phase="Running",
        ),
        pod(
            "web",
            pod_spec(container(gpus=None)),
            namespace=mine,
            node_name=node_name,
            phase="Running",
        ),
    ]
    with seeded(kube_request, objects):
        everything = scan(control_plane.kubeconfig)
        limited = scan(control_plane.kubeconfig, "-n", mine)

    def on_node(document: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            f
            for f in document["findings"]
            if f["check_id"] == IDLE_GPU and f["resource"]["name"] == node_name
        ]

    # With every namespace listed the node is busy: no idle-GPU finding on it.
    assert on_node(everything) == []
    (whole,) = [c for c in everything["checks"] if c["id"] == IDLE_GPU]
    assert whole["status"] in ("passed", "failed")
    # Listed in one namespace only: the check is not evaluated, and says why.
    assert on_node(limited) == []
    (check,) = [c for c in limited["checks"] if c["id"] == IDLE_GPU]
    assert check["status"] == "not_evaluated"
    assert check["reason"] == (
        f"pods of other namespaces were not listed (--namespace {mine}): "
        "its verdicts on cluster-scoped objects are not assessed"
    )
    assert {f["resource"]["namespace"] for f in limited["findings"]} <= {mine}
    assert limited["output_filter"]["namespace"] == mine
    # Only that namespace was listed: the other namespace's pod is not in the input.
    assert limited["source"]["details"]["namespace"] == mine
    assert limited["source"]["types"]["Pod"] == 1
