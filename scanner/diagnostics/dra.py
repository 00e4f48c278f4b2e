"""DRA in the diagnostics: the GPUs the NVIDIA DRA driver publishes and what ResourceClaims hold
of them (inventory), and kube-scheduler's DynamicResources plugin for a Pending pod (why-pending).

The plugin (pkg/scheduler/framework/plugins/dynamicresources) first checks the pod itself
(PreEnqueue/PreFilter): every claim must exist (a template's claim must have been created,
status.resourceClaimStatuses) and every DeviceClass an unallocated claim names must exist
("request <r>: device class <c> does not exist"). It then filters each node, after every other
filter of the default profile: an allocated claim's nodeSelector must select the node
("resourceclaim not available on the node"), and the unallocated claims must all be allocatable
there from devices no other claim holds ("cannot allocate all claims"). Extended resources a
DeviceClass serves (extendedResourceName, KEP-5004) on nodes whose device plugin does not
advertise them are allocated the same way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.diagnostics.fit import ZERO, NodeUsage, is_bound
from gpu_audit.diagnostics.predicates import Verdict
from gpu_audit.k8s.dra import (
    ALL_DEVICES,
    DEVICE_CLASS,
    EXACT_COUNT,
    NVIDIA_GPU_DRIVER,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    ClaimRequest,
    Device,
    DeviceRequest,
    MatchAttributeConstraint,
    allocated_devices,
    claim_constraints,
    claim_requests,
    container_claims,
    device_class,
    extended_resource_classes,
    generated_claim_name,
    is_allocated,
    node_devices,
    pod_claims,
    published_devices,
    reserved_for,
    selector_set,
    selects_nvidia_gpus,
)
from gpu_audit.k8s.dra_cel import NotEvaluatedError
from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.pods import templates_of
from gpu_audit.k8s.scheduling import node_affinity_matches, tolerates
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

PREDICATE = "DynamicResources"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
DRA_SUFFIX = " (DRA)"
# Ways to try before giving up on a node (the allocator backtracks the same way).
_SEARCH_STEPS = 20_000
_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


# --------------------------------------------------------------------------- inventory


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """A node's NVIDIA DRA GPUs by inventory resource name (gpu.nvidia.com/gpu (DRA), ...)."""

    capacity: Mapping[str, Decimal]
    requested: Mapping[str, Decimal]
    held: Mapping[str, Decimal]
    product: str


def inventory_resource(device: Device) -> str | None:
    """The inventory row of a gpu.nvidia.com device: whole GPUs, and MIG slices and VFIO
    devices that are not partitions of shared counters (dynamic MIG publishes every possible
    placement, which overlap: only its whole GPUs are counted)."""
    kind = device.kind
    if kind == "gpu":
        return f"{NVIDIA_GPU_DRIVER}/gpu{DRA_SUFFIX}"
    if device.partitionable or kind not in ("mig", "vfio"):
        return None
    if kind == "vfio":
        return f"{NVIDIA_GPU_DRIVER}/vfio{DRA_SUFFIX}"
    profile = device.attribute("profile")
    return (
        f"{NVIDIA_GPU_DRIVER}/mig-{profile if isinstance(profile, str) else 'unknown'}{DRA_SUFFIX}"
    )


def _product(devices: Sequence[Device]) -> str:
    names = sorted({n for d in devices if isinstance(n := d.attribute("productName"), str) and n})
    return names[0] if names else ""


def _exited_claim_users(pod: Resource) -> bool:
    """A bound, unfinished pod whose containers that use claims have all exited: it keeps its
    claims (and their devices) while nothing uses them."""
    templates = templates_of(pod)
    if not templates or not is_bound(pod):
        return False
    users = [
        c.name
        for c in templates[0].containers()
        if container_claims(c.raw) and not (c.init and not c.is_sidecar)
    ]
    exited = {
        str(s.get("name", ""))
        for section in ("initContainerStatuses", "containerStatuses")
        for s in map(as_mapping, as_list(pod.status.get(section)))
        if "terminated" in as_mapping(s.get("state"))
    }
    return bool(users) and set(users) <= exited


