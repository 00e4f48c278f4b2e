"""Every check's remediation has a fix kind and a documented form a reader can act on.

The documented (generic) form is what docs/checks.md, `checks show` and `checks list -o json`
print. It must not be placeholder-only: no `$placeholder` of the per-object template left in
it, and at least one line that is neither a comment nor only <placeholders>.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.api import Category, Severity, check
from gpu_audit.catalog import check_metadata
from gpu_audit.model import Check, FixKind, Remediation, Result
from gpu_audit.registry import load_checks
from gpu_audit.snapshot import Snapshot

CHECKS = load_checks(plugins=False)
ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "checks.md"

# A string.Template placeholder; strategic-merge-patch directives ($patch: delete) are real keys.
TEMPLATE_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*")
PATCH_DIRECTIVE = re.compile(
    r"\$(?:patch|retainKeys)(?=\s*:)|\$(?:setElementOrder|deleteFromPrimitiveList)/"
)
ANGLE_PLACEHOLDER = re.compile(r"<[^<>\n]+>")
COMMENT = re.compile(r"(^|\s)#.*$")


def placeholder_problems(text: str) -> list[str]:
    """Why a documented remediation tells a reader nothing ([] when it is fine)."""
    problems = []
    left = TEMPLATE_PLACEHOLDER.findall(PATCH_DIRECTIVE.sub(" ", text))
    if left:
        problems.append(f"keeps the template placeholder {left[0]}")
    substantive = [
        line
        for line in text.splitlines()
        if re.search(
            r"[A-Za-z0-9]",
            re.sub(r"\b(kubectl|helm)\b", "", ANGLE_PLACEHOLDER.sub("", COMMENT.sub("", line))),
        )
    ]
    if not substantive:
        problems.append("has no line besides comments and placeholders")
    return problems


def documented_remediations() -> dict[str, tuple[str, str]]:
    """check id -> (fix kind, code block) as docs/checks.md shows them."""
    found: dict[str, tuple[str, str]] = {}
    sections = re.split(r"^### ", DOCS.read_text(encoding="utf-8"), flags=re.M)[1:]
    for section in sections:
        check_id = section.split("\n", 1)[0].strip()
        match = re.search(
            r"^\*Remediation\*, fix kind `(\w+)` \([^\n]*\):\n\n```\w*\n(.*?)\n```$",
            section,
            re.M | re.S,
        )
        assert match, f"{check_id}: no remediation block in docs/checks.md"
        found[check_id] = (match.group(1), match.group(2))
    return found


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_every_check_has_a_fix_kind_and_a_documented_remediation(check_id: str) -> None:
    fix = CHECKS[check_id].remediation
    assert isinstance(fix, Remediation)
    assert isinstance(fix.kind, FixKind)
    assert fix.root in ("", "pod_spec")
    assert placeholder_problems(fix.generic) == []
    meta = check_metadata(CHECKS[check_id])["remediation"]
    assert meta["kind"] in {k.value for k in FixKind}
    assert meta["template"] == fix.template
    assert placeholder_problems(meta["generic"]) == []


def test_docs_show_a_fix_kind_and_no_placeholder_only_remediation() -> None:
    documented = documented_remediations()
    assert set(documented) == set(CHECKS)
    bad = {cid: placeholder_problems(code) for cid, (_, code) in documented.items()}
    assert {cid: p for cid, p in bad.items() if p} == {}
    kinds = {cid: kind for cid, (kind, _) in documented.items()}
    assert kinds == {cid: c.remediation.kind.value for cid, c in CHECKS.items()}


def _declared_fix_kinds(path: Path) -> dict[str, bool]:
    """check id -> whether its @check(...) call passes fix_kind, for one check module."""
    declared = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check":
            keywords = {k.arg: k.value for k in node.keywords}
            ident = keywords.get("id")
            if isinstance(ident, ast.Constant):
                declared[str(ident.value)] = "fix_kind" in keywords
    return declared


def test_every_builtin_check_declares_its_fix_kind() -> None:
    declared: dict[str, bool] = {}
    for path in sorted((ROOT / "checks").rglob("*.py")):
        declared.update(_declared_fix_kinds(path))
    for path in sorted((ROOT / "checks" / "declarative").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        declared[raw["id"]] = "fix_kind" in raw
    assert set(declared) == set(CHECKS)
    assert sorted(cid for cid, ok in declared.items() if not ok) == []


def _declare(remediation: str, **extra: Any) -> Check:
    def nothing(snapshot: Snapshot) -> list[Result]:
        return []

    return check(
        id="TEST-NODE-001",
        title="t",
        category=Category.NODES,
        severity=Severity.LOW,
        rationale="r",
        remediation=remediation,
        references=("https://example.invalid/",),
        requires=("Node",),
        **extra,
    )(nothing)


@pytest.mark.parametrize(
    "template", ["$command   # $summary", "# $kind $name: $problem\n$snippet", "kubectl $command"]
)
def test_a_placeholder_only_template_needs_a_generic_form(template: str) -> None:
    with pytest.raises(ValueError, match="TEST-NODE-001: remediation_generic is required"):
        _declare(template)
    generic = "kubectl taint nodes <node> nvidia.com/gpu=present:NoSchedule"
    declared = _declare(template, remediation_generic=generic, fix_kind=FixKind.COMMAND)
    assert declared.remediation == Remediation(FixKind.COMMAND, template, generic)


def test_the_generic_form_defaults_to_the_template_with_angle_placeholders() -> None:
    declared = _declare("# $kind $name\nkubectl label node $name x=$value --overwrite # $$5")
    assert declared.remediation == Remediation(
        FixKind.COMMAND,
        "# $kind $name\nkubectl label node $name x=$value --overwrite # $$5",
        "# <kind> <name>\nkubectl label node <name> x=<value> --overwrite # $5",
    )
    fragment = _declare("containers:\n  - name: $container", remediation_root="pod_spec")
    assert fragment.remediation.kind is FixKind.PATCH


@pytest.mark.parametrize(
    ("generic", "error"),
    [
        ("kubectl label node $name x=1", "remediation_generic uses $name: write placeholders"),
        ("# <node>\n<command>   # <summary>", "remediation_generic is only placeholders"),
    ],
)
def test_a_generic_form_must_be_readable(generic: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        _declare("$command", remediation_generic=generic)


def test_strategic_merge_directives_are_not_placeholders() -> None:
    generic = "volumes:\n  - {name: <volume>, $patch: delete}"
    declared = _declare("$patch_text", remediation_generic=generic)
    assert declared.remediation.generic == generic
    assert placeholder_problems(generic) == []
