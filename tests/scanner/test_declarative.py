"""Declarative checks: the file format, its errors, its semantics, and the CLI's --checks-dir."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.declarative import load_check_dir, load_check_dirs, load_check_file
from gpu_audit.engine import run_check
from gpu_audit.errors import InputError
from gpu_audit.model import CheckStatus, Outcome, Severity
from gpu_audit.registry import RegistryError, load_checks
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import load_files

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "declarative-checks.md"

BASE: dict[str, Any] = {
    "id": "ACME-STACK-001",
    "title": "Device plugin DaemonSets run at system-node-critical priority",
    "category": "stack",
    "severity": "medium",
    "rationale": "Why it matters.",
    "detection": "How it decides.",
    "remediation": "kubectl -n $namespace patch daemonset $name -p '{}'",
    "references": ["https://kubernetes.io/docs/concepts/scheduling-eviction/"],
    "target": {"kinds": ["DaemonSet"]},
    "require": {"path": "$.spec.template.spec.priorityClassName", "equals": "x"},
}


def write(directory: Path, name: str, content: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
    return path


def with_(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


def problem_of(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_check_file(path)
    (problem,) = info.value.problems
    assert problem.startswith(f"{path}: "), problem
    return problem.removeprefix(f"{path}: ")


# --------------------------------------------------------------------------- invalid files


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    content = dict(BASE)
    del content["require"]
    assert problem_of(write(tmp_path, "c.yaml", content)) == "require: missing"


def test_missing_path_of_a_nested_condition(tmp_path: Path) -> None:
    require = {"all_of": [{"path": "$.a", "exists": True}, {"equals": 1}]}
    problem = problem_of(write(tmp_path, "c.yaml", with_(require=require)))
    assert problem == "require.all_of[1].path: missing"


def test_bad_jsonpath(tmp_path: Path) -> None:
    require = {"all_of": [{"path": "$.a", "exists": True}, {"path": "$.spec[", "exists": True}]}
    problem = problem_of(write(tmp_path, "c.yaml", with_(require=require)))
    assert problem.startswith("require.all_of[1].path: invalid JSONPath '$.spec[': ")


def test_jsonpath_must_start_at_the_root(tmp_path: Path) -> None:
    problem = problem_of(write(tmp_path, "c.yaml", with_(where={"path": "spec.x", "exists": True})))
    assert problem.startswith("where.path: must be a JSONPath starting at the object root")


def test_unknown_condition(tmp_path: Path) -> None:
    require = {"path": "$.spec.replicas", "greater_than": 1}
    problem = problem_of(write(tmp_path, "c.yaml", with_(require=require)))
    assert problem.startswith("require.greater_than: unknown condition (expected one of exists")


def test_two_operators_in_one_test(tmp_path: Path) -> None:
    require = {"path": "$.a", "equals": 1, "in": [1]}
    problem = problem_of(write(tmp_path, "c.yaml", with_(require=require)))
    assert problem.startswith("require: needs exactly one operator")


def test_unknown_kind(tmp_path: Path) -> None:
    problem = problem_of(write(tmp_path, "c.yaml", with_(target={"kinds": ["Daemonset"]})))
    assert (
        problem == "target.kinds[0]: unknown kind 'Daemonset' (not a resource type gpu-audit reads)"
    )


def test_pod_scope_takes_only_workload_kinds(tmp_path: Path) -> None:
    target = {"kinds": ["Deployment", "Node"], "scope": "pod"}
    problem = problem_of(write(tmp_path, "c.yaml", with_(target=target)))
    assert problem == "target.kinds[1]: unknown kind 'Node' (not a workload type)"


def test_bad_severity(tmp_path: Path) -> None:
    problem = problem_of(write(tmp_path, "c.yaml", with_(severity="urgent")))
    assert problem == (
        "severity: unknown severity 'urgent' (expected one of critical, high, medium, low, info)"
    )


def test_bad_category_and_id_mismatch(tmp_path: Path) -> None:
    assert problem_of(write(tmp_path, "a.yaml", with_(category="gpus"))).startswith(
        "category: unknown category 'gpus'"
    )
    problem = problem_of(write(tmp_path, "b.yaml", with_(category="nodes")))
    assert problem == "id: check id 'ACME-STACK-001' does not belong to category nodes"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"references": ["http://example.com"]}, "references[0]: must be an https:// URL"),
        ({"remediation_root": "spec"}, "remediation_root: check ACME-STACK-001: remediation_root"),
        ({"colour": "red"}, "colour: unknown field"),
        ({"require": {"path": "$.a", "matches": "("}}, "require.matches: invalid regular"),
        ({"require": {"path": "$.a", "gt": "lots"}}, "require.gt: must be a number or a quantity"),
        ({"require": {"path": "$.a", "in": []}}, "require.in: must be a non-empty list"),
        ({"require": {"path": "$.a", "exists": True, "if_absent": True}}, "require.if_absent:"),
        ({"require": {"path": "$.a", "equals": 1, "match": "some"}}, "require.match: must be"),
        ({"require": {"any_of": []}}, "require.any_of: must be a non-empty list"),
        ({"target": {"kinds": ["Pod"], "gpu_only": True}}, "target.gpu_only: applies to"),
        ({"target": {"kinds": ["Pod"], "scope": "node"}}, "target.scope: 'node' is not one of"),
        ({"messages": {"ok": "fine"}}, "messages: must be a mapping"),
        ({"require": {"path": "$.a", "exists": True, "fix": ["x"]}}, "require.fix: must map"),
        ({"require": {"path": "$.a", "exists": True, "fix": {"a-b": "x"}}}, "require.fix:"),
        ({"remediation": "set $value"}, "remediation: uses $value, which the test of $.spec"),
        ({"remediation": "costs $5"}, "remediation: is not a valid template"),
        ({"fix_kind": "yaml"}, "fix_kind: unknown fix kind 'yaml' (expected one of patch,"),
        ({"fix_kind": 3}, "fix_kind: must be one of patch, command, manifest, procedure"),
        ({"remediation_generic": ["x"]}, "remediation_generic: must be a string"),
        (
            {"remediation": "# $kind $name\nkubectl $namespace"},
            "remediation_generic: check ACME-STACK-001: remediation_generic is required",
        ),
        (
            {"remediation_generic": "kubectl -n $namespace patch daemonset $name"},
            "remediation_generic: check ACME-STACK-001: remediation_generic uses $name: "
            "write placeholders as <name>",
        ),
        (
            {"remediation_generic": "# <kind> <name>\n<command>"},
            "remediation_generic: check ACME-STACK-001: remediation_generic is only placeholders",
        ),
    ],
)
def test_other_mistakes_name_their_field(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    assert problem_of(write(tmp_path, "c.yaml", with_(**changes))).startswith(expected)


def test_not_yaml_or_not_a_mapping(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("id: [unclosed\n", encoding="utf-8")
    assert problem_of(broken).startswith("not valid YAML")
    listed = tmp_path / "list.yaml"
    listed.write_text("- id: x\n", encoding="utf-8")
    assert problem_of(listed) == "a check file is one YAML mapping"


def test_duplicate_id_in_one_directory_names_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", BASE)
    second = write(tmp_path, "b.yaml", BASE)
    with pytest.raises(InputError) as info:
        load_check_dir(tmp_path)
    assert info.value.problems == (f"{second}: id: ACME-STACK-001 is already defined by {first}",)


def test_every_broken_file_of_a_directory_is_listed(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", with_(severity="urgent"))
    write(tmp_path, "b.yaml", with_(id="ACME-STACK-002", target={"kinds": ["Nodes"]}))
    with pytest.raises(InputError) as info:
        load_check_dir(tmp_path)
    assert [p.split(": ", 2)[1] for p in info.value.problems] == ["severity", "target.kinds[0]"]


def test_duplicate_of_a_builtin_or_reserved_prefix_is_a_registry_error(tmp_path: Path) -> None:
    write(tmp_path / "one", "a.yaml", BASE)
    write(tmp_path / "two", "a.yaml", BASE)
    dirs = [str(tmp_path / "one"), str(tmp_path / "two")]
    with pytest.raises(RegistryError, match=r"ACME-STACK-001 is defined by both --checks-dir"):
        load_checks(plugins=False, extra=load_check_dirs(dirs))
    write(tmp_path / "three", "a.yaml", with_(id="GPU-STACK-001"))
    with pytest.raises(RegistryError, match="GPU-STACK-001 is defined by both gpu-audit"):
        load_checks(plugins=False, extra=load_check_dirs([str(tmp_path / "three")]))


# --------------------------------------------------------------------------- semantics


def snapshot_of(text: str, tmp_path: Path) -> Snapshot:
    path = tmp_path / "input.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_files([str(path)])


NODES = """
    apiVersion: v1
    kind: Node
    metadata: {name: a, labels: {gpu: "true", pool: train}}
    spec: {unschedulable: true}
    status: {capacity: {nvidia.com/gpu: "8", memory: 1Ti}}
    ---
    apiVersion: v1
    kind: Node
    metadata: {name: b, labels: {gpu: "false"}}
    status: {capacity: {nvidia.com/gpu: 2, memory: 64Gi}}
    ---
    apiVersion: v1
    kind: Node
    metadata: {name: c}
    status: {capacity: {memory: "512Mi"}}
