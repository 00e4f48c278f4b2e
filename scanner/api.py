"""The only import surface for check authors, built-in or third-party.

A check is a decorated pure function of the snapshot that yields `passed(...)` or `failed(...)`
for every object it evaluated, and nothing for objects it does not apply to.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Mapping

from gpu_audit.gpu_hosts import gpu_hosts, gpu_quantities, has_resource_status, is_gpu_host
from gpu_audit.gpu_operator import (
    CLUSTER_POLICY,
    DEPLOY_PREFIX,
    active_cluster_policy,
    command_line,
    component_enabled,
    containers,
    daemonset_runs_on,
    device_plugin_daemonsets,
    env_value,
    is_operator_operand,
    operand_deployed,
    operand_label,
    operator_node_labels,
    pod_spec,
    policy_operand_runs_on,
)
from gpu_audit.gpu_stack import (
    is_gpu_stack_image,
    is_gpu_stack_node_agent,
    is_stack_pod_in_system_namespace,
)
from gpu_audit.image_refs import image_registry_and_path, image_repository
from gpu_audit.k8s import (
    AMD_GPU,
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    NVIDIA_MIG_PREFIX,
    WORKLOAD_TYPES,
    Container,
    PodTemplate,
    QuantityError,
    Taint,
    as_list,
    as_mapping,
    controller_owner,
    effective_pod_request,
    format_quantity,
    gpu_nodes,
    gpu_pod_templates,
    is_extended_resource,
    is_gpu_node,
    is_gpu_resource,
    label_selector_matches,
    map_selector_matches,
    node_affinity_matches,
    node_is_ready,
    node_is_schedulable,
    node_taints,
    parse_quantity,
    pod_templates,
    quantities,
    schedules_on,
    select,
    str_map,
    templates_of,
    tolerates,
    top_owner,
    untolerated_taints,
)
from gpu_audit.karpenter import (
    NODEPOOL,
    nodepool_gpu_scope,
    nodepool_requirements,
    nodepool_taints,
    nodepool_template_labels,
)
from gpu_audit.model import (
    Category,
    Check,
    CheckFunction,
    ObjRef,
    Outcome,
    Resource,
    Result,
    Severity,
)
from gpu_audit.model_servers import (
    KSERVE_ISVC_LABEL,
    RAY,
    TORCHSERVE,
    TRITON,
    VLLM,
    ServerClass,
    argv,
    classify,
)
from gpu_audit.node_lifecycle import (
    dedicating_taints,
    is_bootstrapping,
    is_joining,
    is_transient_taint,
)
from gpu_audit.redact import credential_like, is_placeholder
from gpu_audit.snapshot import Snapshot
from gpu_audit.spot_capacity import runs_on_spot
from gpu_audit.training_jobs import (
    KUBEFLOW_REPLICA_KEYS,
    MULTI_POD_JOB_TYPES,
    VOLCANO_JOB,
    ReplicaGroup,
    count_field,
    finished_as,
    owned_pods,
    owner_kinds,
    pod_is_active,
    replica_groups,
)

__all__ = [
    "AMD_GPU",
    "CLUSTER_POLICY",
    "DEPLOY_PREFIX",
    "KSERVE_ISVC_LABEL",
    "KUBEFLOW_REPLICA_KEYS",
    "MULTI_POD_JOB_TYPES",
    "NODEPOOL",
    "NVIDIA_GPU",
    "NVIDIA_GPU_SHARED",
    "NVIDIA_MIG_PREFIX",
    "RAY",
    "TORCHSERVE",
    "TRITON",
    "VLLM",
    "VOLCANO_JOB",
    "WORKLOAD_TYPES",
    "Category",
    "Check",
    "Container",
    "ObjRef",
    "PodTemplate",
    "QuantityError",
    "ReplicaGroup",
    "Resource",
    "Result",
    "ServerClass",
    "Severity",
    "Snapshot",
    "Taint",
    "Target",
    "active_cluster_policy",
    "argv",
    "as_list",
    "as_mapping",
    "check",
    "classify",
    "command_line",
    "component_enabled",
    "containers",
    "controller_owner",
    "count_field",
    "credential_like",
    "daemonset_runs_on",
    "dedicating_taints",
    "device_plugin_daemonsets",
    "effective_pod_request",
    "env_value",
    "failed",
    "finished_as",
    "format_quantity",
    "gpu_hosts",
    "gpu_nodes",
    "gpu_pod_templates",
    "gpu_quantities",
    "has_resource_status",
    "image_registry_and_path",
    "image_repository",
    "is_bootstrapping",
    "is_extended_resource",
    "is_gpu_host",
    "is_gpu_node",
    "is_gpu_resource",
    "is_gpu_stack_image",
    "is_gpu_stack_node_agent",
    "is_joining",
    "is_operator_operand",
    "is_placeholder",
    "is_stack_pod_in_system_namespace",
    "is_transient_taint",
    "label_selector_matches",
    "map_selector_matches",
    "node_affinity_matches",
    "node_is_ready",
    "node_is_schedulable",
    "node_taints",
    "nodepool_gpu_scope",
    "nodepool_requirements",
    "nodepool_taints",
    "nodepool_template_labels",
    "operand_deployed",
    "operand_label",
    "operator_node_labels",
    "owned_pods",
    "owner_kinds",
    "parse_quantity",
    "passed",
    "pod_is_active",
    "pod_spec",
    "pod_templates",
    "policy_operand_runs_on",
    "quantities",
    "replica_groups",
    "runs_on_spot",
    "schedules_on",
    "select",
    "str_map",
    "templates_of",
    "tolerates",
    "top_owner",
    "untolerated_taints",
]

REMEDIATION_ROOTS = ("", "pod_spec")
CHECK_ID = re.compile(r"^[A-Z][A-Z0-9]*-([A-Z]+)-\d{3}$")

Target = Resource | PodTemplate | Container


def check(
    *,
    id: str,
    title: str,
    category: Category,
    severity: Severity,
    rationale: str,
    remediation: str,
    references: Iterable[str],
    requires: Iterable[str | tuple[str, ...]],
    detection: str = "",
    remediation_root: str = "",
) -> Callable[[CheckFunction], Check]:
    """Declare a check. Returns a `Check` value; nothing is registered as a side effect.

    `remediation` is a `string.Template`: `$kind`, `$namespace`, `$name` and any key of the
    result's `fix` mapping are filled in for the object at hand (`$$` for a literal dollar).
    With `remediation_root="pod_spec"` it is a fragment of a pod spec (`containers: ...`), and
    the finding shows it nested under the pod template's path in the object (`spec.template.
    spec` of a Deployment, `spec.jobTemplate.spec.template.spec` of a CronJob): a strategic-merge
    patch that `kubectl patch --patch-file` takes as it is.
    """
    if remediation_root not in REMEDIATION_ROOTS:
        raise ValueError(f"check {id}: remediation_root must be one of {REMEDIATION_ROOTS}")
    match = CHECK_ID.match(id)
    if not match:
        raise ValueError(f"check id {id!r} does not match PREFIX-CAT-NNN")
    if match.group(1) not in category.codes:
        raise ValueError(f"check id {id!r} does not belong to category {category.value}")

    def wrap(function: CheckFunction) -> Check:
        return Check(
            id=id,
            title=title,
            category=category,
            severity=severity,
            rationale=_clean(rationale),
            remediation=_clean(remediation),
            references=tuple(references),
            requires=tuple(requires),
            function=function,
            detection=_clean(detection),
            module=getattr(function, "__module__", ""),
            remediation_root=remediation_root,
        )

    return wrap


def _clean(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _ref_and_subject(target: Target) -> tuple[ObjRef, str]:
    # A training job has one template per replica type, often with same-named containers.
    if isinstance(target, Container):
        owner = target.template.owner
        return owner.ref, f"{_template_subject(target.template)} {target.describe()}"
    if isinstance(target, PodTemplate):
        return target.owner.ref, _template_subject(target)
    return target.ref, str(target.ref)


def _template_subject(template: PodTemplate) -> str:
    replica = f" ({template.replica_type})" if template.replica_type else ""
    return f"{template.owner.ref}{replica}"


def _result(
    outcome: Outcome,
    target: Target,
    message: str,
    path: str,
    severity: Severity | None,
    fix: Mapping[str, str] | None,
) -> Result:
    ref, subject = _ref_and_subject(target)
    if not path and isinstance(target, Container | PodTemplate):
        path = target.path
    template = target.template if isinstance(target, Container) else target
    pod_spec_path = template.path if isinstance(template, PodTemplate) else ""
    return Result(
        outcome, ref, f"{subject} {message}", path, severity, dict(fix or {}), pod_spec_path
    )


def passed(target: Target, message: str, *, path: str = "") -> Result:
    return _result(Outcome.PASS, target, message, path, None, None)


def failed(
    target: Target,
    message: str,
    *,
    path: str = "",
    severity: Severity | None = None,
    fix: Mapping[str, str] | None = None,
) -> Result:
    return _result(Outcome.FAIL, target, message, path, severity, fix)
