"""The only import surface for check authors, built-in or third-party.

A check is a decorated pure function of the snapshot that yields `passed(...)` or `failed(...)`
for every object it evaluated, and nothing for objects it does not apply to.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpu_audit.k8s.events import (
    event_count,
    event_note,
    event_regarding,
    event_time,
)
from gpu_audit.k8s.gpu_hosts import (
    gpu_hosts,
    gpu_nodes,
    gpu_quantities,
    has_resource_status,
    is_gpu_host,
    is_gpu_node,
)
from gpu_audit.k8s.gpu_operator import (
    CLUSTER_POLICY,
    DEPLOY_PREFIX,
    active_cluster_policy,
    command_line,
    component_enabled,
    containers,
    daemonset_runs_on,
    device_plugin_daemonsets,
    is_operator_operand,
    operand_deployed,
    operand_label,
    operator_node_labels,
    pod_spec,
    policy_operand_runs_on,
)
from gpu_audit.k8s.gpu_resources import (
    AMD_GPU,
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    NVIDIA_MIG_PREFIX,
    is_extended_resource,
    is_gpu_resource,
)
from gpu_audit.k8s.gpu_stack import (
    is_gpu_stack_image,
    is_gpu_stack_node_agent,
    is_stack_pod_in_system_namespace,
)
from gpu_audit.k8s.images import (
    image_registry_and_path,
    image_repository,
    image_tag,
)
from gpu_audit.k8s.karpenter import (
    NODEPOOL,
    nodepool_gpu_scope,
    nodepool_requirements,
    nodepool_taints,
    nodepool_template_labels,
)
from gpu_audit.k8s.model_servers import (
    KSERVE_ISVC_LABEL,
    RAY,
    TORCHSERVE,
    TRITON,
    VLLM,
    ServerClass,
    argv,
    classify,
)
from gpu_audit.k8s.node_lifecycle import (
    dedicating_taints,
    is_bootstrapping,
    is_joining,
    is_transient_taint,
)
from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
    str_map,
    template_spec,
)
from gpu_audit.k8s.pods import (
    WORKLOAD_TYPES,
    Container,
    PodTemplate,
    controller_owner,
    effective_pod_request,
    env_value,
    gpu_pod_templates,
    pod_templates,
    templates_of,
    top_owner,
)
from gpu_audit.k8s.quantities import (
    QuantityError,
    format_quantity,
    parse_quantity,
    quantities,
)
from gpu_audit.k8s.scheduling import (
    Taint,
    node_affinity_matches,
    node_is_ready,
    node_is_schedulable,
    node_taints,
    schedules_on,
    tolerates,
    untolerated_taints,
)
from gpu_audit.k8s.selectors import (
    label_selector_matches,
    map_selector_matches,
    namespace_labels,
    select,
)
from gpu_audit.k8s.spot_capacity import runs_on_spot
from gpu_audit.k8s.training_jobs import (
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
from gpu_audit.model import (
    Category,
    Check,
    CheckFunction,
    FixKind,
    ObjRef,
    Outcome,
    RelatedRef,
    RelatedRole,
    Remediation,
    Resource,
    Result,
    Severity,
)
from gpu_audit.redact import credential_like, is_placeholder
from gpu_audit.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class ApiGroup:
    """Names of this API that belong together: a section of docs/plugin-api.md."""

    title: str
    summary: str
    names: tuple[str, ...]


API_GROUPS: tuple[ApiGroup, ...] = (
    ApiGroup(
        "Declaring a check",
        "The decorator, the verdicts a check yields, and the values they are made of.",
        (
            "check",
            "passed",
            "failed",
            "relate",
            "RelatedRef",
            "RelatedRole",
            "Target",
            "Category",
            "Severity",
            "FixKind",
            "Remediation",
            "Check",
            "CheckFunction",
            "Result",
            "ObjRef",
            "Outcome",
        ),
    ),
    ApiGroup(
        "The snapshot and raw objects",
        "Read-only access to the input; fields of the wrong type read as empty.",
        (
            "Snapshot",
            "Resource",
            "as_mapping",
            "as_list",
            "str_map",
            "template_spec",
        ),
    ),
    ApiGroup(
        "Quantities and GPU resources",
        "Resource quantities as the apiserver parses them, and which resources are GPUs.",
        (
            "QuantityError",
            "parse_quantity",
            "format_quantity",
            "quantities",
            "NVIDIA_GPU",
            "NVIDIA_GPU_SHARED",
            "NVIDIA_MIG_PREFIX",
            "AMD_GPU",
            "is_gpu_resource",
            "is_extended_resource",
        ),
    ),
    ApiGroup(
        "Selectors",
        "Label selectors and namespaces, evaluated as the apiserver does.",
        (
            "label_selector_matches",
            "map_selector_matches",
            "select",
            "namespace_labels",
        ),
    ),
    ApiGroup(
        "Scheduling",
        "Taints, tolerations and node affinity, evaluated exactly as the scheduler does.",
        (
            "Taint",
            "node_taints",
            "tolerates",
            "untolerated_taints",
            "node_affinity_matches",
            "schedules_on",
            "node_is_ready",
            "node_is_schedulable",
        ),
    ),
    ApiGroup(
        "Pods, templates and owners",
        "Every pod template of every workload kind, its containers, owners and effective requests.",
        (
            "WORKLOAD_TYPES",
            "PodTemplate",
            "Container",
            "pod_templates",
            "gpu_pod_templates",
            "templates_of",
            "controller_owner",
            "top_owner",
            "effective_pod_request",
            "env_value",
        ),
    ),
    ApiGroup(
        "Events",
        "Core and events.k8s.io Events read the same way.",
        (
            "event_regarding",
            "event_note",
            "event_time",
            "event_count",
        ),
    ),
    ApiGroup(
        "Images",
        "Image references split by the image-reference grammar.",
        (
            "image_repository",
            "image_registry_and_path",
            "image_tag",
        ),
    ),
    ApiGroup(
        "GPU nodes",
        "Which nodes are GPU hosts, their GPU quantities, and where they are in their lifecycle.",
        (
            "gpu_nodes",
            "is_gpu_node",
            "gpu_hosts",
            "is_gpu_host",
            "gpu_quantities",
            "has_resource_status",
            "is_joining",
            "is_bootstrapping",
            "is_transient_taint",
            "dedicating_taints",
            "runs_on_spot",
        ),
    ),
    ApiGroup(
        "GPU Operator and the GPU stack",
        "The ClusterPolicy, its operands, device-plugin DaemonSets and NVIDIA node agents.",
        (
            "CLUSTER_POLICY",
            "DEPLOY_PREFIX",
            "active_cluster_policy",
            "component_enabled",
            "operand_deployed",
            "operand_label",
            "operator_node_labels",
            "policy_operand_runs_on",
            "is_operator_operand",
            "device_plugin_daemonsets",
            "daemonset_runs_on",
            "pod_spec",
            "containers",
            "command_line",
            "is_gpu_stack_image",
            "is_gpu_stack_node_agent",
            "is_stack_pod_in_system_namespace",
        ),
    ),
    ApiGroup(
        "Karpenter",
        "NodePools: the nodes they would launch, their taints and GPU scope.",
        (
            "NODEPOOL",
            "nodepool_requirements",
            "nodepool_taints",
            "nodepool_template_labels",
            "nodepool_gpu_scope",
        ),
    ),
    ApiGroup(
        "Training jobs",
        "Kubeflow and Volcano jobs: replica groups, their pods and how they finished.",
        (
            "KUBEFLOW_REPLICA_KEYS",
            "MULTI_POD_JOB_TYPES",
            "VOLCANO_JOB",
            "ReplicaGroup",
            "replica_groups",
            "owned_pods",
            "owner_kinds",
            "count_field",
            "finished_as",
            "pod_is_active",
        ),
    ),
    ApiGroup(
        "Model servers",
        "Which model server a container runs, from its image and command line.",
        (
            "ServerClass",
            "classify",
            "argv",
            "KSERVE_ISVC_LABEL",
            "RAY",
            "TORCHSERVE",
            "TRITON",
            "VLLM",
        ),
    ),
    ApiGroup(
        "Credentials",
        "Recognising credential-like values and template placeholders without reading Secrets.",
        (
            "credential_like",
            "is_placeholder",
        ),
    ),
)
# mypy reads re-exports only from a literal list; tests/test_plugin_api.py keeps it equal to
# the groups above.
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
    "CheckFunction",
    "Container",
    "FixKind",
    "ObjRef",
    "Outcome",
    "PodTemplate",
    "QuantityError",
    "RelatedRef",
    "RelatedRole",
    "Remediation",
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
    "event_count",
    "event_note",
    "event_regarding",
    "event_time",
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
    "image_tag",
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
    "namespace_labels",
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
    "relate",
    "replica_groups",
    "runs_on_spot",
    "schedules_on",
    "select",
    "str_map",
    "template_spec",
    "templates_of",
    "tolerates",
    "top_owner",
    "untolerated_taints",
]

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
    severity_evidence: str = "",
    remediation_root: str = "",
    fix_kind: FixKind | None = None,
    remediation_generic: str = "",
) -> Callable[[CheckFunction], Check]:
    """Declare a check. Returns a `Check` value; nothing is registered as a side effect.

    `remediation` is a `string.Template`: `$kind`, `$namespace`, `$name` and any key of the
    result's `fix` mapping are filled in for the object at hand (`$$` for a literal dollar).
    With `remediation_root="pod_spec"` it is a fragment of a pod spec (`containers: ...`), and
    the finding shows it nested under the pod template's path in the object (`spec.template.
    spec` of a Deployment, `spec.jobTemplate.spec.template.spec` of a CronJob): a strategic-merge
    patch that `kubectl patch --patch-file` takes as it is.

    `severity_evidence` says what in the input raises or lowers a result's severity from the
    declared one (docs/severity.md: medium or higher needs evidence that the problem bites).

    `fix_kind` says what the remediation is (a patch, a command, a manifest, a procedure);
    left out, it is read from the remediation's form. `remediation_generic` is what the check
    reference and `checks show` print: the fix for any object, with <angle-bracket>
    placeholders (`<node>`, `<namespace>`). Left out, it is the template with each `$x` written
    `<x>`; a template that is only placeholders and comments (`$command   # $summary`) must
    give it, or the check cannot be declared.
    """
    try:
        fix = Remediation.declare(
            _clean(remediation),
            kind=fix_kind,
            generic=_clean(remediation_generic),
            root=remediation_root,
        )
    except ValueError as exc:
        raise ValueError(f"check {id}: {exc}") from None
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
            remediation=fix,
            references=tuple(references),
            requires=tuple(requires),
            function=function,
            detection=_clean(detection),
            severity_evidence=_clean(severity_evidence),
            module=getattr(function, "__module__", ""),
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
    related: Iterable[RelatedRef] = (),
) -> Result:
    ref, subject = _ref_and_subject(target)
    if not path and isinstance(target, Container | PodTemplate):
        path = target.path
    template = target.template if isinstance(target, Container) else target
    pod_spec_path = template.path if isinstance(template, PodTemplate) else ""
    return Result(
        outcome,
        ref,
        f"{subject} {message}",
        path,
        severity,
        dict(fix or {}),
        pod_spec_path,
        _related(ref, related),
    )


def _related(ref: ObjRef, related: Iterable[RelatedRef]) -> tuple[RelatedRef, ...]:
    """Each (object, role) once, never the finding's own object, in RelatedRef.sort_key order."""
    unique = {r for r in related if r.ref != ref}
    return tuple(sorted(unique, key=lambda r: r.sort_key))


def relate(target: Target | ObjRef, role: RelatedRole | str) -> RelatedRef:
    """An entry of a finding's `related`: the object (a pod template or container stands for
    its workload, as in findings) and its role: RelatedRole or its value ("symptom",
    "selected-by", "owner", "cause")."""
    if isinstance(target, ObjRef):
        ref = target
    elif isinstance(target, Container):
        ref = target.template.owner.ref
    elif isinstance(target, PodTemplate):
        ref = target.owner.ref
    else:
        ref = target.ref
    return RelatedRef(ref, role if isinstance(role, RelatedRole) else RelatedRole.parse(role))


def passed(target: Target, message: str, *, path: str = "") -> Result:
    return _result(Outcome.PASS, target, message, path, None, None)


def failed(
    target: Target,
    message: str,
    *,
    path: str = "",
    severity: Severity | None = None,
    fix: Mapping[str, str] | None = None,
    related: Iterable[RelatedRef] = (),
) -> Result:
    """A failed result on `target`, the object to change. `related` lists the other objects
    that show the symptom or explain it (build them with `relate`); one cause with many
    victims is one result on the cause with the victims related as symptoms."""
    return _result(Outcome.FAIL, target, message, path, severity, fix, related)
