"""The remediation of a pod-spec finding on a workload custom resource, applied for real,
fixes the finding and loses nothing.

For every workload custom resource kind `templates_of` reads (tests/live/cr_remediation_cases.py
holds one failing object each, beside what a careless patch would lose: other containers, other
list items, images, commands, tolerations), against the test kube-apiserver:

1. the objects are created, read back and scanned with the check: the finding is on the object;
2. its remediation is read as a shell reads it and must be `kubectl patch ... --type=json`
   (custom resources take no strategic merge patch; a merge patch would replace whole lists);
   the patch is sent as that call (application/json-patch+json, fieldValidation=Strict, no
   dry-run), then the object is read back;
3. every value of the object before the patch that no operation of the patch names is unchanged
   after it (nothing else was lost), and every list is at least as long;
4. the read-back object (with the objects it is read with) is scanned again; the check reports
   nothing on it: the patch fixed what was found. Up to 3 rounds, one finding each.

The table of kinds and outcomes is printed (`pytest -s`, or -rA) and all rows must pass.
"""

from __future__ import annotations

import json
import shlex
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from gpu_audit.engine import Finding
from tests.builders import run_check_on
from tests.json_patch import apply_json_patch, lost
from tests.live.cr_remediation_cases import Case, cases
from tests.live.test_remediation_dry_run import (
    JSON_PATCH,
    MERGE_PATCH,
    SERVER_FIELDS,
    Cluster,
    KubeRequest,
    command_lines,
    discover,
    parse_kubectl,
)

MAX_ROUNDS = 3
# Kinds templates_of reads that need no case of their own here, and why.
NOT_APPLICABLE = {
    "ServingRuntime / ClusterServingRuntime": "no pod of its own: each InferenceService merges "
    "it, and the finding is on the InferenceService (case InferenceService (model))",
    "TrainingRuntime": "no CRD in ../shared/crds (the namespaced twin of ClusterTrainingRuntime)",
    "TFJob": "no CRD in ../shared/crds",
}


@dataclass
class Row:
    label: str
    kind: str
    check_id: str
    rounds: int = 0
    operations: int = 0
    outcome: str = "not run"


def findings_on(case: Case, objects: list[dict[str, Any]]) -> list[Finding]:
    target = case.target["metadata"]
    run = run_check_on(case.check_id, objects)
    return [
        f
        for f in run.findings
        if f.result.ref.name == target["name"]
        and f.result.ref.kind.split(".", 1)[0] == case.target["kind"]
    ]


def apply_remediation(cluster: Cluster, finding: Finding) -> list[dict[str, Any]]:
    """Run the remediation's one command as the API calls it makes, for real: `kubectl patch
    --type=json` as that PATCH; `kubectl get | kubectl patch --local | kubectl replace
    --force` (a fix of an immutable field) as a GET, the patch applied locally, a DELETE and
    a POST of the patched object."""
    lines = command_lines(finding.remediation)
    assert len(lines) == 1, f"one command expected:\n{finding.remediation}"
    line, stdin = lines[0]
    assert not stdin
    words: list[list[str]] = [[]]
    for word in shlex.split(line):  # a quoted | stays inside its word
        if word == "|":
            words.append([])
        else:
            words[-1].append(word)
    stages = [parse_kubectl(stage) for stage in words]
    patch = stages[1] if len(stages) == 3 else stages[0]
    assert patch.verb == "patch", f"not a patch: {line}"
    assert patch.flags.get("type") == "json", f"a custom resource needs --type=json: {line}"
    operations: list[dict[str, Any]] = json.loads(patch.flags["p"])
    ref = finding.result.ref
    strict = urllib.parse.urlencode({"fieldValidation": "Strict"})
    if len(stages) == 1:
        api, name = patch.target(cluster)
        assert (name, patch.namespace) == (ref.name, ref.namespace), line
        path = api.path(ref.namespace, name)
        status, reply = cluster.call("PATCH", f"{path}?{strict}", operations, JSON_PATCH)
        assert status == 200, f"HTTP {status}: {reply}\n{finding.remediation}"
        return operations
    get, replace = stages[0], stages[2]
    assert (get.verb, get.flags.get("o")) == ("get", "json"), line
    assert "local" in patch.switches and patch.source == "-", line
    assert replace.verb == "replace" and "force" in replace.switches and replace.source == "-"
    api, name = get.target(cluster)
    assert (name, get.namespace) == (ref.name, ref.namespace), line
    path = api.path(ref.namespace, name)
    status, current = cluster.call("GET", path)
    assert status == 200, current
    fixed = apply_json_patch(current, operations)
    status, reply = cluster.call("DELETE", path)
    assert status in (200, 202), reply
    for key in SERVER_FIELDS:
        fixed["metadata"].pop(key, None)
    status, reply = cluster.call("POST", f"{api.path(ref.namespace)}?{strict}", fixed)
    assert status == 201, f"HTTP {status}: {reply}\n{finding.remediation}"
    return operations


