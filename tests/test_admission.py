"""`gpu-audit admission`: what the policies and bindings say, offline.

Whether the CEL is right is proven on the real apiserver, against the Python checks, by
tests/live/test_admission_policies.py; these tests hold the rendering: names, matched kinds,
match conditions, actions per severity, namespace selectors, the CLI and its errors.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.admission import (
    MACROS,
    WORKLOAD_TEMPLATES,
    AdmissionError,
    AdmissionOptions,
    admission_checks,
    exemption_condition,
    expand,
    matched_types,
    parse_options,
    render_binding,
    render_objects,
    render_policy,
    render_yaml,
)
from gpu_audit.catalog import check_metadata, checks_markdown
from gpu_audit.cli import main
from gpu_audit.declarative import load_check_file
from gpu_audit.errors import InputError
from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.model import AdmissionRule, Severity
from gpu_audit.registry import load_checks

CHECKS = load_checks(plugins=False)
COVERED = admission_checks(CHECKS.values())


def test_at_least_fifteen_checks_have_an_admission_form() -> None:
    assert len(COVERED) >= 15, [c.id for c in COVERED]


def test_every_macro_is_expanded_and_unknown_ones_are_an_error() -> None:
    for check in COVERED:
        assert check.admission is not None
        for text in (check.admission.valid, check.admission.where):
            assert not re.search(r"@[a-z_]+\(", expand(text)), check.id
    assert expand("@gpu(c)").startswith("(c.?resources.?limits")
    assert "\n" not in expand("a\n   && 'two  spaces'") and "'two  spaces'" in expand(
        "'two  spaces'"
    )
    with pytest.raises(AdmissionError, match="@nope"):
        expand("@nope(c)")
    assert set(MACROS) >= {"gpu", "pod_gpu", "stack_agent", "stack_image", "containers"}


def _balanced(expression: str) -> bool:
    """Parentheses and brackets pair up outside CEL string literals."""
    code = re.sub(r"'(?:[^'\\]|\\.)*'", "''", expression)
    pairs = {")": "(", "]": "["}
    depth: list[str] = []
    for char in code:
        if char in "([":
            depth.append(char)
        elif char in pairs and (not depth or depth.pop() != pairs[char]):
            return False
    return not depth


def test_every_expression_is_balanced() -> None:
    """A cheap offline check that catches a missing parenthesis before the apiserver does."""
    for obj in render_objects(CHECKS.values(), AdmissionOptions()):
        spec = obj["spec"]
        texts = [c["expression"] for c in spec.get("matchConditions", [])]
        texts += [v["expression"] for v in spec.get("variables", [])]
        texts += [
            t
            for v in spec.get("validations", [])
            for t in (v["expression"], v["messageExpression"])
        ]
        assert all(_balanced(t) for t in texts), obj["metadata"]["name"]
    assert not _balanced("a(b[c)]") and not _balanced("f(x") and _balanced("f(')')")


def test_yaml_round_trips() -> None:
    objects = render_objects(CHECKS.values(), AdmissionOptions())
    assert list(yaml.safe_load_all(render_yaml(objects))) == objects


def test_policy_matches_the_kinds_a_check_reads() -> None:
    wl005 = render_policy(CHECKS["GPU-WL-005"])
    rules = wl005["spec"]["matchConstraints"]["resourceRules"]
    resources = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    expected = {(KNOWN_KINDS[t].group, KNOWN_KINDS[t].plural) for t in WORKLOAD_TEMPLATES}
    assert resources == expected
    assert ("kubeflow.org", "pytorchjobs") in resources and ("", "pods") in resources
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in rules)
    hpa = render_policy(CHECKS["GPU-HPA-001"])
    assert hpa["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["autoscaling"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["horizontalpodautoscalers"],
        }
    ]
    # An object rule has no template variable and no owner condition.
    assert "variables" not in hpa["spec"]
    assert [c["name"] for c in hpa["spec"]["matchConditions"]] == ["not-exempted"]
    assert [c["name"] for c in wl005["spec"]["matchConditions"]] == [
        "not-exempted",
        "not-controlled",
    ]
    assert [v["name"] for v in wl005["spec"]["variables"]] == ["templates", "oldTemplates"]


def test_updates_ratchet() -> None:
    """The validation holds on the new object, or the update is of an object that already
    failed: the same expression on oldObject and the old templates."""
    expression = render_policy(CHECKS["GPU-WL-005"])["spec"]["validations"][0]["expression"]
    new, _, old = expression.partition(" || (request.operation == 'UPDATE' && oldObject != null")
    assert "variables.templates" in new and "oldObject" not in new
    assert "variables.oldTemplates" in old and "variables.templates" not in old
    inner = new.removeprefix("(").removesuffix(")")
    normalised = old.replace("oldObject", "object").replace("oldTemplates", "templates")
    assert normalised == f" && !({inner}))"


def test_a_pod_rule_limited_to_daemonsets_matches_only_daemonsets() -> None:
    check = CHECKS["GPU-SHARE-008"]
    assert check.admission is not None
    assert matched_types(check.admission) == ["DaemonSet"]


def test_validation_carries_id_severity_and_message() -> None:
    check = CHECKS["GPU-WL-005"]
    assert check.admission is not None
    validation = render_policy(check)["spec"]["validations"][0]
    assert validation["message"] == f"GPU-WL-005 (high): {check.admission.message}"
    assert validation["messageExpression"].startswith("'GPU-WL-005 (high): ")
    assert "(containers: " in validation["messageExpression"]
    assert validation["reason"] == "Invalid"
    assert render_policy(check)["metadata"]["annotations"] == {
        "gpu-audit.io/check": "GPU-WL-005",
        "gpu-audit.io/severity": "high",
    }


def test_exemption_condition_names_the_check_and_needs_a_reason() -> None:
    text = exemption_condition("GPU-WL-005")
    assert "[?'gpu-audit.io/exempt']" in text and "[?'gpu-audit.io/exempt-reason']" in text
    assert "x.trim() == 'GPU-WL-005'" in text and ".trim() != ''" in text


def test_deny_is_opt_in_per_severity() -> None:
    high, low = CHECKS["GPU-WL-005"], CHECKS["GPU-SCHED-007"]
    options = parse_options(["critical,high"], [], [])
    assert options.deny == {Severity.CRITICAL, Severity.HIGH}
    assert render_binding(high, options)["spec"]["validationActions"] == ["Deny", "Audit"]
    assert render_binding(low, options)["spec"]["validationActions"] == ["Warn", "Audit"]
    assert render_binding(high, AdmissionOptions())["spec"]["validationActions"] == [
        "Warn",
        "Audit",
    ]


def test_a_rule_severity_overrides_the_checks() -> None:
    check = CHECKS["GPU-WL-005"]
    assert check.admission is not None
    lowered = dataclasses.replace(
        check, admission=dataclasses.replace(check.admission, severity=Severity.MEDIUM)
    )
    options = AdmissionOptions(deny=frozenset({Severity.HIGH}))
    assert render_binding(lowered, options)["spec"]["validationActions"] == ["Warn", "Audit"]
    assert render_policy(lowered)["spec"]["validations"][0]["message"].startswith(
        "GPU-WL-005 (medium): "
    )


def test_namespace_selector() -> None:
    options = parse_options([], ["team=ml", "gpu=yes"], ["kube-system,gpu-operator"])
    binding = render_binding(CHECKS["GPU-WL-005"], options)
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"gpu": "yes", "team": "ml"},
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["gpu-operator", "kube-system"],
            }
        ],
    }
    assert "matchResources" not in render_binding(CHECKS["GPU-WL-005"], AdmissionOptions())
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_options([], ["team"], [])
    with pytest.raises(ValueError, match="unknown severity"):
        parse_options(["urgent"], [], [])


def test_objects_come_in_policy_binding_pairs_by_check_id() -> None:
    objects = render_objects(CHECKS.values(), AdmissionOptions())
    kinds = [o["kind"] for o in objects]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * len(COVERED)
    names = [o["metadata"]["name"] for o in objects[::2]]
    assert names == [f"gpu-audit-{c.id.lower()}" for c in COVERED]
    assert all(b["spec"]["policyName"] == b["metadata"]["name"] for b in objects[1::2])


def test_cli_prints_multi_document_yaml(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["admission", "--only", "GPU-WL-005,GPU-HPA-001", "--deny", "high"]
    )
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    assert [d["metadata"]["name"] for d in docs] == [
        "gpu-audit-gpu-hpa-001",
        "gpu-audit-gpu-hpa-001",
        "gpu-audit-gpu-wl-005",
        "gpu-audit-gpu-wl-005",
    ]
    assert docs[3]["spec"]["validationActions"] == ["Deny", "Audit"]
    out = tmp_path / "policies.yaml"
    again = runner.invoke(
        main, ["admission", "--only", "GPU-WL-005,GPU-HPA-001", "--deny", "high", "-o", str(out)]
    )
    assert again.exit_code == 0 and out.read_text(encoding="utf-8") == result.output
    skipped = runner.invoke(main, ["admission", "--skip", "GPU-WL-005"])
    assert (
        "gpu-audit-gpu-wl-005" not in skipped.output and "gpu-audit-gpu-hpa-001" in skipped.output
    )


def test_cli_errors_name_the_problem() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["admission", "--only", "GPU-SCHED-001"])
    assert result.exit_code == 2
    assert "no admission form" in result.output and "GPU-SCHED-001" in result.output
    result = runner.invoke(main, ["admission", "--deny", "urgent"])
    assert result.exit_code == 2 and "unknown severity 'urgent'" in result.output
    result = runner.invoke(main, ["admission", "--only", "GPU-NOPE-001"])
    assert result.exit_code == 2 and "GPU-NOPE-001" in result.output


def test_admission_rule_is_validated() -> None:
    with pytest.raises(ValueError, match="scope"):
        AdmissionRule(scope="cluster", valid="true", message="m")
    with pytest.raises(ValueError, match="kinds"):
        AdmissionRule(scope="object", valid="true", message="m")
    with pytest.raises(ValueError, match="valid"):
        AdmissionRule(scope="pod", valid=" ", message="m")


def test_declarative_admission_key(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[1] / "checks" / "declarative"
    text = (source / "cluster_policy_driver_upgrades_automated.yaml").read_text(encoding="utf-8")
    loaded = load_check_file(source / "cluster_policy_driver_upgrades_automated.yaml")
    assert loaded.admission is not None and loaded.admission.scope == "object"
    assert loaded.admission.kinds == ("ClusterPolicy.nvidia.com",)
    assert loaded.admission.message.startswith("has driver.upgradePolicy.autoUpgrade off")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  valid:", "  vaild:"), encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.yaml: admission.vaild: unknown field"):
        load_check_file(bad)
    bad.write_text(text + "  severity: urgent\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"admission: unknown severity"):
        load_check_file(bad)


def test_check_reference_marks_the_checks_enforceable_at_admission() -> None:
    text = checks_markdown(CHECKS.values())
    assert f"{len(COVERED)} checks are enforceable at admission" in text
    for check in CHECKS.values():
        row = next(line for line in text.splitlines() if line.startswith(f"| [{check.id}]"))
        assert ("| yes |" in row) == (check.admission is not None), row
    section = text.split("### GPU-WL-005", 1)[1].split("### ", 1)[0]
    assert "*Admission.* Enforceable at admission with `gpu-audit admission`" in section
    assert check_metadata(CHECKS["GPU-WL-005"])["admission"] is True
    assert check_metadata(CHECKS["GPU-SCHED-001"])["admission"] is False
