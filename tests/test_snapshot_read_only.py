"""Nothing a scan runs changes the snapshot's objects: every check, the report, the diagnostics
section, the inventory and why-pending, on every fixture input.

The snapshot contract says its objects are read-only, and the live loader relies on it: it
holds equal parts of different objects once (gpu_audit.sharing), so a reader that edited
one pod's containers in place would edit every pod that shares them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_audit.diagnostics import build_inventory, explain_targets
from gpu_audit.errors import InputError
from gpu_audit.scan import Inputs, ScanOptions, run_scan
from gpu_audit.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
INPUTS = sorted(
    {
        *ROOT.glob("clusters/*"),
        *ROOT.glob("clusters/diagnostics/*"),
        *ROOT.glob("scenarios/*/cluster"),
        *(p for p in ROOT.glob("checks/*/*.yaml") if p.name != "expected.yaml"),
        *ROOT.glob("checks/*/*.json"),
    }
    - {ROOT / "clusters" / "diagnostics"}
)


def _texts(snapshot: Snapshot) -> dict[str, str]:
    # json.dumps tells True from 1 and keeps key order: any edit shows.
    return {str(r.ref): json.dumps(r.raw) for r in snapshot.all()}


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_scan_leaves_every_object_as_it_was_loaded(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpu_audit.scan

    loaded: list[tuple[Snapshot, dict[str, str]]] = []
    load = gpu_audit.scan.load_snapshot

    def load_and_remember(inputs: Inputs, types: object) -> Snapshot:
        snapshot = load(inputs, types)  # type: ignore[arg-type]
        loaded.append((snapshot, _texts(snapshot)))
        return snapshot

    monkeypatch.setattr(gpu_audit.scan, "load_snapshot", load_and_remember)
    try:
        run_scan(ScanOptions(Inputs(files=(str(path),)), plugins=False))
    except InputError:
        pytest.skip("not a loadable input (a fixture of the loader's errors)")
    ((snapshot, before),) = loaded
    build_inventory(snapshot).as_dict()
    for explanation in explain_targets(snapshot, None):
        explanation.as_dict()
    assert _texts(snapshot) == before
