"""kube-scheduler's filter predicates that decide where a GPU pod can go, evaluated per node.

Each predicate returns the reasons the scheduler's filter plugin of the same name would
record, word for word, so that the summary can be compared with FailedScheduling events:
NodeUnschedulable ("node(s) were unschedulable"), TaintToleration ("node(s) had untolerated
taint {key: value}"), NodeAffinity ("node(s) didn't match Pod's node affinity/selector"),
NodeResourcesFit ("Insufficient <resource>", "Too many pods"), PodTopologySpread ("node(s)
didn't match pod topology spread constraints"), InterPodAffinity, and DynamicResources for
pods with ResourceClaims ("cannot allocate all claims", dra.py). They run in the default
profile's order (pkg/scheduler/apis/config/v1/default_plugins.go) and, as in the scheduler, a
node's reasons are those of the first predicate that fails; every predicate is still
evaluated so the fix can name all that stand in the way.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from gpu_audit.diagnostics.fit import ZERO, ClusterUsage, NodeUsage, is_bound, node_name_of
from gpu_audit.k8s.gpu_resources import (
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    NVIDIA_MIG_PREFIX,
    is_gpu_resource,
)
from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
    str_map,
)
from gpu_audit.k8s.quantities import format_quantity
from gpu_audit.k8s.scheduling import (
    Taint,
    node_affinity_matches,
    node_taints,
    tolerates,
)
from gpu_audit.k8s.selectors import (
    label_selector_matches,
    select,
)
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

UNSCHEDULABLE = "node(s) were unschedulable"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_LABEL = SPREAD + " (missing required label)"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
TOO_MANY_PODS = "Too many pods"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_BASIC = ("cpu", "memory", "ephemeral-storage")


def taint_reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One predicate on one node (or on the pod itself): the scheduler's reasons when it
    fails, what was found, and the change that would make it pass."""

    predicate: str
    passed: bool
    reasons: tuple[str, ...] = ()
    detail: str = ""
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "predicate": self.predicate,
            "passed": self.passed,
            "reasons": list(self.reasons),
            "detail": self.detail,
            "fix": self.fix or None,
        }


def _ok(predicate: str, detail: str = "") -> Verdict:
    return Verdict(predicate, True, (), detail)


