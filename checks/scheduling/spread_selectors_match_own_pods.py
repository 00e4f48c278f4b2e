from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
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
    gpu_pod_templates,
    json_pointer,
    label_selector_matches,
    passed,
    pod_templates,
    str_map,
    template_spec,
)

_HPA = "HorizontalPodAutoscaler"
_TYPO_SIMILARITY = 0.6
_REPLICATED = ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController")
# Labels a controller adds to the pods it creates, which the template does not show. A
# selector requirement on one of them is taken as met (its value is the controller's to set).
# Entries ending in "/" are prefixes.
_JOB_LABELS = (
    "job-name",
    "controller-uid",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-completion-index",
)
_INJECTED: dict[str, tuple[str, ...]] = {
    "Deployment": ("pod-template-hash",),
    "ReplicaSet": ("pod-template-hash",),
    "StatefulSet": (
        "controller-revision-hash",
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
    ),
    "Job": _JOB_LABELS,
    "CronJob": _JOB_LABELS,
    "PyTorchJob.kubeflow.org": ("training.kubeflow.org/", "group-name", "replica-type"),
    "MPIJob.kubeflow.org": ("training.kubeflow.org/",),
    "Job.batch.volcano.sh": ("volcano.sh/",),
}
# Set on the Jobs and StatefulSets that JobSet and LeaderWorkerSet create, whatever the kind.
_INJECTED_ANYWHERE = ("jobset.sigs.k8s.io/", "leaderworkerset.sigs.k8s.io/")


@dataclass(frozen=True, slots=True)
class _Term:
    """One podAntiAffinity term or topology spread constraint of a template."""

    what: str  # "required podAntiAffinity term" / "topology spread constraint" / ...
    index: int  # position in its own list
    path: str  # JSON-patch path of its labelSelector, relative to the pod spec
    selector: Mapping[str, Any] | None
    all_namespaces: bool


