from collections.abc import Iterator, Mapping

from gpu_audit.api import (
    CLUSTER_POLICY,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_list,
    as_mapping,
    check,
    failed,
    passed,
)


def _failing_conditions(policy: Resource) -> str:
    found = [
        f"{c.get('reason', '')}: {c.get('message', '')}"
        for c in map(as_mapping, as_list(policy.status.get("conditions")))
        if (c.get("type") == "Error" and c.get("status") == "True")
        or (c.get("type") == "Ready" and c.get("status") == "False")
    ]
    return f" ({'; '.join(dict.fromkeys(found))})" if found else ""


def _differing_sections(policy: Resource, active: Resource | None) -> list[str]:
    """The top-level spec sections whose settings differ from the reconciled policy's (every
    section when there is none to compare with)."""
    mine, theirs = policy.spec, active.spec if active is not None else {}
    keys = sorted({str(k) for k in mine} | {str(k) for k in theirs})
    return [k for k in keys if _plain(mine.get(k)) != _plain(theirs.get(k))]


def _plain(value: object) -> object:
    """Empty sections and absent ones mean the same defaults."""
    if isinstance(value, Mapping):
        items = {str(k): _plain(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if v is not None} or None
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@check(
    id="GPU-STACK-001",
    title="Exactly one ClusterPolicy exists and it reports ready",
    category=Category.STACK,
    severity=Severity.HIGH,
    requires=(CLUSTER_POLICY,),
    rationale="""
        The GPU Operator reconciles one ClusterPolicy and marks every other one `ignored`, so
        admins who edit a duplicate change nothing. A policy in `notReady` means some operand
        (driver, toolkit, device plugin, validator...) is failing on some GPU node.
    """,
    detection="""
        With several ClusterPolicies, each one in state `ignored` fails, or, without status
        (offline manifests), every one but the oldest by creationTimestamp. The reconciled
        policy fails when status.state is notReady (with its Error/Ready=False conditions),
        passes when ready, and passes on the duplicate count alone when it has no status.
        Not done: the 10-minute grace for a policy that is still installing (checks cannot read
        the clock) and the GPUCluster (DRA) coexistence error (type not collected).
    """,
    severity_evidence="""
        High for the reconciled policy in state notReady: an operand is failing on GPU nodes.
        A duplicate never breaks GPU work (the operator ignores it): medium when its spec
        differs from the reconciled policy's (settings someone wrote are not applied), low
        when it says the same (a leftover).
    """,
    remediation="""
        $command   # $summary
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # a duplicate ClusterPolicy the operator ignores: merge any settings you need into the
        # reconciled policy first, then
        kubectl delete clusterpolicies.nvidia.com/<name>
        # the reconciled policy reports notReady: read status.conditions, then the failing operand's pods
        kubectl describe clusterpolicies.nvidia.com/<name>
    """,
    references=(
        "https://github.com/NVIDIA/gpu-operator/blob/main/api/nvidia/v1/clusterpolicy_types.go",
    ),
)
def single_cluster_policy_ready(snapshot: Snapshot) -> Iterator[Result]:
    active = active_cluster_policy(snapshot)
    for policy in snapshot.of(CLUSTER_POLICY):
        if policy is not active:
            differs = _differing_sections(policy, active)
            effect = (
                f": its {', '.join(differs)} settings differ from that policy's and are not applied"
                if differs
                else ", with the same settings (a harmless leftover)"
            )
            yield failed(
                policy,
                f"is a duplicate the operator ignores; it reconciles only "
                f"{active.ref.name if active else 'one policy'}{effect}",
                path="status.state",
                severity=Severity.MEDIUM if differs else Severity.LOW,
                fix={
                    "summary": "merge any settings you need into the reconciled policy first",
                    "command": f"kubectl delete clusterpolicies.nvidia.com/{policy.ref.name}",
                },
            )
        elif policy.status.get("state") == "notReady":
            yield failed(
                policy,
                f"reports state notReady{_failing_conditions(policy)}",
                path="status.state",
                fix={
                    "summary": "read status.conditions, then the failing operand's pods",
                    "command": f"kubectl describe clusterpolicies.nvidia.com/{policy.ref.name}",
                },
            )
        else:
            state = policy.status.get("state")
            yield passed(policy, f"is the only reconciled ClusterPolicy (state {state or 'n/a'})")
