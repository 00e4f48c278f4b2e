"""One command line (issue 19, item 4): --namespace offline, case-insensitive values, "did you
mean", one error style, exit 2 for every kubeconfig or usage problem, --min-severity, help on
every option, a closed pipe, Helm charts and `diff` severity changes."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml
from click.testing import CliRunner, Result
from referencing import Registry, Resource

from gpu_audit.cli import main
from gpu_audit.model import Severity
from gpu_audit.postscan.diff import DIFF_SCHEMA_FILE
from gpu_audit.report import SCHEMA_FILE

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "clusters" / "sample"
CHART = ROOT / "deploy" / "helm" / "gpu-audit"
PENDING_POD = ("ml-training", "llama-finetune-worker-0")  # the sample's Pending GPU pod
REPORT_SCHEMA = json.loads(SCHEMA_FILE.read_text())


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def scan_json(*args: str) -> dict[str, Any]:
    result = run("scan", "--from-file", str(SAMPLE), "-o", "json", *args)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def one_error_line(result: Result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-audit: error: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0]


# --------------------------------------------------------------------------- --namespace
def test_namespace_filters_the_findings_of_a_file_scan() -> None:
    # Every object is read and checked; only the namespace's findings are shown (the whole
    # behaviour, live included: tests/test_namespace_filter.py, tests/live/test_namespace_live.py).
    everything = scan_json()
    serving = scan_json("-n", "ml-serving")
    # The namespace's objects, and the Namespace itself (namespace null).
    assert {f["resource"]["namespace"] for f in serving["findings"]} == {None, "ml-serving"}
    cluster_scoped = [f["resource"] for f in serving["findings"] if not f["resource"]["namespace"]]
    assert {(r["kind"], r["name"]) for r in cluster_scoped} == {("Namespace", "ml-serving")}
    assert {f["resource"]["namespace"] for f in everything["findings"]} > {None, "ml-serving"}
    assert serving["output_filter"]["namespace"] == "ml-serving"
    assert serving["source"] == everything["source"]


def test_namespace_and_all_namespaces_conflict_offline_too() -> None:
    result = run("scan", "--from-file", str(SAMPLE), "-n", "ml", "-A")
    assert result.exit_code == 2
    assert "--namespace and --all-namespaces" in one_error_line(result)


def test_why_pending_takes_the_namespace_as_kubectl_does() -> None:
    namespace, pod = PENDING_POD
    full = run("why-pending", f"{namespace}/{pod}", "--from-file", str(SAMPLE), "-o", "json")
    short = run("why-pending", "-n", namespace, pod, "--from-file", str(SAMPLE), "-o", "json")
    assert full.exit_code == short.exit_code == 0, short.output
    assert json.loads(short.stdout) == json.loads(full.stdout)
    assert json.loads(short.stdout)["pending_pods"][0]["pod"]["name"] == pod
    # A workload as KIND/NAME; without a target, the namespace's Pending GPU pods only.
    job = run("why-pending", "-n", namespace, "Job/tokenizer-eval", "--from-file", str(SAMPLE))
    assert job.exit_code == 0 and "Job ml-training/tokenizer-eval" in job.stdout
    mine = run("why-pending", "-n", namespace, "--from-file", str(SAMPLE), "-o", "json")
    other = run("why-pending", "-n", "ml-serving", "--from-file", str(SAMPLE), "-o", "json")
    assert [p["pod"]["name"] for p in json.loads(mine.stdout)["pending_pods"]] == [pod]
    assert json.loads(other.stdout)["pending_pods"] == []


def test_inventory_refuses_a_namespace_it_would_miscount() -> None:
    result = run("inventory", "--from-file", str(SAMPLE), "-n", "ml-serving")
    assert result.exit_code == 2
    assert "the inventory counts every pod on every node" in one_error_line(result)


# --------------------------------------------------------------------------- case
def test_ids_formats_and_severities_in_any_case() -> None:
    lower = scan_json("--only", "gpu-wl-001")
    assert [c["id"] for c in lower["checks"]] == ["GPU-WL-001"]
    upper_format = run("scan", "--from-file", str(SAMPLE), "-o", "JSON", "--fail-on", "HIGH")
    assert upper_format.exit_code == 1  # the sample has high findings
    assert json.loads(upper_format.stdout)["findings"]
    listed = run("checks", "list", "-o", "Json", "--severity", "CRITICAL")
    assert listed.exit_code == 0
    assert {c["severity"] for c in json.loads(listed.stdout)} == {"critical"}
    skipped = scan_json("--skip", "Gpu-Wl-001")
    assert "GPU-WL-001" not in {c["id"] for c in skipped["checks"]}


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["scan", "--from-file", str(SAMPLE), "--only", "GPU-WL-01"], "did you mean GPU-WL-001?"),
        (["checks", "show", "gpu-wl-01"], "did you mean GPU-WL-001?"),
        (
            ["why-pending", "ml-training/Jbo/tokenizer-eval", "--from-file", str(SAMPLE)],
            "unknown workload kind 'Jbo' (did you mean Job?)",
        ),
    ],
)
def test_unknown_ids_and_kinds_suggest_the_closest(args: list[str], hint: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert hint in one_error_line(result)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["scan", "--bogus"], "No such option '--bogus' (see `gpu-audit scan --help`)"),
        (["scan", "-o", "xml"], "Invalid value for '-o' / '--format': 'xml' is not one of"),
        (["render"], "Missing argument 'REPORT.json'"),
        (["diff", "a.json"], "Missing argument 'NEW.json'"),
        (["no-such-command"], "No such command 'no-such-command'"),
        (["checks", "list", "--severity", "urgent"], "'urgent' is not one of"),
    ],
)
def test_usage_errors_have_the_one_error_style(args: list[str], says: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert says in one_error_line(result)
    assert "Usage:" not in result.output


def _kubeconfig(path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "real", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "real",
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("missing file", "(--kubeconfig): no such file"),  # not "Invalid kube-config file"
        ("no kubeconfig at all", "$KUBECONFIG is unset and ~/.kube/config does not exist"),
        ("unknown context", "context(s) not in "),
        ("not YAML", "cannot load "),  # was a traceback of yaml.parser.ParserError
    ],
)
def test_every_kubeconfig_problem_exits_2(case: str, says: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env: dict[str, str | None] = {
        "HOME": str(home),
        "KUBECONFIG": None,
        "KUBERNETES_SERVICE_HOST": None,
    }
    args = {
        "missing file": ["--kubeconfig", str(tmp_path / "nope.yaml")],
        "no kubeconfig at all": [],
        "unknown context": [
            "--kubeconfig",
            str(_kubeconfig(tmp_path / "k.yaml")),
            "--context",
            "x",
        ],
        "not YAML": ["--kubeconfig", str(tmp_path / "bad.yaml"), "--context", "real"],
    }[case]
    (tmp_path / "bad.yaml").write_text("contexts: [\n")
    for command in (["scan"], ["collect", "--output-file", str(tmp_path / "s.json")]):
        result = run(*command, *args, env=env)
        assert result.exit_code == 2, (command, result.output)
        line = one_error_line(result)
        assert says in line and (case != "unknown context" or line.endswith(": x"))


# --------------------------------------------------------------------------- --min-severity
def test_min_severity_filters_what_is_shown_not_what_is_scored(tmp_path: Path) -> None:
    everything = scan_json()
    high = scan_json("--min-severity", "high")
    floor = Severity.HIGH.rank
    expected = [f for f in everything["findings"] if Severity(f["severity"]).rank >= floor]
    assert high["findings"] == expected and 0 < len(expected) < len(everything["findings"])
    assert high["output_filter"] == {
        "min_severity": "high",
        "hidden_findings": len(everything["findings"]) - len(expected),
    }
    for same in ("score", "coverage", "summary", "checks"):
        assert high[same] == everything[same]
    jsonschema.validate(high, REPORT_SCHEMA)
    # render applies it to a saved report; the table says what it left out.
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(everything))
    table = run("render", str(saved), "--min-severity", "HIGH").stdout
    hidden = len(everything["findings"]) - len(expected)
    assert f"Showing findings at or above high: {hidden} below it not shown" in table
    assert "LOW " not in table and "MEDIUM " not in table and "HIGH " in table


# --------------------------------------------------------------------------- help
def _options(command: click.Command, path: str) -> list[tuple[str, click.Option]]:
    found = [(path, p) for p in command.params if isinstance(p, click.Option)]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found.extend(_options(sub, f"{path} {name}"))
    return found


def test_every_option_of_every_command_has_help() -> None:
    options = _options(main, "gpu-audit")
    assert len(options) > 50
    assert [(path, o.opts) for path, o in options if not (o.help or "").strip()] == []


def test_checks_show_formats_are_table_and_json_like_the_rest() -> None:
    assert "[table|json]" in run("checks", "show", "--help").stdout
    shown = run("checks", "show", "GPU-WL-001", "-o", "table")
    assert shown.exit_code == 0 and "Why it matters:" in shown.stdout


# --------------------------------------------------------------------------- pipes
def test_a_closed_stdout_pipe_exits_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written, as after `| head -1`
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpu_audit", "scan", "--from-file", str(SAMPLE)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141  # as a shell reports a tool ended by SIGPIPE
    assert proc.stderr == ""


# --------------------------------------------------------------------------- Helm charts
def test_a_helm_chart_directory_is_recognised() -> None:
    result = run("scan", "--from-file", str(CHART))
    assert result.exit_code == 2
    line = one_error_line(result)
    assert f"{CHART} is a Helm chart" in line
    assert f"`helm template {CHART} | gpu-audit scan --from-file -`" in line


def test_helm_chart_without_helm_on_path_says_how(tmp_path: Path) -> None:
    result = run("scan", "--helm-chart", str(CHART), env={"PATH": str(tmp_path)})
    assert result.exit_code == 2
    assert "--helm-chart needs helm on PATH" in one_error_line(result)


HELM = os.environ.get("GPU_AUDIT_HELM")


@pytest.mark.skipif(not HELM, reason="GPU_AUDIT_HELM (a helm binary) is not set")
def test_helm_chart_scans_what_helm_template_renders() -> None:
    assert HELM
    path = f"{Path(HELM).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # What the chart renders, read with helm itself and PyYAML (not with gpu-audit).
    rendered = subprocess.run(
        [HELM, "template", str(CHART)], capture_output=True, text=True, check=True
    ).stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    kinds: dict[str, int] = {}
    for doc in objects:
        kinds[doc["kind"]] = kinds.get(doc["kind"], 0) + 1
    assert kinds and "CronJob" in kinds
    result = run("scan", "--helm-chart", str(CHART), "-o", "json", env={"PATH": path})
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["source"]["objects"] == len(objects)
    counted = {t.split(".", 1)[0]: n for t, n in report["source"]["types"].items()}
    assert counted == kinds
    assert report["source"]["inputs"] == [f"<helm template {CHART}>"]


def test_a_problem_in_what_helm_renders_names_the_chart(tmp_path: Path) -> None:
    # A stand-in for helm that renders a Deployment with a duplicate key, as a template that
    # repeats a field does; the real helm renders the bundled chart without any problem.
    fake = tmp_path / "helm"
    fake.write_text(
        "#!/bin/sh\n"
        "printf 'apiVersion: apps/v1\\nkind: Deployment\\n"
        "metadata: {name: llm, name: llm2}\\n'\n"
    )
    fake.chmod(0o755)
    result = run("scan", "--helm-chart", "charts/llm", env={"PATH": str(tmp_path)})
    assert result.exit_code == 2
    line = one_error_line(result)
    assert line.startswith("gpu-audit: error: <helm template charts/llm>: document 1: "), line
    assert "duplicate key 'name'" in line


# --------------------------------------------------------------------------- diff
def test_diff_reports_a_severity_change(tmp_path: Path) -> None:
    old = scan_json()
    new = copy.deepcopy(old)
    changed = next(f for f in new["findings"] if f["severity"] == "high")
    changed["severity"] = "critical"
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    files = [str(tmp_path / "old.json"), str(tmp_path / "new.json")]
    as_json = run("diff", *files, "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    registry: Registry[Any] = Registry().with_resource(
        REPORT_SCHEMA["$id"], Resource.from_contents(REPORT_SCHEMA)
    )
    schema = json.loads(DIFF_SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator(schema, registry=registry).validate(document)
    (item,) = document["findings"]["severity_changed"]
    assert (item["fingerprint"], item["old_severity"], item["severity"]) == (
        changed["fingerprint"],
        "high",
        "critical",
    )
    unchanged = {f["fingerprint"] for f in document["findings"]["unchanged"]}
    assert changed["fingerprint"] not in unchanged
    assert len(unchanged) == len(old["findings"]) - 1
    assert document["summary"]["severity_changed"] == 1
    table = run("diff", *files).stdout
    assert "1 with a new severity" in table
    assert "Severity changed:" in table and "HIGH->CRITICAL" in table


# --------------------------------------------------------------------------- kubectl plugin
def test_the_kubectl_plugin_executable_is_installed_beside_gpu_audit(tmp_path: Path) -> None:
    scripts = Path(sys.executable).parent
    plugin = scripts / "kubectl-gpu_audit"
    assert plugin.is_file() and os.access(plugin, os.X_OK)
    version = subprocess.run([plugin, "version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0 and version.stdout.startswith("gpu-audit, version ")
    usage = subprocess.run([plugin, "--help"], capture_output=True, text=True, check=False)
    assert usage.stdout.startswith("Usage: kubectl gpu-audit [OPTIONS] COMMAND")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_finds_and_runs_the_plugin(repo_root: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    listed = subprocess.run(
        [kubectl, "plugin", "list"], capture_output=True, text=True, env=env, check=False
    )
    assert "kubectl-gpu_audit" in listed.stdout
    fixture = repo_root / "fixtures/checks/GPU-WL-001/fail-request-differs-from-limit.yaml"
    direct = subprocess.run(
        [sys.executable, "-m", "gpu_audit", "scan", "--from-file", str(fixture), "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    through_kubectl = subprocess.run(
        [kubectl, "gpu-audit", "scan", "--from-file", str(fixture), "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert through_kubectl.returncode == direct.returncode == 0, through_kubectl.stderr
    assert through_kubectl.stdout == direct.stdout
    assert json.loads(through_kubectl.stdout)["findings"]
    version = subprocess.run(
        [kubectl, "gpu-audit", "version"], capture_output=True, text=True, env=env, check=False
    )
    assert version.stdout.startswith("gpu-audit, version ")
