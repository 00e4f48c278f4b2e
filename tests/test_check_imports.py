"""Check modules import the engine only through `gpu_audit.api`, and never another category's
helpers: what two categories share belongs in the engine, re-exported by the API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CHECKS_DIR = Path(__file__).resolve().parents[1] / "checks"
CHECK_MODULES = sorted(
    p for p in CHECKS_DIR.rglob("*.py") if p.parent != CHECKS_DIR and "__pycache__" not in p.parts
)


def forbidden_imports(source: str, category: str) -> list[str]:
    """The imports of one check module (in package `category`) that break the rule, as
    `line: module`."""
    own = f"gpu_audit.checks.{category}"
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level > 1:
                problems.append(f"{node.lineno}: {'.' * node.level}{node.module or ''}")
                continue
            modules = [] if node.level == 1 else [node.module or ""]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            if module.split(".")[0] != "gpu_audit" or module == "gpu_audit.api":
                continue
            if module == own or module.startswith(own + "."):
                continue
            problems.append(f"{node.lineno}: {module}")
    return problems


def test_every_category_has_check_modules() -> None:
    assert len({p.parent.name for p in CHECK_MODULES}) >= 10


@pytest.mark.parametrize("path", CHECK_MODULES, ids=lambda p: str(p.relative_to(CHECKS_DIR)))
def test_check_module_imports_only_api_and_own_category(path: Path) -> None:
    assert forbidden_imports(path.read_text(encoding="utf-8"), path.parent.name) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from gpu_audit.api import check\nfrom ._common import x\nimport json\n", []),
        ("from gpu_audit.checks.nodes._common import gpu_hosts\n", []),
        (
            "from gpu_audit.checks.stack._common import containers\n",
            ["1: gpu_audit.checks.stack._common"],
        ),
        ("from ..stack._common import containers\n", ["1: ..stack._common"]),
        ("import gpu_audit.k8s\n", ["1: gpu_audit.k8s"]),
        ("from gpu_audit.snapshot import Snapshot\n", ["1: gpu_audit.snapshot"]),
    ],
)
def test_forbidden_imports_are_found(source: str, expected: list[str]) -> None:
    assert forbidden_imports(source, "nodes") == expected
