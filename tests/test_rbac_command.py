"""`gpu-audit rbac`: the read-only access of a scan, and the chart data generated from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.model import Category
from gpu_audit.rbac import read_rules, scan_types
from gpu_audit.registry import load_checks, select_checks

ROOT = Path(__file__).resolve().parents[1]
CHART_INDEX = ROOT / "deploy" / "helm" / "gpu-audit" / "files" / "read-access.yaml"
RBAC_FILE = ROOT / "deploy" / "rbac.yaml"


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}


def _role(runner: CliRunner, *args: str) -> dict[str, Any]:
    result = runner.invoke(main, ["rbac", *args])
    assert result.exit_code == 0, result.output
    role: dict[str, Any] = yaml.safe_load(result.stdout)
    return role


def test_the_chart_index_is_generated_from_the_checks(runner: CliRunner) -> None:
    result = runner.invoke(main, ["rbac", "--chart-index"])
    assert result.exit_code == 0, result.output
    assert CHART_INDEX.read_text(encoding="utf-8") == result.stdout, (
        "deploy/helm/gpu-audit/files/read-access.yaml is stale: run `make docs`"
    )
    index = yaml.safe_load(result.stdout)
    assert sorted(index["checks"]) == sorted(load_checks(plugins=False))


def test_the_role_grants_reads_of_exactly_what_a_scan_lists(runner: CliRunner) -> None:
    role = _role(runner)
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "gpu-audit-reader"
    for rule in role["rules"]:
        assert rule["verbs"] == ["list"]  # a scan lists; it never gets by name nor watches
        assert "secrets" not in rule["resources"] and "*" not in str(rule)
    registry = load_checks(plugins=True)
    expected = {
        (KNOWN_KINDS[t].group, KNOWN_KINDS[t].plural)
        for t in scan_types(registry.values())
        if t != "Secret"
    }
    assert _granted(role["rules"]) == expected


def test_deploy_rbac_yaml_covers_every_check(runner: CliRunner) -> None:
    """deploy/rbac.yaml grants every known kind; the generated role is a subset of it."""
    documents = [d for d in yaml.safe_load_all(RBAC_FILE.read_text(encoding="utf-8")) if d]
    (static,) = [d for d in documents if d["kind"] == "ClusterRole"]
    assert _granted(_role(runner)["rules"]) <= _granted(static["rules"])


def test_selecting_checks_narrows_the_role(runner: CliRunner) -> None:
    narrow = _role(runner, "--category", "MON", "--skip", "GPU-MON-006", "--name", "mon-reader")
    assert narrow["metadata"]["name"] == "mon-reader"
    monitoring = select_checks(
        load_checks(plugins=True), skip=["GPU-MON-006"], categories=[Category.parse("MON")]
    )
    assert narrow["rules"] == read_rules(scan_types(monitoring.values()))
    assert _granted(narrow["rules"]) < _granted(_role(runner)["rules"])


def test_unknown_ids_and_categories_are_usage_errors(runner: CliRunner) -> None:
    for args in (["--only", "GPU-NOPE-001"], ["--category", "bogus"]):
        result = runner.invoke(main, ["rbac", *args])
        assert result.exit_code == 2 and "gpu-audit: error:" in result.stderr, args
