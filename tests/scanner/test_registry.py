from __future__ import annotations

import importlib.metadata
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from gpu_audit import registry
from gpu_audit.model import Category, Severity
from gpu_audit.registry import RegistryError, load_checks, select_checks

PLUGIN = """
from gpu_audit.api import Category, Severity, check, passed

@check(id="{id}", title="Plugin check", category=Category.NODES, severity=Severity.LOW,
       rationale="r", remediation="kubectl get nodes", references=("https://example.invalid/",),
       requires=("Node",))
def plugin_check(snapshot):
    for node in snapshot.of("Node"):
        yield passed(node, "ok")
"""


@dataclass
class FakeDist:
    name: str


@dataclass
class FakeEntryPoint:
    name: str
    value: str
    dist: FakeDist

    def load(self) -> ModuleType:
        import importlib

        return importlib.import_module(self.value)


def install_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, check_id: str
) -> None:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(PLUGIN.format(id=check_id)))
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = FakeEntryPoint("acme", module, FakeDist("acme-gpu-checks"))
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group: [ep] if group == registry.ENTRY_POINT_GROUP else [],
    )


def test_builtin_checks_are_found_with_valid_ids() -> None:
    checks = load_checks(plugins=False)
    assert "GPU-WL-001" in checks
    assert list(checks) == sorted(checks)
    assert all(c.origin == "gpu-audit" for c in checks.values())


def test_plugins_come_through_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_plugin(tmp_path, monkeypatch, "acme_plugin_ok", "ACME-NODE-001")
    checks = load_checks()
    assert checks["ACME-NODE-001"].origin == "acme-gpu-checks"
    assert "ACME-NODE-001" not in load_checks(plugins=False)


def test_duplicate_id_names_both_origins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_plugin(tmp_path, monkeypatch, "acme_plugin_dup", "ACME-NODE-002")
    first = load_checks()["ACME-NODE-002"]
    with pytest.raises(RegistryError) as info:
        load_checks(extra=[("local-dir", [first])])
    assert str(info.value) == (
        "ACME-NODE-002 is defined by both acme-gpu-checks (acme_plugin_dup) and local-dir (acme_plugin_dup)"
    )


def test_plugins_cannot_use_the_builtin_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugin(tmp_path, monkeypatch, "acme_plugin_prefix", "GPU-NODE-901")
    with pytest.raises(RegistryError, match="reserved for gpu-audit"):
        load_checks()


def test_select_checks_filters_and_rejects_unknown_ids() -> None:
    checks = load_checks(plugins=False)
    assert list(select_checks(checks, only=["GPU-WL-001"])) == ["GPU-WL-001"]
    assert "GPU-WL-001" not in select_checks(checks, skip=["GPU-WL-001"])
    assert all(
        c.category is Category.WORKLOADS
        for c in select_checks(checks, categories=[Category.WORKLOADS]).values()
    )
    assert all(
        c.severity.rank >= Severity.HIGH.rank
        for c in select_checks(checks, min_severity=Severity.HIGH).values()
    )
    with pytest.raises(RegistryError, match="unknown check id"):
        select_checks(checks, only=["GPU-NOPE-999"])
