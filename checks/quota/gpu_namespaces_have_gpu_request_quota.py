import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
    AdmissionRule,
    Category,
    FixKind,
    ObjRef,
    PodTemplate,
    RelatedRole,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    format_quantity,
    is_gpu_resource,
    passed,
    relate,
    str_map,
)
from gpu_audit.checks.quota._common import (
    SYSTEM_NAMESPACES,
    namespace_target,
    template_gpus,
    tenant_gpu_templates,
)

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PROFILE = "Profile.kubeflow.org"


@check(
    id="GPU-QUOTA-001",
    title="Every namespace that runs GPU pods has a ResourceQuota on requests of its GPU resources",
    category=Category.QUOTA,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES, "ResourceQuota"),
    rationale="""
        GPUs cannot be overcommitted, so a ResourceQuota is the only per-namespace cap: without
        one, one team's hyper-parameter sweep can take every GPU of a shared cluster. For
        extended resources the quota evaluator only counts `requests.<resource>`; a quota
        written as `limits.nvidia.com/gpu` or bare `nvidia.com/gpu` is accepted by the API but
        caps nothing (its status.used never counts the GPUs).
    """,
    detection="""
        For each namespace outside the control plane and GPU stack that has GPU pod templates,
        and each GPU resource they request (nvidia.com/gpu, nvidia.com/gpu.shared,
        nvidia.com/mig-*, amd.com/gpu): every template must be counted by a ResourceQuota of
        the namespace with `requests.<resource>` in spec.hard whose scopes and scopeSelector
        (Terminating, BestEffort, PriorityClass...) match the pod, or be admitted by Kueue
        (a queue-name label naming a LocalQueue of the namespace whose ClusterQueue has a
        nominalQuota for the resource). A ResourceQuota that caps a GPU resource only as
        `limits.<resource>` or the bare name (no `requests.<resource>` beside it: that key
        caps the resource, and the others are only redundant) is the object to change, also
        in a namespace with no GPU workload yet: the finding is on it,
        with its namespace and the uncapped workloads as related symptoms; on the Kubeflow
        Profile instead when one in the input controls the quota (its controller renders
        spec.resourceQuotaSpec into the quota and restores it on every reconcile). Without
        any such quota the finding is on the Namespace. DRA ResourceClaims are not counted here.
    """,
    severity_evidence="""
        A ResourceQuota whose GPU key the evaluator ignores is high when GPU workloads run in
        its namespace (someone meant to cap them, and nothing is capped), low when none does
        yet. A namespace with no GPU quota at all is high when two or more namespaces run GPU
        pods (a shared cluster), low when only one does.
    """,
    remediation="""
        # $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # a ResourceQuota caps a GPU resource as limits.<resource> or <resource>, which the
        # quota evaluator ignores: move the value to requests.<resource> ("/" is "~1" in a JSON pointer)
        kubectl -n <namespace> patch resourcequota <quota> --type=json -p '[{"op": "remove", "path": "/spec/hard/limits.nvidia.com~1gpu"}, {"op": "add", "path": "/spec/hard/requests.nvidia.com~1gpu", "value": "<count>"}]'
        # no ResourceQuota caps the GPU resource: create one (extended resources only with requests.)
        kubectl -n <namespace> create quota gpu-quota --hard=requests.nvidia.com/gpu=<count>
    """,
    references=(
        "https://kubernetes.io/docs/concepts/policy/resource-quotas/#resource-quota-for-extended-resources",
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/quota/v1/evaluator/core/pods.go",
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/",
        "https://github.com/kubeflow/dashboard/blob/063d0737c04851e73f209416b666b6e790bae5b9/components/profile-controller/controllers/profile_controller.go",
    ),
    admission=AdmissionRule(
        scope="object",
        kinds=("ResourceQuota",),
        where=f"!(request.namespace in {sorted(SYSTEM_NAMESPACES)})",
        valid="""
            object.spec.?hard.orValue({}).all(k,
                [k.startsWith('limits.') ? k.substring(7) : k].all(r,
                    !@gpu_resource(r) || ('requests.' + r) in object.spec.hard))
        """,
        message="caps a GPU resource as limits.<gpu> or <gpu> without requests.<gpu>: the quota "
        "evaluator ignores that key for extended resources and caps nothing",
        note="the quota itself; namespaces without any GPU quota are left to scans",
    ),
)
def gpu_namespaces_have_gpu_request_quota(snapshot: Snapshot) -> Iterator[Result]:
    by_namespace = tenant_gpu_templates(snapshot)
    shared_cluster = len(by_namespace) >= 2
    reported: set[tuple[ObjRef, str]] = set()
    for namespace, templates in by_namespace.items():
        quotas = snapshot.in_namespace("ResourceQuota", namespace)
        target = namespace_target(snapshot, namespace, templates[0])
        demand: dict[str, list[tuple[PodTemplate, Decimal]]] = {}
        for template in templates:
            for resource, quantity in template_gpus(template).items():
                demand.setdefault(resource, []).append((template, quantity))
        for resource, users in sorted(demand.items()):
            uncovered = [
                t
                for t, _ in users
                if not _quota_counts(quotas, t, resource)
                and not _kueue_counts(snapshot, t, resource)
            ]
            if not uncovered:
                yield passed(target, f"requests.{resource} is capped for every GPU workload")
                continue
            ineffective = _ineffective_keys(quotas, resource)
            for quota, key in ineffective:
                reported.add((quota.ref, key))
                yield _ineffective(snapshot, quota, key, resource, target, uncovered)
            if not ineffective:
                yield _missing(target, resource, users, uncovered, shared_cluster)
    yield from _idle_ineffective_quotas(snapshot, by_namespace, reported)