def dra_inventory(snapshot: Snapshot) -> Mapping[str, NodeDevices]:
    """Node name -> its NVIDIA DRA GPUs, those allocated to ResourceClaims, and those held by
    pods whose claim-using containers have exited. Empty without such devices."""
    by_node = node_devices(snapshot, NVIDIA_GPU_DRIVER)
    if not by_node:
        return {}
    allocated = {a.key: a for a in allocated_devices(snapshot)}
    out: dict[str, NodeDevices] = {}
    for node, devices in by_node.items():
        capacity: dict[str, Decimal] = defaultdict(Decimal)
        requested: dict[str, Decimal] = defaultdict(Decimal)
        held: dict[str, Decimal] = defaultdict(Decimal)
        for device in devices:
            name = inventory_resource(device)
            if name is None:
                continue
            capacity[name] += 1
            allocation = allocated.get(device.key)
            if allocation is None:
                continue
            requested[name] += 1
            pods = [
                snapshot.get("Pod", ref.namespace, ref.name)
                for ref in reserved_for(allocation.claim)
            ]
            if pods and all(p is not None and _exited_claim_users(p) for p in pods):
                held[name] += 1
        if capacity:
            out[node] = NodeDevices(dict(capacity), dict(requested), dict(held), _product(devices))
    return out


def with_dra(usage: NodeUsage, devices: NodeDevices | None) -> NodeUsage:
    """The node's usage with its DRA GPUs as resources (capacity = allocatable = published)."""
    if devices is None:
        return usage
    return NodeUsage(
        usage.node,
        {**usage.capacity, **devices.capacity},
        {**usage.allocatable, **devices.capacity},
        {**usage.requested, **devices.requested},
        usage.pods,
    )


# --------------------------------------------------------------------------- pods


@dataclass(frozen=True, slots=True)
class ClaimToAllocate:
    """A claim the scheduler would allocate for the pod: an existing unallocated claim, a
    claim still to be created from a template, or the pod's DRA-backed extended resources."""

    label: str
    claim: Resource | None  # None for extended resources
    requests: tuple[ClaimRequest, ...]
    constraints: tuple[MatchAttributeConstraint, ...]


@dataclass(frozen=True, slots=True)
class PodClaims:
    """What the DynamicResources plugin sees of one pod."""

    pod_verdict: Verdict
    blocked: bool  # the pod-level checks fail: no node is evaluated
    allocated: tuple[Resource, ...]  # claims already allocated (their nodeSelector must match)
    to_allocate: tuple[ClaimToAllocate, ...]
    extended: tuple[tuple[str, int, Resource], ...]  # (resource, count, DeviceClass)
    not_evaluated: str

    @property
    def served_resources(self) -> frozenset[str]:
        """Extended resources a DeviceClass serves: NodeResourcesFit leaves them to DRA on
        nodes that do not advertise them."""
        return frozenset(name for name, _, _ in self.extended)

    def memo_key(self) -> tuple[str, ...]:
        return (
            *(c.ref.name for c in self.allocated),
            *(c.label for c in self.to_allocate),
            self.pod_verdict.detail,
        )


def _is_real(pod: Resource) -> bool:
    """A pod read from a cluster (it has a status beyond the Pending phase given to a pod made
    from a template), as opposed to a manifest: only a real pod's claims have been created."""
    return any(key != "phase" for key in pod.status)


def _resolve(
    snapshot: Snapshot, pod: Resource, template_pod: bool
) -> Iterator[tuple[str, Resource | None, str]]:
    """(pod claim name, the claim object or template to allocate from, problem)."""
    namespace = pod.ref.namespace
    for pod_claim in pod_claims(pod.spec, "spec"):
        if pod_claim.claim_name:
            if not snapshot.has(RESOURCE_CLAIM):
                yield pod_claim.name, None, ""
                continue
            found = snapshot.get(RESOURCE_CLAIM, namespace, pod_claim.claim_name)
            problem = (
                f'resourceclaim.resource.k8s.io "{pod_claim.claim_name}" not found'
                if found is None
                else ""
            )
            yield pod_claim.name, found, problem
        elif pod_claim.template_name:
            generated = None if template_pod else generated_claim_name(pod, pod_claim.name)
            if generated:  # without ResourceClaims in the input: not evaluated
                found = snapshot.get(RESOURCE_CLAIM, namespace, generated)
                missing = snapshot.has(RESOURCE_CLAIM) and found is None
                yield (
                    pod_claim.name,
                    found,
                    f'resourceclaim "{generated}" not found' if missing else "",
                )
                continue
            template = snapshot.get(RESOURCE_CLAIM_TEMPLATE, namespace, pod_claim.template_name)
            if template is None and snapshot.has(RESOURCE_CLAIM_TEMPLATE):
                yield (
                    pod_claim.name,
                    None,
                    f"ResourceClaimTemplate {pod_claim.template_name} does not exist: no claim "
                    "can be created for the pod",
                )
            elif _is_real(pod) and not template_pod:
                yield (
                    pod_claim.name,
                    None,
                    f'pod "{namespace}/{pod.ref.name}": ResourceClaim not created yet',
                )
            else:
                yield pod_claim.name, template, ""


