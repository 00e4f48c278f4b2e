"""Admission policies: the checks that can be decided from one object, enforced when it is
created or changed.

A check declares its admission form next to itself (`admission=AdmissionRule(...)` in
`@check`, an `admission:` mapping in a declarative check); this module renders one
ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, CEL) and its binding per check:

- `matchConstraints` lists the resource types the check reads. A pod or container rule is
  matched against Pods and every workload kind whose pod template is used as written (the
  built-in controllers and the training job CRDs in WORKLOAD_TEMPLATES); the `templates`
  variable collects the pod templates of whichever kind is admitted, with CEL optionals
  (`object.spec.?tasks.orValue([])`) for fields that may be absent.
- `matchConditions` leave alone what a scan would not report: objects exempted by the
  `gpu-audit.io/exempt` annotation (with its required reason), objects controlled by another
  object the same policy matches (a Deployment's ReplicaSet and Pods: a scan reports on the
  top-most owner, and the owner was checked when it was admitted).
- validations ratchet: an update is refused only when it makes a compliant object fail (the
  same CEL on `oldObject`), so objects admitted before the policy can still be scaled,
  labelled, suspended and resumed.
- each validation carries the check id, severity and message in its `messageExpression`
  (with the failing containers' names for container rules).
- the binding's `validationActions` are Warn and Audit, or Deny and Audit for the severities
  given to `--deny` (Deny and Warn together are refused by the API); `namespaceSelector`
  narrows the namespaces.

Rules may use the macros of MACROS (`@gpu(c)`, `@stack_agent(t)`...), written once here
from the same constants the Python checks use.

References: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/
(match conditions, variables, messageExpression, validation actions, failure policy),
https://kubernetes.io/docs/reference/using-api/cel/ (optional field selection, the strings and
quantity libraries, cost limits), https://pkg.go.dev/k8s.io/apiserver/pkg/apis/cel (the
runtime cost budgets: 10,000,000 per binding, 2,500,000 for its match conditions;
`failurePolicy: Fail` reports an evaluation over budget with the binding's actions).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gpu_audit.k8s.gpu_resources import AMD_GPU, NVIDIA_GPU, NVIDIA_MIG_PREFIX
from gpu_audit.k8s.gpu_stack import _STACK_OWNER_KINDS, GPU_STACK_IMAGE_PATHS
from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.model import AdmissionRule, Check, Severity
from gpu_audit.postscan.exemptions import EXEMPT_ANNOTATION, REASON_ANNOTATION

API_VERSION = "admissionregistration.k8s.io/v1"
NAME_PREFIX = "gpu-audit-"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-audit"}
CHECK_ANNOTATION = "gpu-audit.io/check"
SEVERITY_ANNOTATION = "gpu-audit.io/severity"
OPERATIONS = ["CREATE", "UPDATE"]


class AdmissionError(Exception):
    """A selection that renders no policy, or asks for a check without an admission form."""


# --------------------------------------------------------------------------- workload kinds

# Resource type -> the CEL list of its pod templates (PodTemplateSpecs, or the Pod itself:
# each has .metadata and .spec). Only kinds whose template is the pod as it will run: KubeRay,
# KServe, Kubeflow Trainer, NIM and Spark build their pods from more than the object.
WORKLOAD_TEMPLATES: dict[str, str] = {
    "Pod": "[object]",
    "Deployment": "[object.spec.template]",
    "StatefulSet": "[object.spec.template]",
    "DaemonSet": "[object.spec.template]",
    "ReplicaSet": "has(object.spec.template) ? [object.spec.template] : []",
    "ReplicationController": "has(object.spec.template) ? [object.spec.template] : []",
    "Job": "[object.spec.template]",
    "CronJob": "[object.spec.jobTemplate.spec.template]",
    "PyTorchJob.kubeflow.org": (
        "object.spec.?pytorchReplicaSpecs.orValue({}).map(k,"
        " has(object.spec.pytorchReplicaSpecs[k].template),"
        " object.spec.pytorchReplicaSpecs[k].template)"
    ),
    "MPIJob.kubeflow.org": (
        "object.spec.?mpiReplicaSpecs.orValue({}).map(k,"
        " has(object.spec.mpiReplicaSpecs[k].template),"
        " object.spec.mpiReplicaSpecs[k].template)"
    ),
    "Job.batch.volcano.sh": (
        "object.spec.?tasks.orValue([]).filter(x, has(x.template)).map(x, x.template)"
    ),
    "JobSet.jobset.x-k8s.io": (
        "object.spec.?replicatedJobs.orValue([]).map(x, x.template.spec.template)"
    ),
    "LeaderWorkerSet.leaderworkerset.x-k8s.io": (
        "[object.spec.leaderWorkerTemplate.workerTemplate]"
        " + (has(object.spec.leaderWorkerTemplate.leaderTemplate)"
        " ? [object.spec.leaderWorkerTemplate.leaderTemplate] : [])"
    ),
}

# --------------------------------------------------------------------------- macros


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _gpu_resource(key: str) -> str:
    """CEL: the resource name `key` is a GPU (gpu_audit.k8s.gpu_resources.is_gpu_resource)."""
    return (
        f"({key} in ['{NVIDIA_GPU}', '{AMD_GPU}'] || {key}.startsWith('{NVIDIA_GPU}.')"
        f" || {key}.startsWith('{NVIDIA_GPU}-') || {key}.startsWith('{NVIDIA_MIG_PREFIX}'))"
    )


def _stack_image_pattern() -> str:
    """RE2 for an image on the GPU-stack allowlist, from any registry host (a first part with
    a dot, a port or `localhost`), with any tag or digest (gpu_stack.is_gpu_stack_image)."""
    paths = "|".join(
        p.replace(".", "[.]") + ("[^:@]+" if p.endswith("/") else "") for p in GPU_STACK_IMAGE_PATHS
    )
    return f"^(([^/]*[.:][^/]*|localhost)/)?({paths})(:[^/@]*)?(@.*)?$"


# Each macro is `@name(argument)`; `_` in the body stands for the argument, which must be a
# CEL identifier or field selection without parentheses.
MACROS: dict[str, str] = {
    # The container `_` names a GPU resource in its requests or limits.
    "gpu": (
        "(_.?resources.?limits.orValue({}).exists(k, GPU(k))"
        " || _.?resources.?requests.orValue({}).exists(k, GPU(k)))"
    ).replace("GPU(k)", _gpu_resource("k")),
    # The init containers and containers of the pod template `_`.
    "containers": "(_.spec.?initContainers.orValue([]) + _.spec.?containers.orValue([]))",
    # A container of the pod template `_` names a GPU resource.
    "pod_gpu": "@containers(_).exists(g, @gpu(g))",
    # The image reference `_` is on the GPU-stack allowlist.
    "stack_image": f"_.lowerAscii().matches({_cel_string(_stack_image_pattern())})",
    # The pod template `_` is a GPU-stack node agent: run by a DaemonSet (or the operator)
    # and built only from GPU-stack images (gpu_stack.is_gpu_stack_node_agent).
    "stack_agent": (
        "(size(@containers(_)) > 0 && (object.kind == 'DaemonSet'"
        " || object.metadata.?ownerReferences.orValue([]).exists(r, r.kind in "
        + str(sorted(_STACK_OWNER_KINDS))
        + ")) && @containers(_).all(s, has(s.image) && @stack_image(s.image)))"
    ),
    # The resource name `_` is a GPU resource.
    "gpu_resource": _gpu_resource("_"),
    # The quantity `_` (a string, or an int in a custom resource) is a whole number.
    "whole": (
        "(type(_) == int || (type(_) == string && isQuantity(_) && quantity(_).isInteger()))"
    ),
    # The quantity `_` is above zero.
    "positive": (
        "(type(_) == int ? dyn(_) > 0 : type(_) == string && isQuantity(_)"
        " && quantity(_).isGreaterThan(quantity('0')))"
    ),
    # The resource name `_` is an extended resource (gpu_resources.is_extended_resource).
    "extended": (
        "(_.contains('/') && !_.startsWith('requests.')"
        " && _.split('/')[0] != 'kubernetes.io' && !_.split('/')[0].endsWith('.kubernetes.io'))"
    ),
}
_MACRO = re.compile(r"@([a-z_]+)\(([A-Za-z_][A-Za-z0-9_.?]*)\)")


def _one_line(expression: str) -> str:
    """The expression on one line: runs of white space outside string literals become one
    space (rules are written over several indented lines)."""
    parts = re.split(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", expression)
    return "".join(
        part if index % 2 else re.sub(r"\s+", " ", part) for index, part in enumerate(parts)
    ).strip()


def expand(expression: str) -> str:
    """The CEL of a rule on one line, its macros expanded (macros may use other macros)."""
    expression = _one_line(expression)
    for _ in range(10):

        def one(match: re.Match[str]) -> str:
            name, argument = match.group(1), match.group(2)
            if name not in MACROS:
                raise AdmissionError(f"unknown admission macro @{name}")
            return re.sub(r"(?<![\w'.])_(?![\w'])", lambda _: argument, MACROS[name])

        expanded = _MACRO.sub(one, expression)
        if expanded == expression:
            return expression
        expression = expanded
    raise AdmissionError(f"admission macros nest too deeply in {expression[:80]!r}")


# --------------------------------------------------------------------------- options


@dataclass(frozen=True, slots=True)
class AdmissionOptions:
    """Which severities are denied (the rest are warnings), and which namespaces the bindings
    apply to (`namespace_labels`: matchLabels; `exclude_namespaces`: never these)."""

    deny: frozenset[Severity] = frozenset()
    namespace_labels: Mapping[str, str] | None = None
    exclude_namespaces: tuple[str, ...] = ()


def parse_options(
    deny: Sequence[str], namespace_labels: Sequence[str], exclude_namespaces: Sequence[str]
) -> AdmissionOptions:
    """Options from the command line; ValueError names the bad value."""
    severities = frozenset(
        Severity.parse(part.strip()) for value in deny for part in value.split(",") if part.strip()
    )
    labels: dict[str, str] = {}
    for item in namespace_labels:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--namespace-label {item!r}: expected KEY=VALUE")
        labels[key.strip()] = value.strip()
    excluded = tuple(
        part.strip() for value in exclude_namespaces for part in value.split(",") if part.strip()
    )
    return AdmissionOptions(severities, labels or None, excluded)


def rule_severity(check: Check) -> Severity:
    rule = check.admission
    return rule.severity if rule is not None and rule.severity is not None else check.severity


def admission_checks(checks: Iterable[Check]) -> list[Check]:
    """The checks with an admission form, by id."""
    return sorted((c for c in checks if c.admission is not None), key=lambda c: c.id)


# --------------------------------------------------------------------------- rendering


def policy_name(check: Check) -> str:
    return NAME_PREFIX + check.id.lower()


def matched_types(rule: AdmissionRule) -> list[str]:
    """The resource types a rule's policy matches."""
    if rule.scope == "object":
        return list(rule.kinds)
    wanted = rule.kinds or tuple(WORKLOAD_TEMPLATES)
    return [t for t in WORKLOAD_TEMPLATES if t in wanted]


