from __future__ import annotations

from gpu_audit.model import Severity
from gpu_audit.scoring import Coverage, grade_for, score_verdicts


def test_score_is_weighted_per_check_not_per_object() -> None:
    # One failing critical check against four passing high checks: 20 / 30 of the weight.
    score = score_verdicts([(Severity.CRITICAL, False)] + [(Severity.HIGH, True)] * 4)
    assert score.value == 66.7
    assert (score.checks_passed, score.checks_failed) == (4, 1)


def test_a_failing_critical_check_caps_the_grade() -> None:
    many = [(Severity.LOW, True)] * 200 + [(Severity.CRITICAL, False)]
    score = score_verdicts(many)
    assert score.value is not None and score.value > 90
    assert (score.grade, score.capped_by) == ("D", "critical")


def test_a_failing_high_check_caps_at_b() -> None:
    score = score_verdicts([(Severity.LOW, True)] * 100 + [(Severity.HIGH, False)])
    assert (score.grade, score.capped_by) == ("B", "high")
    assert score_verdicts([(Severity.HIGH, False), (Severity.HIGH, True)]).grade == "F"


def test_nothing_evaluated_is_null_not_100() -> None:
    assert score_verdicts([]).value is None
    assert score_verdicts([(Severity.INFO, True)]).grade is None


def test_grade_bands() -> None:
    assert [grade_for(v) for v in (100, 90, 89.9, 80, 70, 60, 59.9, 0)] == [
        "A",
        "A",
        "B",
        "B",
        "C",
        "D",
        "F",
        "F",
    ]


def test_coverage_excludes_not_applicable_checks() -> None:
    cov = Coverage(enabled=10, evaluated=6, not_applicable=2, not_evaluated=2, errors=0)
    assert cov.ratio == 0.75
    assert Coverage(2, 0, 2, 0, 0).ratio is None