_BINARY_SUFFIXES = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def _qty(value: Decimal, resource: str = "") -> str:
    """A quantity as kubectl shows it: bytes with a binary suffix when exact (32Gi)."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in _BINARY_SUFFIXES:
            if value >= size and value % size == 0:
                return f"{format_quantity(value / size)}{suffix}"
    return format_quantity(value)


# --------------------------------------------------------------------------- context


@dataclass(frozen=True, slots=True)
class AntiAffinityHolder:
    """A bound pod with required anti-affinity: it keeps matching pods off its domain."""

    pod: Resource
    node: Resource
    terms: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class SchedulingContext:
    """What every predicate reads, built once per snapshot."""

    snapshot: Snapshot
    usage: ClusterUsage
    anti_affinity_holders: tuple[AntiAffinityHolder, ...]
    # Results that depend only on the snapshot, kept across the pods explained with it:
    # (node, resource) -> the pods holding it; pod key -> the per-node explanations.
    memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def node(self, name: str) -> Resource | None:
        found = self.usage.nodes.get(name)
        return found.node if found else None


def _required_terms(spec: Mapping[str, Any], kind: str) -> tuple[Mapping[str, Any], ...]:
    section = as_mapping(as_mapping(spec.get("affinity")).get(kind))
    return tuple(
        map(as_mapping, as_list(section.get("requiredDuringSchedulingIgnoredDuringExecution")))
    )


def scheduling_context(snapshot: Snapshot, usage: ClusterUsage) -> SchedulingContext:
    holders = []
    for node_usage in usage.nodes.values():
        for pod in node_usage.pods:
            terms = _required_terms(pod.spec, "podAntiAffinity")
            if terms:
                holders.append(AntiAffinityHolder(pod, node_usage.node, terms))
    return SchedulingContext(snapshot, usage, tuple(holders))


# --------------------------------------------------------------------------- node state


def condition_taints(node: Resource) -> tuple[Taint, ...]:
    """The node's taints plus those the node lifecycle controller puts on a node that is not
    Ready (TaintNodesByCondition), in case the dump predates them. The scheduler itself never
    reads the Ready condition: it sees these taints."""
    taints = list(node_taints(node))
    present = {(t.key, t.effect) for t in taints}
    for cond in map(as_mapping, as_list(node.status.get("conditions"))):
        if cond.get("type") != "Ready" or cond.get("status") == "True":
            continue
        key = UNREACHABLE_TAINT if cond.get("status") == "Unknown" else NOT_READY_TAINT
        if (key, "NoSchedule") not in present:
            taints.append(Taint(key, "", "NoSchedule"))
    return tuple(taints)


def node_unschedulable(spec: Mapping[str, Any], node: Resource) -> Verdict:
    name = "NodeUnschedulable"
    if node.spec.get("unschedulable") is not True:
        return _ok(name)
    cordon_taint = Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")
    if tolerates(as_list(spec.get("tolerations")), cordon_taint):
        return _ok(name, "cordoned, but the pod tolerates node.kubernetes.io/unschedulable")
    return Verdict(
        name,
        False,
        (UNSCHEDULABLE,),
        f"node {node.ref.name} is cordoned (spec.unschedulable: true)",
        f"kubectl uncordon {node.ref.name}",
    )


def _toleration_fix(taints: Sequence[Taint]) -> str:
    lines = ["# add to the pod spec (spec.template.spec of its controller):", "tolerations:"]
    for t in taints:
        if t.value:
            lines.append(
                f'- {{key: "{t.key}", operator: Equal, value: "{t.value}", effect: {t.effect}}}'
            )
        else:
            lines.append(f'- {{key: "{t.key}", operator: Exists, effect: {t.effect}}}')
    return "\n".join(lines)


def taint_toleration(spec: Mapping[str, Any], node: Resource) -> Verdict:
    name = "TaintToleration"
    tolerations = as_list(spec.get("tolerations"))
    blocking = [
        t
        for t in condition_taints(node)
        if t.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)
    ]
    if not blocking:
        return _ok(name)
    health = [t for t in blocking if t.key in (NOT_READY_TAINT, UNREACHABLE_TAINT)]
    fix = (
        f"node {node.ref.name} is not Ready ({health[0].key}): repair it "
        f"(kubectl describe node {node.ref.name}); tolerating the taint would not make it run pods"
        if health
        else _toleration_fix(blocking)
    )
    return Verdict(
        name,
        False,
        (taint_reason(blocking[0]),),  # the scheduler reports the first one only
        "untolerated: " + ", ".join(str(t) for t in blocking),
        fix,
    )


def _selector_mismatches(spec: Mapping[str, Any], node: Resource) -> list[tuple[str, str, str]]:
    labels = node.labels
    return [
        (key, want, labels.get(key, ""))
        for key, want in sorted(str_map(spec.get("nodeSelector")).items())
        if labels.get(key) != want
    ]


def node_affinity(spec: Mapping[str, Any], node: Resource) -> Verdict:
    name = "NodeAffinity"
    if node_affinity_matches(spec, node):
        return _ok(name)
    mismatches = _selector_mismatches(spec, node)
    if mismatches:
        detail = "; ".join(
            f"nodeSelector {k}={want}, node has {k}={have or '(absent)'}"
            for k, want, have in mismatches
        )
        fix_lines = [
            f"# node {node.ref.name} differs from the pod's nodeSelector: change the selector"
            " to the node's value, or label the node if it really is such a node"
        ]
        for k, want, have in mismatches:
            if have:
                fix_lines.append(f"nodeSelector: {{{k}: {have}}}")
            fix_lines.append(f"# kubectl label node {node.ref.name} {k}={want} --overwrite")
        fix = "\n".join(fix_lines)
    else:
        detail = "requiredDuringSchedulingIgnoredDuringExecution excludes the node"
        fix = (
            f"# node {node.ref.name} matches no term of the pod's required node affinity: "
            "add a nodeSelectorTerm that matches its labels (kubectl get node "
            f"{node.ref.name} --show-labels)"
        )
    return Verdict(name, False, (NODE_AFFINITY,), detail, fix)


# --------------------------------------------------------------------------- resources


def _gpu_alternatives(usage: NodeUsage, wanted: str) -> list[str]:
    return sorted(
        n for n, v in usage.allocatable.items() if is_gpu_resource(n) and n != wanted and v > 0
    )


def _missing_gpu_fix(usage: NodeUsage, wanted: str) -> str:
    node = usage.node
    alternatives = _gpu_alternatives(usage, wanted)
    product = node.labels.get("nvidia.com/gpu.product", "")
    strategy = node.labels.get("nvidia.com/mig.strategy", "none")
    if wanted.startswith(NVIDIA_MIG_PREFIX) and strategy == "single" and NVIDIA_GPU in alternatives:
        return (
            f"# node {node.ref.name} runs MIG strategy single: its slices are advertised as "
            f"{NVIDIA_GPU} ({product}), never as {wanted}\n"
            f"nodeSelector: {{nvidia.com/gpu.product: {product}}}\n"
            f"# and in the container: resources: {{limits: {{{NVIDIA_GPU}: 1}}}}"
        )
    if wanted == NVIDIA_GPU and any(a.startswith(NVIDIA_MIG_PREFIX) for a in alternatives):
        slices = ", ".join(a for a in alternatives if a.startswith(NVIDIA_MIG_PREFIX))
        return (
            f"# node {node.ref.name} runs MIG strategy mixed: it offers {slices}, not "
            f"{NVIDIA_GPU}; request one of those slices instead"
        )
    if NVIDIA_GPU_SHARED in alternatives:
        return (
            f"# node {node.ref.name} advertises its time-sliced/MPS replicas renamed to "
            f"{NVIDIA_GPU_SHARED}, not {wanted}; request exactly 1 replica per container:\n"
            f"resources: {{limits: {{{NVIDIA_GPU_SHARED}: 1}}}}"
        )
    if alternatives:
        return f"# node {node.ref.name} offers {', '.join(alternatives)}, not {wanted}"
    return (
        f"# node {node.ref.name} advertises no {wanted}: check its device plugin "
        f"(kubectl describe node {node.ref.name})"
    )


def _holders(usage: NodeUsage, ctx: SchedulingContext, resource: str) -> str:
    key = ("holders", usage.node.ref.name, resource)
    if key not in ctx.memo:
        ctx.memo[key] = _top_holders(usage, ctx, resource)
    return str(ctx.memo[key])


def _top_holders(usage: NodeUsage, ctx: SchedulingContext, resource: str) -> str:
    held = [
        (ctx.usage.request_of(p).get(resource, ZERO), f"{p.ref.namespace}/{p.ref.name}")
        for p in usage.pods
    ]
    top = sorted((h for h in held if h[0] > 0), key=lambda h: (-h[0], h[1]))[:5]
    return ", ".join(f"{name} ({_qty(amount, resource)})" for amount, name in top)


def _resource_shortfall(
    resource: str, want: Decimal, usage: NodeUsage, ctx: SchedulingContext
) -> tuple[str, str]:
    """(detail, fix) for one resource the node cannot give."""
    node = usage.node.ref.name
    have = usage.allocatable.get(resource, ZERO)
    used = usage.requested.get(resource, ZERO)
    if is_gpu_resource(resource) and have == 0:
        return (f"{resource}: node advertises none", _missing_gpu_fix(usage, resource))
    want_s, have_s = _qty(want, resource), _qty(have, resource)
    detail = (
        f"{resource}: wants {want_s}, allocatable {have_s}, "
        f"requested by bound pods {_qty(used, resource)}"
    )
    if want > have:
        return (
            detail,
            f"# {resource} {want_s} exceeds node {node}'s allocatable {have_s}: lower the "
            f"request to at most {have_s}, or split the work into pods that each fit",
        )
    holders = _holders(usage, ctx, resource)
    return (
        detail,
        f"# node {node} has {_qty(have - used, resource)} of {have_s} {resource} free; held "
        f"by {holders or 'bound pods'}. Wait for them to finish, delete the idle or finished "
        "ones, or add capacity",
    )


def _shortfalls(
    request: Mapping[str, Decimal], usage: NodeUsage, dra_served: frozenset[str]
) -> tuple[Decimal | None, list[str], list[str]] | None:
    """What NodeResourcesFit finds short on the node: the pod limit when the node is full
    (else None), the requested resources it cannot give, and every requested resource in the
    filter's order; None when the node lists no allocatable (nothing to check)."""
    if not usage.node.status.get("allocatable"):
        return None
    wanted = [r for r in request if r not in dra_served or usage.allocatable.get(r, ZERO) > 0]
    ordered = [r for r in _BASIC if r in wanted] + sorted(r for r in wanted if r not in _BASIC)
    max_pods = usage.allocatable.get("pods")
    too_many = max_pods if max_pods is not None and len(usage.pods) + 1 > max_pods else None
    missing = [r for r in ordered if r != "pods" and request[r] > 0 and request[r] > usage.free(r)]
    return too_many, missing, ordered