def _resource_rules(types: Sequence[str]) -> list[dict[str, Any]]:
    by_group: dict[str, list[str]] = {}
    for type_ in types:
        info = KNOWN_KINDS[type_]
        by_group.setdefault(info.group, []).append(info.plural)
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": list(OPERATIONS),
            "resources": sorted(plurals),
        }
        for group, plurals in sorted(by_group.items())
    ]


def _is_kind(type_: str) -> str:
    """CEL: the admitted object is of resource type `type_`."""
    info = KNOWN_KINDS[type_]
    version = (
        f"object.apiVersion.startsWith('{info.group}/')"
        if info.group
        else ("object.apiVersion == 'v1'")
    )
    return f"object.kind == '{info.kind}' && {version}"


def _templates_expression(types: Sequence[str]) -> str:
    expression = "[]"
    for type_ in reversed(types):
        expression = f"({_is_kind(type_)}) ? ({WORKLOAD_TEMPLATES[type_]}) : {expression}"
    return expression


def exemption_condition(check_id: str) -> str:
    """CEL: true unless the object carries a valid exempt annotation for `check_id` (exact
    ids, comma-separated, and a non-empty reason: gpu_audit.postscan.exemptions)."""
    annotations = "object.metadata.?annotations.orValue({})"
    return (
        f"!({annotations}{_field(EXEMPT_ANNOTATION)}.orValue('').split(',')"
        f".exists(x, x.trim() == '{check_id}')"
        f" && {annotations}{_field(REASON_ANNOTATION)}.orValue('').trim() != '')"
    )


