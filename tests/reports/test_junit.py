"""JUnit XML output: well-formed, a testsuite per category, counts that add up."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.reports.base import related_lines
from gpu_audit.reports.junit import render_junit

EXEMPTED_POD = Path(__file__).resolve().parents[2] / "fixtures" / "reports" / "exempted-pod.yaml"
COUNTS = ("tests", "failures", "errors", "skipped")
# junit-10.xsd (tests/data) allows no `skipped` on testsuites; each testsuite has it.
ROOT_COUNTS = ("tests", "failures", "errors")
JUNIT_XSD = Path(__file__).resolve().parents[1] / "data" / "junit-10.xsd"


def scan(runner: CliRunner, source: Path, out: Path) -> tuple[dict[str, Any], ET.Element]:
    args = ["scan", "--from-file", str(source), "-o", "json", "-o", "junit"]
    result = runner.invoke(main, [*args, "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return document, ET.parse(out / "report.junit.xml").getroot()


@pytest.fixture
def sample(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> tuple[dict[str, Any], ET.Element]:
    return scan(runner, sample_cluster, tmp_path)


def counts(element: ET.Element, names: tuple[str, ...] = COUNTS) -> dict[str, int]:
    return {name: int(element.attrib[name]) for name in names}


def tally(cases: list[ET.Element]) -> dict[str, int]:
    return {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "errors": sum(1 for c in cases if c.find("error") is not None),
        "skipped": sum(1 for c in cases if c.find("skipped") is not None),
    }


def assert_counts_add_up(root: ET.Element) -> None:
    assert root.tag == "testsuites"
    for suite in root.findall("testsuite"):
        assert counts(suite) == tally(suite.findall("testcase"))
    whole = tally(root.findall("testsuite/testcase"))
    assert counts(root, ROOT_COUNTS) == {name: whole[name] for name in ROOT_COUNTS}
    assert "skipped" not in root.attrib


def test_suites_cases_and_counts(sample: tuple[dict[str, Any], ET.Element]) -> None:
    document, root = sample
    assert_counts_add_up(root)
    categories = list(dict.fromkeys(c["category"] for c in document["checks"]))
    assert [s.get("name") for s in root.findall("testsuite")] == [
        f"gpu-audit.{c}" for c in categories
    ]
    totals = tally(root.findall("testsuite/testcase"))
    assert totals["failures"] == document["summary"]["findings"] > 0
    assert totals["errors"] == document["summary"]["checks"]["error"] == 0
    assert totals["skipped"] == document["summary"]["checks"]["not_evaluated"]
    passed = document["summary"]["checks"]["passed"]
    assert totals["tests"] == totals["failures"] + totals["skipped"] + passed


def test_failures_name_the_object_and_carry_the_remediation(
    sample: tuple[dict[str, Any], ET.Element],
) -> None:
    document, root = sample
    actual = []
    for case in root.iter("testcase"):
        failure = case.find("failure")
        if failure is not None:
            text = failure.text or ""
            head, _, remediation = text.partition("\n\nRemediation:\n")
            # The message, then (schema 1.2) a block of one line per role of related objects.
            message, _, related = head.partition("\n\n")
            assert message == failure.get("message")
            actual.append(
                (
                    case.get("classname"),
                    case.get("name"),
                    message,
                    related.splitlines(),
                    failure.get("type"),
                    remediation,
                )
            )
    expected = []
    for finding in document["findings"]:
        res = finding["resource"]
        where = f"{res['namespace']}/{res['name']}" if res["namespace"] else res["name"]
        name = f"{res['kind']} {where}" + (f" at {finding['path']}" if finding["path"] else "")
        expected.append(
            (
                finding["check_id"],
                name,
                finding["message"],
                related_lines(finding),
                finding["severity"],
                finding["remediation"] + "\n",
            )
        )
    assert sorted(actual) == sorted(expected)


def test_checks_not_evaluated_are_skipped_with_their_reason(
    sample: tuple[dict[str, Any], ET.Element],
) -> None:
    document, root = sample
    skipped = {
        c.get("classname"): c.find("skipped")
        for c in root.iter("testcase")
        if c.find("skipped") is not None
    }
    blocked = {c["id"]: c["reason"] for c in document["checks"] if c["status"] == "not_evaluated"}
    assert {cid: s.get("message") for cid, s in skipped.items() if s is not None} == blocked


def test_exempted_findings_are_skipped(runner: CliRunner, tmp_path: Path) -> None:
    manifest = EXEMPTED_POD
    document, root = scan(runner, manifest, tmp_path / "out")
    assert_counts_add_up(root)
    (exempted,) = document["exempted_findings"]
    cases = [c for c in root.iter("testcase") if c.get("classname") == exempted["check_id"]]
    skips = [c.find("skipped") for c in cases]
    messages = [s.get("message") for s in skips if s is not None]
    assert messages == ["exempted: MIG migration tracked in OPS-12"]
    assert all(c.find("failure") is None for c in cases)


def test_a_check_that_raised_is_an_error(sample: tuple[dict[str, Any], ET.Element]) -> None:
    document = copy.deepcopy(sample[0])
    check = next(c for c in document["checks"] if c["status"] == "passed")
    check["status"], check["reason"] = "error", "raised KeyError: 'spec'"
    root = ET.fromstring(render_junit(document))
    assert_counts_add_up(root)
    (case,) = [c for c in root.iter("testcase") if c.get("classname") == check["id"]]
    error = case.find("error")
    assert error is not None and error.get("message") == "raised KeyError: 'spec'"
    assert counts(root, ROOT_COUNTS)["errors"] == 1
    assert_valid_junit(render_junit(document))


def assert_valid_junit(text: str) -> None:
    """Valid against the Jenkins xUnit plugin's junit-10.xsd (the schema pytest checks its
    own JUnit XML against), every error listed."""
    schema = xmlschema.XMLSchema(str(JUNIT_XSD))
    errors = [f"{e.path}: {e.reason}" for e in schema.iter_errors(text)]
    assert errors == []


def test_the_junit_file_is_valid_against_junit_10_xsd(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    # The sample (failures, passes, not evaluated checks) and a report with an exempted
    # finding (skipped testcases).
    for source in (sample_cluster, EXEMPTED_POD):
        out = tmp_path / source.stem
        scan(runner, source, out)
        text = (out / "report.junit.xml").read_text(encoding="utf-8")
        assert_valid_junit(text)
        assert "<skipped" in text and "<failure" in text


def test_text_xml_cannot_hold_is_escaped_not_dropped(
    sample: tuple[dict[str, Any], ET.Element],
) -> None:
    document = copy.deepcopy(sample[0])
    document["findings"][0]["message"] = 'limit "\x01" <b>&amp;</b>'
    root = ET.fromstring(render_junit(document))  # parses: the output is well-formed
    messages = [f.get("message") for f in root.iter("failure")]
    assert 'limit "\\x01" <b>&amp;</b>' in messages


def test_hostile_names_stay_well_formed(runner: CliRunner, repo_root: Path, tmp_path: Path) -> None:
    document, root = scan(runner, repo_root / "fixtures" / "clusters" / "hostile", tmp_path)
    assert_counts_add_up(root)
    names = {c.get("name") for c in root.iter("testcase")}
    pod = next(f for f in document["findings"] if "<script>" in f["message"])
    res = pod["resource"]
    assert f"{res['kind']} {res['namespace']}/{res['name']} at {pod['path']}" in names


def test_render_reproduces_the_scan_output(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    scan(runner, sample_cluster, tmp_path)
    again = tmp_path / "again"
    result = runner.invoke(
        main, ["render", str(tmp_path / "report.json"), "-o", "junit", "--output-dir", str(again)]
    )
    assert result.exit_code == 0, result.output
    assert (again / "report.junit.xml").read_bytes() == (tmp_path / "report.junit.xml").read_bytes()
