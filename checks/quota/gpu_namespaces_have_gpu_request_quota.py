from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    format_quantity,
    passed,
    str_map,
)
from gpu_audit.checks.quota._common import namespace_target, template_gpus, tenant_gpu_templates

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


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
        caps nothing.
    """,
    detection="""
        For each namespace outside the control plane and GPU stack that has GPU pod templates,
        and each GPU resource they request (nvidia.com/gpu, nvidia.com/gpu.shared,
        nvidia.com/mig-*, amd.com/gpu): every template must be counted by a ResourceQuota of
        the namespace with `requests.<resource>` in spec.hard whose scopes and scopeSelector
        (Terminating, BestEffort, PriorityClass...) match the pod, or be admitted by Kueue
        (a queue-name label naming a LocalQueue of the namespace whose ClusterQueue has a
        nominalQuota for the resource). A quota that only lists the limits. or bare form is
        reported as an ineffective quota. High when two or more namespaces run GPU pods, low
        when only one does. DRA ResourceClaims are not counted here.
    """,
    remediation="""
        # Namespace $ns: cap $resource ($reason)
        apiVersion: v1
        kind: ResourceQuota
        metadata:
          name: $quota
          namespace: $ns
        spec:
          hard:
            requests.$resource: "$count"   # extended resources are enforced only with requests.
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://kubernetes.io/docs/concepts/policy/resource-quotas/#quota-for-extended-resources",
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/",
    ),
)
def gpu_namespaces_have_gpu_request_quota(snapshot: Snapshot) -> Iterator[Result]:
    by_namespace = tenant_gpu_templates(snapshot)
    severity = Severity.HIGH if len(by_namespace) >= 2 else Severity.LOW
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
            yield _finding(target, quotas, resource, users, uncovered, severity)


def _finding(
    target: Resource,
    quotas: tuple[Resource, ...],
    resource: str,
    users: list[tuple[PodTemplate, Decimal]],
    uncovered: list[PodTemplate],
    severity: Severity,
) -> Result:
    names = ", ".join(str(t.owner.ref) for t in uncovered[:3])
    more = f" and {len(uncovered) - 3} more" if len(uncovered) > 3 else ""
    namespace = target.ref.name
    ineffective = _ineffective_key(quotas, resource)
    if ineffective is not None:
        quota, key, value = ineffective
        return failed(
            target,
            f"ResourceQuota {quota.ref.name} caps {resource} as {key!r}, which the quota "
            f"evaluator ignores for extended resources; uncapped: {names}{more}",
            severity=severity,
            fix={
                "ns": namespace,
                "resource": resource,
                "quota": quota.ref.name,
                "count": value,
                "reason": f"replace {key} with requests.{resource}",
            },
        )
    total = sum((q * _replicas(t) for t, q in users), Decimal(0))
    return failed(
        target,
        f"no ResourceQuota counts requests.{resource}; uncapped: {names}{more}",
        severity=severity,
        fix={
            "ns": namespace,
            "resource": resource,
            "quota": "gpu-quota",
            "count": format_quantity(total),
            "reason": "the count is today's demand; set the team's share",
        },
    )


def _ineffective_key(
    quotas: tuple[Resource, ...], resource: str
) -> tuple[Resource, str, str] | None:
    for quota in quotas:
        hard = str_map(quota.spec.get("hard"))
        for key in (f"limits.{resource}", resource):
            if key in hard:
                return quota, key, hard[key]
    return None


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
