from collections.abc import Iterator
from dataclasses import dataclass, replace

from gpu_audit.api import (
    ALL_DEVICES,
    DEVICE_CLASS,
    DRA_CLAIM_TYPES,
    RESOURCE_SLICE,
    Category,
    ClaimRequest,
    DeviceRequest,
    FixKind,
    RelatedRole,
    RequestMatch,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    claim_requests,
    claim_uses,
    claims_to_allocate,
    device_class,
    failed,
    match_request,
    passed,
    relate,
)

_EXAMPLES = 3


@dataclass(frozen=True, slots=True)
class _Verdict:
    """One request of a claim: a shortfall (the request can never be satisfied), a warning
    (satisfiable, but the selector errors on devices it meets), or neither; `not_evaluated`
    when the selectors are outside the evaluated CEL subset."""

    shortfall: str = ""
    warning: str = ""
    not_evaluated: str = ""
    path: str = ""


def _devices(match: RequestMatch) -> str:
    shown = ", ".join(d.label() for d in match.devices[:_EXAMPLES])
    more = f" +{len(match.devices) - _EXAMPLES} more" if len(match.devices) > _EXAMPLES else ""
    return f"{shown}{more}"


def _error_note(match: RequestMatch) -> str:
    first_device, first_error = match.errors[0]
    return (
        f"its selectors fail with a CEL runtime error ({first_error}) on {len(match.errors)} "
        f"device(s) (e.g. {first_device.label()})"
    )


def _shortfall(snapshot: Snapshot, request: DeviceRequest, match: RequestMatch) -> str:
    if not match.devices:
        cls = device_class(snapshot, request.class_name)
        selected = match_request(snapshot, replace(request, selectors=()), cls)
        if not selected.devices:
            where = f"no published device of the {match.checked} in the ResourceSlices"
            return f"{request.describe()}: {where} matches DeviceClass {request.class_name}"
        base = (
            f"{request.describe()}: DeviceClass {request.class_name} selects "
            f"{len(selected.devices)} published device(s) ({_devices(selected)}); the request's own "
            "selectors match none of them"
        )
        return f"{base}; {_error_note(match)}" if match.errors else base
    if request.mode == ALL_DEVICES:
        return ""
    most, node = match.per_node_max()
    if most >= request.count:
        return ""
    where = f" (node {node})" if node else ""
    return (
        f"{request.describe()}: at most {most} matching device(s) are reachable from one "
        f"node{where}, and a claim's devices are allocated on one node"
    )


def _request_verdict(snapshot: Snapshot, request: ClaimRequest) -> _Verdict | None:
    """The first alternative that can be satisfied wins (firstAvailable); None when a class
    is missing (GPU-SCHED-008's finding)."""
    shortfalls: list[tuple[str, str]] = []
    skipped: list[str] = []
    for alternative in request.alternatives:
        cls = device_class(snapshot, alternative.class_name)
        if cls is None:
            return None
        match = match_request(snapshot, alternative, cls)
        if match.not_evaluated:
            skipped.append(f"{alternative.describe()}: {match.not_evaluated}")
            continue
        shortfall = _shortfall(snapshot, alternative, match)
        if not shortfall:
            warning = _error_note(match) if match.errors else ""
            if warning:
                warning = f"{alternative.describe()}: {warning}"
            return _Verdict(warning=warning, path=alternative.path)
        shortfalls.append((shortfall, alternative.path))
    if skipped:
        return _Verdict(not_evaluated="; ".join(skipped))
    return _Verdict(shortfall="; ".join(s for s, _ in shortfalls), path=shortfalls[0][1])