def _missing_classes(snapshot: Snapshot, claim: Resource) -> list[str]:
    if not snapshot.has(DEVICE_CLASS):
        return []
    return [
        f"request {alt.name}: device class {alt.class_name} does not exist"
        for request in claim_requests(claim)
        for alt in request.alternatives
        if alt.class_name and device_class(snapshot, alt.class_name) is None
    ]


def _unevaluated(snapshot: Snapshot, requests: Sequence[ClaimRequest]) -> str:
    """Why the nodes are judged without some selectors ("" when every one is evaluated)."""
    reasons = [
        found.not_evaluated
        for request in requests
        for alt in request.alternatives
        if (found := selector_set(device_class(snapshot, alt.class_name), alt)).not_evaluated
    ]
    return f" (not evaluated: {'; '.join(reasons)})" if reasons else ""


def _dra_extended(
    snapshot: Snapshot, request: Mapping[str, Decimal]
) -> tuple[tuple[str, int, Resource], ...]:
    mapped = extended_resource_classes(snapshot)
    return tuple(
        (name, int(amount), mapped[name])
        for name, amount in sorted(request.items())
        if name in mapped and amount > 0
    )


def pod_claims_state(
    snapshot: Snapshot, pod: Resource, request: Mapping[str, Decimal], template_pod: bool
) -> PodClaims | None:
    """The pod's claims as the plugin sees them; None when the pod has no claims and no
    extended resource a DeviceClass serves (the plugin skips it)."""
    extended = _dra_extended(snapshot, request)
    resolved = list(_resolve(snapshot, pod, template_pod))
    if not resolved and not extended:
        return None
    problems = [p for _, _, p in resolved if p]
    allocated, to_allocate, parts, unknown = [], [], [], []
    for name, found, problem in resolved:
        if problem:
            continue
        if found is None:
            unknown.append(name)
            continue
        if found.metadata.get("deletionTimestamp"):
            problems.append(f'resourceclaim "{found.ref.name}" is being deleted')
        elif found.ref.kind == RESOURCE_CLAIM and is_allocated(found):
            allocated.append(found)
            parts.append(f"{name}: ResourceClaim {found.ref.name} allocated")
        else:
            problems.extend(_missing_classes(snapshot, found))
            constraints, skipped = claim_constraints(found)
            label = f"{found.ref.kind} {found.ref.name}"
            requests = claim_requests(found)
            to_allocate.append(ClaimToAllocate(label, found, requests, constraints))
            note = _unevaluated(snapshot, requests) + (f" ({skipped})" if skipped else "")
            parts.append(f"{name}: {label} to allocate{note}")
    parts.extend(f"{name} {count} from DeviceClass {cls.ref.name}" for name, count, cls in extended)
    not_evaluated = (
        f"claims {', '.join(unknown)}: ResourceClaims or templates not in the input"
        if unknown
        else ""
    )
    if problems:
        verdict = Verdict(
            PREDICATE,
            False,
            (),
            "; ".join(problems),
            "# create the missing ResourceClaim, ResourceClaimTemplate or DeviceClass (kubectl "
            "get resourceclaims,resourceclaimtemplates -n "
            f"{pod.ref.namespace}; kubectl get deviceclasses), or fix the names in the pod's "
            "spec.resourceClaims or the claim's requests",
        )
    else:
        detail = "; ".join(parts) or "no claim to allocate"
        verdict = Verdict(PREDICATE, True, (), detail + (f"; {not_evaluated}" if unknown else ""))
    return PodClaims(
        verdict, bool(problems), tuple(allocated), tuple(to_allocate), extended, not_evaluated
    )