def resource_fit_reasons(
    request: Mapping[str, Decimal], usage: NodeUsage, dra_served: frozenset[str] = frozenset()
) -> tuple[str, ...]:
    """The reasons node_resources_fit records, without its texts: () when the pod fits."""
    shortfalls = _shortfalls(request, usage, dra_served)
    if shortfalls is None:
        return ()
    too_many, missing, _ = shortfalls
    head = (TOO_MANY_PODS,) if too_many is not None else ()
    return (*head, *map(insufficient, missing))


def node_resources_fit(
    request: Mapping[str, Decimal],
    usage: NodeUsage,
    ctx: SchedulingContext,
    dra_served: frozenset[str] = frozenset(),
) -> Verdict:
    """NodeResourcesFit's Filter: a pod slot, then every requested resource against
    allocatable minus what bound pods request. A resource the node does not list counts as
    0 allocatable, exactly as in the scheduler, except an extended resource a DeviceClass
    serves (`dra_served`, KEP-5004): where no device plugin advertises it, the filter leaves it
    to DynamicResources."""
    name = "NodeResourcesFit"
    shortfalls = _shortfalls(request, usage, dra_served)
    if shortfalls is None:
        return _ok(name, "node has no status.allocatable (a manifest without status)")
    too_many, missing, ordered = shortfalls
    reasons: list[str] = []
    details: list[str] = []
    fixes: list[str] = []
    if too_many is not None:
        reasons.append(TOO_MANY_PODS)
        details.append(f"pods: {len(usage.pods)} of {_qty(too_many)} already")
        fixes.append(f"# node {usage.node.ref.name} runs its maximum of {_qty(too_many)} pods")
    for resource in missing:
        reasons.append(insufficient(resource))
        detail, fix = _resource_shortfall(resource, request[resource], usage, ctx)
        details.append(detail)
        fixes.append(fix)
    if not reasons:
        gpus = ", ".join(
            f"{r} {_qty(request[r])} of {_qty(usage.free(r))} free"
            for r in ordered
            if is_gpu_resource(r)
        )
        return _ok(name, gpus)
    return Verdict(name, False, tuple(reasons), "; ".join(details), "\n".join(fixes))


