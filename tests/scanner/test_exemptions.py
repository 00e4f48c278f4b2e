"""Exemptions: annotations and the exemptions file, what they exempt, and what they report."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from gpu_audit.engine import CheckRun, run_checks
from gpu_audit.errors import InputError
from gpu_audit.model import CheckStatus, ObjRef
from gpu_audit.postscan.exemptions import (
    ObjectMatch,
    apply_exemptions,
    evaluation_date,
    load_exemptions,
)
from gpu_audit.registry import load_checks
from gpu_audit.report import Document, build_report
from gpu_audit.scoring import namespace_scores
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import load_files

REGISTRY = load_checks(plugins=False)
TODAY = dt.date(2025, 6, 1)


def job(name: str, namespace: str = "ml", gpus: str = "0.5", **metadata: Any) -> str:
    """A Job whose fractional GPU limit GPU-WL-001 fails."""
    meta = {"name": name, "namespace": namespace, **metadata}
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {meta!r}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: train
          image: nvcr.io/nvidia/pytorch:24.08-py3
          resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def scan(
    tmp_path: Path, *manifests: str, rules: str | None = None, today: dt.date = TODAY
) -> tuple[tuple[CheckRun, ...], Document]:
    snapshot = load_files([write(tmp_path, "in.yaml", "---".join(manifests))], None)
    checks = [REGISTRY["GPU-WL-001"]]
    loaded = load_exemptions(write(tmp_path, "ex.yaml", rules), REGISTRY) if rules else None
    runs, section = apply_exemptions(
        run_checks(checks, snapshot), snapshot, REGISTRY, loaded, today
    )
    return runs, build_report(snapshot, runs, exemptions=section)


def exempted_names(document: Document) -> list[str]:
    return [f["resource"]["name"] for f in document["exempted_findings"]]


def counted_names(document: Document) -> list[str]:
    return [f["resource"]["name"] for f in document["findings"]]


ANNOTATED: dict[str, Any] = {
    "annotations": {
        "gpu-audit.io/exempt": "GPU-WL-001, GPU-WL-003",
        "gpu-audit.io/exempt-reason": "MPS-shared research job, see TICKET-7",
    }
}


def test_an_annotated_object_is_exempted_and_stays_visible(tmp_path: Path) -> None:
    _, document = scan(tmp_path, job("a", **ANNOTATED), job("b"))
    assert counted_names(document) == ["b"]
    assert exempted_names(document) == ["a"]
    exemption = document["exempted_findings"][0]["exemption"]
    assert exemption == {
        "source": "annotation",
        "reason": "MPS-shared research job, see TICKET-7",
        "file": None,
        "entry": None,
        "expires": None,
    }
    assert document["summary"]["findings"] == 1
    assert document["summary"]["exempted"] == 1
    assert document["summary"]["results"]["failed"] == 1
    assert document["checks"][0]["results"] == {"passed": 0, "failed": 1, "exempted": 1}
    [annotation] = document["exemptions"]["annotations"]
    assert annotation["status"] == "used"
    assert annotation["checks"] == ["GPU-WL-001", "GPU-WL-003"]
    # GPU-WL-003 was not run, so that part of the annotation is unused, and said so.
    assert annotation["unused_checks"] == ["GPU-WL-003"]
    assert document["exemptions"]["warnings"] == [
        "Job ml/a: gpu-audit.io/exempt exempts GPU-WL-003 but there is no such finding"
    ]


def test_a_check_whose_failures_are_all_exempted_passes_and_scores(tmp_path: Path) -> None:
    runs, document = scan(tmp_path, job("a", **ANNOTATED))
    assert runs[0].status is CheckStatus.PASSED
    assert document["score"]["overall"] == 100.0
    assert document["findings"] == []
    assert namespace_scores(runs)["ml"].checks_failed == 0


def test_without_exemptions_the_same_input_fails(tmp_path: Path) -> None:
    runs, document = scan(tmp_path, job("a"))
    assert runs[0].status is CheckStatus.FAILED
    assert document["score"]["overall"] == 0.0
    assert document["exempted_findings"] == []


def test_an_annotation_without_reason_exempts_nothing_and_is_reported(tmp_path: Path) -> None:
    no_reason: dict[str, Any] = {"annotations": {"gpu-audit.io/exempt": "GPU-WL-001"}}
    _, document = scan(tmp_path, job("a", **no_reason))
    assert counted_names(document) == ["a"]
    [annotation] = document["exemptions"]["annotations"]
    assert annotation["status"] == "invalid"
    assert document["exemptions"]["warnings"] == [
        "Job ml/a: gpu-audit.io/exempt has no gpu-audit.io/exempt-reason: nothing is exempted"
    ]


def test_an_annotation_names_unknown_ids_and_patterns(tmp_path: Path) -> None:
    odd: dict[str, Any] = {
        "annotations": {
            "gpu-audit.io/exempt": "GPU-WL-001,GPU-NOPE-999,GPU-WL-*",
            "gpu-audit.io/exempt-reason": "accepted",
        }
    }
    _, document = scan(tmp_path, job("a", **odd))
    assert exempted_names(document) == ["a"]  # the known id still applies
    problems = document["exemptions"]["annotations"][0]["problems"]
    assert "gpu-audit.io/exempt lists unknown check id 'GPU-NOPE-999'" in problems
    assert any("takes exact check ids, not 'GPU-WL-*'" in p for p in problems)


def test_an_annotation_on_an_owned_pod_points_at_its_owner(tmp_path: Path) -> None:
    pod = """
