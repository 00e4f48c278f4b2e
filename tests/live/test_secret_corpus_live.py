"""The planted-credential corpus (fixtures/secrets, see tests/test_secret_corpus.py) in a real
kube-apiserver: `collect`, `scan` and `why-pending` as the read-only account of deploy/rbac.yaml
hold none of its credentials."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_audit.k8s.kinds import resource_type
from tests.live.harness import KubeRequest
from tests.live.test_live_scan import (
    Seeder,
    assert_no_traceback,
    cli,
    load_objects,
    reader_kubeconfig,  # noqa: F401  (a fixture of this module too)
)
from tests.test_secret_corpus import CORPUS, PLANTED, forms, leaked


@pytest.fixture(scope="module")
def seeded_corpus(kube_request: KubeRequest) -> Iterator[Seeder]:
    seeder = Seeder(kube_request, load_objects([CORPUS]))
    try:
        seeder.prepare_namespaces()
        seeder.create_objects()
        yield seeder
    finally:
        seeder.delete_all()


def test_the_cluster_holds_the_planted_credentials(
    seeded_corpus: Seeder, kube_request: KubeRequest
) -> None:
    """The test is sound: the apiserver accepted every object and kept every planted value
    (a field its schema pruned would prove nothing). Secrets are not read back."""
    assert seeded_corpus.rejected == []
    held = ""
    namespaces = [f"/api/v1/namespaces/{name}" for name in seeded_corpus.namespaces]
    for path in [*namespaces, *seeded_corpus.created]:
        if "/secrets/" not in path:
            status, body = kube_request("GET", path)
            assert status == 200, path
            held += json.dumps(body)
    in_secret = {"secret-string-data", "secret-data"}
    missing = sorted(k for k, v in PLANTED.items() if not any(f in held for f in forms(v)))
    assert missing == sorted(in_secret)


def test_live_collect_holds_no_planted_credential(
    seeded_corpus: Seeder,
    reader_kubeconfig: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    snapshot = tmp_path / "snapshot.json"
    result = cli("collect", "--kubeconfig", reader_kubeconfig, "-q", "--output-file", str(snapshot))
    assert_no_traceback(result)
    assert result.exit_code == 0, result.output
    text = snapshot.read_text(encoding="utf-8")
    assert leaked(text) == []
    assert leaked(result.output) == []
    # Not vacuous: the objects of every type a scan reads were collected.
    document = json.loads(text)
    collected = {(i["kind"], i["metadata"]["name"]) for i in document["items"]}
    for obj in seeded_corpus.accepted:
        if resource_type(obj["apiVersion"], obj["kind"]) in document["available"]:
            assert (obj["kind"], obj["metadata"]["name"]) in collected, obj["kind"]
    assert {"ClusterPolicy", "InferenceService", "Deployment", "ConfigMap"} <= {
        kind for kind, _ in collected
    }


@pytest.mark.parametrize(
    "command",
    [("scan", "--format", "json", "-q"), ("why-pending", "-o", "json"), ("inventory",)],
    ids=["scan", "why-pending", "inventory"],
)
def test_live_outputs_hold_no_planted_credential(
    seeded_corpus: Seeder,
    reader_kubeconfig: str,  # noqa: F811
    command: tuple[str, ...],
) -> None:
    result = cli(*command, "--kubeconfig", reader_kubeconfig)
    assert_no_traceback(result)
    assert result.exit_code in (0, 1), result.output
    assert leaked(result.output) == []
    if command[0] == "why-pending":  # the Event quoting a password was listed and read
        pending = json.loads(result.stdout)["pending_pods"]
        explained = next(p for p in pending if p["pod"]["name"] == "pending-gpu")
        assert explained["scheduler_messages"]