"""


def outcomes(tmp_path: Path, require: dict[str, Any], **extra: Any) -> dict[str, Outcome]:
    content = with_(id="ACME-NODE-001", category="nodes", target={"kinds": ["Node"]})
    content.update(require=require, **extra)
    check = load_check_file(write(tmp_path / "checks", "c.yaml", content))
    run = run_check(check, snapshot_of(NODES, tmp_path))
    return {r.ref.name: r.outcome for r in run.results}


P, F = Outcome.PASS, Outcome.FAIL


@pytest.mark.parametrize(
    ("require", "expected"),
    [
        ({"path": "$.spec.unschedulable", "exists": True}, {"a": P, "b": F, "c": F}),
        ({"path": "$.spec.unschedulable", "absent": True}, {"a": F, "b": P, "c": P}),
        # A label is the string "true", never the boolean true.
        ({"path": "$.metadata.labels.gpu", "equals": "true"}, {"a": P, "b": F, "c": F}),
        ({"path": "$.metadata.labels.gpu", "equals": True}, {"a": F, "b": F, "c": F}),
        ({"path": "$.spec.unschedulable", "equals": 1}, {"a": F, "b": F, "c": F}),
        (
            {"path": "$.metadata.labels.gpu", "not_equals": "true", "if_absent": True},
            {"a": F, "b": P, "c": P},
        ),
        ({"path": "$.metadata.labels.pool", "in": ["train", "serve"]}, {"a": P, "b": F, "c": F}),
        (
            {"path": "$.metadata.labels.pool", "not_in": ["train"], "if_absent": True},
            {"a": F, "b": P, "c": P},
        ),
        ({"path": "$.metadata.name", "matches": "^[ab]$"}, {"a": P, "b": P, "c": F}),
        # Numbers and quantities compare by value: "8" and 2 are GPUs, "1Ti" > "100Gi".
        ({"path": "$.status.capacity.'nvidia.com/gpu'", "ge": 4}, {"a": P, "b": F, "c": F}),
        ({"path": "$.status.capacity.memory", "gt": "100Gi"}, {"a": P, "b": F, "c": F}),
        ({"path": "$.status.capacity.memory", "lt": "1Gi"}, {"a": F, "b": F, "c": P}),
        ({"path": "$.status.capacity.memory", "le": "64Gi"}, {"a": F, "b": P, "c": P}),
        (
            {"path": "$.status.capacity.*", "matches": "Gi$", "match": "any"},
            {"a": F, "b": P, "c": F},
        ),
        ({"path": "$.status.capacity.*", "matches": "Gi$"}, {"a": F, "b": F, "c": F}),
        (
            {
                "any_of": [
                    {"path": "$.spec.unschedulable", "equals": True},
                    {"path": "$.metadata.labels.gpu", "equals": "false"},
                ]
            },
            {"a": P, "b": P, "c": F},
        ),
        (
            {
                "all_of": [
                    {"path": "$.metadata.labels", "exists": True},
                    {"path": "$.status.capacity.'nvidia.com/gpu'", "gt": 1},
                ]
            },
            {"a": P, "b": P, "c": F},
        ),
    ],
)
def test_operators(tmp_path: Path, require: dict[str, Any], expected: dict[str, Outcome]) -> None:
    assert outcomes(tmp_path, require) == expected


def test_where_selects_what_is_evaluated(tmp_path: Path) -> None:
    where = {"path": "$.metadata.labels.gpu", "exists": True}
    require = {"path": "$.spec.unschedulable", "absent": True}
    assert outcomes(tmp_path, require, where=where) == {"a": F, "b": P}


def test_nothing_evaluated_is_not_applicable(tmp_path: Path) -> None:
    content = with_(where={"path": "$.nothing", "exists": True})
    check = load_check_file(write(tmp_path / "checks", "c.yaml", content))
    run = run_check(check, snapshot_of(DAEMONSETS, tmp_path))
    assert run.status is CheckStatus.NOT_EVALUATED
    assert not run.applicable


DAEMONSETS = """
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: plugin, namespace: kube-system}
    spec:
      template:
        metadata: {labels: {app: plugin}}
        spec:
          priorityClassName: system-node-critical
          containers:
            - {name: a, image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", env: [{name: X, value: "1"}]}
    ---
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: agent, namespace: kube-system}
    spec:
      template:
        spec:
          containers:
            - {name: a, image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}
            - {name: b, image: "busybox:1.36", env: [{name: X, value: "2"}]}
