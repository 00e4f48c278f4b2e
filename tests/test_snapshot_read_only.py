"""Nothing a scan runs changes the snapshot's objects: every check, the report, the diagnostics
section, the inventory and why-pending, on every fixture input.

The snapshot contract says its objects are read-only, and the live loader relies on it: it
holds equal parts of different objects once (gpu_audit.sharing), so a reader that edited
one pod's containers in place would edit every pod that shares them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest

import gpu_audit.scan
from gpu_audit.diagnostics import build_inventory, explain_targets
from gpu_audit.scan import Inputs, ScanOptions, run_scan
from gpu_audit.snapshot import Snapshot
from tests.builders import fixture_clusters


def _texts(snapshot: Snapshot) -> dict[str, str]:
    # json.dumps tells True from 1 and keeps key order: any edit shows.
    return {str(r.ref): json.dumps(r.raw) for r in snapshot.all()}


CLUSTERS = list(fixture_clusters())


@pytest.mark.parametrize("path", [path for _, path in CLUSTERS], ids=[n for n, _ in CLUSTERS])
def test_a_scan_leaves_every_object_as_it_was_loaded(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[tuple[Snapshot, dict[str, str]]] = []
    load = gpu_audit.scan.load_snapshot

    def load_and_remember(inputs: Inputs, types: Iterable[str]) -> Snapshot:
        snapshot = load(inputs, types)
        loaded.append((snapshot, _texts(snapshot)))
        return snapshot

    monkeypatch.setattr(gpu_audit.scan, "load_snapshot", load_and_remember)
    run_scan(ScanOptions(Inputs(files=(str(path),)), plugins=False))
    ((snapshot, before),) = loaded
    build_inventory(snapshot).as_dict()
    for explanation in explain_targets(snapshot, None):
        explanation.as_dict()
    assert _texts(snapshot) == before