apiVersion: v1
kind: Pod
metadata:
  name: a-x1
  namespace: ml
  annotations: {gpu-audit.io/exempt: GPU-WL-001, gpu-audit.io/exempt-reason: accepted}
  ownerReferences: [{apiVersion: batch/v1, kind: Job, name: a, uid: u1, controller: true}]
spec:
  containers:
    - name: train
      image: nvcr.io/nvidia/pytorch:24.08-py3
      resources: {limits: {nvidia.com/gpu: "0.5"}}
"""
    _, document = scan(tmp_path, job("a"), pod)
    assert counted_names(document) == ["a"]  # reported on the Job, which is not annotated
    [warning] = document["exemptions"]["warnings"]
    assert warning.startswith("Pod ml/a-x1: gpu-audit.io/exempt exempts GPU-WL-001")
    assert "annotate that one" in warning


RULES = """
exemptions:
  - checks: GPU-WL-001
    match: {kind: Job, namespace: ml, name: "train-*"}
    reason: fractional limits are rewritten by our admission webhook
    expires: 2025-06-01
  - checks: [GPU-WL-001]
    match:
      labels:
        matchLabels: {team: research}
        matchExpressions: [{key: tier, operator: NotIn, values: [prod]}]
    reason: research sandbox
  - checks: ["GPU-WL-*"]
    match: {namespace: nowhere}
    reason: stale entry