# --------------------------------------------------------------------------- spreading


def _bound_matching(
    ctx: SchedulingContext, namespaces: Iterable[str] | None, selector: object
) -> list[Resource]:
    """Bound pods matching a LabelSelector in the namespaces (all when None), via the label
    index."""
    if namespaces is None:
        found: Iterable[Resource] = select(ctx.snapshot, "Pod", None, selector)
    else:
        found = [
            p for ns in sorted(set(namespaces)) for p in select(ctx.snapshot, "Pod", ns, selector)
        ]
    return [p for p in found if is_bound(p)]


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    key: str
    max_skew: int
    selector: Mapping[str, Any]
    counts: Mapping[str, int]  # topology value -> matching pods
    minimum: int
    self_match: int


def spread_constraints(
    ctx: SchedulingContext, pod: Resource, spec: Mapping[str, Any]
) -> tuple[SpreadConstraint, ...]:
    """The pod's hard (DoNotSchedule) constraints with the pod counts per domain, over the
    nodes that pass its node affinity and carry every constraint's key (the defaults
    nodeAffinityPolicy: Honor and nodeTaintsPolicy: Ignore)."""
    raw = [
        as_mapping(c)
        for c in as_list(spec.get("topologySpreadConstraints"))
        if as_mapping(c).get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
    ]
    if not raw:
        return ()
    keys = [str(c.get("topologyKey", "")) for c in raw]
    eligible = [
        u.node
        for u in ctx.usage.nodes.values()
        if node_affinity_matches(spec, u.node) and all(k in u.node.labels for k in keys)
    ]
    eligible_names = {n.ref.name for n in eligible}
    out = []
    for constraint, key in zip(raw, keys, strict=True):
        selector = dict(as_mapping(constraint.get("labelSelector")))
        extra = {
            str(k): pod.labels[str(k)]
            for k in as_list(constraint.get("matchLabelKeys"))
            if str(k) in pod.labels
        }
        if extra:
            selector["matchLabels"] = {**str_map(selector.get("matchLabels")), **extra}
        counts: dict[str, int] = dict.fromkeys((n.labels[key] for n in eligible), 0)
        for other in _bound_matching(ctx, [pod.ref.namespace], selector):
            if other.metadata.get("deletionTimestamp"):
                continue  # PodTopologySpread skips terminating pods
            node = ctx.node(node_name_of(other))
            if node is not None and node.ref.name in eligible_names:
                counts[node.labels[key]] += 1
        minimum = min(counts.values()) if counts else 0
        min_domains = constraint.get("minDomains")
        if isinstance(min_domains, int) and len(counts) < min_domains:
            minimum = 0
        max_skew = constraint.get("maxSkew")
        out.append(
            SpreadConstraint(
                key,
                max_skew if isinstance(max_skew, int) else 1,
                selector,
                counts,
                minimum,
                int(label_selector_matches(selector, pod.labels)),
            )
        )
    return tuple(out)


