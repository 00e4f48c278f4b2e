from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    KSERVE_ISVC_LABEL,
    AdmissionRule,
    Category,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    classify,
    failed,
    label_selector_matches,
    passed,
    pod_templates,
)

from ._common import policy_selects

WAIVER = "gpu-audit.io/intent"
_DIRECTIONS = (("ingress", "from"), ("egress", "to"))


@check(
    id="GPU-NET-002",
    title="NetworkPolicy peers combine namespaceSelector and podSelector as intended",
    category=Category.NETWORK_SECURITY,
    severity=Severity.MEDIUM,
    requires=("NetworkPolicy",),
    rationale="""
        One YAML dash changes the meaning of a NetworkPolicy peer list: a namespaceSelector
        and a podSelector in one list item are ANDed (those pods in those namespaces), as two
        items they are ORed (every pod in those namespaces, or those pods here). The OR form
        is usually far broader than intended, e.g. every pod in the monitoring namespace can
        reach the TorchServe management port or the training job's rendezvous port.
    """,
    detection="""
        Every ingress `from` and egress `to` list: a peer with only a non-empty
        namespaceSelector next to a peer with only a podSelector is reported as a likely AND
        written as OR, with both readings. Not flagged: an empty podSelector next to a
        namespaceSelector that selects the policy's own namespace (a deliberate "this
        namespace plus that one"), ipBlock-only peers, combined peers, and policies annotated
        gpu-audit.io/intent: or. Whether a selector matches any namespace is not judged,
        because offline inputs rarely carry every Namespace.
    """,
    severity_evidence="""
        Which reading was meant is a guess, so the evidence is what the policy guards: medium
        when its podSelector selects model servers or GPU pods in the input (the OR opens them
        to a whole namespace), low otherwise.
    """,
    remediation="""
        # $kind $namespace/$name, $where: merge the two peers into ONE list item to mean
        # "pods matching $pods in namespaces matching $namespaces" (AND).
        # The test operation refuses the patch if the list changed since the scan:
        kubectl patch networkpolicy $name -n $namespace --type=json -p '$patch'
        # if the OR is intended, annotate the policy instead:
        #   kubectl annotate networkpolicy $name -n $namespace gpu-audit.io/intent=or
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # <kind> <namespace>/<name>, spec.ingress[<i>].from (or spec.egress[<i>].to): merge the two
        # peers into ONE list item to mean "pods matching <pods> in namespaces matching <namespaces>" (AND).
        # The test operation refuses the patch if the list changed since the scan:
        kubectl patch networkpolicy <name> -n <namespace> --type=json -p '[{"op":"test","path":"/spec/ingress/<i>/from","value":[<the peers as scanned>]},{"op":"replace","path":"/spec/ingress/<i>/from","value":[{"namespaceSelector":<namespaces>,"podSelector":<pods>}]}]'
        # if the OR is intended, annotate the policy instead:
        #   kubectl annotate networkpolicy <name> -n <namespace> gpu-audit.io/intent=or
    """,
    references=(
        "https://kubernetes.io/docs/concepts/services-networking/network-policies/#behavior-of-to-and-from-selectors",
        "https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/",
    ),
    admission=AdmissionRule(
        scope="object",
        kinds=("NetworkPolicy",),
        where=f"object.metadata.?annotations.orValue({{}})[?'{WAIVER}'].orValue('').lowerAscii()"
        " != 'or'",
        valid=" && ".join(
            f"""
            object.spec.?{direction}.orValue([]).all(rule, [rule.?{key}.orValue([])].all(peers,
              !peers.exists(np, has(np.namespaceSelector) && !has(np.podSelector)
                && (size(np.namespaceSelector.?matchLabels.orValue({{}})) > 0
                    || size(np.namespaceSelector.?matchExpressions.orValue([])) > 0)
                && peers.exists(pp, has(pp.podSelector) && !has(pp.namespaceSelector)
                  && !(size(pp.podSelector.?matchLabels.orValue({{}})) == 0
                       && size(pp.podSelector.?matchExpressions.orValue([])) == 0
                       && np.namespaceSelector.?matchLabels.orValue({{}}).all(k,
                            k == 'kubernetes.io/metadata.name'
                            && np.namespaceSelector.matchLabels[k] == request.namespace)
                       && np.namespaceSelector.?matchExpressions.orValue([]).all(e,
                            e.operator == 'In'
                              ? e.key == 'kubernetes.io/metadata.name'
                                && request.namespace in e.?values.orValue([])
                            : e.operator == 'NotIn'
                              ? e.key != 'kubernetes.io/metadata.name'
                                || !(request.namespace in e.?values.orValue([]))
                            : e.operator == 'Exists' ? e.key == 'kubernetes.io/metadata.name'
                            : e.operator == 'DoesNotExist'
                              && e.key != 'kubernetes.io/metadata.name'))))))
            """
            for direction, key in _DIRECTIONS
        ),
        message="a peer list has a namespaceSelector and a podSelector as separate peers, which "
        "are ORed: it allows every pod of those namespaces, not those pods in them",
        note="medium when the policy guards a model server or GPU pod in the input, else low",
    ),
)
def network_policy_peers_combine_selectors_as_intended(snapshot: Snapshot) -> Iterator[Result]:
    for policy in snapshot.of("NetworkPolicy"):
        if policy.annotations.get(WAIVER, "").lower() == "or":
            continue
        evaluated = False
        found = False
        for direction, key in _DIRECTIONS:
            for index, rule in enumerate(map(as_mapping, as_list(policy.spec.get(direction)))):
                peers = [as_mapping(p) for p in as_list(rule.get(key))]
                if any("namespaceSelector" in p or "podSelector" in p for p in peers):
                    evaluated = True
                pointer = f"/spec/{direction}/{index}/{key}"
                for result in _or_mixups(snapshot, policy, pointer, peers):
                    found = True
                    yield result
        if evaluated and not found:
            yield passed(policy, "every peer combines its selectors unambiguously")


