"""`make quality`: recall and precision of gpu-audit on clusters nobody here wrote the checks for.

Each folder of fixtures/scenarios/ is a small cluster rebuilt from a public source (a bug
report, an upstream example, a vendor's documented platform) with an `expected.yaml` written
from that source before the scanner ran on it (format: fixtures/scenarios/README.md):

* `must_find`: the real problems, each with the check that should report it, the object to
  change and the lowest acceptable severity. A finding of that check on that object at that
  severity or above is a hit; anything else is a miss (a problem no check covers is a miss too).
* `must_not_flag`: correctly configured look-alikes. A finding at medium or above on one of
  them is a false positive.
* `clean: true`: a correct platform. Every finding at medium or above in it is a false positive.

Findings at medium or above that none of these judge are listed as unjudged, so that a
reviewer can see every loud finding; precision is computed over the judged ones and, as a
stricter figure, counting every unjudged one as wrong.

The figures recorded in benchmarks/quality-figures.json are a ratchet: tests/test_quality.py
fails when a change lowers recall or precision below them, or when any protected object or
clean platform gets a finding at medium or above.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_audit.engine import run_checks
from gpu_audit.errors import InputError
from gpu_audit.model import ObjRef, Severity
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "fixtures" / "scenarios"
FIGURES = Path(__file__).resolve().parent / "quality-figures.json"
LOUD = Severity.MEDIUM  # the severity from which a finding asks a person to act


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """An object as a scenario names it: bare kind, namespace ("" when cluster-scoped), name."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def parse(cls, raw: object, where: str) -> ObjectKey:
        if not isinstance(raw, Mapping) or not raw.get("kind") or not raw.get("name"):
            raise ValueError(f"{where}: an object needs kind and name, got {raw!r}")
        return cls(str(raw["kind"]), str(raw.get("namespace") or ""), str(raw["name"]))

    @classmethod
    def of(cls, ref: ObjRef) -> ObjectKey:
        return cls(ref.kind_name, ref.namespace, ref.name)

    def __str__(self) -> str:
        return (
            f"{self.kind} {self.namespace}/{self.name}"
            if self.namespace
            else (f"{self.kind} {self.name}")
        )


@dataclass(frozen=True, slots=True)
class Expected:
    """One real problem of a scenario: the checks allowed to report it, on which object."""

    checks: tuple[str, ...]
    problem: str
    object: ObjectKey
    min_severity: Severity

    def matched_by(self, found: Finding) -> bool:
        return (
            found.check in self.checks
            and found.object == self.object
            and found.severity.rank >= self.min_severity.rank
        )


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    object: ObjectKey
    severity: Severity
    message: str

    def __str__(self) -> str:
        return f"{self.check} [{self.severity.value}] {self.object}: {self.message}"


@dataclass(frozen=True, slots=True)
class Scenario:
    slug: str
    title: str
    kind: str
    sources: tuple[str, ...]
    clean: bool
    needs: tuple[str, ...]
    must_find: tuple[Expected, ...]
    must_not_flag: frozenset[ObjectKey]

    @classmethod
    def load(cls, folder: Path) -> Scenario:
        where = f"{folder.name}/expected.yaml"
        raw = yaml.safe_load((folder / "expected.yaml").read_text(encoding="utf-8"))
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: not a mapping")
        expected = []
        for i, item in enumerate(raw.get("must_find") or [], 1):
            at = f"{where} must_find[{i}]"
            checks = item.get("check")
            names = tuple(str(c) for c in (checks if isinstance(checks, list) else [checks]))
            expected.append(
                Expected(
                    checks=names,
                    problem=str(item.get("problem", "")),
                    object=ObjectKey.parse(item.get("object"), at),
                    min_severity=Severity.parse(str(item.get("min_severity", "low"))),
                )
            )
        protected = frozenset(
            ObjectKey.parse(o, f"{where} must_not_flag") for o in raw.get("must_not_flag") or []
        )
        needs = raw.get("needs") or []
        return cls(
            slug=folder.name,
            title=str(raw.get("title", "")),
            kind=str(raw.get("kind", "")),
            sources=tuple(str(s) for s in raw.get("sources") or []),
            clean=bool(raw.get("clean", False)),
            needs=tuple(str(n) for n in (needs if isinstance(needs, list) else [needs])),
            must_find=tuple(expected),
            must_not_flag=protected,
        )


@dataclass(slots=True)
class Outcome:
    """What the scanner did on one scenario, judged against its expectations."""

    scenario: Scenario
    findings: list[Finding] = field(default_factory=list)
    hits: list[Expected] = field(default_factory=list)
    misses: list[Expected] = field(default_factory=list)
    true_positives: list[Finding] = field(default_factory=list)
    false_positives: list[Finding] = field(default_factory=list)
    unjudged: list[Finding] = field(default_factory=list)
    error: str = ""