def _field(key: str) -> str:
    """An optional map index (`m[?'key']`), for a key that is not a CEL identifier."""
    return f"[?{_cel_string(key)}]"


def _controlled_condition(types: Sequence[str]) -> str:
    """CEL: true unless a controller of the object is of a type the policy matches."""
    owners = sorted(
        {
            f"{KNOWN_KINDS[t].group}/{KNOWN_KINDS[t].kind}"
            if KNOWN_KINDS[t].group
            else KNOWN_KINDS[t].kind
            for t in types
        }
    )
    return (
        "!object.metadata.?ownerReferences.orValue([]).exists(r,"
        " r.?controller.orValue(false) &&"
        " (r.apiVersion.contains('/') ? r.apiVersion.split('/')[0] + '/' + r.kind : r.kind)"
        f" in {owners!r})"
    )


def _on_old_object(expression: str) -> str:
    """The expression evaluated on the object as it was before an update."""
    expression = expression.replace("variables.templates", "variables.oldTemplates")
    return re.sub(r"\bobject\b", "oldObject", expression)


def _ratcheted(expression: str) -> str:
    """Valid, or an update of an object that already failed: an update is refused only when
    it makes a compliant object fail, so objects admitted before the policy (or exempted
    then) can still be scaled, labelled, suspended and resumed."""
    return (
        f"({expression}) || (request.operation == 'UPDATE' && oldObject != null"
        f" && !({_on_old_object(expression)}))"
    )


