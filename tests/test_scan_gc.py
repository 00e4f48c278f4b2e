"""run_scan keeps the cyclic garbage collector off the snapshot while the checks, diagnostics
and report read it (gpu_audit.scan.frozen_snapshot), and gives the objects back when it is done, so
that scans run one after another in one process do not pile up frozen objects."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from gpu_audit.diagnostics import diagnostics_section
from gpu_audit.scan import Inputs, ScanOptions, run_scan
from gpu_audit.snapshot import Snapshot

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "clusters" / "sample"


def test_the_snapshot_is_frozen_only_while_the_scan_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen_during: list[int] = []

    def spy(snapshot: Snapshot) -> dict[str, Any]:
        frozen_during.append(gc.get_freeze_count())
        return diagnostics_section(snapshot)

    monkeypatch.setattr("gpu_audit.scan.diagnostics_section", spy)
    before = gc.get_freeze_count()
    for _ in range(2):
        document = run_scan(ScanOptions(Inputs(files=(str(SAMPLE),)))).document
        assert document["findings"]
        assert gc.get_freeze_count() == before
    assert len(frozen_during) == 2
    assert all(count > before for count in frozen_during)
    assert gc.isenabled()


def test_a_failing_scan_gives_the_objects_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(snapshot: Snapshot) -> dict[str, Any]:
        raise RuntimeError("diagnostics failed")

    monkeypatch.setattr("gpu_audit.scan.diagnostics_section", broken)
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError, match="diagnostics failed"):
        run_scan(ScanOptions(Inputs(files=(str(SAMPLE),))))
    assert gc.get_freeze_count() == before


def test_the_snapshot_is_frozen_before_the_collector_runs_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Re-enabled before the freeze, the collector's next pass would traverse every object
    # the load made.
    enabled_at_freeze: list[bool] = []
    freeze = gc.freeze

    def spy() -> None:
        enabled_at_freeze.append(gc.isenabled())
        freeze()

    monkeypatch.setattr(gc, "freeze", spy)
    run_scan(ScanOptions(Inputs(files=(str(SAMPLE),))))
    assert enabled_at_freeze == [False]
    assert gc.isenabled()