def read_back(cluster: Cluster, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        api = cluster.discovery.of_object(obj)
        meta = obj["metadata"]
        status, reply = cluster.call(
            "GET", api.path(meta.get("namespace", "") if api.namespaced else "", meta["name"])
        )
        assert status == 200, reply
        out.append(reply)
    return out


def run_case(
    cluster: Cluster,
    case: Case,
    row: Row,
    apply: Callable[[Cluster, Finding], list[dict[str, Any]]] = apply_remediation,
) -> None:
    """Create the case's objects, then apply the remediation of their first finding with
    `apply` (which returns the JSON patch operations it sent) until none is left."""
    for obj in case.objects:
        status, reply = cluster.apply(obj, dry_run=False)
        assert status in (200, 201), f"{obj['kind']} {obj['metadata']['name']}: {reply}"
    current = read_back(cluster, case.objects)
    found = findings_on(case, current)
    assert found, f"{case.check_id} finds nothing on the {case.label}"
    while found:
        assert row.rounds < MAX_ROUNDS, f"still {len(found)} findings after {row.rounds} patches"
        before = current[0]
        operations = apply(cluster, found[0])
        row.rounds += 1
        row.operations += sum(op["op"] != "test" for op in operations)
        current = read_back(cluster, case.objects)
        problems = lost(before, current[0], operations)
        assert not problems, "the patch lost or changed:\n" + "\n".join(problems)
        left = findings_on(case, current)
        assert len(left) < len(found), f"the patch did not fix: {found[0].result.message}"
        found = left


def cleanup(cluster: Cluster, case: Case) -> None:
    query = urllib.parse.urlencode({"propagationPolicy": "Background", "gracePeriodSeconds": 0})
    for obj in case.objects:
        api = cluster.discovery.of_object(obj)
        meta = obj["metadata"]
        path = api.path(meta.get("namespace", "") if api.namespaced else "", meta["name"])
        status, reply = cluster.call("DELETE", f"{path}?{query}")
        assert status in (200, 202, 404), f"cleanup of {path}: HTTP {status}: {reply}"


def run_all(
    cluster: Cluster,
    all_cases: list[Case],
    capsys: pytest.CaptureFixture[str],
    apply: Callable[[Cluster, Finding], list[dict[str, Any]]] = apply_remediation,
    not_applicable: Mapping[str, str] | None = None,
) -> None:
    """Every case through run_case (its objects deleted after), the table of outcomes printed
    (with the kinds `not_applicable`, and why); fails when any case did."""
    rows = []
    for case in all_cases:
        row = Row(case.label, case.target["kind"], case.check_id)
        rows.append(row)
        try:
            run_case(cluster, case, row, apply)
            row.outcome = "fixed, nothing lost"
        except AssertionError as exc:
            row.outcome = "FAILED: " + " / ".join(str(exc).splitlines()[:4])[:600]
        finally:
            cleanup(cluster, case)
    table = [
        "| case | kind | check | patches | operations | result |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| {r.label} | {r.kind} | {r.check_id} | {r.rounds} | {r.operations} | {r.outcome} |"
            for r in rows
        ),
        *(
            f"| {kind} | | | | | not applicable: {why} |"
            for kind, why in (not_applicable or {}).items()
        ),
    ]
    with capsys.disabled():
        print("\n" + "\n".join(table))
    failed = [r for r in rows if not r.outcome.startswith("fixed")]
    assert not failed, "\n".join(f"{r.label}: {r.outcome}" for r in failed)


def test_remediations_of_custom_resources_apply_and_fix_the_finding(
    kube_request: KubeRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = Cluster(kube_request, discover(kube_request))
    run_all(cluster, cases(), capsys, not_applicable=NOT_APPLICABLE)


def test_a_merge_patch_of_a_custom_resource_replaces_its_lists(kube_request: KubeRequest) -> None:
    """Why the fixes are JSON patches: the same fix as the JSON merge patch `kubectl patch`
    sends a custom resource by default (the fragment nested under the template's path) is
    accepted, and drops the container's command and the sidecar."""
    cluster = Cluster(kube_request, discover(kube_request))
    example = next(c for c in cases() if c.label == "PyTorchJob")
    try:
        status, reply = cluster.apply(example.target, dry_run=False)
        assert status in (200, 201), reply
        (before,) = read_back(cluster, example.objects)
        limits = {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}}
        worker = {"containers": [{"name": "pytorch", "resources": limits}]}
        fragment = {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": worker}}}}}
        api = cluster.discovery.of_object(example.target)
        path = api.path(example.target["metadata"]["namespace"], example.target["metadata"]["name"])
        status, reply = cluster.call("PATCH", path, fragment, MERGE_PATCH)
        assert status == 200, reply
        (after,) = read_back(cluster, example.objects)
        containers = after["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        assert [c["name"] for c in containers["containers"]] == ["pytorch"]
        assert "command" not in containers["containers"][0]
        assert lost(before, after, [])
    finally:
        cleanup(cluster, example)
