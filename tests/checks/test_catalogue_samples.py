"""The catalogue's own sample objects (../shared/catalogue.md), scanned as users would paste them.

Every ```yaml block of a check's section that holds whole objects (apiVersion + kind) is the
catalogue's fix for that check. Scanned on its own it must not fail that check, no check may
raise on it, and a block that is only a fragment must get a clear input error, not a traceback.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.engine import run_check
from gpu_audit.errors import InputError
from gpu_audit.model import CheckStatus
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

CATALOGUE = Path(__file__).resolve().parents[3] / "shared" / "catalogue.md"
CHECKS = load_checks(plugins=False)
SECTION = re.compile(r"^### (GPU-[A-Z]+-\d+)", re.MULTILINE)
YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)


def sample_blocks() -> list[tuple[str, int, list[dict[str, Any]]]]:
    """(check id, block number in its section, objects) for each block with whole objects."""
    if not CATALOGUE.is_file():
        return []
    parts = SECTION.split(CATALOGUE.read_text(encoding="utf-8"))
    found = []
    for check_id, body in zip(parts[1::2], parts[2::2], strict=True):
        for n, block in enumerate(YAML_BLOCK.findall(body), start=1):
            docs = [d for d in yaml.safe_load_all(textwrap.dedent(block)) if d]
            objects = [d for d in docs if isinstance(d, dict) and {"apiVersion", "kind"} <= set(d)]
            if objects:
                found.append((check_id, n, objects))
    return found


SAMPLES = sample_blocks()


def test_the_catalogue_has_samples() -> None:
    if not CATALOGUE.is_file():
        pytest.skip(f"{CATALOGUE} is not here (the catalogue lives beside the checkout)")
    assert len(SAMPLES) >= 20, len(SAMPLES)


@pytest.mark.parametrize(
    ("check_id", "block", "objects"), SAMPLES, ids=[f"{c}-{n}" for c, n, _ in SAMPLES]
)
def test_a_catalogue_fix_passes_its_own_check(
    check_id: str, block: int, objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / f"{check_id}-{block}.yaml"
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    try:
        snapshot = load_files([str(path)])
    except InputError as exc:
        # A fragment shown as an object (a Job without metadata): the error names the document.
        assert all("metadata" not in o for o in objects), exc
        assert f"{path}: document" in str(exc)
        return
    for check in CHECKS.values():
        run = run_check(check, snapshot)
        assert run.status is not CheckStatus.ERROR, (check.id, run.error_detail)
        if check.id == check_id:
            assert run.status is not CheckStatus.FAILED, [f.result.message for f in run.findings]