"""


def test_failure_points_at_the_offending_value_and_renders_the_remediation(
    tmp_path: Path,
) -> None:
    content = with_(
        target={"kinds": ["DaemonSet"], "scope": "container"},
        require={"path": "$.env[?(@.name == 'X')].value", "equals": "1"},
        remediation="# $kind $namespace/$name container $container\nenv: [{name: X, value: '1'}]",
        messages={"pass": "sets X to 1", "fail": "does not set X to 1"},
    )
    check = load_check_file(write(tmp_path / "checks", "c.yaml", content))
    run = run_check(check, snapshot_of(DAEMONSETS, tmp_path))
    results = {(r.ref.name, r.message, r.path) for r in run.results}
    assert results == {
        (
            "plugin",
            "DaemonSet kube-system/plugin container a sets X to 1",
            "spec.template.spec.containers[0]",
        ),
        (
            "agent",
            "DaemonSet kube-system/agent container a does not set X to 1",
            "spec.template.spec.containers[0].env[?(@.name == 'X')].value",
        ),
        (
            "agent",
            "DaemonSet kube-system/agent container b does not set X to 1",
            "spec.template.spec.containers[1].env[0].value",
        ),
    }
    assert {f.remediation.splitlines()[0] for f in run.findings} == {
        "# DaemonSet kube-system/agent container a",
        "# DaemonSet kube-system/agent container b",
    }


GPU_WORKLOADS = """
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: llm, namespace: serving}
    spec:
      template:
        metadata: {labels: {tier: gpu}}
        spec:
          containers:
            - {name: server, image: "vllm/vllm-openai:v0.6.3", resources: {limits: {nvidia.com/gpu: 1}}}
            - {name: proxy, image: "envoyproxy/envoy:v1.31.2"}
    ---
    apiVersion: v1
    kind: Pod
    metadata:
      name: llm-1
      namespace: serving
      ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: llm-abc, controller: true}]
    spec:
      containers:
        - {name: server, image: "vllm/vllm-openai:v0.6.3", resources: {limits: {nvidia.com/gpu: 1}}}
    ---
    apiVersion: apps/v1
    kind: ReplicaSet
    metadata:
      name: llm-abc
      namespace: serving
      ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: llm, controller: true}]
    spec:
      template:
        spec:
          containers:
            - {name: server, image: "vllm/vllm-openai:v0.6.3", resources: {limits: {nvidia.com/gpu: 1}}}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: default}
    spec:
      template:
        spec:
          containers: [{name: web, image: "nginx:1.27.2"}]