def pod_topology_spread(constraints: Sequence[SpreadConstraint], node: Resource) -> Verdict:
    name = "PodTopologySpread"
    for c in constraints:
        if c.key not in node.labels:
            return Verdict(
                name,
                False,
                (SPREAD_LABEL,),
                f"node has no {c.key} label",
                f"# label node {node.ref.name} with {c.key}, or spread on a key every node has",
            )
        value = node.labels[c.key]
        skew = c.counts.get(value, 0) + c.self_match - c.minimum
        if skew > c.max_skew:
            return Verdict(
                name,
                False,
                (SPREAD,),
                f"{c.key}={value} would hold {c.counts.get(value, 0) + c.self_match} matching "
                f"pods against a minimum of {c.minimum} (maxSkew {c.max_skew})",
                "# the spread constraint keeps the pod off this domain: add nodes in the "
                "emptier domains, raise maxSkew, or use whenUnsatisfiable: ScheduleAnyway",
            )
    return _ok(name)


# --------------------------------------------------------------------------- inter-pod affinity


def _term_namespaces(
    ctx: SchedulingContext, term: Mapping[str, Any], own_namespace: str
) -> list[str] | None:
    """The namespaces a PodAffinityTerm covers; None for all of them. The term applies to the
    union of `namespaces` and the namespaces its namespaceSelector selects (judged from the
    Namespace objects of the input); with neither, to the pod's own namespace; an empty
    selector `{}` selects every namespace."""
    names = [str(n) for n in as_list(term.get("namespaces"))]
    selector = term.get("namespaceSelector")
    if isinstance(selector, Mapping):
        if not selector:
            return None
        names.extend(n.ref.name for n in select(ctx.snapshot, "Namespace", None, selector))
        return names
    return names or [own_namespace]


def _in_namespaces(namespace: str, namespaces: Sequence[str] | None) -> bool:
    return namespaces is None or namespace in namespaces


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    key: str
    namespaces: tuple[str, ...] | None  # None: every namespace
    selector: Mapping[str, Any]
    domains: frozenset[str]  # topology values holding a matching pod
    self_match: bool

    def matches(self, pod: Resource) -> bool:
        return _in_namespaces(pod.ref.namespace, self.namespaces) and label_selector_matches(
            self.selector, pod.labels
        )


def _parsed_terms(
    ctx: SchedulingContext, pod: Resource, spec: Mapping[str, Any], kind: str
) -> list[AffinityTerm]:
    out = []
    for term in _required_terms(spec, kind):
        names = _term_namespaces(ctx, term, pod.ref.namespace)
        parsed = AffinityTerm(
            str(term.get("topologyKey", "")),
            None if names is None else tuple(sorted(set(names))),
            as_mapping(term.get("labelSelector")),
            frozenset(),
            False,
        )
        out.append(replace(parsed, self_match=parsed.matches(pod)))
    return out


def _domains(
    ctx: SchedulingContext, term: AffinityTerm, pods: Iterable[Resource]
) -> frozenset[str]:
    values = set()
    for other in pods:
        node = ctx.node(node_name_of(other))
        if node is not None and term.key in node.labels:
            values.add(node.labels[term.key])
    return frozenset(values)


def affinity_terms(
    ctx: SchedulingContext, pod: Resource, spec: Mapping[str, Any]
) -> tuple[AffinityTerm, ...]:
    """Required podAffinity terms. As in the scheduler, a bound pod counts for the terms only
    when it matches all of them (updateWithAffinityTerms / podMatchesAllAffinityTerms)."""
    terms = _parsed_terms(ctx, pod, spec, "podAffinity")
    if not terms:
        return ()
    first = terms[0]
    candidates = [
        p
        for p in _bound_matching(ctx, first.namespaces, first.selector)
        if all(t.matches(p) for t in terms[1:])
    ]
    return tuple(replace(t, domains=_domains(ctx, t, candidates)) for t in terms)


