"""The terminal output of a live scan (issue 19, item 3), against the real kube-apiserver: a
permission gap makes the table say INCOMPLETE and name the RBAC rule to add, apart from the
CRDs the cluster does not have, and the exit is explained on stderr; the progress line is
written only to a terminal."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from click.testing import CliRunner

from gpu_audit.cli import main
from tests.live.harness import KubeRequest
from tests.live.test_live_scan import (
    SERVICE_MONITOR,
    SERVICE_MONITOR_CRD,
    KubeconfigFor,
    MintToken,
    _unique,
    apply,
    bind,
    rbac_documents,
    wait_until_allowed,
)
from tests.test_cli_terminal import in_a_terminal, terminal_env


def _role_without_servicemonitors(request: KubeRequest) -> str:
    """deploy/rbac.yaml's reader role less `servicemonitors`; its name."""
    role: dict[str, Any] = json.loads(
        json.dumps(next(d for d in rbac_documents() if d["kind"] == "ClusterRole"))
    )
    role["metadata"]["name"] = _unique("gpu-audit-reader-no-sm")
    for rule in role["rules"]:
        rule["resources"] = [r for r in rule["resources"] if r != "servicemonitors"]
    apply(request, role)
    return str(role["metadata"]["name"])


def test_a_permission_gap_is_named_in_the_table_with_its_rule(
    kube_request: KubeRequest,
    mint_service_account_token: MintToken,
    kubeconfig_for_token: KubeconfigFor,
) -> None:
    role = _role_without_servicemonitors(kube_request)
    namespace = _unique("no-sm-table")
    token = mint_service_account_token(namespace, "scanner")
    bind(kube_request, role, namespace, "scanner")
    wait_until_allowed(kube_request, token, "/apis/monitoring.coreos.com/v1/prometheuses")
    kubeconfig = kubeconfig_for_token(token)

    result = CliRunner().invoke(main, ["scan", "--kubeconfig", kubeconfig, "--no-plugins", "-q"])
    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"gpu-audit: exit 3: scan incomplete: 1 resource type(s) not read ({SERVICE_MONITOR})\n"
    )
    table = result.stdout
    start = table.index("INCOMPLETE:")
    banner = table[start : table.index("\n\n", start)]
    plural, _, group = SERVICE_MONITOR_CRD.partition(".")
    assert banner == (
        "INCOMPLETE: 1 resource type(s) could not be read; the checks that need them were not "
        "evaluated:\n"
        f"  {SERVICE_MONITOR}: forbidden: list {SERVICE_MONITOR_CRD}\n"
        "    add this rule to the scanner's ClusterRole:\n"
        f'      - apiGroups: ["{group}"]\n'
        f'        resources: ["{plural}"]\n'
        '        verbs: ["list"]\n'
        "  (`gpu-audit rbac` prints the whole role a scan needs)"
    )
    # The rule is one the reader role has: adding it closes the gap.
    reader = next(d for d in rbac_documents() if d["kind"] == "ClusterRole")
    assert any(
        group in r["apiGroups"] and plural in r["resources"] and "list" in r["verbs"]
        for r in reader["rules"]
    )
    # The CRDs this apiserver does not have are listed apart, not as gaps to fix.
    report = json.loads(
        CliRunner()
        .invoke(main, ["scan", "--kubeconfig", kubeconfig, "--no-plugins", "-q", "-o", "json"])
        .stdout
    )
    absent = [g for g in report["source"]["gaps"] if g["reason"].startswith("CRD not installed")]
    if absent:
        assert "Not installed in this cluster (their checks do not apply): " in table
        assert all(g["type"] not in banner for g in absent)
    # `collect` explains its exit 3 the same way.
    collected = CliRunner().invoke(
        main, ["collect", "--kubeconfig", kubeconfig, "-q", "--output-file", os.devnull]
    )
    assert collected.exit_code == 3
    assert collected.stderr == (
        f"gpu-audit: exit 3: snapshot incomplete: 1 resource type(s) not read ({SERVICE_MONITOR})\n"
    )


def test_the_progress_line_goes_to_a_terminal_only(
    mint_service_account_token: MintToken,
    kubeconfig_for_token: KubeconfigFor,
    kube_request: KubeRequest,
) -> None:
    for doc in rbac_documents():
        apply(kube_request, doc)
    token = mint_service_account_token("gpu-audit", "gpu-audit")
    kubeconfig = kubeconfig_for_token(token)
    args = ["scan", "--kubeconfig", kubeconfig, "--no-plugins", "--output-file", os.devnull]
    code, shown = in_a_terminal(args, 100, terminal_env())
    assert code == 0, shown
    assert re.search(r"\rgpu-audit: read \d+ objects at \d+/s \(listing [^)]+\)\x1b\[K", shown)
    assert "\r\x1b[K" in shown  # cleared before the summary line
    quiet_code, quiet = in_a_terminal([*args, "-q"], 100, terminal_env())
    assert quiet_code == 0 and quiet == ""
    piped = CliRunner().invoke(main, args)
    assert piped.exit_code == 0
    assert f"wrote {os.devnull}" in piped.stderr
    assert "objects (listing" not in piped.stderr and "\r" not in piped.stderr