def wants_gpus(snapshot: Snapshot, pod: Resource) -> bool:
    """Whether the pod claims NVIDIA GPUs through DRA (a claim whose DeviceClass hands them out)."""
    for _, found, _ in _resolve(snapshot, pod, False):
        if found is None:
            continue
        names = {a.class_name for r in claim_requests(found) for a in r.alternatives}
        if any(selects_nvidia_gpus(snapshot, n) for n in names if n):
            return True
    return False


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class _Need:
    """One way to fill a request on a node: the free devices that qualify, how many."""

    label: str  # "request gpu of ResourceClaimTemplate x"
    claim: str  # constraints apply within one claim
    request: str  # the request's name, as constraints list it
    candidates: tuple[Device, ...]
    taken: int  # qualifying devices other claims hold
    count: int  # 0: every qualifying device (allocationMode All)


class _ExhaustedError(Exception):
    pass


def _reachable(snapshot: Snapshot, node: Resource) -> Sequence[Device]:
    """Devices of every slice the node can reach: its own, then those of slices for all nodes
    or for the nodes a selector picks."""
    shared = snapshot.derived(
        ("dra", "shared-devices"), lambda s: [d for d in published_devices(s) if not d.node]
    )
    own = list(node_devices(snapshot).get(node.ref.name, ()))
    return own + [d for d in shared if d.reachable_from(node)]


def _held(snapshot: Snapshot) -> frozenset[tuple[str, str, str]]:
    return snapshot.derived(
        ("dra", "held-keys"), lambda s: frozenset(a.key for a in allocated_devices(s))
    )


def _need(
    snapshot: Snapshot, node: Resource, request: DeviceRequest, label: str, claim: str, name: str
) -> _Need | str:
    """The request's qualifying devices on the node, or why it is not evaluated."""
    selectors = selector_set(device_class(snapshot, request.class_name), request)
    if selectors.not_evaluated:
        return f"{label}: {selectors.not_evaluated}"
    held = _held(snapshot)
    free, taken = [], 0
    try:
        for device in _reachable(snapshot, node):
            if selectors.verdict(device) is not True:
                continue
            blocked = any(
                t.effect in _TAINT_EFFECTS and not tolerates(request.tolerations, t)
                for t in device.taints
            )
            if device.key in held and not request.admin_access:
                taken += 1
            elif not blocked:
                free.append(device)
    except NotEvaluatedError as exc:
        return f"{label}: evaluating its selectors needs {exc}"
    count = 0 if request.mode == ALL_DEVICES else request.count
    return _Need(label, claim, name, tuple(free), taken, count)


@dataclass
class _Search:
    """The allocator's search on one node: requests in order, each by its first alternative
    that works, distinct devices, matchAttribute constraints within a claim."""

    requests: list[tuple[_Need, ...]]  # alternatives per request
    constraints: Mapping[str, tuple[MatchAttributeConstraint, ...]]  # claim -> constraints
    steps: int = 0

    def run(self) -> bool:
        return self._solve(0, set(), {})

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > _SEARCH_STEPS:
            raise _ExhaustedError

    def _fits(
        self, need: _Need, device: Device, values: dict[tuple[str, int], Any]
    ) -> dict[tuple[str, int], Any] | None:
        out = dict(values)
        for index, constraint in enumerate(self.constraints.get(need.claim, ())):
            if constraint.requests and need.request not in constraint.requests:
                continue
            value = device.attribute(constraint.attribute)
            key = (need.claim, index)
            if value is None or (key in out and out[key] != value):
                return None
            out[key] = value
        return out

    def _solve(
        self, index: int, used: set[tuple[str, str, str]], values: dict[tuple[str, int], Any]
    ) -> bool:
        if index == len(self.requests):
            return True
        for need in self.requests[index]:
            if need.count == 0:
                if need.taken or not need.candidates:
                    continue
                picked: dict[tuple[str, int], Any] | None = values
                for device in need.candidates:
                    picked = (
                        None
                        if picked is None or device.key in used
                        else self._fits(need, device, picked)
                    )
                if picked is not None:
                    keys = {d.key for d in need.candidates}
                    if self._solve(index + 1, used | keys, picked):
                        return True
                continue
            if self._pick(index, need, 0, need.count, used, values):
                return True
        return False

    def _pick(
        self,
        index: int,
        need: _Need,
        start: int,
        remaining: int,
        used: set[tuple[str, str, str]],
        values: dict[tuple[str, int], Any],
    ) -> bool:
        if remaining == 0:
            return self._solve(index + 1, used, values)
        for position in range(start, len(need.candidates) - remaining + 1):
            self._tick()
            device = need.candidates[position]
            if device.key in used:
                continue
            fitted = self._fits(need, device, values)
            if fitted is not None and self._pick(
                index, need, position + 1, remaining - 1, used | {device.key}, fitted
            ):
                return True
        return False


