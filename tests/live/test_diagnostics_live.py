"""`gpu-audit inventory` and `why-pending` against a real kube-apiserver (see conftest.py).

A fixture cluster is seeded with unique node and namespace names: Nodes with their status
written through the status subresource, Pods created unbound (no scheduler runs, so they stay
Pending) or bound with spec.nodeName, and a FailedScheduling Event. The live answers must equal
the offline answers for the same files, node for node; other tests' nodes may share the
apiserver, so only the seeded nodes are compared.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from tests.live.harness import ControlPlane, KubeRequest, delete_namespace

CASE = Path(__file__).resolve().parents[2] / "fixtures" / "clusters" / "diagnostics"
MERGE_PATCH = "application/merge-patch+json"
POOL_LABEL = "eks.amazonaws.com/nodegroup"
PLURALS = {"Namespace": "namespaces", "Node": "nodes", "Pod": "pods", "Event": "events"}


def _ok(status: int, body: Any, what: str, ok: tuple[int, ...] = (200, 201)) -> None:
    assert status in ok, f"{what}: HTTP {status}: {str(body)[:2000]}"


def renamed(objects: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """The case's objects with every node, namespace and node-pool name made unique to this
    run (names are whole JSON strings, so a node named like its pool is renamed once)."""
    text = json.dumps(objects)
    nodes = {o["metadata"]["name"] for o in objects if o["kind"] == "Node"}
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    pools = {o["metadata"]["labels"][POOL_LABEL] for o in objects if o["kind"] == "Node"}
    for name in sorted(nodes | namespaces | pools, key=len, reverse=True):
        text = text.replace(f'"{name}"', f'"{name}-{tag}"')
    renamed_objects: list[dict[str, Any]] = json.loads(text)
    return renamed_objects


def _path(obj: dict[str, Any]) -> str:
    plural = PLURALS[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    return f"/api/v1/namespaces/{namespace}/{plural}" if namespace else f"/api/v1/{plural}"


@contextlib.contextmanager
def seeded(request: KubeRequest, objects: list[dict[str, Any]]) -> Iterator[None]:
    """Create the objects (namespaces first), and delete them again afterwards."""
    created: list[str] = []
    try:
        for obj in sorted(objects, key=lambda o: list(PLURALS).index(o["kind"])):
            body = {k: v for k, v in obj.items() if k != "status"}
            status, reply = request("POST", _path(obj), body)
            _ok(status, reply, f"creating {obj['kind']} {obj['metadata']['name']}")
            path = f"{_path(obj)}/{obj['metadata']['name']}"
            created.append(path)
            if obj.get("status") and obj["kind"] != "Namespace":
                status, reply = request(
                    "PATCH", f"{path}/status", {"status": obj["status"]}, content_type=MERGE_PATCH
                )
                _ok(status, reply, f"patching the status of {path}")
        yield
    finally:
        for path in reversed(created):
            if path.startswith("/api/v1/namespaces/") and path.count("/") == 4:
                delete_namespace(request, path.rsplit("/", 1)[1])
                continue
            status, reply = request("DELETE", f"{path}?gracePeriodSeconds=0")
            _ok(status, reply, f"deleting {path}", (200, 202, 404))


def run(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def only_nodes(explanation: dict[str, Any], names: set[str]) -> list[dict[str, Any]]:
    return [n for n in explanation["nodes"] if n["node"] in names]


def test_why_pending_and_inventory_live_equal_offline(
    control_plane: ControlPlane, kube_request: KubeRequest, tmp_path: Path
) -> None:
    tag = secrets.token_hex(3)
    source = CASE / "combined-taint-and-capacity" / "cluster.yaml"
    objects = renamed([d for d in yaml.safe_load_all(source.read_text()) if d], tag)
    offline_file = tmp_path / "cluster.json"
    offline_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    nodes = {o["metadata"]["name"] for o in objects if o["kind"] == "Node"}
    target = f"ml-{tag}/trainer"

    with seeded(kube_request, objects):
        live = run("why-pending", target, "--kubeconfig", control_plane.kubeconfig, "-q")
        live_inventory = run("inventory", "--kubeconfig", control_plane.kubeconfig, "-q")
    offline = run("why-pending", target, "--from-file", str(offline_file))
    offline_inventory = run("inventory", "--from-file", str(offline_file))

    (live_pod,) = live["pending_pods"]
    (offline_pod,) = offline["pending_pods"]
    assert offline_pod["summary"] == (
        "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, "
        "8 node(s) had untolerated taint {nvidia.com/gpu: true}."
    )
    assert only_nodes(live_pod, nodes) == only_nodes(offline_pod, nodes)
    assert live_pod["request"] == offline_pod["request"]
    # The seeded events came back from the apiserver, oldest first, with their counts.
    assert [m["message"] for m in live_pod["scheduler_messages"]] == [
        m["message"] for m in offline_pod["scheduler_messages"]
    ]
    pools = {f"h100-{tag}", f"l40s-{tag}"}
    live_pools = [p for p in live_inventory["inventory"]["pools"] if p["pool"] in pools]
    offline_pools = offline_inventory["inventory"]["pools"]
    assert [p["pool"] for p in offline_pools] == sorted(pools)
    assert live_pools == offline_pools
