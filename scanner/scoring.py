"""Scores, grades and coverage: pure functions of the check runs.

The score is computed per check, not per object: a check passes when none of its results
failed, and each evaluated check weighs by its severity. A thousand compliant pods therefore
cannot dilute one critical failure, and a critical failure also caps the grade (README, Scoring).

A grade needs evidence: when fewer than COVERAGE_FLOOR of the checks that could apply were
evaluated (one Pod manifest, a nodes-only dump), the grade is "incomplete", not a letter that
would read as a verdict on the cluster; the score is still given, beside its coverage.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpu_audit.engine import CheckRun
from gpu_audit.model import Category, CheckStatus, Severity

GRADE_BANDS = ((90.0, "A"), (80.0, "B"), (70.0, "C"), (60.0, "D"), (0.0, "F"))
# The best grade a scan can get while a check of this severity fails.
GRADE_CAP = {Severity.CRITICAL: "D", Severity.HIGH: "B"}
CLUSTER_SCOPE = ""
# The share of applicable checks that must be evaluated for a letter grade (overall and per
# category), and the grade below it.
COVERAGE_FLOOR = 0.5
INCOMPLETE_GRADE = "incomplete"


@dataclass(frozen=True, slots=True)
class Score:
    value: float | None  # 0-100, None when nothing with a weight was evaluated
    grade: str | None
    checks_passed: int
    checks_failed: int
    capped_by: str | None = None  # the severity whose failure capped the grade


@dataclass(frozen=True, slots=True)
class Coverage:
    enabled: int
    evaluated: int
    not_applicable: int
    not_evaluated: int
    errors: int

    @property
    def ratio(self) -> float | None:
        """Evaluated checks out of those that could apply (not-applicable ones excluded)."""
        relevant = self.enabled - self.not_applicable
        return None if relevant == 0 else round(self.evaluated / relevant, 4)


def grade_for(value: float) -> str:
    return next(letter for floor, letter in GRADE_BANDS if value >= floor)


def _worse(a: str, b: str) -> str:
    return max(a, b)  # letters sort A < B < ... < F


def score_verdicts(verdicts: Iterable[tuple[Severity, bool]]) -> Score:
    """Score from (severity, passed) per evaluated check."""
    total = passed_weight = 0
    passed = failed = 0
    worst_failed: Severity | None = None
    for severity, ok in verdicts:
        total += severity.weight
        if ok:
            passed += 1
            passed_weight += severity.weight
        else:
            failed += 1
            if worst_failed is None or severity.rank > worst_failed.rank:
                worst_failed = severity
    if total == 0:
        return Score(None, None, passed, failed)
    value = round(100.0 * passed_weight / total, 1)
    grade = grade_for(value)
    cap = GRADE_CAP.get(worst_failed) if worst_failed else None
    if cap and _worse(grade, cap) != grade:
        return Score(value, cap, passed, failed, worst_failed.value if worst_failed else None)
    return Score(value, grade, passed, failed)


def _evaluated(runs: Sequence[CheckRun]) -> list[CheckRun]:
    return [r for r in runs if r.status in (CheckStatus.PASSED, CheckStatus.FAILED)]


def overall_score(runs: Sequence[CheckRun]) -> Score:
    """The score of these runs; graded "incomplete" below the coverage floor."""
    score = score_verdicts(
        (r.check.severity, r.status is CheckStatus.PASSED) for r in _evaluated(runs)
    )
    ratio = coverage(runs).ratio
    if score.grade is not None and ratio is not None and ratio < COVERAGE_FLOOR:
        return dataclasses.replace(score, grade=INCOMPLETE_GRADE, capped_by=None)
    return score


def category_scores(runs: Sequence[CheckRun]) -> dict[Category, Score]:
    by_category: dict[Category, list[CheckRun]] = defaultdict(list)
    for run in runs:
        by_category[run.check.category].append(run)
    return {c: overall_score(by_category[c]) for c in Category if c in by_category}


def namespace_scores(runs: Sequence[CheckRun]) -> dict[str, Score]:
    """Per namespace ("" = cluster-scoped objects): a check passes in a namespace when none
    of its results there failed, exempted failures not counted)."""
    verdicts: dict[str, dict[str, tuple[Severity, bool]]] = defaultdict(dict)
    for run in _evaluated(runs):
        failing = {f.result.ref.namespace for f in run.findings if f.exemption is None}
        for ns in {result.ref.namespace for result in run.results}:
            verdicts[ns][run.check.id] = (run.check.severity, ns not in failing)
    return {ns: score_verdicts(verdicts[ns].values()) for ns in sorted(verdicts)}


def coverage(runs: Sequence[CheckRun]) -> Coverage:
    statuses = [r.status for r in runs]
    not_applicable = sum(1 for r in runs if not r.applicable)
    return Coverage(
        enabled=len(runs),
        evaluated=len(_evaluated(runs)),
        not_applicable=not_applicable,
        not_evaluated=statuses.count(CheckStatus.NOT_EVALUATED) - not_applicable,
        errors=statuses.count(CheckStatus.ERROR),
    )