@check(
    id="GPU-SCHED-004",
    title="Pod anti-affinity and topology spread selectors of GPU workloads match their own pods",
    category=Category.SCHEDULING,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        Spreading and anti-affinity count the pods their labelSelector matches in each
        topology domain. A selector that does not match the workload's own pods counts zero
        everywhere, so the constraint is silently a no-op: every inference replica or training
        worker may land on the same GPU node or zone, and one node failure takes them all.
        A term without a labelSelector matches no pod at all.
    """,
    detection="""
        GPU pod templates that run more than one pod (replicas or an HPA above one, Job
        parallelism, the replica sum of a PyTorchJob, MPIJob or Volcano Job; Pods created by a
        controller). Each podAntiAffinity term (required and preferred) and each
        topologySpreadConstraint must select the template's own labels; requirements on labels
        the controller injects (pod-template-hash, job-name, training.kubeflow.org/*,
        jobset.sigs.k8s.io/*, ...) count as met, and matchLabelKeys always match the pod's own
        values. A selector that matches another workload's pod template in scope passes
        (deliberate co-location avoidance). Fails medium when the selector is missing or gives
        one of the pod's own label keys a value close to the pod's (llm-srv for llm-server, a
        typo); low when it selects no pod in the input at all (it may target a workload that
        is not in the input).
    """,
    severity_evidence="""
        Medium when the input shows the constraint is a no-op for a GPU workload that runs
        several pods: its labelSelector is missing or names the workload's own label with a
        mistyped value, so its replicas may all land on one node or zone. Low when the
        selector matches no pod in the input (it may target a workload not in the input).
    """,
    remediation="""
        # select the pod's own labels in $what $index of $kind $namespace/$name
        kubectl patch $resource $name -n $namespace --type=json -p '$patch'
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # select the pod's own labels in the podAntiAffinity term or topology spread constraint <i> of <kind> <namespace>/<name>
        kubectl patch <kind> <name> -n <namespace> --type=json -p '[{"op":"add","path":"/spec/template/spec/topologySpreadConstraints/<i>/labelSelector","value":{"matchLabels":{"<label>":"<value>"}}}]'
        # the path of a podAntiAffinity term, under the pod template's path:
        #   /affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/<i>/labelSelector
        #   /affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/<i>/podAffinityTerm/labelSelector
    """,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/topology-spread-constraints/",
        "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#inter-pod-affinity-and-anti-affinity",
        "https://github.com/kubernetes/kubernetes/issues/126632",
    ),
)
def spread_selectors_match_own_pods(snapshot: Snapshot) -> Iterator[Result]:
    autoscaled = _autoscaled_targets(snapshot)
    index = _TemplateIndex(snapshot)
    for template in gpu_pod_templates(snapshot):
        terms = _terms(template)
        if terms and _runs_several_pods(template, autoscaled):
            yield _verdict(template, terms, index)


def _verdict(template: PodTemplate, terms: list[_Term], index: _TemplateIndex) -> Result:
    own = template.labels
    injected = _injected_keys(template)
    for position, term in enumerate(terms):
        if term.selector is not None and label_selector_matches(
            _without(term.selector, injected), own
        ):
            continue
        if term.selector is not None and index.selects_other(template, term):
            continue
        return _failure(template, terms, position, own)
    return passed(
        template, f"every spread/anti-affinity selector matches its own labels {_labels(own)}"
    )


def _failure(
    template: PodTemplate, terms: list[_Term], position: int, own: Mapping[str, str]
) -> Result:
    term = terms[position]
    selector = as_mapping(term.selector)
    wanted = str_map(selector.get("matchLabels"))
    keys = {k for k in wanted if k in own} | {
        str(as_mapping(e).get("key", ""))
        for e in as_list(selector.get("matchExpressions"))
        if str(as_mapping(e).get("key", "")) in own
    }
    if term.selector is None:
        problem, severity = "has no labelSelector, so it matches no pod", None
    elif _looks_like_a_typo(selector, own):
        problem = f"selects {_describe(selector)}, not this workload's labels {_labels(own)}"
        severity = None
    else:
        # Likely aimed at another workload that is not in the input.
        problem = f"selects {_describe(selector)}: no pod in the input, nor this workload's"
        severity = Severity.LOW
    fixed = {k: own[k] for k in sorted(keys)} if keys else dict(sorted(own.items()))
    patch = [
        {
            "op": "add",
            "path": json_pointer(template.path) + term.path,
            "value": {"matchLabels": fixed},
        }
    ]
    more = len(terms) - position - 1
    return failed(
        template,
        f"{term.what} {term.index}: {problem}" + (f" (and {more} more terms)" if more else ""),
        path=template.path,
        severity=severity,
        fix={
            "what": term.what,
            "index": str(term.index),
            "resource": template.owner.ref.kind.lower(),
            "patch": json.dumps(patch, separators=(",", ":"), sort_keys=True),
        },
    )


def _looks_like_a_typo(selector: Mapping[str, Any], own: Mapping[str, str]) -> bool:
    """A value for one of the pod's own label keys that is close to the pod's value
    (llm-srv for llm-server), rather than another application's name."""
    wanted: list[tuple[str, str]] = list(str_map(selector.get("matchLabels")).items())
    for expr in map(as_mapping, as_list(selector.get("matchExpressions"))):
        if expr.get("operator") == "In":
            key = str(expr.get("key", ""))
            wanted.extend((key, str(v)) for v in as_list(expr.get("values")))
    return any(
        key in own and SequenceMatcher(None, value, own[key]).ratio() >= _TYPO_SIMILARITY
        for key, value in wanted
    )


def _describe(selector: Mapping[str, Any]) -> str:
    return json.dumps(dict(selector), separators=(",", ":"), sort_keys=True)


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "(none)"


# --------------------------------------------------------------------------- terms


def _terms(template: PodTemplate) -> list[_Term]:
    spec = template.spec
    anti = as_mapping(as_mapping(spec.get("affinity")).get("podAntiAffinity"))
    out: list[_Term] = []
    base = "/affinity/podAntiAffinity"
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred = "preferredDuringSchedulingIgnoredDuringExecution"
    for i, raw in enumerate(map(as_mapping, as_list(anti.get(required)))):
        out.append(_affinity_term(raw, "required", i, f"{base}/{required}/{i}/labelSelector"))
    for i, raw in enumerate(map(as_mapping, as_list(anti.get(preferred)))):
        term = as_mapping(raw.get("podAffinityTerm"))
        path = f"{base}/{preferred}/{i}/podAffinityTerm/labelSelector"
        out.append(_affinity_term(term, "preferred", i, path))
    for i, raw in enumerate(map(as_mapping, as_list(spec.get("topologySpreadConstraints")))):
        selector = raw.get("labelSelector")
        out.append(
            _Term(
                "topology spread constraint",
                i,
                f"/topologySpreadConstraints/{i}/labelSelector",
                as_mapping(selector) if isinstance(selector, Mapping) else None,
                all_namespaces=False,
            )
        )
    return out


def _affinity_term(term: Mapping[str, Any], kind: str, index: int, path: str) -> _Term:
    selector = term.get("labelSelector")
    # namespaces or a namespaceSelector widen the scope beyond the pod's namespace; matching
    # the namespaceSelector itself needs Namespace labels, so any namespace is allowed.
    wider = bool(as_list(term.get("namespaces"))) or "namespaceSelector" in term
    return _Term(
        f"{kind} podAntiAffinity term",
        index,
        path,
        as_mapping(selector) if isinstance(selector, Mapping) else None,
        all_namespaces=wider,
    )


def _injected_keys(template: PodTemplate) -> tuple[str, ...]:
    return (*_INJECTED.get(template.owner.ref.kind, ()), *_INJECTED_ANYWHERE)


def _is_injected(key: str, injected: tuple[str, ...]) -> bool:
    return any(key.startswith(i) if i.endswith("/") else key == i for i in injected)


def _without(selector: Mapping[str, Any], injected: tuple[str, ...]) -> dict[str, Any]:
    """The selector minus its requirements on controller-injected labels."""
    labels = str_map(selector.get("matchLabels"))
    expressions = [
        e
        for e in map(as_mapping, as_list(selector.get("matchExpressions")))
        if not _is_injected(str(e.get("key", "")), injected)
    ]
    return {
        "matchLabels": {k: v for k, v in labels.items() if not _is_injected(k, injected)},
        "matchExpressions": expressions,
    }


# --------------------------------------------------------------------------- replica counts


def _autoscaled_targets(snapshot: Snapshot) -> frozenset[tuple[str, str, str]]:
    """(namespace, kind, name) of the workloads an HPA may scale above one replica."""
    out: set[tuple[str, str, str]] = set()
    for hpa in snapshot.of(_HPA):
        target = as_mapping(hpa.spec.get("scaleTargetRef"))
        if _int(hpa.spec.get("maxReplicas"), 1) > 1:
            out.add((hpa.ref.namespace, str(target.get("kind", "")), str(target.get("name", ""))))
    return frozenset(out)


def _int(value: object, default: int) -> int:
    if isinstance(value, bool):
        return default
    try:
        return int(str(value)) if value is not None else default
    except ValueError:
        return default


def _runs_several_pods(template: PodTemplate, autoscaled: frozenset[tuple[str, str, str]]) -> bool:
    owner = template.owner
    kind = owner.ref.kind
    spec = owner.spec
    if kind in _REPLICATED:
        key = (owner.ref.namespace, kind, owner.ref.name)
        return _int(spec.get("replicas"), 1) > 1 or key in autoscaled
    if kind == "Job":
        return _int(spec.get("parallelism"), 1) > 1
    if kind == "CronJob":
        job = template_spec(spec, "jobTemplate")
        return _int(job.get("parallelism"), 1) > 1
    if kind in ("PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org"):
        field = "pytorchReplicaSpecs" if kind.startswith("PyTorchJob") else "mpiReplicaSpecs"
        replicas = as_mapping(spec.get(field)).values()
        return sum(_int(as_mapping(r).get("replicas"), 1) for r in replicas) > 1
    if kind == "Job.batch.volcano.sh":
        tasks = map(as_mapping, as_list(spec.get("tasks")))
        return sum(_int(t.get("replicas"), 1) for t in tasks) > 1
    if kind == "Pod":
        # A Pod whose controller is not in the input is one replica of several.
        return any(
            as_mapping(r).get("controller") is True
            for r in as_list(owner.metadata.get("ownerReferences"))
        )
    return False  # DaemonSets place one pod per node by construction


# --------------------------------------------------------------------------- other workloads


class _TemplateIndex:
    """Pod template labels by (namespace, key, value), to find other workloads a selector
    targets without comparing every template with every other."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._by_label: dict[tuple[str, str, str], list[PodTemplate]] = defaultdict(list)
        self._by_namespace: dict[str, list[PodTemplate]] = defaultdict(list)
        for template in pod_templates(snapshot):
            namespace = template.owner.ref.namespace
            self._by_namespace[namespace].append(template)
            for key, value in template.labels.items():
                self._by_label[(namespace, key, value)].append(template)
                self._by_label[("*", key, value)].append(template)
        self._by_namespace["*"] = [t for ts in self._by_namespace.values() for t in ts]

    def selects_other(self, template: PodTemplate, term: _Term) -> bool:
        selector = as_mapping(term.selector)
        scope = "*" if term.all_namespaces else template.owner.ref.namespace
        match_labels = str_map(selector.get("matchLabels"))
        if match_labels:
            key = min(match_labels)
            candidates = self._by_label.get((scope, key, match_labels[key]), [])
        else:
            candidates = self._by_namespace.get(scope, [])
        return any(
            c.owner.ref != template.owner.ref and label_selector_matches(selector, c.labels)
            for c in candidates
        )
