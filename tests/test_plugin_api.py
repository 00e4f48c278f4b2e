"""gpu_audit.api is the only import surface for checks: grouped, documented, and complete."""

from __future__ import annotations

import ast
from pathlib import Path

from gpu_audit import api
from gpu_audit.plugin_api import plugin_api_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_every_export_is_in_exactly_one_group() -> None:
    grouped = [name for group in api.API_GROUPS for name in group.names]
    assert len(grouped) == len(set(grouped)), "a name is listed in two groups"
    assert sorted(grouped) == sorted(api.__all__)


def test_every_public_name_imported_into_the_api_is_exported() -> None:
    tree = ast.parse((ROOT / "scanner" / "api.py").read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpu_audit")
        for alias in node.names
    }
    assert imported - set(api.__all__) == set()


def test_every_export_exists() -> None:
    for name in api.__all__:
        assert hasattr(api, name), name


def test_docs_plugin_api_md_is_generated_from_the_api() -> None:
    committed = (ROOT / "docs" / "plugin-api.md").read_text(encoding="utf-8")
    assert committed == plugin_api_markdown(), "docs/plugin-api.md drifted: run `make docs`"


def test_plugin_api_doc_names_every_export_once() -> None:
    text = plugin_api_markdown()
    for name in api.__all__:
        assert f"- `{name}" in text, name