def _claim_selector_matches(claim: Resource, node: Resource) -> bool:
    selector = as_mapping(claim.status.get("allocation")).get("nodeSelector")
    if not isinstance(selector, Mapping):
        return True  # devices reachable from every node
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}
    }
    return node_affinity_matches(spec, node)


def _shortfall(need: _Need) -> str:
    wanted = "every one" if need.count == 0 else str(need.count)
    held = f", {need.taken} held by other claims" if need.taken else ""
    return f"{need.label}: wants {wanted}, {len(need.candidates)} free{held}"


def node_verdict(snapshot: Snapshot, claims: PodClaims, usage: NodeUsage) -> Verdict:
    """The DynamicResources filter on one node."""
    node = usage.node
    if claims.blocked:
        return Verdict(
            PREDICATE, True, (), "not evaluated per node: the pod's claims are not resolved"
        )
    elsewhere = [c for c in claims.allocated if not _claim_selector_matches(c, node)]
    if elsewhere:
        names = ", ".join(c.ref.name for c in elsewhere)
        return Verdict(
            PREDICATE,
            False,
            (NOT_AVAILABLE,),
            f"ResourceClaim {names} is allocated to devices this node cannot reach",
            f"# the pod can only run where its allocated claim {names} is; if that node is gone, "
            "delete the claim so it is allocated again (a template's claim is recreated)",
        )
    requests: list[tuple[_Need, ...]] = []
    constraints: dict[str, tuple[MatchAttributeConstraint, ...]] = {}
    skipped: list[str] = []
    for claim in claims.to_allocate:
        constraints[claim.label] = claim.constraints
        for request in claim.requests:
            needs = []
            for alternative in request.alternatives:
                found = _need(
                    snapshot,
                    node,
                    alternative,
                    f"request {alternative.name} of {claim.label}",
                    claim.label,
                    request.name,
                )
                if isinstance(found, str):
                    skipped.append(found)
                else:
                    needs.append(found)
            requests.append(tuple(needs))
    for resource, count, cls in claims.extended:
        if usage.allocatable.get(resource, ZERO) > 0:
            continue  # the device plugin serves it here: NodeResourcesFit counted it
        implicit = DeviceRequest(resource, cls.ref.name, (), EXACT_COUNT, count, False, "")
        found = _need(
            snapshot,
            node,
            implicit,
            f"{resource} ({count}) from DeviceClass {cls.ref.name}",
            resource,
            resource,
        )
        if isinstance(found, str):
            skipped.append(found)
        else:
            requests.append((found,))
    if skipped:
        return Verdict(PREDICATE, True, (), "not evaluated: " + "; ".join(skipped))
    if not requests:
        return Verdict(PREDICATE, True, (), "its allocated claims are reachable from this node")
    try:
        fits = _Search(requests, constraints).run()
    except _ExhaustedError:
        return Verdict(PREDICATE, True, (), "not evaluated: too many ways to combine the devices")
    needs = [n for alternatives in requests for n in alternatives[:1]]
    if fits:
        return Verdict(PREDICATE, True, (), "; ".join(_shortfall(n) for n in needs))
    short = [
        n
        for alternatives in requests
        if all(
            len(a.candidates) < max(a.count, 1) or (a.count == 0 and a.taken) for a in alternatives
        )
        for n in alternatives[:1]
    ]
    shown = short or needs
    held = any(n.taken for n in shown)
    return Verdict(
        PREDICATE,
        False,
        (CANNOT_ALLOCATE,),
        "; ".join(_shortfall(n) for n in shown)
        + ("" if short else "; the requests cannot all be met at once"),
        f"# node {node.ref.name}: "
        + (
            "devices that qualify are held by other claims; wait for their pods to finish or "
            "delete idle ones (kubectl get resourceclaims -A)"
            if held
            else "not enough devices qualify; check the request's selectors and count against "
            f"kubectl get resourceslices --field-selector spec.nodeName={node.ref.name} -o yaml"
        ),
    )
