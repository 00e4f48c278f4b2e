"""docs/source-claims.md: every check it names exists, and every claim is covered or explained."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_audit.registry import load_checks

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "source-claims.md"
NOT_VISIBLE = "Not visible in the API"
CHECK_ID = re.compile(r"\b[A-Z][A-Z0-9]*-[A-Z]+-\d{3}\b")
# The catalogue's source claims come in eleven groups (stack, resources, sharing, ... cost).
GROUPS = 11


def claim_rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"\d+\.\d+", cells[0]):
            rows.append(cells)
    return rows


def test_every_check_named_as_covering_a_claim_exists() -> None:
    registry = load_checks(plugins=False)
    named = {i for row in claim_rows() for i in CHECK_ID.findall(row[2])}
    assert named, "no check ids found in docs/source-claims.md"
    assert sorted(named - set(registry)) == []


def test_every_claim_is_covered_or_explained() -> None:
    rows = claim_rows()
    assert {int(row[0].split(".")[0]) for row in rows} == set(range(1, GROUPS + 1))
    for number, claim, checks, how in rows:
        assert claim and how, number
        assert CHECK_ID.search(checks) or checks == NOT_VISIBLE, (number, checks)
        # A claim no check can show says why, in more than a few words.
        if checks == NOT_VISIBLE:
            assert len(how) > 80, number
