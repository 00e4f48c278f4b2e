"""`scan --namespace` against a real kube-apiserver (see conftest.py): the Pending section
explains only that namespace's pods, and the terminal report says that the GPU usage it shows
counts that namespace's pods alone, as the live listing read no other namespace's.

The case (fixtures/clusters/diagnostics/combined-taint-and-capacity) has a Pending trainer in
namespace ml and inference pods of namespace serving holding every L40S GPU.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from tests.live.harness import ControlPlane, KubeRequest
from tests.live.test_diagnostics_live import CASE, renamed, seeded


def test_a_namespace_scan_explains_its_pods_and_says_what_it_did_not_list(
    control_plane: ControlPlane, kube_request: KubeRequest
) -> None:
    tag = secrets.token_hex(3)
    source = CASE / "combined-taint-and-capacity" / "cluster.yaml"
    objects = renamed([d for d in yaml.safe_load_all(source.read_text()) if d], tag)
    args = ["scan", "--kubeconfig", control_plane.kubeconfig, "--no-plugins", "-q"]

    def scan(*extra: str) -> dict[str, Any]:
        result = CliRunner().invoke(main, [*args, "-o", "json", *extra])
        assert result.exit_code == 0, result.output
        document: dict[str, Any] = json.loads(result.stdout)
        return document

    with seeded(kube_request, objects):
        whole = scan()
        ml, serving = scan("-n", f"ml-{tag}"), scan("-n", f"serving-{tag}")
        table = CliRunner().invoke(main, [*args, "-n", f"ml-{tag}"])

    def pending(document: dict[str, Any]) -> list[str]:
        pods = document["diagnostics"]["pending_pods"]
        return [f"{p['pod']['namespace']}/{p['pod']['name']}" for p in pods]

    def l40s_requested(document: dict[str, Any]) -> int:
        pools = document["diagnostics"]["inventory"]["pools"]
        (pool,) = [p for p in pools if p["pool"] == f"l40s-{tag}"]
        return int(sum(r["requested"] for r in pool["resources"]))

    assert f"ml-{tag}/trainer" in pending(whole)
    assert pending(ml) == [f"ml-{tag}/trainer"]
    assert pending(serving) == []
    # What a listing of one namespace cannot know: the 4 serving pods hold all 16 L40S GPUs.
    assert l40s_requested(whole) == 16 and l40s_requested(ml) == 0
    assert ml["source"]["details"]["namespace"] == f"ml-{tag}"
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())
    assert f"Pending GPU pods of namespace ml-{tag} (1):" in text
    assert (
        f"Only the pods of namespace ml-{tag} were listed: the GPU usage below (REQUESTED, "
        "IDLE, HELD, FIT) and each node's verdict on a Pending pod count them alone"
    ) in text