"""


def test_the_failing_test_gives_its_fix_values_to_the_remediation(tmp_path: Path) -> None:
    content = with_(
        target={"kinds": ["DaemonSet"], "scope": "container"},
        require={
            "all_of": [
                {"path": "$.image", "matches": "busybox", "fix": {"want": "an image"}},
                {"path": "$.env[?(@.name == 'X')].value", "equals": "1", "fix": {"want": "X"}},
            ]
        },
        remediation="# $section/$container: $want",
        remediation_generic="# <section>/<container>: an image\nimage: <image>",
    )
    check = load_check_file(write(tmp_path / "checks", "c.yaml", content))
    run = run_check(check, snapshot_of(DAEMONSETS, tmp_path))
    assert sorted(f.remediation for f in run.findings) == [
        "# containers/a: an image",
        "# containers/a: an image",
        "# containers/b: X",
    ]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        # Pods are reported as their top-most controller, once; gpu_only drops CPU-only ones.
        ({"scope": "pod", "gpu_only": True}, {("Deployment", "llm", "")}),
        ({"scope": "pod"}, {("Deployment", "llm", ""), ("Deployment", "web", "")}),
        (
            {"scope": "container", "gpu_only": True},
            {("Deployment", "llm", "container server")},
        ),
        (
            {"scope": "container", "kinds": ["Deployment"]},
            {
                ("Deployment", "llm", "container server"),
                ("Deployment", "llm", "container proxy"),
                ("Deployment", "web", "container web"),
            },
        ),
    ],
)
def test_pod_and_container_scopes(
    tmp_path: Path, target: dict[str, Any], expected: set[tuple[str, str, str]]
) -> None:
    content = with_(
        id="ACME-WL-001",
        category="workloads",
        target=target,
        require={"path": "$.image", "exists": True}
        if target["scope"] == "container"
        else {"path": "$.spec.containers", "exists": True},
        messages={"pass": "ok"},
    )
    check = load_check_file(write(tmp_path / "checks", "c.yaml", content))
    run = run_check(check, snapshot_of(GPU_WORKLOADS, tmp_path))
    got = {
        (r.ref.kind, r.ref.name, r.message.removeprefix(f"{r.ref}").removesuffix("ok").strip())
        for r in run.results
    }
    assert got == expected
    assert {r.outcome for r in run.results} == {Outcome.PASS}


def test_pod_scope_failure_path_is_inside_the_template(tmp_path: Path) -> None:
    content = with_(
        id="ACME-WL-001",
        category="workloads",
        target={"scope": "pod", "gpu_only": True},
        require={"path": "$.metadata.labels.tier", "equals": "batch"},
    )
    check = load_check_file(write(tmp_path / "checks", "c.yaml", content))
    (result,) = run_check(check, snapshot_of(GPU_WORKLOADS, tmp_path)).results
    assert (result.outcome, result.path) == (F, "spec.template.metadata.labels.tier")


def test_a_declarative_check_is_an_ordinary_check(tmp_path: Path) -> None:
    check = load_check_file(write(tmp_path, "acme_priority.yaml", BASE))
    assert (check.severity, check.requires, check.function.__name__) == (
        Severity.MEDIUM,
        ("DaemonSet",),
        "acme_priority",
    )
    assert check.module == str(tmp_path / "acme_priority.yaml")
    registry = load_checks(plugins=False, extra=load_check_dirs([str(tmp_path)]))
    assert registry["ACME-STACK-001"].origin == f"--checks-dir {tmp_path}"
    assert list(registry) == sorted(registry)


def test_builtin_declarative_checks_are_in_the_registry() -> None:
    builtin = load_checks(plugins=False)
    declarative = sorted(c.id for c in builtin.values() if c.module.endswith(".yaml"))
    files = sorted((ROOT / "checks" / "declarative").glob("*.yaml"))
    assert len(declarative) == len(files) >= 4
    assert all(builtin[i].origin == "gpu-audit" for i in declarative)


# --------------------------------------------------------------------------- docs and CLI


def docs_example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(r"## A complete example.*?```yaml\n(.*?)```", text, re.S)
    assert match, "docs/declarative-checks.md lost its example"
    return match.group(1)


DEVICE_PLUGINS = """
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: nvidia-device-plugin-daemonset, namespace: kube-system}
    spec:
      template:
        spec:
          containers: [{name: ctr, image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}]
    ---
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: fluent-bit, namespace: logging}
    spec:
      template:
        spec:
          containers: [{name: fluent-bit, image: "cr.fluentbit.io/fluent/fluent-bit:3.1.9"}]
