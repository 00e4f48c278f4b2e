"""deploy/rbac.yaml: the read-only ClusterRole grants what the checks read, and nothing more:
`list`, the only verb a scan uses (no get, no watch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.registry import load_checks

RBAC_FILE = Path(__file__).resolve().parents[1] / "deploy" / "rbac.yaml"
LIST_ONLY = ["list"]


def _documents() -> list[dict[str, Any]]:
    with RBAC_FILE.open(encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def _one(kind: str) -> dict[str, Any]:
    found = [d for d in _documents() if d.get("kind") == kind]
    assert len(found) == 1, f"{RBAC_FILE.name} must hold exactly one {kind}"
    return found[0]


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    role = _one("ClusterRole")
    assert role["metadata"]["name"] == "gpu-audit-reader"
    assert "aggregationRule" not in role
    found: list[dict[str, Any]] = role["rules"]
    return found


def _granted(rules: list[dict[str, Any]], verb: str) -> set[tuple[str, str]]:
    return {
        (group, resource)
        for rule in rules
        if verb in rule.get("verbs", [])
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
    }


def test_lists_every_type_the_builtin_checks_require(rules: list[dict[str, Any]]) -> None:
    required = {t for check in load_checks(plugins=False).values() for t in check.required_types}
    assert required, "no built-in check requires anything?"
    listable = _granted(rules, "list")
    missing = sorted(
        f"{KNOWN_KINDS[t].plural}.{KNOWN_KINDS[t].group}"
        for t in required
        if (KNOWN_KINDS[t].group, KNOWN_KINDS[t].plural) not in listable
    )
    assert missing == []


def test_grants_exactly_the_known_kinds_but_secrets(rules: list[dict[str, Any]]) -> None:
    expected = {(i.group, i.plural) for i in KNOWN_KINDS.values() if i.type != "Secret"}
    assert _granted(rules, "list") == expected
    for verb in ("get", "watch"):  # the scan never reads one object by name, nor watches
        assert _granted(rules, verb) == set(), verb


def test_read_verbs_only_no_wildcards_no_secrets(rules: list[dict[str, Any]]) -> None:
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule  # no resourceNames etc.
        assert rule["verbs"] == LIST_ONLY, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert not any("*" in value for value in rule[field]), rule
        assert "secrets" not in rule["resources"], rule
        assert not any("/" in r for r in rule["resources"]), rule  # no subresources
    groups = [g for rule in rules for g in rule["apiGroups"]]
    assert len(groups) == len(set(groups)), "one rule per apiGroup"


def test_binding_names_the_service_account() -> None:
    namespace = _one("Namespace")["metadata"]["name"]
    account = _one("ServiceAccount")["metadata"]
    binding = _one("ClusterRoleBinding")
    assert namespace == account["namespace"] == "gpu-audit"
    assert account["name"] == "gpu-audit"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpu-audit-reader",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-audit", "namespace": "gpu-audit"}
    ]
