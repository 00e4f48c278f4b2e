"""A fleet scan of two kubeconfig contexts of the real kube-apiserver (issue 19, item 6): one
with the admin's rights, one of a ServiceAccount whose ClusterRole lists only nodes and pods.
One report comes out, and it says which cluster is incomplete and which permissions it lacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpu_audit.cli import main
from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.rbac import scan_types
from gpu_audit.registry import load_checks
from gpu_audit.sources.live import NEVER_LISTED
from tests.live.harness import ControlPlane, KubeRequest
from tests.live.test_live_scan import MintToken, _unique, apply, bind, wait_until_allowed
from tests.test_fleet import validate

pytestmark = pytest.mark.live
ADMIN, RESTRICTED = "admin-ctx", "restricted-ctx"


@pytest.fixture(scope="module")
def two_contexts(
    control_plane: ControlPlane,
    kube_request: KubeRequest,
    mint_service_account_token: MintToken,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """A kubeconfig with two contexts: the admin's token, and a ServiceAccount's token
    (TokenRequest) bound to a ClusterRole that may list only nodes and pods."""
    role = _unique("nodes-and-pods")
    apply(
        kube_request,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}],
        },
    )
    namespace = _unique("fleet")
    token = mint_service_account_token(namespace, "scanner")
    bind(kube_request, role, namespace, "scanner")
    wait_until_allowed(kube_request, token, "/api/v1/pods")
    users = {ADMIN: control_plane.admin_token, RESTRICTED: token}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "live",
                "cluster": {
                    "server": control_plane.server,
                    "certificate-authority": control_plane.ca_file,
                },
            }
        ],
        "users": [{"name": name, "user": {"token": t}} for name, t in users.items()],
        "contexts": [
            {"name": name, "context": {"cluster": "live", "user": name}} for name in users
        ],
        "current-context": ADMIN,
    }
    path = tmp_path_factory.mktemp("fleet") / "kubeconfig"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return str(path)


def _forbidden(type_: str) -> str:
    info = KNOWN_KINDS[type_]
    return f"forbidden: list {info.plural}" + (f".{info.group}" if info.group else "")


def test_a_fleet_scan_says_which_cluster_is_incomplete(two_contexts: str, tmp_path: Path) -> None:
    args = ["scan", "--kubeconfig", two_contexts, "--no-plugins", "--context", RESTRICTED]
    result = CliRunner().invoke(main, [*args, "--context", ADMIN, "-o", "json"])
    assert result.exit_code == 3, result.output
    assert result.stderr.endswith(
        f"gpu-audit: exit 3: fleet incomplete: 1 cluster(s): {RESTRICTED} (incomplete)\n"
    )
    fleet: dict[str, Any] = json.loads(result.stdout)
    validate(fleet)
    assert [c["name"] for c in fleet["clusters"]] == [RESTRICTED, ADMIN]  # worst first
    restricted, admin = fleet["clusters"]
    assert admin["status"] == "complete" and admin["gaps"] == []
    assert restricted["status"] == "incomplete"
    assert (fleet["summary"]["complete"], fleet["summary"]["incomplete"]) == (1, 1)
    # What the restricted identity could not list is every type the scan lists (those of
    # the built-in checks, Secrets never, less the APIs this apiserver does not serve) but
    # Node and Pod, each named as the permission it lacks.
    absent = {g["type"] for g in admin["report"]["source"]["gaps"]}
    listed = scan_types(load_checks(plugins=False).values()) - NEVER_LISTED - absent
    assert {"Node", "Pod", "ConfigMap", "DaemonSet"} <= listed
    expected = sorted(_forbidden(t) for t in listed - {"Node", "Pod"})
    assert restricted["missing_permissions"] == expected
    assert "forbidden: list configmaps" in expected
    assert {g["reason"] for g in restricted["gaps"]} == set(expected)
    assert restricted["report"]["source"]["details"]["context"] == RESTRICTED
    assert restricted["report"]["source"]["details"]["missing_permissions"] == expected

    # The table names the incomplete cluster and its missing permissions at the top.
    table = CliRunner().invoke(main, [*args, "--context", ADMIN, "-q"])
    assert table.exit_code == 3
    head = table.stdout[: table.stdout.index("=== cluster")]
    listing = "".join(f"\n    {reason}" for reason in expected)
    assert f"INCOMPLETE: {RESTRICTED}:\n  missing permission(s):{listing}\n" in head

    # --all-contexts gives the same clusters; Prometheus labels each cluster's series.
    prom = CliRunner().invoke(
        main,
        [
            "scan",
            "--kubeconfig",
            two_contexts,
            "--no-plugins",
            "--all-contexts",
            "-o",
            "prometheus",
        ],
    )
    assert prom.exit_code == 3
    complete = {
        s.labels["cluster"]: s.value
        for family in text_string_to_metric_families(prom.stdout)
        if family.name == "gpu_audit_scan_complete"
        for s in family.samples
    }
    assert complete == {ADMIN: 1.0, RESTRICTED: 0.0}