"""


def test_the_documented_example_works_from_the_command_line(tmp_path: Path) -> None:
    checks_dir = tmp_path / "my-checks"
    checks_dir.mkdir()
    (checks_dir / "acme_device_plugin_priority.yaml").write_text(docs_example(), encoding="utf-8")
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(textwrap.dedent(DEVICE_PLUGINS), encoding="utf-8")
    runner = CliRunner()
    args = ["--checks-dir", str(checks_dir)]

    scan = runner.invoke(
        main,
        ["scan", "--from-file", str(manifest), "--only", "ACME-STACK-001", "-o", "json", *args],
    )
    assert scan.exit_code == 0, scan.output
    report = json.loads(scan.output)
    (finding,) = report["findings"]
    assert finding["resource"]["name"] == "nvidia-device-plugin-daemonset"
    assert finding["remediation"].startswith("kubectl -n kube-system patch daemonset nvidia-")
    (status,) = [c for c in report["checks"] if c["id"] == "ACME-STACK-001"]
    assert status["status"] == "failed"

    listed = runner.invoke(main, ["checks", "list", "--category", "stack", *args])
    assert "ACME-STACK-001" in listed.output
    shown = runner.invoke(main, ["checks", "show", "ACME-STACK-001", *args])
    assert f"from --checks-dir {checks_dir}" in shown.output
    docs = runner.invoke(main, ["checks", "docs", *args])
    assert "### ACME-STACK-001" in docs.output
    assert "ACME-STACK-001" not in runner.invoke(main, ["checks", "docs"]).output


def test_a_broken_checks_dir_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", with_(severity="urgent"))
    for command in (["checks", "list"], ["scan", "--from-file", str(bad)], ["checks", "docs"]):
        result = CliRunner().invoke(main, [*command, "--checks-dir", str(tmp_path)])
        assert result.exit_code == 2, command
        assert f"gpu-audit: error: {bad}: severity: unknown severity 'urgent'" in result.output