def _templates_by_namespace(snapshot: Snapshot) -> Mapping[str, tuple[PodTemplate, ...]]:
    out: dict[str, list[PodTemplate]] = defaultdict(list)
    for template in pod_templates(snapshot):
        out[template.owner.ref.namespace].append(template)
    return {namespace: tuple(found) for namespace, found in out.items()}


def _guarded_gpu_work(snapshot: Snapshot, policy: Resource) -> str:
    """The first model server or GPU workload the policy selects, "" when it selects none in
    the input. A policy selects pods of its own namespace only."""
    index = snapshot.derived("network_security.templates_by_namespace", _templates_by_namespace)
    for template in index.get(policy.ref.namespace, ()):
        if not policy_selects(policy, template):
            continue
        serving = KSERVE_ISVC_LABEL in template.labels or any(
            classify(c) for c in template.containers()
        )
        if serving or template.requests_gpu:
            return str(template.owner.ref)
    return ""


def _or_mixups(
    snapshot: Snapshot, policy: Resource, pointer: str, peers: list[Mapping[str, Any]]
) -> Iterator[Result]:
    """`pointer` is the JSON pointer of the peer list (/spec/ingress/0/from)."""
    _, _, direction, index, key = pointer.split("/")
    path = f"spec.{direction}[{index}].{key}"
    lone_ns = [
        p
        for p in peers
        if "namespaceSelector" in p
        and "podSelector" not in p
        and _non_empty(p.get("namespaceSelector"))
    ]
    lone_pod = [p for p in peers if "podSelector" in p and "namespaceSelector" not in p]
    for ns_peer in lone_ns:
        for pod_peer in lone_pod:
            if _deliberate_union(policy, ns_peer, pod_peer):
                continue
            namespaces = _flow(ns_peer.get("namespaceSelector"))
            pods = _flow(pod_peer.get("podSelector"))
            guarded = _guarded_gpu_work(snapshot, policy)
            yield failed(
                policy,
                f"{path} lists namespaceSelector {namespaces} and podSelector {pods} as separate "
                f"peers, which are ORed: as written it allows every pod in those namespaces OR "
                f"those pods in {policy.ref.namespace}; one peer with both would mean pods "
                f"{pods} in namespaces {namespaces}"
                + (
                    f"; the policy guards {guarded}"
                    if guarded
                    else "; it selects no model server or GPU pod in the input"
                ),
                path=path,
                severity=Severity.MEDIUM if guarded else Severity.LOW,
                fix={
                    "where": path,
                    "namespaces": namespaces,
                    "pods": pods,
                    "patch": _combine(pointer, peers, ns_peer, pod_peer),
                },
            )


def _combine(
    pointer: str,
    peers: list[Mapping[str, Any]],
    ns_peer: Mapping[str, Any],
    pod_peer: Mapping[str, Any],
) -> str:
    """A JSON patch that replaces the list with one where the two peers are one item (at the
    place of the first), guarded by a test of the list as scanned."""
    combined = {**ns_peer, **pod_peer}
    first = min(peers.index(ns_peer), peers.index(pod_peer))
    fixed = [
        combined if i == first else p
        for i, p in enumerate(peers)
        if i == first or p not in (ns_peer, pod_peer)
    ]
    operations = [
        {"op": "test", "path": pointer, "value": peers},
        {"op": "replace", "path": pointer, "value": fixed},
    ]
    return json.dumps(operations, separators=(",", ":"), default=_plain)


def _plain(value: object) -> object:
    """Snapshot values are read-only mappings and tuples; JSON wants dicts and lists."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def _deliberate_union(
    policy: Resource, ns_peer: Mapping[str, Any], pod_peer: Mapping[str, Any]
) -> bool:
    """`podSelector: {}` (this namespace) next to a namespaceSelector for this namespace is a
    deliberate union of namespaces, not a mistyped AND."""
    own = {"kubernetes.io/metadata.name": policy.ref.namespace}
    return not _non_empty(pod_peer.get("podSelector")) and label_selector_matches(
        ns_peer.get("namespaceSelector"), own
    )


def _non_empty(selector: object) -> bool:
    sel = as_mapping(selector)
    return bool(as_mapping(sel.get("matchLabels")) or as_list(sel.get("matchExpressions")))


def _flow(selector: object) -> str:
    """A selector as a one-line YAML flow mapping, for messages and the remediation."""
    sel = as_mapping(selector)
    parts = []
    labels = as_mapping(sel.get("matchLabels"))
    if labels:
        inner = ", ".join(f"{k}: {json.dumps(str(v))}" for k, v in sorted(labels.items()))
        parts.append(f"matchLabels: {{{inner}}}")
    expressions = as_list(sel.get("matchExpressions"))
    if expressions:
        rendered = []
        for expr in map(as_mapping, expressions):
            values = ", ".join(json.dumps(str(v)) for v in as_list(expr.get("values")))
            body = f"key: {expr.get('key', '')}, operator: {expr.get('operator', '')}"
            rendered.append(f"{{{body}, values: [{values}]}}" if values else f"{{{body}}}")
        parts.append(f"matchExpressions: [{', '.join(rendered)}]")
    return "{" + ", ".join(parts) + "}"
