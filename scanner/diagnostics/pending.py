"""Why a GPU pod is Pending: per-node predicate verdicts, the scheduler-style summary, the fix,
and whether the pod's FailedScheduling events agree.

The summary has the format of kube-scheduler's FitError ("0/12 nodes are available: 8 node(s)
had untolerated taint {nvidia.com/gpu: true}, 4 Insufficient nvidia.com/gpu."): reasons
counted per node and sorted as strings. The scheduler appends a preemption part
("preemption: 0/12 nodes are available: ..."); it depends on priorities and is left out here,
and ignored when comparing with events.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

from gpu_audit.diagnostics.dra import PodClaims, node_verdict, pod_claims_state, wants_gpus
from gpu_audit.diagnostics.fit import (
    ClusterUsage,
    as_number,
    cluster_usage,
    gpu_part,
    is_bound,
    node_name_of,
    pod_phase,
    pod_request,
)
from gpu_audit.diagnostics.predicates import (
    SchedulingContext,
    Verdict,
    inter_pod_rules,
    scheduling_context,
    spread_constraints,
)
from gpu_audit.diagnostics.shapes import NodeTable, node_table
from gpu_audit.errors import InputError, did_you_mean
from gpu_audit.k8s.events import event_count, event_note, event_regarding, event_time
from gpu_audit.k8s.gpu_resources import is_extended_resource
from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
    str_map,
)
from gpu_audit.k8s.pods import (
    WORKLOAD_TYPES,
    Container,
    PodTemplate,
    templates_of,
)
from gpu_audit.k8s.quantities import (
    QuantityError,
    add_quantities,
    parse_quantity,
    quantities,
)
from gpu_audit.model import ObjRef, Resource
from gpu_audit.redact import redact_tree
from gpu_audit.snapshot import Snapshot

DEFAULT_SCHEDULER = "default-scheduler"
RUNTIME_CLASS = "RuntimeClass"
VOLCANO_PODGROUP = "PodGroup.scheduling.volcano.sh"
COSCHEDULING_PODGROUP = "PodGroup.scheduling.x-k8s.io"
# Volcano names a pod's PodGroup in an annotation; scheduler-plugins' Coscheduling in a label
# (the second label is its legacy name).
VOLCANO_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
COSCHEDULING_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
_FIT_ERROR = re.compile(r"^0/(\d+) nodes are available:(.*)$", re.DOTALL)
_HISTOGRAM_ITEM = re.compile(r"^(\d+) (.+)$")
# What the DynamicResources plugin's PostFilter appends to the FitError after the histogram
# (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go, PostFilter).
_DRA_POST_FILTER = re.compile(
    r"(?<=\.) (?:still not schedulable|no new claims to deallocate"
    r"|deallocation of ResourceClaim completed)$"
)


@dataclass(frozen=True, slots=True)
class SchedulerMessage:
    """A FailedScheduling event or the PodScheduled condition, compared with the summary."""

    source: str  # "event <name>" or "condition PodScheduled"
    message: str
    count: int
    agrees: bool | None  # None: not in the default scheduler's format
    differences: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "message": self.message,
            "count": self.count,
            "agrees": self.agrees,
            "differences": list(self.differences),
        }


@dataclass(frozen=True, slots=True)
class TemplateOrigin:
    """The workload whose pod template stands in for a pod that does not exist yet."""

    owner: ObjRef
    path: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.owner.kind_name,
            "namespace": self.owner.namespace,
            "name": self.owner.name,
            "path": self.path,
        }


@dataclass(frozen=True, slots=True)
class PendingExplanation:
    pod: ObjRef
    template: TemplateOrigin | None
    phase: str
    scheduler: str
    request: tuple[tuple[str, Decimal], ...]
    pod_checks: tuple[Verdict, ...]
    nodes: NodeTable
    histogram: tuple[tuple[str, int], ...]
    summary: str
    fixes: tuple[str, ...]
    messages: tuple[SchedulerMessage, ...]

    @property
    def fitting_nodes(self) -> tuple[str, ...]:
        return self.nodes.fitting

    def as_dict(self, node_limit: int | None = None) -> dict[str, Any]:
        """The explanation as `why-pending` (every node) and the report (the `node_limit`
        nodes nearest to taking the pod, and `nodes_evaluated`) show it, through the redaction
        of gpu_audit.redact (event messages and predicate details quote the cluster's data)."""
        if node_limit is None:
            fields = self._fields()
            nodes = redact_tree([n.as_dict() for n in self.nodes.explanations()])
        else:
            fields = {**self._fields(), "nodes_evaluated": len(self.nodes)}
            nodes = self.nodes.closest_shown(node_limit)
        explanation: dict[str, Any] = redact_tree(fields)
        explanation["nodes"] = nodes
        return explanation

    def _fields(self) -> dict[str, Any]:
        return {
            "pod": {"namespace": self.pod.namespace, "name": self.pod.name},
            "template": self.template.as_dict() if self.template else None,
            "phase": self.phase,
            "scheduler": self.scheduler,
            "request": {name: as_number(value) for name, value in self.request},
            "pod_checks": [v.as_dict() for v in self.pod_checks],
            "summary": self.summary,
            "histogram": dict(self.histogram),
            "fitting_nodes": list(self.fitting_nodes),
            "fixes": list(self.fixes),
            "scheduler_messages": [m.as_dict() for m in self.messages],
        }


# --------------------------------------------------------------------------- pod-level checks


def _admitted_spec(snapshot: Snapshot, pod: Resource) -> tuple[dict[str, Any], Verdict | None]:
    """The spec the scheduler sees: the RuntimeClass admission plugin merges the class's
    scheduling.nodeSelector and tolerations into the pod and sets spec.overhead from it. Pods
    read from a cluster already carry them (merging again changes nothing); manifests do not."""
    spec = dict(pod.spec)
    name = str(spec.get("runtimeClassName") or "")
    if not name:
        return spec, None
    if not snapshot.has(RUNTIME_CLASS):
        return spec, Verdict(
            RUNTIME_CLASS, True, (), f"runtimeClassName {name}: RuntimeClasses not in the input"
        )
    found = snapshot.get(RUNTIME_CLASS, "", name)
    if found is None:
        return spec, Verdict(
            RUNTIME_CLASS,
            False,
            (),
            f"RuntimeClass {name} does not exist: admission rejects new pods that name it and "
            "the kubelet cannot run this one",
            f"# create RuntimeClass {name} (handler: the CRI handler, e.g. nvidia) or fix "
            "spec.runtimeClassName",
        )
    scheduling = as_mapping(found.raw.get("scheduling"))
    selector = str_map(spec.get("nodeSelector"))
    for key, value in str_map(scheduling.get("nodeSelector")).items():
        if key in selector and selector[key] != value:
            return spec, Verdict(
                RUNTIME_CLASS,
                False,
                (),
                f"RuntimeClass {name} selects {key}={value}, the pod {key}={selector[key]}: "
                "admission rejects the conflict",
                f"# make the pod's nodeSelector {key} agree with RuntimeClass {name}",
            )
        selector[key] = value
    spec["nodeSelector"] = selector
    tolerations = list(as_list(spec.get("tolerations")))
    tolerations.extend(t for t in as_list(scheduling.get("tolerations")) if t not in tolerations)
    spec["tolerations"] = tolerations
    if not spec.get("overhead") and as_mapping(found.raw.get("overhead")).get("podFixed"):
        spec["overhead"] = as_mapping(found.raw.get("overhead")).get("podFixed")
    handler = str(found.raw.get("handler", ""))
    return spec, Verdict(
        RUNTIME_CLASS,
        True,
        (),
        f"RuntimeClass {name} (handler {handler}); its scheduling section is merged into the "
        "pod's nodeSelector and tolerations",
    )


def _extended_resource_problems(container: Container) -> list[str]:
    problems = []
    for name in sorted({str(k) for k in container.requests} | {str(k) for k in container.limits}):
        if not is_extended_resource(name):
            continue
        request, limit = container.requests.get(name), container.limits.get(name)
        for label, value in (("request", request), ("limit", limit)):
            if value is None:
                continue
            try:
                amount = parse_quantity(value)
            except QuantityError:
                problems.append(
                    f"{container.describe()}: {name} {label} {value!r} is not a quantity"
                )
                continue
            if amount != amount.to_integral_value():
                problems.append(
                    f"{container.describe()}: {name} {label} {value} is not a whole number"
                )
        if limit is None:
            problems.append(f"{container.describe()}: {name} has a request but no limit")
        elif request is not None and quantities({"r": request}) != quantities({"r": limit}):
            problems.append(
                f"{container.describe()}: {name} request {request} differs from its limit {limit}"
            )
    return problems


def _api_validation(pod: Resource) -> Verdict | None:
    """Extended resources (GPUs included) must be whole numbers with request == limit, or the
    API server rejects the pod and no scheduler ever sees it (pods read from a cluster always
    pass; manifests may not)."""
    templates = templates_of(pod)
    problems = [
        p
        for c in (templates[0].containers() if templates else ())
        for p in _extended_resource_problems(c)
    ]
    if not problems:
        return None
    return Verdict(
        "PodValidation",
        False,
        (),
        "; ".join(problems) + ": the API server rejects such a pod, so it is never scheduled",
        "# extended resources such as GPUs are requested in whole units with requests equal to "
        "limits: set only resources.limits (requests default to it), e.g. "
        "resources: {limits: {nvidia.com/gpu: 1}}",
    )


def _scheduling_gates(spec: Mapping[str, Any]) -> Verdict | None:
    gates = [str(as_mapping(g).get("name", "")) for g in as_list(spec.get("schedulingGates"))]
    if not gates:
        return None
    return Verdict(
        "SchedulingGates",
        False,
        (),
        f"scheduling gates {', '.join(gates)}: the scheduler does not consider the pod until "
        "they are removed (by Kueue on admission, for example)",
        "# the controller that added the gates removes them; check its queue (kubectl get "
        "workloads -A for Kueue)",
    )


def _pod_group(pod: Resource) -> tuple[str, str] | None:
    for key in VOLCANO_GROUP_ANNOTATIONS:
        if pod.annotations.get(key):
            return VOLCANO_PODGROUP, pod.annotations[key]
    for key in COSCHEDULING_GROUP_LABELS:
        if pod.labels.get(key):
            return COSCHEDULING_PODGROUP, pod.labels[key]
    return None


def _members(snapshot: Snapshot, pod: Resource, type_: str, group: str) -> list[Resource]:
    if type_ == COSCHEDULING_PODGROUP:
        found = [
            p
            for key in COSCHEDULING_GROUP_LABELS
            for p in snapshot.with_label("Pod", key, group)
            if p.ref.namespace == pod.ref.namespace
        ]
    else:
        found = [
            p
            for p in snapshot.in_namespace("Pod", pod.ref.namespace)
            if any(p.annotations.get(k) == group for k in VOLCANO_GROUP_ANNOTATIONS)
        ]
    return sorted({p.ref: p for p in found}.values(), key=lambda p: p.ref.sort_key)


def _copies_that_fit(
    request: Mapping[str, Decimal], fitting: Sequence[str], usage: ClusterUsage
) -> int:
    """How many more pods shaped like this one fit at once on the nodes where it fits."""
    total = 0
    for node in fitting:
        free = usage.nodes[node]
        per_node = [int(free.free(r) // v) for r, v in request.items() if v > 0]
        total += min(per_node) if per_node else 1
    return total


def _gang(
    snapshot: Snapshot,
    pod: Resource,
    request: Mapping[str, Decimal],
    fitting: Sequence[str],
    usage: ClusterUsage,
) -> Verdict | None:
    found = _pod_group(pod)
    if found is None:
        return None
    type_, group = found
    where = f"{type_.split('.', 1)[0]} {pod.ref.namespace}/{group} ({type_.split('.', 1)[1]})"
    if not snapshot.has(type_):
        return Verdict("Gang", True, (), f"member of {where}; PodGroups not in the input")
    podgroup = snapshot.get(type_, pod.ref.namespace, group)
    if podgroup is None:
        return Verdict(
            "Gang",
            False,
            (),
            f"{where} does not exist: the gang scheduler places none of its pods",
            f"# create the PodGroup {group} in {pod.ref.namespace} (its job controller "
            "normally does), or remove the pod's group label/annotation",
        )
    min_member = podgroup.spec.get("minMember")
    minimum = min_member if isinstance(min_member, int) else 1
    members = _members(snapshot, pod, type_, group)
    waiting = [m for m in members if not is_bound(m) and pod_phase(m) == "Pending"]
    bound = [m for m in members if is_bound(m)]
    phase = str(podgroup.status.get("phase") or "unknown")
    detail = (
        f"member of {where}: minMember {minimum}, {len(members)} member pods exist "
        f"({len(bound)} bound, {len(waiting)} pending), PodGroup phase {phase}"
    )
    if len(members) < minimum:
        return Verdict(
            "Gang",
            False,
            (),
            detail,
            f"# {minimum - len(members)} member pod(s) are missing: the gang waits until "
            f"{minimum} exist; lower minMember of PodGroup {group} or create the missing pods",
        )
    room = _copies_that_fit(request, fitting, usage)
    needed = max(minimum - len(bound), 0)
    if room < needed:
        return Verdict(
            "Gang",
            False,
            (),
            f"{detail}; room for {room} pod(s) shaped like this one, the gang needs {needed} more",
            f"# the gang needs {needed} such pods placed at once and only {room} fit now: "
            "free or add GPU capacity, or lower minMember",
        )
    return Verdict("Gang", True, (), f"{detail}; room for {room} such pod(s)")


# --------------------------------------------------------------------------- messages


def fit_error_message(total: int, histogram: Mapping[str, int]) -> str:
    if total == 0:
        return "no nodes available to schedule pods"
    reasons = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"0/{total} nodes are available: {', '.join(reasons)}."


def parse_fit_error(message: str) -> tuple[int, dict[str, int], list[str]] | None:
    """(nodes, histogram, unparsed parts) of a default-scheduler FitError message; None when
    the message has another format (another scheduler, or a non-fit error)."""
    match = _FIT_ERROR.match(message.strip())
    if not match:
        return None
    body = match.group(2).split(" preemption: ", 1)[0].strip().rstrip(",")
    body = _DRA_POST_FILTER.sub("", body).strip().rstrip(".")
    histogram: dict[str, int] = {}
    unparsed: list[str] = []
    # Parts are "N reason" joined by ", "; a PreFilter message ends with ". " before them.
    for sentence in body.split(". "):
        for part in re.split(r", (?=\d+ )", sentence.strip()):
            item = _HISTOGRAM_ITEM.match(part.strip())
            if item:
                reason = item.group(2).rstrip(".")
                histogram[reason] = histogram.get(reason, 0) + int(item.group(1))
            elif part.strip():
                unparsed.append(part.strip())
    return int(match.group(1)), histogram, unparsed


def _compare(
    source: str, message: str, count: int, total: int, histogram: Mapping[str, int]
) -> SchedulerMessage:
    parsed = parse_fit_error(message)
    if parsed is None:
        return SchedulerMessage(source, message, count, None, ())
    nodes, theirs, unparsed = parsed
    differences = []
    if nodes != total:
        differences.append(f"the scheduler counted {nodes} nodes, the input has {total}")
    differences.extend(
        f"{reason}: scheduler {theirs.get(reason, 0)}, gpu-audit {histogram.get(reason, 0)}"
        for reason in sorted(set(theirs) | set(histogram))
        if theirs.get(reason, 0) != histogram.get(reason, 0)
    )
    differences.extend(f"not evaluated by gpu-audit: {part}" for part in unparsed)
    return SchedulerMessage(source, message, count, not differences, tuple(differences))


def _failed_scheduling_events(snapshot: Snapshot, pod: Resource) -> list[Resource]:
    """core/v1 Events (involvedObject, message) and events.k8s.io/v1 (regarding, note)."""
    out = []
    for event in snapshot.in_namespace("Event", pod.ref.namespace):
        about = event_regarding(event)
        if (
            about.get("kind") == "Pod"
            and about.get("name") == pod.ref.name
            and event.raw.get("reason") == "FailedScheduling"
        ):
            out.append(event)
    return sorted(out, key=lambda e: (event_time(e), e.ref.name))


def scheduler_messages(
    snapshot: Snapshot, pod: Resource, total: int, histogram: Mapping[str, int]
) -> tuple[SchedulerMessage, ...]:
    out = []
    for cond in map(as_mapping, as_list(pod.status.get("conditions"))):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = str(cond.get("message") or "")
            if message:
                out.append(_compare("condition PodScheduled", message, 1, total, histogram))
    out.extend(
        _compare(f"event {e.ref.name}", event_note(e), event_count(e), total, histogram)
        for e in _failed_scheduling_events(snapshot, pod)
    )
    return tuple(out)


# --------------------------------------------------------------------------- explanation


def _fixes(pod_checks: Sequence[Verdict], nodes: NodeTable, wants_gpu: bool) -> tuple[str, ...]:
    fixes = [v.fix for v in pod_checks if not v.passed and v.fix]
    if not nodes.fitting:
        for node in nodes.best_candidates(wants_gpu):
            fixes.extend(v.fix for v in node.failed if v.fix)
    return tuple(dict.fromkeys(fixes))


def _summary(
    total: int,
    histogram: Mapping[str, int],
    fitting: Sequence[str],
    pod_checks: Sequence[Verdict],
    subject: str,
) -> str:
    """The scheduler's FitError when no node fits; otherwise which nodes fit and what still
    keeps the pod waiting."""
    if not fitting:
        return fit_error_message(total, histogram)
    blockers = [v.detail for v in pod_checks if not v.passed]
    shown = ", ".join(fitting[:5]) + (", ..." if len(fitting) > 5 else "")
    head = f"{len(fitting)}/{total} nodes fit {subject} now ({shown})"
    if blockers:
        return f"{head}, but: {'; '.join(blockers)}"
    if subject != "the pod":
        return f"{head}: the scheduler would place it"
    return (
        f"{head}: the scheduler would place it on its next attempt; if it stays Pending, check "
        "that its scheduler is running"
    )


# What the per-node verdicts read of a pod's (admitted) spec; its labels only count for
# topology spread, inter-pod affinity and the anti-affinity of running pods.
_PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints")


def _shape_key(
    ctx: SchedulingContext,
    pod: Resource,
    spec: Mapping[str, Any],
    request: Mapping[str, Decimal],
    claims: PodClaims | None,
) -> str:
    """The pod's scheduling shape: pods with one shape have the same verdicts on every node,
    so replicas of one controller are evaluated against the nodes once. A pod with
    ResourceClaims is keyed by its whole spec, labels and namespace. The namespace and labels
    of other pods count only where topology spread or inter-pod (anti-)affinity reads them,
    so that Pending pods of many namespaces alike in placement share one evaluation."""
    if claims is not None:
        held: list[Any] = [pod.ref.namespace, pod.labels, spec, claims.memo_key()]
    else:
        affinity = as_mapping(spec.get("affinity"))
        reads_labels = bool(
            ctx.anti_affinity_holders
            or spec.get("topologySpreadConstraints")
            or affinity.get("podAffinity")
            or affinity.get("podAntiAffinity")
        )
        scoped = [pod.ref.namespace, pod.labels] if reads_labels else None
        held = [scoped, [spec.get(f) for f in _PLACEMENT_FIELDS]]
    return json.dumps([*held, sorted(request.items())], sort_keys=True, default=str)


def explain_pending(
    snapshot: Snapshot,
    pod: Resource,
    ctx: SchedulingContext | None = None,
    template: TemplateOrigin | None = None,
) -> PendingExplanation:
    """`pod` is a Pod of the snapshot, or (with `template`) one made from a workload's pod
    template by template_pods, which is not in the snapshot's accounting."""
    ctx = ctx or scheduling_context(snapshot, cluster_usage(snapshot))
    spec, runtime_class = _admitted_spec(snapshot, pod)
    request = dict(pod_request(pod) if template else ctx.usage.request_of(pod))
    if runtime_class is not None and not pod.spec.get("overhead") and spec.get("overhead"):
        add_quantities(request, quantities(spec.get("overhead")))
    claims = pod_claims_state(snapshot, pod, request, template is not None)
    key = ("nodes", _shape_key(ctx, pod, spec, request, claims))
    if key not in ctx.memo:
        ctx.memo[key] = node_table(
            ctx,
            spec,
            request,
            spread_constraints(ctx, pod, spec),
            inter_pod_rules(ctx, pod, spec),
            None if claims is None else partial(node_verdict, snapshot, claims),
            frozenset() if claims is None else claims.served_resources,
        )
    nodes: NodeTable = ctx.memo[key]
    total = len(nodes)
    histogram = nodes.histogram()
    dra_check = None if claims is None else claims.pod_verdict
    pod_checks = [
        v
        for v in (_api_validation(pod), runtime_class, _scheduling_gates(spec), dra_check)
        if v is not None
    ]
    gang = _gang(snapshot, pod, request, nodes.fitting, ctx.usage)
    if gang is not None:
        pod_checks.append(gang)
    scheduler = str(spec.get("schedulerName") or DEFAULT_SCHEDULER)
    if scheduler != DEFAULT_SCHEDULER:
        pod_checks.append(
            Verdict(
                "SchedulerName",
                True,
                (),
                f"placed by scheduler {scheduler}: the predicates below are the default "
                "scheduler's, which such schedulers also apply",
            )
        )
    if node_name_of(pod):
        pod_checks.append(
            Verdict(
                "NodeName",
                True,
                (),
                f"spec.nodeName is {node_name_of(pod)}: the pod is bound; the kubelet decides",
            )
        )
    wants_gpu = bool(gpu_part(request)) or (claims is not None and wants_gpus(snapshot, pod))
    subject = "a new pod from this template" if template else "the pod"
    if template is not None:
        pod_checks.append(
            Verdict(
                "PodTemplate",
                True,
                (),
                f"no such pod exists: evaluated as a new pod from {template.owner} "
                f"({template.path}); admission plugins other than RuntimeClass (e.g. "
                "ExtendedResourceToleration, which adds a toleration per extended resource "
                "requested where it is enabled) are not applied",
            )
        )
    return PendingExplanation(
        pod=pod.ref,
        template=template,
        phase=pod_phase(pod),
        scheduler=scheduler,
        request=tuple(sorted(request.items())),
        pod_checks=tuple(pod_checks),
        nodes=nodes,
        histogram=tuple(sorted(histogram.items())),
        summary=_summary(total, histogram, nodes.fitting, pod_checks, subject),
        fixes=_fixes(pod_checks, nodes, wants_gpu),
        messages=scheduler_messages(snapshot, pod, total, histogram),
    )


def pending_gpu_pods(snapshot: Snapshot, usage: ClusterUsage) -> list[Resource]:
    """Pods waiting for a node that request a GPU resource, or claim GPUs through DRA. A pod
    without a status phase is a manifest, never submitted: nothing waits. A Pod the API server
    accepted always has one: its create strategy sets status.phase Pending (kubernetes
    pkg/registry/core/pod/strategy.go, podStrategy.PrepareForCreate)."""
    return [
        p
        for p in snapshot.of("Pod")
        if p.status.get("phase") == "Pending"
        and not node_name_of(p)
        and (
            gpu_part(usage.request_of(p))
            or (p.spec.get("resourceClaims") and wants_gpus(snapshot, p))
        )
    ]


def explain_all_pending(snapshot: Snapshot) -> list[PendingExplanation]:
    usage = cluster_usage(snapshot)
    ctx = scheduling_context(snapshot, usage)
    return [explain_pending(snapshot, p, ctx) for p in pending_gpu_pods(snapshot, usage)]


def _template_pod(template: PodTemplate) -> Resource:
    owner = template.owner
    suffix = f"-{template.replica_type.lower()}" if template.replica_type else ""
    name = f"{owner.ref.name}{suffix}"
    metadata = {**template.metadata, "name": name, "namespace": owner.ref.namespace}
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": dict(template.spec),
        "status": {"phase": "Pending"},
    }
    return Resource(ObjRef("Pod", owner.ref.namespace, name), "v1", raw, owner.source)


def _workload(snapshot: Snapshot, namespace: str, kind: str, name: str) -> Resource | None:
    wanted = kind.lower()
    for type_ in WORKLOAD_TYPES:
        if wanted in (type_.lower(), type_.split(".", 1)[0].lower()):
            found = snapshot.get(type_, namespace, name)
            if found is not None:
                return found
    return None


def resolve_target(snapshot: Snapshot, target: str) -> list[tuple[Resource, TemplateOrigin | None]]:
    """NAMESPACE/POD names a Pod; NAMESPACE/KIND/NAME a workload (Job, Deployment,
    PyTorchJob...) whose pod templates are explained as new pods, one per replica type."""
    parts = target.split("/")
    if len(parts) == 2 and all(parts):
        namespace, name = parts
        pod = snapshot.get("Pod", namespace, name)
        if pod is None:
            hint = "" if snapshot.has("Pod") else " (the input has no Pods at all)"
            raise InputError(
                [
                    f"pod {namespace}/{name} is not in the input{hint}; to explain a workload "
                    "that has no pods yet, name it as NAMESPACE/KIND/NAME (e.g. "
                    f"{namespace}/Job/{name})"
                ]
            )
        return [(pod, None)]
    if len(parts) == 3 and all(parts):
        namespace, kind, name = parts
        kinds = sorted({t.split(".", 1)[0] for t in WORKLOAD_TYPES})
        if kind.casefold() not in {k.casefold() for k in kinds} | {
            t.casefold() for t in WORKLOAD_TYPES
        }:
            raise InputError(
                [f"{target!r}: unknown workload kind {kind!r}{did_you_mean([kind], kinds)}"]
            )
        owner = _workload(snapshot, namespace, kind, name)
        if owner is None:
            raise InputError([f"{kind} {namespace}/{name} is not in the input"])
        templates = templates_of(owner)
        if not templates:
            raise InputError([f"{owner.ref} has no pod template"])
        return [(_template_pod(t), TemplateOrigin(owner.ref, t.path)) for t in templates]
    raise InputError([f"{target!r}: expected NAMESPACE/POD or NAMESPACE/KIND/NAME"])
