"""Fixture clusters of fixtures/clusters/diagnostics/<case>/ loaded as snapshots."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import load_files

CASES = Path(__file__).resolve().parents[2] / "fixtures" / "clusters" / "diagnostics"

LoadCase = Callable[[str], Snapshot]


@pytest.fixture
def load_case() -> LoadCase:
    def load(case: str) -> Snapshot:
        return load_files([str(CASES / case)], io.StringIO())

    return load
