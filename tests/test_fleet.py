"""The fleet view (issue 19, item 6): several clusters' reports as one document, worst cluster
first, from saved reports (`gpu-audit fleet`) or from a scan of several contexts; the fleet's
Prometheus exposition labels every sample with its cluster. The live scan of two contexts is
tests/live/test_fleet_scan.py."""

from __future__ import annotations

import copy
import json
import re
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from referencing import Registry, Resource

from gpu_audit.cli import main
from gpu_audit.fleet import (
    FLEET_SCHEMA_FILE,
    Member,
    build_fleet,
    load_members,
    scan_fleet,
)
from gpu_audit.report import SCHEMA_FILE, dumps
from gpu_audit.reports.fleet import render_fleet_html, render_fleet_table
from gpu_audit.reports.prometheus import render_fleet_prometheus, render_prometheus
from gpu_audit.scan import Inputs, LiveError, ScanOptions, ScanResult

ROOT = Path(__file__).resolve().parents[1]
QUOTA_FIXTURE = (
    ROOT / "fixtures" / "checks" / "GPU-QUOTA-001" / "fail-bare-key-single-namespace.yaml"
)
PRICES = ROOT / "docs" / "gpu-prices.example.yaml"
FORBIDDEN_GAP = {"type": "ConfigMap", "reason": "forbidden: list configmaps"}
REPORT_SCHEMA = json.loads(SCHEMA_FILE.read_text())
FLEET_SCHEMA = json.loads(FLEET_SCHEMA_FILE.read_text())


def validate(fleet: dict[str, Any]) -> None:
    registry: Registry[Any] = Registry().with_resource(
        REPORT_SCHEMA["$id"], Resource.from_contents(REPORT_SCHEMA)
    )
    jsonschema.Draft202012Validator(FLEET_SCHEMA, registry=registry).validate(fleet)


def saved(runner: CliRunner, source: Path, out: Path, *extra: str) -> dict[str, Any]:
    args = ["scan", "--from-file", str(source), "-o", "json", "--output-file", str(out), "-q"]
    result = runner.invoke(main, [*args, *extra])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return document


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, sample_cluster: Path) -> dict[str, Path]:
    """Two saved reports of clusters that differ: the sample cluster and a one-namespace
    quota fixture (with prices, so that its findings have costs), and an incomplete copy of
    the sample: a forbidden list and a check that raised."""
    out = tmp_path_factory.mktemp("fleet")
    runner = CliRunner()
    saved(runner, sample_cluster, out / "lab.json", "--cluster-name", "lab-a100")
    saved(runner, QUOTA_FIXTURE, out / "research.json", "--cluster-name", "research")
    priced = saved(
        runner, sample_cluster, out / "priced.json", "--cluster-name", "priced", "--gpu-prices",
        str(PRICES),
    )  # fmt: skip
    partial = copy.deepcopy(priced)
    partial["cluster"] = "restricted"
    partial["complete"] = False
    partial["source"]["gaps"] = [
        FORBIDDEN_GAP,
        {
            "type": "Workload.kueue.x-k8s.io",
            "reason": "CRD not installed: workloads.kueue.x-k8s.io",
        },
    ]
    (out / "restricted.json").write_text(json.dumps(partial), encoding="utf-8")
    return {p.stem: p for p in out.glob("*.json")}


@pytest.fixture(scope="module")
def sample_cluster() -> Path:
    return ROOT / "fixtures" / "clusters" / "sample"


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def member(report: dict[str, Any], name: str, **changes: Any) -> Member:
    document = copy.deepcopy(report)
    for key, value in changes.items():
        document["score"][key] = value
    document["cluster"] = name
    return Member(name, document)


# --------------------------------------------------------------------------- the document


