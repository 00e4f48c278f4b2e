from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    passed,
)

from ._common import (
    HPA,
    SCALED_OBJECT,
    cpu_only_target,
    for_target,
    is_keda_hpa,
    keda_hpa_names,
    scale_target,
)


@check(
    id="GPU-HPA-003",
    title="Each scale target has exactly one autoscaler",
    category=Category.AUTOSCALING,
    severity=Severity.HIGH,
    requires=((HPA, SCALED_OBJECT),),
    rationale="""
        Two HPAs, or an HPA plus a KEDA ScaledObject (which drives its own generated HPA), on
        the same Deployment fight over its replica count. Current Kubernetes detects HPAs whose
        pods overlap and disables all of them (ScalingActive=False, AmbiguousSelector); older
        clusters flap between the two answers. Either way a GPU inference service loses
        autoscaling exactly when load arrives.
    """,
    detection="""
        Groups HPAs and ScaledObjects by namespace and scaleTargetRef kind/name (a
        ScaledObject's kind defaults to Deployment). In a group of two or more, the object to
        change is reported: with a ScaledObject in the group, the other HPAs (KEDA's FAQ: fold
        them into the ScaledObject), which passes; otherwise every member. Not counted as a
        second owner: the HPA KEDA generates for a ScaledObject (ScaledObject ownerReference,
        status.hpaName, the advanced.horizontalPodAutoscalerConfig name, or keda-hpa-<name>),
        which also covers an HPA adopted with scaledobject.keda.sh/transfer-hpa-ownership.
        VPAs are not replica owners.
    """,
    severity_evidence="""
        High: two owners of one target is concrete, and current Kubernetes disables every HPA
        whose pods overlap (ScalingActive=False, AmbiguousSelector). One step lower when the
        scale target is in the input and requests no GPU.
    """,
    remediation="""
        # $kind $namespace/$name shares $target with $others: keep ONE autoscaler.
        # With KEDA, fold the CPU/memory targets into the ScaledObject and delete the HPA:
        apiVersion: keda.sh/v1alpha1
        kind: ScaledObject
        metadata:
          name: $target_name
          namespace: $namespace
        spec:
          scaleTargetRef:
            name: $target_name
          triggers:
            - type: cpu
              metricType: Utilization
              metadata:
                value: "70"
        # then: kubectl -n $namespace delete hpa <the extra HPA>
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://keda.sh/docs/latest/reference/faq/",
        "https://github.com/kubernetes/kubernetes/pull/112011",
        "https://keda.sh/docs/latest/reference/scaledobject-spec/",
    ),
)
def one_autoscaler_per_scale_target(snapshot: Snapshot) -> Iterator[Result]:
    keda_names = keda_hpa_names(snapshot)
    owners: dict[tuple[str, str, str], list[Resource]] = defaultdict(list)
    for scaled in snapshot.of(SCALED_OBJECT):
        owners[_key(scaled)].append(scaled)
    for hpa in snapshot.of(HPA):
        if not is_keda_hpa(hpa, keda_names):
            owners[_key(hpa)].append(hpa)
    for (_, kind, name), group in sorted(owners.items()):
        target = f"{kind} {name}"
        keda = [o for o in group if o.ref.kind == SCALED_OBJECT]
        for owner in group:
            others = [o for o in group if o is not owner]
            if not others:
                yield passed(
                    owner, f"is the only autoscaler of {target}", path="spec.scaleTargetRef"
                )
                continue
            if len(keda) == 1 and owner is keda[0]:
                yield passed(
                    owner,
                    f"keeps {target}; the other autoscalers of it are reported",
                    path="spec.scaleTargetRef",
                )
                continue
            listed = ", ".join(str(o.ref) for o in others)
            severity, why = for_target(Severity.HIGH, cpu_only_target(snapshot, owner))
            yield failed(
                owner,
                f"autoscales {target} together with {listed}{why}",
                path="spec.scaleTargetRef",
                severity=severity,
                fix={"target": target, "target_name": name, "others": listed},
            )


def _key(owner: Resource) -> tuple[str, str, str]:
    target = scale_target(owner)
    return (owner.ref.namespace, target.kind, target.name)
