"""The direction of imports that docs/architecture.md promises, held by a test."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def gpu_audit_imports(path: Path) -> set[str]:
    """Every gpu_audit module a file imports, at any depth (function-level imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("gpu_audit"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gpu_audit"))
    return found


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _allowed(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", _modules("scanner/k8s"), ids=lambda p: p.name)
def test_domain_knowledge_knows_nothing_of_checks_reports_or_sources(path: Path) -> None:
    allowed = ("gpu_audit.k8s", "gpu_audit.model", "gpu_audit.snapshot")
    assert {m for m in gpu_audit_imports(path) if not _allowed(m, allowed)} == set()


@pytest.mark.parametrize("path", _modules("reports"), ids=lambda p: p.name)
def test_renderers_read_only_the_report_document(path: Path) -> None:
    allowed = ("gpu_audit.reports", "gpu_audit.report", "gpu_audit.model", "gpu_audit")
    bad = {m for m in gpu_audit_imports(path) if not _allowed(m, allowed) or m == "gpu_audit.k8s"}
    assert bad == set()


@pytest.mark.parametrize("path", _modules("scanner/postscan"), ids=lambda p: p.name)
def test_post_scan_features_never_read_the_cluster(path: Path) -> None:
    forbidden = ("gpu_audit.sources", "gpu_audit.k8s.kinds", "gpu_audit.cli")
    assert {m for m in gpu_audit_imports(path) if _allowed(m, forbidden)} == set()


@pytest.mark.parametrize("path", _modules("scanner/sources"), ids=lambda p: p.name)
def test_sources_know_nothing_of_checks_or_reports(path: Path) -> None:
    forbidden = ("gpu_audit.checks", "gpu_audit.reports", "gpu_audit.engine", "gpu_audit.api")
    assert {m for m in gpu_audit_imports(path) if _allowed(m, forbidden)} == set()


def test_the_import_finder_sees_function_level_and_plain_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import gpu_audit.k8s.pods\n"
        "def f():\n    from gpu_audit.sources.live import collect\n"
        "from .sibling import x\n",
        encoding="utf-8",
    )
    assert gpu_audit_imports(source) == {"gpu_audit.k8s.pods", "gpu_audit.sources.live"}