"""


def test_file_entries_match_by_kind_namespace_name_and_labels(tmp_path: Path) -> None:
    _, document = scan(
        tmp_path,
        job("train-1"),
        job("train-2", namespace="other"),  # wrong namespace for entry 1
        job("lab", labels={"team": "research"}),
        job("lab-prod", labels={"team": "research", "tier": "prod"}),
        rules=RULES,
    )
    assert exempted_names(document) == ["lab", "train-1"]
    assert sorted(counted_names(document)) == ["lab-prod", "train-2"]
    by_name = {f["resource"]["name"]: f["exemption"] for f in document["exempted_findings"]}
    assert by_name["train-1"]["entry"] == 1
    assert by_name["train-1"]["expires"] == "2025-06-01"
    assert by_name["lab"]["reason"] == "research sandbox"
    entries = document["exemptions"]["entries"]
    assert [(e["status"], e["findings"]) for e in entries] == [
        ("used", 1),
        ("used", 1),
        ("unused", 0),
    ]
    assert document["exemptions"]["date"] == "2025-06-01"
    assert document["exemptions"]["warnings"] == [f"{tmp_path}/ex.yaml: entry 3 matches no finding"]


def test_an_entry_is_valid_through_its_expiry_day_then_reported(tmp_path: Path) -> None:
    _, on_the_day = scan(tmp_path, job("train-1"), rules=RULES, today=dt.date(2025, 6, 1))
    assert exempted_names(on_the_day) == ["train-1"]
    _, after = scan(tmp_path, job("train-1"), rules=RULES, today=dt.date(2025, 6, 2))
    assert counted_names(after) == ["train-1"]
    assert after["exemptions"]["entries"][0]["status"] == "expired"
    assert after["exemptions"]["date"] == "2025-06-02"
    assert (
        f"{tmp_path}/ex.yaml: entry 1 expired on 2025-06-01; its 1 finding(s) count again"
        in after["exemptions"]["warnings"]
    )


def test_without_expiry_dates_the_report_does_not_depend_on_the_day(tmp_path: Path) -> None:
    rules = "exemptions:\n- {checks: GPU-WL-001, match: {name: a}, reason: accepted}\n"
    _, first = scan(tmp_path, job("a"), rules=rules, today=dt.date(2025, 1, 1))
    _, second = scan(tmp_path, job("a"), rules=rules, today=dt.date(2031, 1, 1))
    assert first == second
    assert first["exemptions"]["date"] is None


def test_object_matches_and_cluster_scoped_objects() -> None:
    anywhere = ObjectMatch(namespace="*")
    assert anywhere.matches(ObjRef("Job", "ml", "a"), {})
    assert not anywhere.matches(ObjRef("Node", "", "gpu-1"), {})
    by_type = ObjectMatch(kind="ServiceMonitor.monitoring.coreos.com", name="dcgm-*")
    assert by_type.matches(ObjRef("ServiceMonitor.monitoring.coreos.com", "m", "dcgm-x"), {})
    assert ObjectMatch(kind="ServiceMonitor").matches(
        ObjRef("ServiceMonitor.monitoring.coreos.com", "m", "dcgm-x"), {}
    )
    assert not by_type.matches(ObjRef("ServiceMonitor.monitoring.coreos.com", "m", "other"), {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("exemptions: [{checks: GPU-WL-001}]", "entry 1: field 'reason': required"),
        ("exemptions: [{reason: r}]", "entry 1: field 'checks': required"),
        (
            "exemptions: [{checks: GPU-NOPE-001, reason: r}]",
            "entry 1: field 'checks': unknown check id 'GPU-NOPE-001'",
        ),
        (
            "exemptions: [{checks: GPU-WL-001, reason: r, expires: 2025-13-01}]",
            "entry 1: field 'expires': '2025-13-01' is not a date (YYYY-MM-DD)",
        ),
        (
            "exemptions: [{checks: GPU-WL-001, reason: r, until: 2025-01-01}]",
            "entry 1: unknown field 'until'",
        ),
        (
            "exemptions: [{checks: GPU-WL-001, reason: r, match: {kind: Job, ns: ml}}]",
            "entry 1: field 'match': unknown field 'ns'",
        ),
        (
            "exemptions: [{checks: GPU-WL-001, reason: r, match: {labels: "
            "{matchExpressions: [{key: a, operator: Gt, values: ['1']}]}}}]",
            "entry 1: field 'match.labels'.matchExpressions[1]: operator 'Gt' is not one of",
        ),
        (
            "exemptions: [{checks: 'GPU-WL-*', reason: r}]",
            "entry 1: field 'match': required when 'checks' has patterns",
        ),
        ("exemptions: [ok, {checks: GPU-WL-001, reason: r}]", "entry 1: expected a mapping"),
        ("- GPU-WL-001", "expected a mapping with an 'exemptions' list"),
        ("exemptions: [\n  {checks: [}", "invalid YAML at line"),
    ],
)
def test_invalid_files_name_the_file_entry_and_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(InputError) as error:
        load_exemptions(path, REGISTRY)
    assert any(p.startswith(f"{path}: ") and expected in p for p in error.value.problems), (
        error.value.problems
    )


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.yaml: cannot read"):
        load_exemptions(str(tmp_path / "missing.yaml"), REGISTRY)


def test_the_evaluation_date_is_injected() -> None:
    assert evaluation_date(dt.date(2024, 2, 29), "2025-12-02T00:00:00Z") == dt.date(2024, 2, 29)
    assert evaluation_date(None, "2025-12-02T00:00:00Z") == dt.date(2025, 12, 2)
    assert evaluation_date(None, None) == dt.datetime.now(dt.UTC).date()


def test_snapshot_without_annotations_or_file_gives_an_empty_section() -> None:
    runs, section = apply_exemptions((), Snapshot([]), REGISTRY, None, TODAY)
    assert runs == ()
    assert section == {"date": None, "file": None, "entries": [], "annotations": [], "warnings": []}