@check(
    id="GPU-SCHED-009",
    title="DRA requests match devices the drivers publish",
    category=Category.SCHEDULING,
    severity=Severity.HIGH,
    requires=(DRA_CLAIM_TYPES, DEVICE_CLASS, RESOURCE_SLICE),
    rationale="""
        A DRA request gets devices only from ResourceSlices: a device qualifies when the
        selectors of the request's DeviceClass and the request's own CEL selectors are all
        true for it, and a claim's devices are allocated on one node. A selector that no
        published device satisfies (a product name spelled as GFD labels it rather than as
        NVML reports it, a MIG profile no GPU is partitioned into, more GPUs than any node has)
        leaves every pod that uses the claim Pending with "cannot allocate all claims". A
        selector that reads an attribute a device does not have fails with a CEL runtime
        error ("no such key"), and kube-scheduler aborts the allocation attempt that meets
        one.
    """,
    detection="""
        Every ResourceClaim and ResourceClaimTemplate not yet allocated (claims generated for
        one pod are skipped: their template is checked): each request's alternatives
        (`exactly`, or `firstAvailable` subrequests in order; v1beta1's flat request) are
        evaluated against every device of every ResourceSlice, DeviceClass selectors first,
        as the allocator does. A request fails when no device matches, or when an ExactCount
        request wants more devices than the most one node can reach (its own devices plus
        devices of slices for all or selected nodes). Devices held by other claims are not
        subtracted: this is whether the request can ever be met (`gpu-audit why-pending`
        judges the free devices now). Constraints between requests and per-request capacity
        are not evaluated. Selectors are evaluated with a CEL subset (comparisons, &&, ||, !,
        in, has, cel.bind, string startsWith/endsWith/contains/matches/lowerAscii, quantity
        and semver comparisons); a request whose selectors use anything else passes with
        "not evaluated", never a guess. Requests whose DeviceClass is missing are left to
        GPU-SCHED-008.
    """,
    severity_evidence="""
        High when a pod or workload in the input uses the claim or template and a request can
        never be met; medium when it can be met but the selectors fail with a CEL runtime
        error on published devices the class selects (an allocation attempt that meets one is
        aborted). Low for either when nothing in the input uses the claim or template yet.
    """,
    remediation="""
        # $kind $namespace/$name: $detail
        kubectl get resourceslices -o yaml   # the attributes and capacity the devices publish
        # then fix the selectors or count in $path (guard optional attributes with has())
    """,
    remediation_generic="""
        kubectl get resourceslices -o yaml   # the attributes and capacity the devices publish
        # then fix the request's selectors or count in the claim (guard optional attributes with
        # has(device.attributes["<domain>"].<name>))
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/",
        "https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-v1/",
        "https://github.com/kubernetes/dynamic-resource-allocation/blob/master/cel/compile.go",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/site/content/docs/reference/resourceslice-attributes.md",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/site/content/docs/guides/gpu-allocation/allocating-gpus.md",
    ),
)
def dra_requests_match_published_devices(snapshot: Snapshot) -> Iterator[Result]:
    for claim in claims_to_allocate(snapshot):
        yield from _claim(snapshot, claim)


def _claim(snapshot: Snapshot, claim: Resource) -> Iterator[Result]:
    verdicts = [v for v in (_request_verdict(snapshot, r) for r in claim_requests(claim)) if v]
    if not verdicts:
        return
    uses = claim_uses(snapshot).get(claim.ref, ())
    related = [relate(use.template, RelatedRole.SYMPTOM) for use in uses]
    unused = "" if uses else "; no pod or workload in the input uses it yet"
    shortfalls = [v for v in verdicts if v.shortfall]
    warnings = [v for v in verdicts if v.warning]
    if shortfalls or warnings:
        found = shortfalls or warnings
        detail = "; ".join(v.shortfall or v.warning for v in found)
        message = (
            f"can never be allocated: {detail}"
            if shortfalls
            else f"{detail}: kube-scheduler aborts an allocation attempt that evaluates one"
        )
        loud = None if shortfalls else Severity.MEDIUM
        yield failed(
            claim,
            message + unused,
            path=found[0].path,
            severity=loud if uses else Severity.LOW,
            fix={"detail": detail, "path": found[0].path},
            related=related,
        )
        return
    skipped = [v.not_evaluated for v in verdicts if v.not_evaluated]
    if skipped:
        yield passed(claim, f"selectors not evaluated ({'; '.join(skipped)}); nothing is claimed")
        return
    yield passed(claim, "every request matches published devices")