def _count(templates: list[PodTemplate]) -> str:
    return f"{len(templates)} GPU workload{'s' if len(templates) != 1 else ''}"


def _names(templates: list[PodTemplate]) -> str:
    names = ", ".join(str(t.owner.ref) for t in templates[:3])
    more = f" and {len(templates) - 3} more" if len(templates) > 3 else ""
    return names + more


def _ineffective(
    snapshot: Snapshot,
    quota: Resource,
    key: str,
    resource: str,
    namespace: Resource,
    uncovered: list[PodTemplate],
) -> Result:
    return _key_finding(
        snapshot,
        quota,
        key,
        resource,
        f"caps {resource} as {key!r}, which the quota evaluator ignores for extended resources "
        f"(only requests.{resource} is counted{_used_note(quota, key)}), so "
        f"{_count(uncovered)} of namespace {namespace.ref.name} "
        f"{'runs' if len(uncovered) == 1 else 'run'} uncapped: "
        f"{_names(uncovered)}",
        Severity.HIGH,
        [
            relate(namespace, RelatedRole.SYMPTOM),
            *(relate(t, RelatedRole.SYMPTOM) for t in uncovered),
        ],
    )


def _key_finding(
    snapshot: Snapshot,
    quota: Resource,
    key: str,
    resource: str,
    message: str,
    severity: Severity,
    related: list[Any],
) -> Result:
    """The finding on the quota's ignored key, or on the Kubeflow Profile that renders the
    quota: its controller writes the Profile's spec.resourceQuotaSpec over the quota on every
    reconcile, so only a change to the Profile lasts."""
    value = str_map(quota.spec.get("hard"))[key]
    profile = _rendering_profile(snapshot, quota)
    if profile is None:
        return failed(
            quota,
            message,
            path=f"spec.hard[{key}]",
            severity=severity,
            fix=_key_fix(quota, key, resource, value),
            related=related,
        )
    return failed(
        profile,
        f"ResourceQuota {quota.ref.namespace}/{quota.ref.name}, which the profile controller "
        f"renders from this Profile's spec.resourceQuotaSpec, {message}",
        path=f"spec.resourceQuotaSpec.hard[{key}]",
        severity=severity,
        fix=_key_fix(profile, key, resource, value),
        related=[relate(quota, RelatedRole.SYMPTOM), *related],
    )


