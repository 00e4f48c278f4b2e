from __future__ import annotations

from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    passed,
    templates_of,
)

from ._common import HPA, SCALED_OBJECT, condition, is_keda_hpa, keda_hpa_names, scale_target

_SCALABLE = ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController")
_UNSCALABLE = ("DaemonSet", "Job", "CronJob", "Pod")
_WAIVER = "gpu-audit.io/pinned"


@check(
    id="GPU-HPA-004",
    title="Autoscalers have a replica range and an existing, scalable target",
    category=Category.AUTOSCALING,
    severity=Severity.MEDIUM,
    requires=((HPA, SCALED_OBJECT),),
    rationale="""
        An HPA whose scaleTargetRef names a missing object, or a kind without a scale
        subresource (DaemonSet, Job, Pod), does nothing (AbleToScale=False, FailedGetScale);
        this typically follows a renamed Helm release or a deleted Deployment. An HPA or
        ScaledObject whose minimum equals its maximum is accepted by validation but never
        scales, which usually is a load-test leftover that hides an unscaled GPU service.
    """,
    detection="""
        Part A (low): HPA minReplicas (default 1) == maxReplicas, ScaledObject
        minReplicaCount (default 0) == maxReplicaCount (default 100); KEDA-generated HPAs are
        judged through their ScaledObject; waived by the annotation gpu-audit.io/pinned=true.
        Part B (medium): targets of kind DaemonSet/Job/CronJob/Pod; Deployment, StatefulSet,
        ReplicaSet and ReplicationController targets absent from the input, flagged only when
        the input holds other workloads of the HPA's namespace (a partial bundle is not
        judged); custom kinds whose CRD in the input has no scale subresource; live
        AbleToScale=False with reason FailedGetScale.
    """,
    severity_evidence="""
        A dead autoscaler (part B) is medium when the namespace holds a GPU Deployment or
        StatefulSet that no autoscaler targets (likely the renamed target, now unscaled), low
        otherwise: an autoscaler of nothing changes nothing. min == max (part A) is low.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $change
    """,
    fix_kind=FixKind.MANIFEST,
    remediation_generic="""
        # min == max: give it a range bounded by GPU capacity (partial objects for kubectl apply)
        apiVersion: autoscaling/v2
        kind: HorizontalPodAutoscaler
        metadata:
          name: <name>
          namespace: <namespace>
        spec:
          maxReplicas: <above-minReplicas>   # maxReplicas * GPUs per pod <= GPUs you can get
        ---
        # a KEDA ScaledObject: the same with maxReplicaCount
        apiVersion: keda.sh/v1alpha1
        kind: ScaledObject
        metadata:
          name: <name>
          namespace: <namespace>
        spec:
          maxReplicaCount: <above-minReplicaCount>   # maxReplicas * GPUs per pod <= GPUs you can get
        ---
        # a scale target that does not exist (or cannot scale):
        apiVersion: autoscaling/v2
        kind: HorizontalPodAutoscaler
        metadata:
          name: <name>
          namespace: <namespace>
        spec:
          scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: <target>}   # an existing Deployment/StatefulSet in this namespace
        # a target without a scale subresource (a DaemonSet): the autoscaler can only go
        #   kubectl -n <namespace> delete horizontalpodautoscaler <name>
    """,
    references=(
        "https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/",
        "https://keda.sh/docs/latest/reference/scaledobject-spec/",
    ),
)
def hpa_has_range_and_scalable_target(snapshot: Snapshot) -> Iterator[Result]:
    keda_names = keda_hpa_names(snapshot)
    for hpa in snapshot.of(HPA):
        if is_keda_hpa(hpa, keda_names):
            continue
        yield _range_result(hpa, hpa.spec.get("minReplicas", 1), hpa.spec.get("maxReplicas"))
        yield from _target_results(snapshot, hpa)
    for scaled in snapshot.of(SCALED_OBJECT):
        spec = scaled.spec
        yield _range_result(
            scaled, spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        )
        yield from _target_results(snapshot, scaled)


def _range_result(owner: Resource, low: object, high: object) -> Result:
    fields = (
        ("minReplicas", "maxReplicas")
        if owner.ref.kind == HPA
        else ("minReplicaCount", "maxReplicaCount")
    )
    if low != high:
        return passed(owner, f"scales between {low} and {high} replicas", path=f"spec.{fields[1]}")
    if owner.annotations.get(_WAIVER) == "true":
        return passed(
            owner, f"pinned at {high} replicas on purpose ({_WAIVER})", path=f"spec.{fields[1]}"
        )
    return failed(
        owner,
        f"{fields[0]} == {fields[1]} == {high}: it can never scale",
        path=f"spec.{fields[1]}",
        severity=Severity.LOW,
        fix=_fix(
            owner,
            "min == max; give it a range bounded by GPU capacity",
            f"{fields[1]}: {_bumped(high)}   # maxReplicas * GPUs per pod <= GPUs you can get",
        ),
    )


