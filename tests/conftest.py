"""Shared test fixtures: where the repository's fixtures live, and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def sample_cluster() -> Path:
    return ROOT / "fixtures" / "clusters" / "sample"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