def scan(folder: Path) -> list[Finding]:
    snapshot = load_files([str(folder / "cluster")])
    runs = run_checks(load_checks(plugins=False).values(), snapshot)
    return [
        Finding(run.check.id, ObjectKey.of(f.result.ref), f.severity, f.result.message)
        for run in runs
        for f in run.findings
    ]


def judge(scenario: Scenario, findings: Sequence[Finding]) -> Outcome:
    outcome = Outcome(scenario, list(findings))
    for expected in scenario.must_find:
        if any(expected.matched_by(f) for f in findings):
            outcome.hits.append(expected)
        else:
            outcome.misses.append(expected)
    for found in findings:
        if any(e.matched_by(found) for e in scenario.must_find):
            outcome.true_positives.append(found)
        elif found.severity.rank < LOUD.rank:
            continue
        elif scenario.clean or found.object in scenario.must_not_flag:
            outcome.false_positives.append(found)
        else:
            outcome.unjudged.append(found)
    return outcome


def evaluate(folders: Iterable[Path]) -> list[Outcome]:
    outcomes = []
    for folder in folders:
        scenario = Scenario.load(folder)
        try:
            outcomes.append(judge(scenario, scan(folder)))
        except InputError as exc:
            outcomes.append(Outcome(scenario, error="; ".join(exc.problems)))
    return outcomes


def scenario_folders(root: Path = SCENARIOS) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/expected.yaml"))


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 1.0


def figures(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    hits = sum(len(o.hits) for o in outcomes)
    expected = hits + sum(len(o.misses) for o in outcomes)
    tp = sum(len(o.true_positives) for o in outcomes)
    fp = sum(len(o.false_positives) for o in outcomes)
    unjudged = sum(len(o.unjudged) for o in outcomes)
    return {
        "scenarios": len(outcomes),
        "platforms": sum(1 for o in outcomes if o.scenario.clean),
        "expected_problems": expected,
        "recall": _ratio(hits, expected),
        "precision": _ratio(tp, tp + fp),
        "strict_precision": _ratio(tp, tp + fp + unjudged),
        "false_positives": fp,
        "unjudged_loud_findings": unjudged,
        "input_errors": sum(1 for o in outcomes if o.error),
    }


def per_check(outcomes: Sequence[Outcome]) -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = {}
    for o in outcomes:
        for e in o.hits:
            table.setdefault(e.checks[0], Counter())["hits"] += 1
        for e in o.misses:
            table.setdefault(e.checks[0], Counter())["misses"] += 1
        for f in o.false_positives:
            table.setdefault(f.check, Counter())["false_positives"] += 1
        for f in o.unjudged:
            table.setdefault(f.check, Counter())["unjudged"] += 1
    return dict(sorted(table.items()))


def report(outcomes: Sequence[Outcome]) -> str:
    lines = []
    summary = figures(outcomes)
    lines.append(
        f"{summary['scenarios']} scenarios ({summary['platforms']} clean platforms), "
        f"{summary['expected_problems']} expected problems"
    )
    lines.append(
        f"recall {summary['recall']:.3f}  precision {summary['precision']:.3f}  "
        f"strict precision {summary['strict_precision']:.3f}  "
        f"false positives {summary['false_positives']}  "
        f"unjudged medium+ {summary['unjudged_loud_findings']}"
    )
    lines.append("")
    lines.append(f"{'check':<16} {'hits':>5} {'misses':>6} {'false+':>6} {'unjudged':>8}")
    for check_id, counts in per_check(outcomes).items():
        lines.append(
            f"{check_id:<16} {counts['hits']:>5} {counts['misses']:>6} "
            f"{counts['false_positives']:>6} {counts['unjudged']:>8}"
        )
    for o in outcomes:
        slug = o.scenario.slug
        if o.error:
            lines.append(f"\nINPUT ERROR {slug}: {o.error}")
        lines.extend(
            f"\nMISS {slug}: {'/'.join(e.checks)} on {e.object} "
            f"(>= {e.min_severity.value}): {e.problem}"
            for e in o.misses
        )
        lines.extend(f"\nFALSE POSITIVE {slug}: {f}" for f in o.false_positives)
        lines.extend(f"\nUNJUDGED {slug}: {f}" for f in o.unjudged)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenarios", nargs="*", help="scenario folders (default: all)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--record", action="store_true", help=f"write the figures to {FIGURES.name}"
    )
    args = parser.parse_args(argv)
    folders = [Path(s) for s in args.scenarios] or scenario_folders()
    outcomes = evaluate(folders)
    summary = figures(outcomes)
    if args.json:
        print(json.dumps({"figures": summary, "per_check": per_check(outcomes)}, indent=2))
    else:
        sys.stdout.write(report(outcomes))
    if args.record:
        FIGURES.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