def _bumped(high: object) -> int:
    return high + 1 if isinstance(high, int) and not isinstance(high, bool) else 2


def _target_results(snapshot: Snapshot, owner: Resource) -> Iterator[Result]:
    target = scale_target(owner)
    problem = _target_problem(snapshot, owner, target.kind, target.name, target.group)
    path = "spec.scaleTargetRef"
    if problem is None:
        return
    unscaled = _unscaled_gpu_workloads(snapshot, owner.ref.namespace) if problem else []
    severity = Severity.MEDIUM if unscaled else Severity.LOW
    message = problem + (
        f"; {', '.join(unscaled[:3])} requests GPUs and no autoscaler targets it"
        if unscaled
        else "; no GPU workload of the namespace is left without an autoscaler"
    )
    if problem and target.kind in _UNSCALABLE:
        # Nothing to repoint: the autoscaler can only go.
        kind = owner.ref.kind.lower()
        delete = f"kubectl -n {owner.ref.namespace} delete {kind} {owner.ref.name}"
        yield failed(
            owner,
            message,
            path=path,
            severity=severity,
            fix={"problem": problem, "change": delete},
        )
    elif problem:
        name = unscaled[0].split(" ", 1)[1] if unscaled else target.name
        kind = unscaled[0].split(" ", 1)[0] if unscaled else "Deployment"
        patch = (
            f"scaleTargetRef: {{apiVersion: apps/v1, kind: {kind}, name: {name}}}"
            "   # an existing Deployment/StatefulSet in this namespace"
        )
        yield failed(owner, message, path=path, severity=severity, fix=_fix(owner, problem, patch))
    else:
        yield passed(owner, f"targets {target.kind} {target.name}, which can scale", path=path)


def _unscaled_gpu_workloads(snapshot: Snapshot, namespace: str) -> list[str]:
    """GPU Deployments and StatefulSets of the namespace that no HPA or ScaledObject targets."""
    targeted = {
        (scale_target(o).kind, scale_target(o).name)
        for o in [
            *snapshot.in_namespace(HPA, namespace),
            *snapshot.in_namespace(SCALED_OBJECT, namespace),
        ]
    }
    return sorted(
        f"{w.ref.kind} {w.ref.name}"
        for w in [
            *snapshot.in_namespace("Deployment", namespace),
            *snapshot.in_namespace("StatefulSet", namespace),
        ]
        if (w.ref.kind, w.ref.name) not in targeted and any(t.requests_gpu for t in templates_of(w))
    )


def _target_problem(
    snapshot: Snapshot, owner: Resource, kind: str, name: str, group: str
) -> str | None:
    """ "" when fine, a problem, or None when the input cannot tell."""
    namespace = owner.ref.namespace
    cond = condition(owner, "AbleToScale")
    if cond and cond.get("status") == "False" and cond.get("reason") == "FailedGetScale":
        return f"AbleToScale=False (FailedGetScale): {cond.get('message', '')}".strip()
    if kind in _UNSCALABLE:
        return f"{kind} has no scale subresource; it cannot be autoscaled"
    if kind in _SCALABLE:
        if snapshot.get(kind, namespace, name) is not None:
            return ""
        neighbours = any(snapshot.in_namespace(t, namespace) for t in WORKLOAD_TYPES)
        if snapshot.has(kind) and neighbours:
            return f"scale target {kind} {name} does not exist in namespace {namespace}"
        return None
    return _custom_kind_problem(snapshot, kind, group)


def _custom_kind_problem(snapshot: Snapshot, kind: str, group: str) -> str | None:
    for crd in snapshot.of("CustomResourceDefinition"):
        names = as_mapping(crd.spec.get("names"))
        if names.get("kind") != kind or crd.spec.get("group") != group:
            continue
        versions = [as_mapping(v) for v in as_list(crd.spec.get("versions"))]
        if any(as_mapping(v.get("subresources")).get("scale") for v in versions):
            return ""
        return f"CRD {crd.ref.name} has no scale subresource; {kind} cannot be autoscaled"
    return None


def _fix(owner: Resource, problem: str, patch: str) -> dict[str, str]:
    """The object with the changed spec field, for `kubectl apply` (a partial object)."""
    change = (
        f"apiVersion: {owner.api_version}\nkind: {owner.ref.kind_name}\nmetadata:\n"
        f"  name: {owner.ref.name}\n  namespace: {owner.ref.namespace}\nspec:\n  {patch}"
    )
    return {"problem": problem.replace("\n", " "), "change": change}