def test_each_cluster_entry_is_taken_from_its_report(reports: dict[str, Path]) -> None:
    lab, restricted = load(reports["lab"]), load(reports["restricted"])
    fleet = build_fleet([Member("lab-a100", lab), Member("restricted", restricted)])
    validate(fleet)
    entries = {c["name"]: c for c in fleet["clusters"]}
    assert entries["lab-a100"]["status"] == "complete"
    assert entries["lab-a100"]["by_severity"] == lab["summary"]["by_severity"]
    assert entries["lab-a100"]["findings"] == len(lab["findings"]) > 0
    assert entries["lab-a100"]["score"] == lab["score"]["overall"]
    assert entries["lab-a100"]["report"] == lab
    # Incomplete: the forbidden list is named; a CRD the cluster lacks is no gap.
    assert entries["restricted"]["status"] == "incomplete"
    assert entries["restricted"]["gaps"] == [FORBIDDEN_GAP]
    assert entries["restricted"]["missing_permissions"] == ["forbidden: list configmaps"]
    # The summary adds the clusters up.
    summary = fleet["summary"]
    assert (summary["clusters"], summary["complete"], summary["incomplete"]) == (2, 1, 1)
    assert summary["by_severity"] == {
        severity: lab["summary"]["by_severity"][severity] + count
        for severity, count in restricted["summary"]["by_severity"].items()
    }
    assert summary["findings"] == len(lab["findings"]) + len(restricted["findings"])


def test_gpu_impact_is_the_sum_of_the_findings_and_priced_only_when_all_are(
    reports: dict[str, Path],
) -> None:
    lab, restricted = load(reports["lab"]), load(reports["restricted"])
    fleet = build_fleet([Member("lab", lab), Member("restricted", restricted)])
    entries = {c["name"]: c for c in fleet["clusters"]}
    gpus = sum(Decimal(str(f["impact"]["gpus"])) for f in lab["findings"])
    assert Decimal(str(entries["lab"]["impact"]["gpus"])) == gpus > 0
    # Unpriced: no cost, for the cluster and the fleet.
    assert entries["lab"]["impact"]["cost_per_day"] is None
    assert fleet["summary"]["impact"]["cost_per_day"] is None
    # Priced (--gpu-prices): each finding's cost_per_day summed, when none is missing.
    costs = [f["impact"]["cost_per_day"] for f in restricted["findings"]]
    hours = [f["impact"]["gpu_hours_per_day"] for f in restricted["findings"]]
    expected = sum(Decimal(str(c)) for c in costs if c is not None)
    if all(c is not None for c, h in zip(costs, hours, strict=True) if h):
        assert Decimal(str(entries["restricted"]["impact"]["cost_per_day"])) == expected > 0
    else:
        assert entries["restricted"]["impact"]["cost_per_day"] is None
    both = sum(Decimal(str(c["impact"]["gpus"])) for c in fleet["clusters"])
    assert Decimal(str(fleet["summary"]["impact"]["gpus"])) == both


def test_worst_cluster_first_ties_broken_by_name(reports: dict[str, Path]) -> None:
    lab = load(reports["lab"])
    members = [
        member(lab, "b-good", overall=90.0),
        member(lab, "a-good", overall=90.0),
        member(lab, "poor", overall=40.0),
        member(lab, "unscored", overall=None, grade=None),
        Member("down", error="cannot reach the cluster at https://10.0.0.1:6443"),
    ]
    for order in (members, list(reversed(members))):
        names = [c["name"] for c in build_fleet(order)["clusters"]]
        assert names == ["down", "unscored", "poor", "a-good", "b-good"]
    # Same score: the worse severity first, then more GPUs, then incomplete first.
    quiet = member(lab, "z-quiet", overall=90.0)
    assert quiet.report is not None
    quiet.report["summary"]["by_severity"] = {**lab["summary"]["by_severity"], "high": 0}
    critical = member(lab, "z-critical", overall=90.0)
    assert critical.report is not None
    critical.report["summary"]["by_severity"] = {**lab["summary"]["by_severity"], "critical": 1}
    partial = member(lab, "z-partial", overall=90.0)
    assert partial.report is not None
    partial.report["complete"] = False
    fewer = member(lab, "a-fewer-gpus", overall=90.0)
    assert fewer.report is not None
    fewer.report["findings"] = fewer.report["findings"][:1]
    names = [c["name"] for c in build_fleet([quiet, fewer, partial, critical])["clusters"]]
    assert names == ["z-critical", "z-partial", "a-fewer-gpus", "z-quiet"]


