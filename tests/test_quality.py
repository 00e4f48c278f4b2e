"""The real-world quality corpus (fixtures/scenarios, `make quality`): well-formed, and a ratchet.

The figures in benchmarks/quality-figures.json may only go up: a change that lowers recall or
precision on clusters rebuilt from public sources fails here, and so does any finding at medium
or above on an object a scenario says is correctly configured, or on a clean platform.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import yaml

from benchmarks.quality import (
    FIGURES,
    SCENARIOS,
    Expected,
    Finding,
    ObjectKey,
    Outcome,
    Scenario,
    evaluate,
    figures,
    judge,
    scenario_folders,
)
from gpu_audit.model import Severity
from gpu_audit.registry import load_checks

FOLDERS = scenario_folders()
KINDS = {"bug-report", "upstream-example", "platform"}


@cache
def outcomes() -> tuple[Outcome, ...]:
    return tuple(evaluate(FOLDERS))


def test_the_corpus_is_big_enough() -> None:
    scenarios = [Scenario.load(f) for f in FOLDERS]
    assert len(scenarios) >= 40
    assert sum(1 for s in scenarios if s.kind == "platform" and s.clean) >= 8


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_scenario_is_well_formed(folder: Path) -> None:
    raw = yaml.safe_load((folder / "expected.yaml").read_text(encoding="utf-8"))
    assert set(raw) <= {
        "title",
        "kind",
        "sources",
        "notes",
        "clean",
        "needs",
        "must_find",
        "must_not_flag",
    }, sorted(raw)
    scenario = Scenario.load(folder)
    assert (folder / "cluster").is_dir()
    assert scenario.kind in KINDS
    assert scenario.title
    assert scenario.sources and all(s.startswith("https://") for s in scenario.sources)
    if scenario.kind == "platform":
        assert scenario.clean, "a platform scenario is a correct platform: clean: true"
    assert scenario.must_find or scenario.clean or scenario.must_not_flag
    known = set(load_checks(plugins=False)) | {"NEW"}
    for expected in scenario.must_find:
        assert set(expected.checks) <= known, expected.checks
        assert expected.problem


def test_every_scenario_loads_without_input_error() -> None:
    assert [(o.scenario.slug, o.error) for o in outcomes() if o.error] == []


def test_no_loud_finding_on_protected_objects_or_clean_platforms() -> None:
    wrong = [f"{o.scenario.slug}: {f}" for o in outcomes() for f in o.false_positives]
    assert wrong == []


def test_recall_and_precision_do_not_fall_below_the_recorded_figures() -> None:
    recorded = json.loads(FIGURES.read_text(encoding="utf-8"))
    measured = figures(outcomes())
    for name in ("recall", "precision", "strict_precision"):
        assert measured[name] >= recorded[name], (name, measured[name], recorded[name])
    assert measured["expected_problems"] >= recorded["expected_problems"]


def test_the_recorded_figures_are_the_scenarios_in_the_repository() -> None:
    recorded = json.loads(FIGURES.read_text(encoding="utf-8"))
    assert recorded["scenarios"] == len(FOLDERS)
    assert SCENARIOS.is_dir()


# --------------------------------------------------------------------------- the judge itself

POD = ObjectKey("Deployment", "ml", "train")
OTHER = ObjectKey("Deployment", "ml", "serve")


def _scenario(*, clean: bool = False, protected: frozenset[ObjectKey] = frozenset()) -> Scenario:
    expected = Expected(("GPU-WL-003",), "no /dev/shm", POD, Severity.MEDIUM)
    return Scenario("s", "t", "bug-report", ("https://x",), clean, (), (expected,), protected)


def test_a_finding_below_the_minimum_severity_is_a_miss() -> None:
    outcome = judge(_scenario(), [Finding("GPU-WL-003", POD, Severity.LOW, "m")])
    assert (len(outcome.hits), len(outcome.misses)) == (0, 1)


def test_the_right_check_on_the_wrong_object_is_a_miss_and_unjudged() -> None:
    outcome = judge(_scenario(), [Finding("GPU-WL-003", OTHER, Severity.HIGH, "m")])
    assert len(outcome.misses) == 1
    assert len(outcome.unjudged) == 1


def test_loud_findings_on_protected_objects_and_clean_platforms_are_false_positives() -> None:
    loud = Finding("GPU-WL-007", OTHER, Severity.MEDIUM, "m")
    quiet = Finding("GPU-WL-007", OTHER, Severity.LOW, "m")
    assert judge(_scenario(protected=frozenset({OTHER})), [loud]).false_positives == [loud]
    assert judge(_scenario(clean=True), [loud, quiet]).false_positives == [loud]


def test_a_hit_is_a_true_positive() -> None:
    found = Finding("GPU-WL-003", POD, Severity.HIGH, "m")
    outcome = judge(_scenario(), [found])
    assert outcome.hits and outcome.true_positives == [found]
