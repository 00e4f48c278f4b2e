"""What every check's metadata must satisfy, and the generated check reference."""

from __future__ import annotations

import re
import string
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_audit.catalog import checks_markdown
from gpu_audit.kinds_doc import kinds_markdown
from gpu_audit.model import Category
from gpu_audit.registry import load_checks

CHECKS = load_checks(plugins=False)
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_metadata_is_complete(check_id: str) -> None:
    c = CHECKS[check_id]
    assert re.fullmatch(r"GPU-[A-Z]+-\d{3}", c.id)
    assert c.title[0].isupper() and not c.title.endswith("."), c.title
    assert len(c.rationale) > 60, "the rationale says why it matters"
    assert c.detection, "the detection says how it decides"
    assert c.references and all(r.startswith("https://") for r in c.references)
    assert c.requires
    if c.module.endswith(".yaml"):
        # A declarative check: one file in checks/declarative/, named like a check module.
        assert Path(c.module).parent.name == "declarative", c.module
        assert Path(c.module).stem == c.function.__name__
    else:
        assert c.module.startswith(f"gpu_audit.checks.{_package(c.category)}."), c.module
        assert c.module.rsplit(".", 1)[1] == c.function.__name__


def _package(category: Category) -> str:
    return {"distributed-training": "distributed", "network-security": "network_security"}.get(
        category.value, category.value
    )


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_remediation_template_uses_only_known_placeholders(check_id: str) -> None:
    template = string.Template(CHECKS[check_id].remediation.template)
    assert template.is_valid(), "a stray $ must be written $$"


def test_builtin_checks_load_without_kubernetes_or_jinja2() -> None:
    code = (
        "import sys\n"
        "from gpu_audit.registry import load_checks\n"
        "from gpu_audit.sources.files import load_files\n"
        "load_checks(plugins=False)\n"
        "bad = sorted(m for m in ('kubernetes', 'jinja2') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_docs_checks_md_is_generated_from_the_registry() -> None:
    committed = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")
    assert committed == checks_markdown(CHECKS.values()), "docs/checks.md drifted: run `make docs`"


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_every_check_states_its_severity_evidence(check_id: str) -> None:
    """docs/severity.md: each check's documentation names what raises and lowers its severity."""
    evidence = CHECKS[check_id].severity_evidence
    assert len(evidence.split()) >= 8, f"{check_id}: severity_evidence is missing or too thin"


def test_docs_kinds_md_is_generated_from_the_kinds_and_checks() -> None:
    committed = (ROOT / "docs" / "kinds.md").read_text(encoding="utf-8")
    assert committed == kinds_markdown(CHECKS.values()), "docs/kinds.md drifted: run `make docs`"


def test_every_kind_a_check_requires_is_known() -> None:
    from gpu_audit.k8s.kinds import KNOWN_KINDS

    required = {t for c in CHECKS.values() for t in c.required_types}
    assert required - set(KNOWN_KINDS) == set()