def _validation(check: Check, rule: AdmissionRule) -> dict[str, Any]:
    valid = expand(rule.valid)
    where = expand(rule.where) if rule.where else ""
    applies = f"!({where}) || ({valid})" if where else valid
    severity = rule_severity(check).value
    prefix = f"{check.id} ({severity}): {rule.message}"
    if rule.scope == "object":
        expression = applies
        message = _cel_string(prefix)
    elif rule.scope == "pod":
        expression = f"variables.templates.all(t, {applies})"
        message = _cel_string(prefix)
    else:
        containers = expand("@containers(t)")
        expression = f"variables.templates.all(t, {containers}.all(c, {applies}))"
        names = (
            f"variables.templates.map(t, {containers}.filter(c, !({applies}))"
            ".map(c, c.?name.orValue('')).join(', ')).filter(n, n != '').join(', ')"
        )
        message = f"{_cel_string(prefix + ' (containers: ')} + {names} + ')'"
    return {
        "expression": _ratcheted(expression),
        "message": prefix,
        "messageExpression": message,
        "reason": "Invalid",
    }


def render_policy(check: Check) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy of one check with an admission form."""
    rule = check.admission
    if rule is None:
        raise AdmissionError(f"{check.id} has no admission form")
    types = matched_types(rule)
    conditions = [
        {"name": "not-exempted", "expression": exemption_condition(check.id)},
    ]
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": _resource_rules(types)},
    }
    if rule.scope != "object":
        conditions.append({"name": "not-controlled", "expression": _controlled_condition(types)})
        templates = _templates_expression(types)
        spec["variables"] = [
            {"name": "templates", "expression": templates},
            {
                "name": "oldTemplates",
                "expression": f"request.operation == 'UPDATE' && oldObject != null"
                f" ? ({_on_old_object(templates)}) : []",
            },
        ]
    spec["matchConditions"] = conditions
    spec["validations"] = [_validation(check, rule)]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": policy_name(check),
            "labels": dict(MANAGED_BY),
            "annotations": {
                CHECK_ANNOTATION: check.id,
                SEVERITY_ANNOTATION: rule_severity(check).value,
            },
        },
        "spec": spec,
    }


def render_binding(check: Check, options: AdmissionOptions) -> dict[str, Any]:
    """The binding of a check's policy: Deny for the severities asked, else Warn; Audit."""
    deny = rule_severity(check) in options.deny
    spec: dict[str, Any] = {
        "policyName": policy_name(check),
        "validationActions": ["Deny", "Audit"] if deny else ["Warn", "Audit"],
    }
    selector: dict[str, Any] = {}
    if options.namespace_labels:
        selector["matchLabels"] = dict(sorted(options.namespace_labels.items()))
    if options.exclude_namespaces:
        selector["matchExpressions"] = [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": sorted(set(options.exclude_namespaces)),
            }
        ]
    if selector:
        spec["matchResources"] = {"namespaceSelector": selector}
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name(check), "labels": dict(MANAGED_BY)},
        "spec": spec,
    }


def render_objects(
    checks: Iterable[Check], options: AdmissionOptions, named: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Policy then binding, per check with an admission form, by check id. A check `named`
    explicitly (--only) that has no admission form is an error, not a silent omission."""
    checks = list(checks)
    without = sorted({c.id for c in checks if c.admission is None} & set(named))
    if without:
        raise AdmissionError(
            f"no admission form (not decidable from one object): {', '.join(without)}"
        )
    selected = admission_checks(checks)
    if not selected:
        raise AdmissionError("no selected check has an admission form")
    out: list[dict[str, Any]] = []
    for check in selected:
        out += [render_policy(check), render_binding(check, options)]
    return out


class _Dumper(yaml.SafeDumper):
    """CEL (which quotes its strings with ') as literal blocks, readable and unescaped."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "'" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def render_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """Multi-document YAML, keys in the order written, long lines kept whole."""
    return yaml.dump_all(
        list(objects), Dumper=_Dumper, sort_keys=False, width=1_000_000, default_flow_style=False
    )
