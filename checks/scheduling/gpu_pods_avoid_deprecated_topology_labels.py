import json
from collections.abc import Iterator
from typing import Any

import yaml

from gpu_audit.api import (
    WORKLOAD_TYPES,
    AdmissionRule,
    Category,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    json_pointer,
    passed,
    pod_templates,
    pointer,
    str_map,
)

# The deprecated beta node labels and the GA labels that replace them, with the same values
# (https://kubernetes.io/docs/reference/labels-annotations-taints/: "topology.kubernetes.io/
# zone ... failure-domain.beta.kubernetes.io/zone (deprecated)"; kubernetes/kubernetes#81431
# and #82049 set both on every node and deprecated the beta ones).
GA_LABEL = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
}
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@check(
    id="GPU-SCHED-007",
    title="GPU pods select nodes by the GA topology labels, not the deprecated beta ones",
    category=Category.SCHEDULING,
    severity=Severity.LOW,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        failure-domain.beta.kubernetes.io/zone, failure-domain.beta.kubernetes.io/region and
        beta.kubernetes.io/instance-type are deprecated in favour of
        topology.kubernetes.io/zone, topology.kubernetes.io/region and
        node.kubernetes.io/instance-type, which carry the same values. A required selector on a
        label that a node provisioner or cloud provider no longer sets matches no node, and
        the GPU pod stays Pending even though GPU capacity is free.
    """,
    detection="""
        Pod templates that request GPUs: their nodeSelector and the required node affinity
        terms must not use failure-domain.beta.kubernetes.io/zone,
        failure-domain.beta.kubernetes.io/region or beta.kubernetes.io/instance-type.
        Preferred (soft) affinity is not evaluated.
    """,
    severity_evidence="""
        Always low: the deprecated labels are still on many nodes, so the selector may well
        match here. When no node matches it, the pod stays Pending and GPU-SCHED-002 reports
        that, high, from the nodes in the input.
    """,
    remediation="""
        # $kind $namespace/$name: $renamed, with the values it selects today
        $fix
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # <kind> <namespace>/<name>: the GA label in place of the beta one, with the value it
        # selects today (a strategic merge patch: null removes the beta key; the required
        # affinity terms, written whole, keep every expression's operator and values)
        spec:
          template:
            spec:
              nodeSelector:
                failure-domain.beta.kubernetes.io/zone: null
                topology.kubernetes.io/zone: <zone>
        # a custom resource: kubectl patch <kind> <name> -n <namespace> --type=json with a
        # "test" of the beta key's value, its "remove" and an "add" of the GA key (a "replace"
        # of an affinity expression's key)
    """,
    references=(
        "https://kubernetes.io/docs/reference/labels-annotations-taints/",
        "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/",
        "https://github.com/kubernetes/kubernetes/pull/81431",
    ),
    admission=AdmissionRule(
        scope="pod",
        where="@pod_gpu(t)",
        valid=f"""
            !t.spec.?nodeSelector.orValue({{}}).exists(k, k in {sorted(GA_LABEL)})
            && !t.spec.?affinity.?nodeAffinity.?{_REQUIRED}.?nodeSelectorTerms.orValue([])
              .exists(term, term.?matchExpressions.orValue([])
                .exists(e, e.key in {sorted(GA_LABEL)}))
        """,
        message="selects nodes by a deprecated beta topology label that newer nodes may not carry",
    ),
)
def gpu_pods_avoid_deprecated_topology_labels(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if not template.requests_gpu:
            continue
        operations, renamed, first = _renames(template)
        if not renamed:
            yield passed(template, "selects nodes without deprecated beta topology labels")
            continue
        yield failed(
            template,
            "selects nodes by the deprecated beta topology label"
            f"{'s' if len(renamed) > 1 else ''} {', '.join(renamed)}, which newer nodes may "
            "not carry",
            path=f"{template.path}.{first}",
            fix={
                "renamed": "; ".join(f"{old} becomes {GA_LABEL[old]}" for old in renamed),
                "fix": _fix(template, operations),
            },
        )


def _fix(template: PodTemplate, operations: list[dict[str, Any]]) -> str:
    """A built-in kind's object gets a strategic merge patch (what `kubectl patch` sends; a
    bare Pod or a Job, whose pod template cannot change, is recreated with it); a custom
    resource, which takes none, the guarded JSON patch."""
    owner = template.owner.ref
    if "." in owner.kind:
        operations_text = json.dumps(operations).replace("'", "'\\''")
        namespace = owner.namespace or "default"
        return (
            f"kubectl patch {owner.kind.lower()} {owner.name} -n {namespace} "
            f"--type=json -p '{operations_text}'"
        )
    pod: dict[str, Any] = {}
    selector = str_map(template.spec.get("nodeSelector"))
    moved: dict[str, str | None] = {}
    for key, value in sorted(selector.items()):
        if key in GA_LABEL:
            moved[key] = None
            if GA_LABEL[key] not in selector:
                moved[GA_LABEL[key]] = value
    if moved:
        pod["nodeSelector"] = moved
    affinity = as_mapping(as_mapping(template.spec.get("affinity")).get("nodeAffinity"))
    terms = as_list(as_mapping(affinity.get(_REQUIRED)).get("nodeSelectorTerms"))
    renamed = [_renamed_term(term) for term in terms]
    if renamed != json.loads(json.dumps(terms)):
        pod["affinity"] = {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": renamed}}}
    patch: dict[str, Any] = pod
    for key in reversed(template.path.split(".")):
        patch = {key: patch}
    return yaml.safe_dump(patch, sort_keys=False).rstrip("\n")


def _renamed_term(term: Any) -> Any:
    """A node selector term (copied) with each beta key of its expressions renamed."""
    copied = json.loads(json.dumps(term))
    for expression in as_list(as_mapping(copied).get("matchExpressions")):
        if isinstance(expression, dict) and expression.get("key") in GA_LABEL:
            expression["key"] = GA_LABEL[expression["key"]]
    return copied


def _renames(template: PodTemplate) -> tuple[list[dict[str, Any]], list[str], str]:
    """The JSON patch that puts the GA label in place of each beta label the template selects
    on (the nodeSelector's value moved to the GA key, unless the GA key is there already; a
    required affinity expression's key replaced, its operator and values kept; each guarded
    by a test of what it changes), the beta labels, and where the first one is."""
    base = json_pointer(template.path)
    operations: list[dict[str, Any]] = []
    found: list[tuple[str, str]] = []  # (beta label, where)
    selector = str_map(template.spec.get("nodeSelector"))
    for key, value in sorted(selector.items()):  # a map: its order is not the object's
        if key not in GA_LABEL:
            continue
        at = f"{base}/nodeSelector"
        operations += [
            {"op": "test", "path": at + pointer((key,)), "value": value},
            {"op": "remove", "path": at + pointer((key,))},
        ]
        if GA_LABEL[key] not in selector:
            operations.append({"op": "add", "path": at + pointer((GA_LABEL[key],)), "value": value})
        found.append((key, f"nodeSelector[{key}]"))
    affinity = as_mapping(as_mapping(template.spec.get("affinity")).get("nodeAffinity"))
    terms = as_list(as_mapping(affinity.get(_REQUIRED)).get("nodeSelectorTerms"))
    for i, term in enumerate(terms):
        for j, expression in enumerate(as_list(as_mapping(term).get("matchExpressions"))):
            key = str(as_mapping(expression).get("key", ""))
            if key not in GA_LABEL:
                continue
            where = (
                f"affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms[{i}].matchExpressions[{j}]"
            )
            at = f"{base}{json_pointer(where)}/key"
            operations += [
                {"op": "test", "path": at, "value": key},
                {"op": "replace", "path": at, "value": GA_LABEL[key]},
            ]
            found.append((key, where))
    beta = list(dict.fromkeys(key for key, _ in found))
    return operations, beta, found[0][1] if found else ""
