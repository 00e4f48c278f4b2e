"""Every check against its own pass and fail fixtures (fixtures/checks/<CHECK-ID>/).

Each folder holds pass-*.yaml and fail-*.yaml fixtures and an expected.yaml that maps every
fail fixture to the exact findings it must produce: for each, the object (bare kind,
namespace, name) and the severity. An object with several findings is listed once per finding.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.engine import CheckRun, run_check
from gpu_audit.model import CheckStatus, Outcome, Severity
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checks"
CHECKS = load_checks(plugins=False)
FIXTURE_PREFIXES = ("pass-", "fail-")
EXPECTED = "expected.yaml"
CASES = sorted(p for p in FIXTURES.glob("*/*.yaml") if p.name.startswith(FIXTURE_PREFIXES))

# A finding as compared: (kind, namespace, name, severity); namespace "" when cluster-scoped.
Key = tuple[str, str, str, str]
ENTRY_KEYS = {"kind", "namespace", "name", "severity"}
SEVERITIES = {s.value for s in Severity}


COMMANDS = ("kubectl ", "helm ")


def assert_is_yaml_or_command(text: str) -> None:
    """A rendered remediation is a paste-able YAML snippet or a shell command."""
    code = [
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    assert code, f"remediation has nothing to paste:\n{text}"
    if code[0].lstrip().startswith(COMMANDS):
        return
    try:
        list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        pytest.fail(f"remediation is not valid YAML ({exc}):\n{text}")


def _entry(where: str, entry: Any) -> Key:
    """One expected finding, checked for shape: kind, name and a known severity are required."""
    assert isinstance(entry, dict), f"{where}: not a mapping: {entry!r}"
    unknown = set(entry) - ENTRY_KEYS
    assert not unknown, f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(ENTRY_KEYS)})"
    values = {k: "" if entry.get(k) is None else entry[k] for k in ENTRY_KEYS}
    for key in ENTRY_KEYS:
        assert isinstance(values[key], str), f"{where}: {key} is not a string: {values[key]!r}"
    for key in ("kind", "name", "severity"):
        assert values[key], f"{where}: {key} is missing"
    assert values["severity"] in SEVERITIES, (
        f"{where}: unknown severity {values['severity']!r} (one of {sorted(SEVERITIES)})"
    )
    return (values["kind"], values["namespace"], values["name"], values["severity"])


@cache
def expected_findings(check_id: str) -> dict[str, tuple[Key, ...]]:
    """fixtures/checks/<check_id>/expected.yaml: fail fixture name -> its expected findings."""
    path = FIXTURES / check_id / EXPECTED
    assert path.is_file(), f"{check_id} has no {EXPECTED}"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path}: expected a mapping of fail fixture -> findings"
    out: dict[str, tuple[Key, ...]] = {}
    for fixture, entries in data.items():
        where = f"{check_id}/{EXPECTED} {fixture}"
        assert isinstance(entries, list) and entries, f"{where}: expected a non-empty list"
        out[str(fixture)] = tuple(_entry(f"{where}[{i}]", e) for i, e in enumerate(entries))
    return out


def produced_findings(run: CheckRun) -> list[Key]:
    return [
        (f.result.ref.kind_name, f.result.ref.namespace, f.result.ref.name, f.severity.value)
        for f in run.findings
    ]


def _show(finding: Key) -> str:
    kind, namespace, name, severity = finding
    return f"{kind} {namespace}/{name} {severity}" if namespace else f"{kind} {name} {severity}"


def findings_mismatch(case: Path, run: CheckRun, expected: tuple[Key, ...]) -> str:
    """What differs between the run's findings and the expected ones, for the assertion."""
    want, got = Counter(expected), Counter(produced_findings(run))
    lines = [f"{case.parent.name}/{case.name}: findings differ from {EXPECTED}"]
    for title, extra in (
        ("expected but not produced", want - got),
        ("produced but not expected", got - want),
    ):
        if extra:
            lines.append(f"  {title}:")
            lines.extend(f"    - {_show(f)}" for f in sorted(extra.elements()))
    lines.append("  produced:")
    lines.extend(
        f"    - {_show(p)}  at {f.result.path or '-'}: {f.result.message}"
        for p, f in sorted(
            zip(produced_findings(run), run.findings, strict=True), key=lambda pair: pair[0]
        )
    )
    return "\n".join(lines)


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture(case: Path) -> None:
    check = CHECKS[case.parent.name]
    run = run_check(check, load_files([str(case)]))
    assert run.status is not CheckStatus.ERROR, run.error_detail
    outcomes = [r.outcome for r in run.results]
    if case.name.startswith("pass-"):
        # At least one object evaluated, and all of them fine: no vacuous pass.
        assert outcomes, f"{case.name} evaluated nothing: {run.reason}"
        assert set(outcomes) == {Outcome.PASS}, [r.message for r in run.results]
    else:
        assert Outcome.FAIL in outcomes, [r.message for r in run.results]
        for finding in run.findings:
            assert_is_yaml_or_command(finding.remediation)
        expected = expected_findings(case.parent.name).get(case.name)
        assert expected is not None, f"{case.name} has no entry in {case.parent.name}/{EXPECTED}"
        assert Counter(produced_findings(run)) == Counter(expected), findings_mismatch(
            case, run, expected
        )


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_expected_names_exactly_the_fail_fixtures(check_id: str) -> None:
    fail_fixtures = {p.name for p in (FIXTURES / check_id).glob("fail-*.yaml")}
    listed = set(expected_findings(check_id))
    assert not fail_fixtures - listed, (
        f"fail fixtures without an entry in {check_id}/{EXPECTED}: {sorted(fail_fixtures - listed)}"
    )
    assert not listed - fail_fixtures, (
        f"{check_id}/{EXPECTED} names fail fixtures that do not exist: "
        f"{sorted(listed - fail_fixtures)}"
    )


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_every_check_has_pass_and_fail_fixtures(check_id: str) -> None:
    names = [p.name for p in (FIXTURES / check_id).glob("*.yaml")]
    assert any(n.startswith("pass-") for n in names), f"{check_id} has no pass- fixture"
    assert any(n.startswith("fail-") for n in names), f"{check_id} has no fail- fixture"


def test_fixture_folders_hold_only_fixtures_and_expectations() -> None:
    """Anything else would be silently skipped by the fixture glob."""
    strays = sorted(
        f"{p.parent.name}/{p.name}"
        for p in FIXTURES.glob("*/*")
        if not (p.suffix == ".yaml" and p.name.startswith(FIXTURE_PREFIXES)) and p.name != EXPECTED
    )
    assert not strays, f"fixture names start with pass- or fail- and end in .yaml: {strays}"


def test_no_orphan_fixture_folders() -> None:
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders <= set(CHECKS), sorted(folders - set(CHECKS))