def test_a_failed_cluster_has_its_reason_and_no_report() -> None:
    fleet = build_fleet([Member("down", error="the cluster at https://x rejected the credentials")])
    validate(fleet)
    (entry,) = fleet["clusters"]
    assert entry["status"] == "failed" and entry["report"] is None
    assert entry["error"] == "the cluster at https://x rejected the credentials"
    assert fleet["summary"]["failed"] == 1


# --------------------------------------------------------------------------- saved reports


def test_the_latest_report_of_a_cluster_stands_for_it(
    reports: dict[str, Path], tmp_path: Path
) -> None:
    lab = load(reports["lab"])
    runs = []
    for n, stamp in enumerate(["2026-12-03T10:00:00Z", "2026-12-03T12:00:00Z", None]):
        path = tmp_path / f"run-{n}.json"
        path.write_text(json.dumps({**lab, "generated_at": stamp}), encoding="utf-8")
        runs.append(str(path))
    members, superseded = load_members(runs)
    assert [(m.name, m.file) for m in members] == [("lab-a100", runs[1])]
    assert superseded == sorted([runs[0], runs[2]])
    # The command names the files it left out (two clusters saved under one name lose one).
    result = CliRunner().invoke(main, ["fleet", *runs, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.endswith(f"stands for: {runs[0]}, {runs[2]}\n")
    # A report without a cluster name is named after its file.
    unnamed = tmp_path / "edge-7.json"
    unnamed.write_text(json.dumps({**lab, "cluster": None}), encoding="utf-8")
    assert [m.name for m in load_members([str(unnamed)])[0]] == ["edge-7"]


def test_fleet_command_json_and_exit_codes(reports: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    both = [str(reports["research"]), str(reports["lab"])]
    result = runner.invoke(main, ["fleet", *both, "-o", "json"])
    assert result.exit_code == 0, result.output
    fleet = json.loads(result.stdout)
    validate(fleet)
    assert [c["file"] for c in fleet["clusters"]] == [str(reports["lab"]), str(reports["research"])]
    assert fleet["clusters"][0]["score"] < fleet["clusters"][1]["score"]
    # The same bytes whatever the order of the files.
    again = runner.invoke(main, ["fleet", *reversed(both), "-o", "json"])
    assert again.stdout == result.stdout
    # --fail-on: exit 1 naming the clusters.
    failing = runner.invoke(main, ["fleet", *both, "--fail-on", "high", "-o", "json"])
    assert failing.exit_code == 1
    high = {
        c["name"]: c["by_severity"]["high"] + c["by_severity"]["critical"]
        for c in fleet["clusters"]
    }
    assert f"in lab-a100 ({high['lab-a100']}), research ({high['research']})" in failing.stderr
    # An incomplete cluster: exit 3, and the line names it.
    partial = runner.invoke(main, ["fleet", *both, str(reports["restricted"])])
    assert partial.exit_code == 3
    assert partial.stderr.endswith(
        "gpu-audit: exit 3: fleet incomplete: 1 cluster(s): restricted (incomplete)\n"
    )


def test_a_saved_fleet_renders_again(reports: dict[str, Path], tmp_path: Path) -> None:
    members, _ = load_members([str(reports["lab"]), str(reports["research"])])
    fleet = build_fleet([*members, Member("down", error="refused", context="down")])
    saved_fleet = tmp_path / "fleet.json"
    saved_fleet.write_text(dumps(fleet), encoding="utf-8")
    result = CliRunner().invoke(main, ["fleet", str(saved_fleet), "-o", "json"])
    assert result.exit_code == 3  # the failed cluster is still failed
    again = json.loads(result.stdout)
    assert again["clusters"][0] == {**fleet["clusters"][0], "file": str(saved_fleet)}
    assert again == {**fleet, "clusters": [again["clusters"][0], *fleet["clusters"][1:]]}


def test_a_file_that_is_not_a_report_is_named(reports: dict[str, Path], tmp_path: Path) -> None:
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    broken = tmp_path / "cut.json"
    broken.write_text('{"schema_version": ')
    result = CliRunner().invoke(main, ["fleet", str(reports["lab"]), str(listing), str(broken)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"gpu-audit: error: {listing}: not a gpu-audit JSON report (no schema_version)\n"
        f"gpu-audit: error: {broken}: invalid JSON at line 1: Expecting value\n"
    )
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- renderers


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_prometheus_labels_every_sample_with_its_cluster(reports: dict[str, Path]) -> None:
    lab, research = load(reports["lab"]), load(reports["research"])
    # One cluster's report: its name labels every sample.
    single = parse(render_prometheus(lab))
    assert {labels.get("cluster") for s in single.values() for labels, _ in s} == {"lab-a100"}
    fleet = build_fleet(
        [Member("lab-a100", lab), Member("research", research), Member("down", error="refused")]
    )
    samples = parse(render_fleet_prometheus(fleet))
    scores = {labels["cluster"]: value for labels, value in samples["gpu_audit_score"]}
    assert scores == {"lab-a100": lab["score"]["overall"], "research": research["score"]["overall"]}
    complete = {labels["cluster"]: value for labels, value in samples["gpu_audit_scan_complete"]}
    assert complete == {"lab-a100": 1.0, "research": 1.0, "down": 0.0}
    for family, series in samples.items():
        assert all("cluster" in labels for labels, _ in series), family
        keys = [tuple(sorted(labels.items())) for labels, _ in series]
        assert len(keys) == len(set(keys)), family  # no duplicate series
    # Each family once in the text, as the exposition format requires.
    text = render_fleet_prometheus(fleet)
    helps = re.findall(r"^# HELP (\S+)", text, re.M)
    assert len(helps) == len(set(helps))


def test_table_names_what_each_cluster_lacks(reports: dict[str, Path]) -> None:
    fleet = build_fleet(
        [
            Member("lab-a100", load(reports["lab"])),
            Member("restricted", load(reports["restricted"])),
            Member("down\x1b]52;evil\x07", error="cannot reach the cluster at https://10.0.0.9"),
        ]
    )
    text = render_fleet_table(fleet)
    assert text.startswith("Fleet: 3 cluster(s): 1 complete, 1 incomplete, 1 failed;")
    assert "\x1b" not in text  # the cluster's name is shown, never obeyed
    assert (
        "INCOMPLETE: restricted:\n  missing permission(s):\n    forbidden: list configmaps\n"
        in text
    )
    assert "FAILED: down\\x1b]52;evil\\x07: cannot reach the cluster at https://10.0.0.9" in text
    rows = [
        line.split()[0] for line in text.splitlines() if line.startswith(("down", "restr", "lab"))
    ]
    assert rows[:3] == ["down\\x1b]52;evil\\x07", "restricted", "lab-a100"]
    assert "=== cluster restricted (incomplete) ===" in text


def test_the_table_shows_coverage_beside_the_grade_and_fits_a_terminal(
    reports: dict[str, Path],
) -> None:
    # A complete scan can have grade "incomplete" (too few checks evaluated for a grade): the
    # coverage beside it says why. On an 80-column terminal the rows become paragraphs.
    documents = {name: load(reports[name]) for name in ("lab", "research")}
    fleet = build_fleet([Member(n, d) for n, d in documents.items()])
    expected = {}
    for name, document in documents.items():
        counts = document["coverage"]
        applicable = counts["enabled"] - counts["not_applicable"]
        expected[name] = (
            document["score"]["grade"],
            f"{round(100 * counts['evaluated'] / applicable)}%",
        )
    assert expected["research"][0] == "incomplete"
    wide = render_fleet_table(fleet).split("=== cluster")[0].splitlines()
    assert wide[2].split() == [
        "CLUSTER", "STATUS", "SCORE", "GRADE", "COVERAGE", "FINDINGS", "GPU", "IMPACT"
    ]  # fmt: skip
    for name, (grade, coverage) in expected.items():
        row = next(line.split() for line in wide if line.startswith(name))
        assert row[1:2] + row[3:5] == ["complete", grade, coverage]
    narrow = render_fleet_table(fleet, width=80).split("=== cluster")[0]
    assert max(len(line) for line in narrow.splitlines()) <= 80
    for name, (grade, coverage) in expected.items():
        assert f"{name}: status complete, score " in narrow
        assert f"grade {grade}, coverage {coverage}, findings " in " ".join(narrow.split())


def test_html_escapes_and_keeps_the_ids_of_clusters_apart(reports: dict[str, Path]) -> None:
    hostile = load(reports["restricted"])
    name = '<script>alert(1)</script>"x'
    page = render_fleet_html(
        build_fleet([Member(name, hostile), Member("lab-a100", load(reports["lab"]))])
    )
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page  # the fleet page runs no script at all
    assert "script-src &#39;none&#39;" in page
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert ids and len(ids) == len(set(ids))
    alert = page[page.index('id="fleet-incomplete"') :]
    alert = alert[: alert.index("</div>")]
    assert "forbidden: list configmaps" in alert and "incomplete" in alert


# --------------------------------------------------------------------------- scanning a fleet


def test_one_context_failing_loses_none_of_the_others(reports: dict[str, Path]) -> None:
    lab = load(reports["lab"])
    seen: list[tuple[str | None, str | None, str]] = []

    def fake_scan(options: ScanOptions) -> ScanResult:
        context = options.inputs.connection.context
        seen.append((context, options.cluster_name, threading.current_thread().name))
        if context == "down":
            raise LiveError("cannot reach the cluster at https://10.0.0.9: timed out")
        return ScanResult({**lab, "cluster": options.cluster_name}, (), options)

    members, results = scan_fleet(ScanOptions(Inputs()), ["a", "down", "b"], 2, fake_scan)
    assert sorted(seen)[0][:2] == ("a", "a") and len(seen) == 3
    assert {c[2] for c in seen} != {threading.current_thread().name}  # in the pool's threads
    assert [(m.name, m.error) for m in members] == [
        ("a", None),
        ("down", "cannot reach the cluster at https://10.0.0.9: timed out"),
        ("b", None),
    ]
    assert [r.document["cluster"] for r in results] == ["a", "b"]


def test_scan_of_unreachable_contexts_reports_each_as_failed(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": n, "cluster": {"server": f"https://127.0.0.1:{port}"}}
                    for n, port in (("one", 1), ("two", 9))
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": n, "context": {"cluster": n, "user": "u"}} for n in ("one", "two")
                ],
                "current-context": "one",
            }
        )
    )
    runner = CliRunner()
    base = ["scan", "--kubeconfig", str(kubeconfig), "--timeout", "5", "--no-plugins"]
    result = runner.invoke(main, [*base, "--all-contexts", "-o", "json"])
    assert result.exit_code == 3, result.output
    fleet = json.loads(result.stdout)
    validate(fleet)
    assert [(c["name"], c["status"]) for c in fleet["clusters"]] == [
        ("one", "failed"),
        ("two", "failed"),
    ]
    assert all(
        "cannot reach the cluster at https://127.0.0.1" in c["error"] for c in fleet["clusters"]
    )
    assert "fleet incomplete: 2 cluster(s): one (failed), two (failed)" in result.stderr
    # An unknown context is a usage error, as for one cluster.
    unknown = runner.invoke(main, [*base, "--context", "one", "--context", "tow"])
    assert unknown.exit_code == 2
    assert f"context(s) not in {kubeconfig}: tow" in unknown.stderr
    # What a fleet scan cannot take is refused before anything is read.
    for extra in (["--from-file", str(tmp_path)], ["--cluster-name", "x"], ["-o", "sarif"]):
        refused = runner.invoke(main, [*base, "--all-contexts", *extra])
        assert refused.exit_code == 2, extra
        assert refused.stderr.startswith("gpu-audit: error: "), refused.stderr