def _rendering_profile(snapshot: Snapshot, quota: Resource) -> Resource | None:
    """The Kubeflow Profile in the input that controls `quota` (kubeflow/dashboard
    profile_controller.go: the quota kf-resource-quota, owned by the Profile)."""
    for ref in map(as_mapping, as_list(quota.metadata.get("ownerReferences"))):
        if (
            ref.get("controller") is True
            and ref.get("kind") == "Profile"
            and str(ref.get("apiVersion", "")).startswith("kubeflow.org/")
        ):
            return snapshot.get(PROFILE, "", str(ref.get("name", "")))
    return None


def _idle_ineffective_quotas(
    snapshot: Snapshot,
    by_namespace: Mapping[str, list[PodTemplate]],
    reported: set[tuple[ObjRef, str]],
) -> Iterator[Result]:
    """Quotas with an ignored GPU key in namespaces that run no GPU workload (yet): the key
    will cap nothing when one arrives."""
    for quota in snapshot.of("ResourceQuota"):
        namespace = quota.ref.namespace
        if namespace in SYSTEM_NAMESPACES:
            continue
        for key, resource in _ignored_keys(quota):
            if (quota.ref, key) in reported:
                continue
            if namespace in by_namespace and any(
                resource in template_gpus(t) for t in by_namespace[namespace]
            ):
                continue  # its workloads are capped by another quota or by Kueue
            yield _key_finding(
                snapshot,
                quota,
                key,
                resource,
                f"caps {resource} as {key!r}, which the quota evaluator ignores for extended "
                f"resources (only requests.{resource} is counted); no GPU workload of "
                f"{namespace} requests {resource} today",
                Severity.LOW,
                [],
            )


def _ignored_keys(quota: Resource) -> list[tuple[str, str]]:
    """(key, GPU resource) of the quota's keys that name a GPU resource in a form the
    evaluator ignores (limits.<gpu> or the bare <gpu>) without requests.<gpu> beside them: a
    quota that also has requests.<gpu> caps the resource, and the other keys are only
    redundant (the admission form judges the same)."""
    hard = str_map(quota.spec.get("hard"))
    out = []
    for key in sorted(hard):
        resource = key.removeprefix("limits.")
        if is_gpu_resource(resource) and f"requests.{resource}" not in hard:
            out.append((key, resource))
    return out


def _used_note(quota: Resource, key: str) -> str:
    """What the quota's own status shows: the evaluator never fills in an ignored key."""
    if not quota.status:
        return ""
    used = str_map(quota.status.get("used"))
    if key not in used:
        return f"; status.used has no {key}"
    return f"; status.used shows {key}: {used[key]}" if used[key] in ("0", "") else ""


def _key_fix(holder: Resource, key: str, resource: str, value: str) -> dict[str, str]:
    """A JSON patch of `holder` (a ResourceQuota, or the Profile that renders one) that moves
    the value of `key` to requests.<resource>."""
    profile = holder.ref.kind == PROFILE
    hard = "/spec/resourceQuotaSpec/hard/" if profile else "/spec/hard/"

    def pointer(name: str) -> str:
        return hard + name.replace("~", "~0").replace("/", "~1")

    ops = [
        {"op": "remove", "path": pointer(key)},
        {"op": "add", "path": pointer(f"requests.{resource}"), "value": value},
    ]
    patch = json.dumps(ops).replace("'", "'\\''")
    if profile:
        shown, command = f"Profile {holder.ref.name}", f"kubectl patch profile {holder.ref.name}"
    else:
        shown = f"ResourceQuota {holder.ref.namespace}/{holder.ref.name}"
        command = f"kubectl -n {holder.ref.namespace} patch resourcequota {holder.ref.name}"
    return {
        "summary": f"{shown}: replace {key} with requests.{resource} (the only form counted "
        "for extended resources)",
        "command": f"{command} --type=json -p '{patch}'",
    }