def anti_affinity_terms(
    ctx: SchedulingContext, pod: Resource, spec: Mapping[str, Any]
) -> tuple[AffinityTerm, ...]:
    """Required podAntiAffinity terms, each counted on its own (updateWithAntiAffinityTerms)."""
    return tuple(
        replace(t, domains=_domains(ctx, t, _bound_matching(ctx, t.namespaces, t.selector)))
        for t in _parsed_terms(ctx, pod, spec, "podAntiAffinity")
    )


@dataclass(frozen=True, slots=True)
class InterPodRules:
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    existing: tuple[tuple[str, str, str], ...]  # (topology key, value, holder pod)


def inter_pod_rules(
    ctx: SchedulingContext, pod: Resource, spec: Mapping[str, Any]
) -> InterPodRules:
    existing = []
    for holder in ctx.anti_affinity_holders:
        for term in holder.terms:
            key = str(term.get("topologyKey", ""))
            namespaces = _term_namespaces(ctx, term, holder.pod.ref.namespace)
            if (
                key in holder.node.labels
                and _in_namespaces(pod.ref.namespace, namespaces)
                and label_selector_matches(term.get("labelSelector"), pod.labels)
            ):
                existing.append(
                    (
                        key,
                        holder.node.labels[key],
                        f"{holder.pod.ref.namespace}/{holder.pod.ref.name}",
                    )
                )
    return InterPodRules(
        affinity_terms(ctx, pod, spec),
        anti_affinity_terms(ctx, pod, spec),
        tuple(sorted(existing)),
    )


def inter_pod_affinity(rules: InterPodRules, node: Resource) -> Verdict:
    """Required pod affinity, then the pod's anti-affinity, then the anti-affinity of pods
    already running, in the order of the InterPodAffinity filter."""
    name = "InterPodAffinity"
    labels = node.labels
    if rules.affinity:
        if not all(t.key in labels for t in rules.affinity):
            return Verdict(name, False, (POD_AFFINITY,), "node lacks a topologyKey label")
        satisfied = all(labels[t.key] in t.domains for t in rules.affinity)
        first_of_group = not any(t.domains for t in rules.affinity) and all(
            t.self_match for t in rules.affinity
        )
        if not (satisfied or first_of_group):
            return Verdict(
                name,
                False,
                (POD_AFFINITY,),
                "no pod the required podAffinity selects runs in this node's domain",
                "# required podAffinity: the pods it selects run elsewhere or nowhere; check "
                "its labelSelector and topologyKey",
            )
    for t in rules.anti_affinity:
        if t.key in labels and labels[t.key] in t.domains:
            return Verdict(
                name,
                False,
                (POD_ANTI_AFFINITY,),
                f"a pod the required podAntiAffinity selects runs in {t.key}={labels[t.key]}",
                "# required podAntiAffinity keeps the pod away from this domain: use "
                "preferredDuringScheduling or a narrower topologyKey",
            )
    for key, value, holder in rules.existing:
        if labels.get(key) == value:
            return Verdict(
                name,
                False,
                (EXISTING_ANTI_AFFINITY,),
                f"pod {holder} has required anti-affinity against this pod in {key}={value}",
                f"# pod {holder}'s required podAntiAffinity selects this pod: change its "
                "labelSelector or this pod's labels",
            )
    return _ok(name)


# --------------------------------------------------------------------------- all of them


def node_verdicts(
    ctx: SchedulingContext,
    spec: Mapping[str, Any],
    request: Mapping[str, Decimal],
    usage: NodeUsage,
    spread: Sequence[SpreadConstraint],
    rules: InterPodRules,
    dra: Callable[[NodeUsage], Verdict] | None = None,
    dra_served: frozenset[str] = frozenset(),
) -> tuple[Verdict, ...]:
    """The filters in the default profile's order; DynamicResources (`dra`, for pods with
    claims or DRA-served extended resources) runs after InterPodAffinity."""
    node = usage.node
    verdicts = (
        node_unschedulable(spec, node),
        taint_toleration(spec, node),
        node_affinity(spec, node),
        node_resources_fit(request, usage, ctx, dra_served),
        pod_topology_spread(spread, node),
        inter_pod_affinity(rules, node),
    )
    return verdicts if dra is None else (*verdicts, dra(usage))
