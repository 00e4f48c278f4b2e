"""Every check against its own pass and fail fixtures (fixtures/checks/<CHECK-ID>/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_audit.engine import run_check
from gpu_audit.model import CheckStatus, Outcome
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checks"
CHECKS = load_checks(plugins=False)
CASES = sorted(FIXTURES.glob("*/*.yaml"))


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
    elif case.name.startswith("fail-"):
        assert Outcome.FAIL in outcomes, [r.message for r in run.results]
        for finding in run.findings:
            assert_is_yaml_or_command(finding.remediation)
    else:
        pytest.fail(f"fixture names start with pass- or fail-: {case.name}")


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_every_check_has_pass_and_fail_fixtures(check_id: str) -> None:
    names = [p.name for p in (FIXTURES / check_id).glob("*.yaml")]
    assert any(n.startswith("pass-") for n in names), f"{check_id} has no pass- fixture"
    assert any(n.startswith("fail-") for n in names), f"{check_id} has no fail- fixture"


def test_no_orphan_fixture_folders() -> None:
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders <= set(CHECKS), sorted(folders - set(CHECKS))