def _missing(
    target: Resource,
    resource: str,
    users: list[tuple[PodTemplate, Decimal]],
    uncovered: list[PodTemplate],
    shared_cluster: bool,
) -> Result:
    total = sum((q * _replicas(t) for t, q in users), Decimal(0))
    severity = Severity.HIGH if shared_cluster else Severity.LOW
    why = (
        "other namespaces run GPU pods too"
        if shared_cluster
        else "the only namespace running GPU pods, so no other team competes for them"
    )
    return failed(
        target,
        f"no ResourceQuota counts requests.{resource}; uncapped: {_names(uncovered)} ({why})",
        severity=severity,
        fix={
            "summary": f"Namespace {target.ref.name}: cap {resource} (the count is today's "
            "demand; set the team's share)",
            "command": f"kubectl -n {target.ref.name} create quota gpu-quota "
            f"--hard=requests.{resource}={format_quantity(total)}",
        },
        related=[relate(t, RelatedRole.SYMPTOM) for t in uncovered],
    )


def _ineffective_keys(quotas: tuple[Resource, ...], resource: str) -> list[tuple[Resource, str]]:
    return [(quota, key) for quota in quotas for key, r in _ignored_keys(quota) if r == resource]


def _quota_counts(quotas: tuple[Resource, ...], template: PodTemplate, resource: str) -> bool:
    return any(
        f"requests.{resource}" in as_mapping(q.spec.get("hard")) and _scopes_match(q, template)
        for q in quotas
    )


def _scopes_match(quota: Resource, template: PodTemplate) -> bool:
    """The quota's scopes AND its scopeSelector expressions all select the pod."""
    spec = template.spec
    terminating = spec.get("activeDeadlineSeconds") is not None
    facts: dict[str, bool] = {
        "Terminating": terminating,
        "NotTerminating": not terminating,
        "BestEffort": False,  # a pod with a GPU limit is never BestEffort
        "NotBestEffort": True,
    }
    for scope in as_list(quota.spec.get("scopes")):
        if not facts.get(str(scope), False):
            return False
    selector = as_mapping(quota.spec.get("scopeSelector"))
    return all(
        _scope_expression_matches(as_mapping(e), facts, str(spec.get("priorityClassName") or ""))
        for e in as_list(selector.get("matchExpressions"))
    )


def _scope_expression_matches(expr: Mapping[str, Any], facts: dict[str, bool], pc: str) -> bool:
    name, operator = str(expr.get("scopeName", "")), str(expr.get("operator", ""))
    if name != "PriorityClass":
        return facts.get(name, False) if operator == "Exists" else False
    values = [str(v) for v in as_list(expr.get("values"))]
    if operator == "In":
        return pc in values
    if operator == "NotIn":
        return pc not in values
    if operator == "Exists":
        return bool(pc)
    return operator == "DoesNotExist" and not pc


def _kueue_counts(snapshot: Snapshot, template: PodTemplate, resource: str) -> bool:
    owner = template.owner
    queue = owner.labels.get(KUEUE_QUEUE_LABEL) or template.labels.get(KUEUE_QUEUE_LABEL)
    if not queue:
        return False
    local = snapshot.get("LocalQueue.kueue.x-k8s.io", owner.ref.namespace, queue)
    if local is None:
        return False
    cluster = snapshot.get("ClusterQueue.kueue.x-k8s.io", "", str(local.spec.get("clusterQueue")))
    if cluster is None:
        return False
    return any(
        as_mapping(r).get("name") == resource and as_mapping(r).get("nominalQuota") is not None
        for group in map(as_mapping, as_list(cluster.spec.get("resourceGroups")))
        for flavor in map(as_mapping, as_list(group.get("flavors")))
        for r in as_list(flavor.get("resources"))
    )


def _replicas(template: PodTemplate) -> int:
    """How many pods of this template run at once, for the suggested quota value."""
    spec = template.owner.spec
    if template.replica_type:
        key = next((k for k in spec if str(k).endswith("ReplicaSpecs")), "")
        value = as_mapping(as_mapping(spec.get(key)).get(template.replica_type)).get("replicas")
    else:
        value = spec.get("replicas", spec.get("parallelism"))
    return value if isinstance(value, int) and value > 0 else 1
