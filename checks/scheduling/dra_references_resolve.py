from collections.abc import Iterator

from gpu_audit.api import (
    DEVICE_CLASS,
    DRA_CLAIM_TYPES,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    WORKLOAD_TYPES,
    Category,
    FixKind,
    PodClaim,
    PodTemplate,
    RelatedRole,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    claim_requests,
    claim_uses,
    claims_to_allocate,
    compute_domain_templates,
    device_class,
    failed,
    generated_claim_name,
    passed,
    pod_claims,
    pod_templates,
    relate,
)


@check(
    id="GPU-SCHED-008",
    title="DRA claims name DeviceClasses, and pods name claims and templates, that exist",
    category=Category.SCHEDULING,
    severity=Severity.HIGH,
    requires=((*DRA_CLAIM_TYPES, DEVICE_CLASS, *WORKLOAD_TYPES),),
    rationale="""
        With Dynamic Resource Allocation a pod gets its GPUs through a chain of names: its
        spec.resourceClaims name a ResourceClaim or a ResourceClaimTemplate, and each request
        of the claim names a DeviceClass. A broken link is not rejected when it is created:
        the pod waits. kube-scheduler's DynamicResources plugin keeps a pod whose claim does
        not exist (or has not been created from a missing template) out of scheduling, and
        marks it unschedulable with "request <r>: device class <c> does not exist" until the
        class appears. Nothing else reports it, and the pod just stays Pending.
    """,
    detection="""
        Every ResourceClaim and ResourceClaimTemplate: each DeviceClass its requests name
        (`exactly.deviceClassName`, each `firstAvailable[]` subrequest's, or the v1beta1
        request's own) must exist; the scheduler checks every subrequest's class, so one
        missing class of a firstAvailable list is enough. ResourceClaims already allocated and
        those generated for one pod (owned by it; their template is checked instead) are
        skipped. Every pod template with spec.resourceClaims: a resourceClaimTemplateName must
        name a ResourceClaimTemplate of its namespace, or the channel template of a
        ComputeDomain there (the NVIDIA DRA driver's controller creates it), and a
        resourceClaimName a ResourceClaim. A Pod whose claim was already created from the
        template passes. Each link is judged only when the input has the kind it names
        (manifests of an application seldom hold the driver's DeviceClasses).
    """,
    severity_evidence="""
        High when a pod or workload in the input uses the claim or template, or for the pod
        template that names a missing one: its pods wait Pending. Low when nothing in the
        input uses the claim or template yet.
    """,
    remediation="""
        # $kind $namespace/$name names $missing, which does not exist ($path)
        kubectl get deviceclasses
        kubectl get resourceclaimtemplates -n $namespace
        # create what it names (DeviceClasses come with the DRA driver, e.g. gpu.nvidia.com from
        # the NVIDIA DRA driver's chart), or correct the name in $path
    """,
    remediation_generic="""
        kubectl get deviceclasses
        kubectl get resourceclaimtemplates -n <namespace>
        # create the missing DeviceClass, ResourceClaimTemplate or ResourceClaim, or correct the
        # name in the claim's deviceClassName / the pod's spec.resourceClaims
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/",
        "https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-v1/",
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/site/content/docs/guides/compute-domain-workloads.md",
    ),
)
def dra_references_resolve(snapshot: Snapshot) -> Iterator[Result]:
    for claim in claims_to_allocate(snapshot):
        yield from _claim_classes(snapshot, claim)
    for template in pod_templates(snapshot):
        yield from _pod_references(snapshot, template)


def _claim_classes(snapshot: Snapshot, claim: Resource) -> Iterator[Result]:
    if not snapshot.has(DEVICE_CLASS):
        return  # the DeviceClasses usually come with the driver, not with the manifests
    alternatives = [alt for request in claim_requests(claim) for alt in request.alternatives]
    named = [alt for alt in alternatives if alt.class_name]
    if not named:
        return
    missing = [alt for alt in named if device_class(snapshot, alt.class_name) is None]
    if not missing:
        classes = ", ".join(sorted({alt.class_name for alt in named}))
        yield passed(claim, f"names existing DeviceClasses ({classes})")
        return
    uses = claim_uses(snapshot).get(claim.ref, ())
    names = ", ".join(sorted({f"DeviceClass {alt.class_name}" for alt in missing}))
    what = "; ".join(f"request {alt.name}: device class {alt.class_name}" for alt in missing)
    users = sorted({str(use.template.owner.ref) for use in uses})
    consequence = (
        f"the scheduler keeps the pods of {', '.join(users)} Pending ({what} does not exist)"
        if users
        else "no pod or workload in the input uses it yet; every pod that does will stay "
        f"Pending ({what} does not exist)"
    )
    exist = "does not exist" if len({alt.class_name for alt in missing}) == 1 else "do not exist"
    yield failed(
        claim,
        f"names {names}, which {exist}: {consequence}",
        path=f"{missing[0].path}.deviceClassName",
        severity=None if uses else Severity.LOW,
        fix={"missing": names, "path": f"{missing[0].path}.deviceClassName"},
        related=[relate(use.template, RelatedRole.SYMPTOM) for use in uses],
    )


def _missing(snapshot: Snapshot, template: PodTemplate, pod_claim: PodClaim) -> str | None:
    """What a pod claim names that does not exist; "" when it resolves, None when the input
    cannot tell (it has no such kind)."""
    namespace = template.owner.ref.namespace
    if pod_claim.template_name:
        name = pod_claim.template_name
        if not snapshot.has(RESOURCE_CLAIM_TEMPLATE):
            return None
        owner = template.owner
        if owner.ref.kind == "Pod" and generated_claim_name(owner, pod_claim.name):
            return ""
        if snapshot.get(RESOURCE_CLAIM_TEMPLATE, namespace, name) is not None:
            return ""
        if name in compute_domain_templates(snapshot, namespace):
            return ""
        return f"ResourceClaimTemplate {name}"
    if pod_claim.claim_name:
        if not snapshot.has(RESOURCE_CLAIM):
            return None
        found = snapshot.get(RESOURCE_CLAIM, namespace, pod_claim.claim_name)
        return "" if found is not None else f"ResourceClaim {pod_claim.claim_name}"
    return None


def _pod_references(snapshot: Snapshot, template: PodTemplate) -> Iterator[Result]:
    claims = pod_claims(template.spec, template.path)
    verdicts = [(c, _missing(snapshot, template, c)) for c in claims]
    judged = [(c, m) for c, m in verdicts if m is not None]
    if not judged:
        return
    missing = [(c, m) for c, m in judged if m]
    if not missing:
        shown = ", ".join(c.name for c, _ in judged)
        yield passed(template, f"resource claims {shown} name objects that exist")
        return
    names = ", ".join(m for _, m in missing if m)
    exist = "does not exist" if len(missing) == 1 else "do not exist"
    yield failed(
        template,
        f"names {names} in spec.resourceClaims, which {exist} in namespace "
        f"{template.owner.ref.namespace}: its pods wait Pending until it does (the scheduler "
        "does not consider a pod whose ResourceClaim is missing)",
        path=missing[0][0].path,
        fix={"missing": names, "path": missing[0][0].path},
    )
