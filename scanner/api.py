"""The only import surface for check authors, built-in or third-party.

A check is a decorated pure function of the snapshot that yields `passed(...)` or `failed(...)`
for every object it evaluated, and nothing for objects it does not apply to.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpu_audit.k8s.cr_patches import json_pointer, pointer
from gpu_audit.k8s.dra import (
    ALL_DEVICES,
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_DRIVER,
    DEVICE_CLASS,
    DRA_CLAIM_TYPES,
    NVIDIA_GPU_DRIVER,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    ClaimRequest,
    DeviceRequest,
    PodClaim,
    RequestMatch,
    claim_class_names,
    claim_requests,
    claim_uses,
    claims_to_allocate,
    compute_domain_templates,
    container_claims,
    device_class,
    extended_resource_classes,
    generated_claim_name,
    gets_gpus_through_dra,
    match_request,
    node_devices,
    pod_claim_object,
    pod_claims,
    selects_nvidia_gpus,
)
from gpu_audit.k8s.events import (
    event_count,
    event_note,
    event_regarding,
    event_time,
)
from gpu_audit.k8s.fabric import (
    EFA,
    FABRIC_JOB_TYPES,
    GKE_INTERFACES_ANNOTATION,
    HUGEPAGES_2MI,
    Landing,
    MultiNodeTemplate,
    NodeShape,
    env_values,
    fabric_family,
    gke_interfaces,
    is_fabric_resource,
    landing,
    multi_node_templates,
    node_fabric,
    node_gpu_count,
    node_shape,
    per_gpu_share,
    pod_fabric,
    template_gpus,
    template_pods,
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
from gpu_audit.k8s.knative import (
    KNATIVE_SERVICE,
    PROGRESS_DEADLINE_ANNOTATION,
    ProgressDeadline,
    progress_deadline,
)
from gpu_audit.k8s.kserve import (
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    SERVING_RUNTIME,
    deployment_mode,
    model_format,
    runtime_name,
    select_runtime,
)
from gpu_audit.k8s.kubeflow_trainer import replicated_job_pods
from gpu_audit.k8s.kueue import (
    CLUSTER_QUEUE,
    COHORT,
    KUEUE_CONFIG_KEY,
    KUEUE_FRAMEWORKS,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUED_TYPES,
    KUEUE_WORKLOAD,
    LOCAL_QUEUE,
    QUEUE_NAME_LABEL,
    RESOURCE_FLAVOR,
    WORKLOAD_PRIORITY_CLASS,
    Blocker,
    BlockerKind,
    FlavorQuota,
    FlavorUsage,
    QueuedWorkload,
    admission_checks,
    admitted_pods,
    cohort_name,
    cohort_root,
    condition_is,
    covered_resources,
    enabled_frameworks,
    evictions,
    flavor_nodes,
    flavor_quotas,
    flavor_usage,
    is_finished,
    kueue_configuration,
    node_gpus,
    podset_templates,
    queue_name,
    queued_workloads,
    requeue_count,
    resource_groups,
    workload_blocker,
    workload_cluster_queue,
    workload_condition,
    workload_gpus,
    workload_owner,
    workload_priority,
    workload_requests,
    workloads_of,
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
from gpu_audit.k8s.model_size import ModelSize, model_size
from gpu_audit.k8s.node_lifecycle import (
    dedicating_taints,
    is_bootstrapping,
    is_joining,
    is_transient_taint,
)
from gpu_audit.k8s.node_shapes import gpu_nodes_admitting, nodes_alike, taints_of
from gpu_audit.k8s.nvidia_runtime import NvidiaRuntime, nvidia_runtime
from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
    str_map,
    template_spec,
)
from gpu_audit.k8s.operator_assets import OPERATOR_PLACEHOLDER, is_operator_asset_template
from gpu_audit.k8s.pods import (
    WORKLOAD_TYPES,
    Container,
    PodTemplate,
    controller_owner,
    effective_pod_request,
    env_value,
    gpu_pod_templates,
    pod_requests_gpu,
    pod_templates,
    pods_on_node,
    templates_of,
    top_owner,
)
from gpu_audit.k8s.quantities import (
    QuantityError,
    format_quantity,
    parse_quantity,
    quantities,
)
from gpu_audit.k8s.ray import RAY_SERVICE, ray_cluster_spec_path
from gpu_audit.k8s.scheduling import (
    DAEMONSET_POD_TOLERATIONS,
    NodeAffinity,
    Taint,
    daemonset_pod_tolerations,
    daemonset_schedules_on,
    daemonset_untolerated_taints,
    node_affinity_keys,
    node_affinity_matches,
    node_affinity_of,
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
from gpu_audit.k8s.stack_fixes import (
    agent_pods_by_node,
    clusterpolicy_placement_fix,
    daemonset_not_ready_fix,
    daemonset_placement_fix,
    operator_deployed,
    pod_is_ready,
    policy_toleration_patch,
)
from gpu_audit.k8s.stack_placement import (
    DCGM_EXPORTER,
    ESSENTIAL_STACK_ROLES,
    PLATFORM_LABELS,
    StackDaemonSet,
    avoids_gpu_nodes,
    builtin_device_plugin,
    gpu_bound_nodes,
    gpu_selection_keys,
    gpu_stack_daemonsets,
    is_gpu_bound_node,
    is_gpu_label,
    is_gpu_taint,
    names_gpu,
    nfd_pci_labelled,
    node_selection,
    selection_may_match,
    stack_agent_runs_on,
)
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
    AdmissionRule,
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
from gpu_audit.redact import REDACTED, credential_like, is_placeholder, redact_argv, redact_text
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
            "AdmissionRule",
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
            "taints_of",
            "tolerates",
            "untolerated_taints",
            "node_affinity_matches",
            "node_affinity_keys",
            "NodeAffinity",
            "node_affinity_of",
            "schedules_on",
            "nodes_alike",
            "gpu_nodes_admitting",
            "node_is_ready",
            "node_is_schedulable",
            "DAEMONSET_POD_TOLERATIONS",
            "daemonset_pod_tolerations",
            "daemonset_untolerated_taints",
            "daemonset_schedules_on",
        ),
    ),
    ApiGroup(
        "Pods, templates and owners",
        "Every pod template of every workload kind, its containers, owners and effective requests.",
        (
            "json_pointer",
            "pointer",
            "WORKLOAD_TYPES",
            "PodTemplate",
            "Container",
            "pod_templates",
            "gpu_pod_templates",
            "templates_of",
            "pod_requests_gpu",
            "pods_on_node",
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
            "is_operator_asset_template",
            "OPERATOR_PLACEHOLDER",
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
        "GPU-stack placement",
        "The stack's node agents by role, the nodes meant for GPUs, and GPU node selection.",
        (
            "StackDaemonSet",
            "DCGM_EXPORTER",
            "daemonset_not_ready_fix",
            "daemonset_placement_fix",
            "clusterpolicy_placement_fix",
            "policy_toleration_patch",
            "agent_pods_by_node",
            "pod_is_ready",
            "operator_deployed",
            "ESSENTIAL_STACK_ROLES",
            "gpu_stack_daemonsets",
            "stack_agent_runs_on",
            "builtin_device_plugin",
            "gpu_bound_nodes",
            "is_gpu_bound_node",
            "is_gpu_taint",
            "names_gpu",
            "is_gpu_label",
            "node_selection",
            "gpu_selection_keys",
            "avoids_gpu_nodes",
            "selection_may_match",
            "nfd_pci_labelled",
            "PLATFORM_LABELS",
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
            "replicated_job_pods",
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
            "ModelSize",
            "model_size",
        ),
    ),
    ApiGroup(
        "Knative and KubeRay",
        "Where an operator's object holds what the operator renders from it.",
        (
            "KNATIVE_SERVICE",
            "PROGRESS_DEADLINE_ANNOTATION",
            "ProgressDeadline",
            "progress_deadline",
            "RAY_SERVICE",
            "ray_cluster_spec_path",
        ),
    ),
    ApiGroup(
        "KServe",
        "InferenceService components are pod templates (PodTemplate.replica_type is the "
        "component); the runtime a predictor's model runs on.",
        (
            "INFERENCE_SERVICE",
            "SERVING_RUNTIME",
            "CLUSTER_SERVING_RUNTIME",
            "deployment_mode",
            "model_format",
            "runtime_name",
            "select_runtime",
        ),
    ),
    ApiGroup(
        "Kueue",
        "What Kueue queues and admits together, ClusterQueue quotas, cohorts and priorities, "
        "and why a Workload waits, read the way Kueue reads them (v1beta2 and v1beta1).",
        (
            "LOCAL_QUEUE",
            "CLUSTER_QUEUE",
            "RESOURCE_FLAVOR",
            "KUEUE_WORKLOAD",
            "WORKLOAD_PRIORITY_CLASS",
            "COHORT",
            "QUEUE_NAME_LABEL",
            "KUEUE_PRIORITY_LABEL",
            "KUEUE_CONFIG_KEY",
            "KUEUE_FRAMEWORKS",
            "KUEUE_QUEUED_TYPES",
            "kueue_configuration",
            "enabled_frameworks",
            "queue_name",
            "QueuedWorkload",
            "queued_workloads",
            "admitted_pods",
            "podset_templates",
            "workload_requests",
            "workload_gpus",
            "resource_groups",
            "covered_resources",
            "FlavorQuota",
            "flavor_quotas",
            "FlavorUsage",
            "flavor_usage",
            "flavor_nodes",
            "node_gpus",
            "admission_checks",
            "cohort_name",
            "cohort_root",
            "workload_priority",
            "workload_condition",
            "condition_is",
            "is_finished",
            "evictions",
            "requeue_count",
            "workload_cluster_queue",
            "workload_owner",
            "workloads_of",
            "BlockerKind",
            "Blocker",
            "workload_blocker",
        ),
    ),
    ApiGroup(
        "NVIDIA container runtime",
        "Whether GPU pods get the NVIDIA runtime (or CDI injection) without a runtimeClassName.",
        (
            "NvidiaRuntime",
            "nvidia_runtime",
        ),
    ),
    ApiGroup(
        "Dynamic Resource Allocation",
        "ResourceSlice devices, what ResourceClaims and templates request and which devices "
        "match (CEL selectors, or why they were not evaluated), pods' claims, ComputeDomains.",
        (
            "RESOURCE_SLICE",
            "DEVICE_CLASS",
            "RESOURCE_CLAIM",
            "RESOURCE_CLAIM_TEMPLATE",
            "DRA_CLAIM_TYPES",
            "COMPUTE_DOMAIN",
            "NVIDIA_GPU_DRIVER",
            "COMPUTE_DOMAIN_DRIVER",
            "ALL_DEVICES",
            "node_devices",
            "ClaimRequest",
            "DeviceRequest",
            "claim_requests",
            "claim_class_names",
            "device_class",
            "RequestMatch",
            "match_request",
            "selects_nvidia_gpus",
            "gets_gpus_through_dra",
            "extended_resource_classes",
            "claims_to_allocate",
            "PodClaim",
            "pod_claims",
            "container_claims",
            "pod_claim_object",
            "generated_claim_name",
            "claim_uses",
            "compute_domain_templates",
        ),
    ),
    ApiGroup(
        "Multi-node fabric",
        "EFA, RDMA and GKE multi-network resources of nodes and pods, the GPU jobs whose pods "
        "span nodes and talk NCCL, and the nodes they land on.",
        (
            "EFA",
            "HUGEPAGES_2MI",
            "GKE_INTERFACES_ANNOTATION",
            "FABRIC_JOB_TYPES",
            "fabric_family",
            "is_fabric_resource",
            "node_fabric",
            "node_gpu_count",
            "pod_fabric",
            "template_gpus",
            "gke_interfaces",
            "template_pods",
            "MultiNodeTemplate",
            "multi_node_templates",
            "Landing",
            "landing",
            "NodeShape",
            "node_shape",
            "per_gpu_share",
            "env_values",
        ),
    ),
    ApiGroup(
        "Credentials",
        "Recognising credential-like values and template placeholders without reading Secrets, "
        "and redacting credentials from what a check quotes of the input.",
        (
            "REDACTED",
            "credential_like",
            "is_placeholder",
            "redact_argv",
            "redact_text",
        ),
    ),
)
# mypy reads re-exports only from a literal list; tests/test_plugin_api.py keeps it equal to
# the groups above.
__all__ = [
    "ALL_DEVICES",
    "AMD_GPU",
    "CLUSTER_POLICY",
    "CLUSTER_QUEUE",
    "CLUSTER_SERVING_RUNTIME",
    "COHORT",
    "COMPUTE_DOMAIN",
    "COMPUTE_DOMAIN_DRIVER",
    "DAEMONSET_POD_TOLERATIONS",
    "DCGM_EXPORTER",
    "DEPLOY_PREFIX",
    "DEVICE_CLASS",
    "DRA_CLAIM_TYPES",
    "EFA",
    "ESSENTIAL_STACK_ROLES",
    "FABRIC_JOB_TYPES",
    "GKE_INTERFACES_ANNOTATION",
    "HUGEPAGES_2MI",
    "INFERENCE_SERVICE",
    "KNATIVE_SERVICE",
    "KSERVE_ISVC_LABEL",
    "KUBEFLOW_REPLICA_KEYS",
    "KUEUE_CONFIG_KEY",
    "KUEUE_FRAMEWORKS",
    "KUEUE_PRIORITY_LABEL",
    "KUEUE_QUEUED_TYPES",
    "KUEUE_WORKLOAD",
    "LOCAL_QUEUE",
    "MULTI_POD_JOB_TYPES",
    "NODEPOOL",
    "NVIDIA_GPU",
    "NVIDIA_GPU_DRIVER",
    "NVIDIA_GPU_SHARED",
    "NVIDIA_MIG_PREFIX",
    "OPERATOR_PLACEHOLDER",
    "PLATFORM_LABELS",
    "PROGRESS_DEADLINE_ANNOTATION",
    "QUEUE_NAME_LABEL",
    "RAY",
    "RAY_SERVICE",
    "REDACTED",
    "RESOURCE_CLAIM",
    "RESOURCE_CLAIM_TEMPLATE",
    "RESOURCE_FLAVOR",
    "RESOURCE_SLICE",
    "SERVING_RUNTIME",
    "TORCHSERVE",
    "TRITON",
    "VLLM",
    "VOLCANO_JOB",
    "WORKLOAD_PRIORITY_CLASS",
    "WORKLOAD_TYPES",
    "AdmissionRule",
    "Blocker",
    "BlockerKind",
    "Category",
    "Check",
    "CheckFunction",
    "ClaimRequest",
    "Container",
    "DeviceRequest",
    "FixKind",
    "FlavorQuota",
    "FlavorUsage",
    "Landing",
    "ModelSize",
    "MultiNodeTemplate",
    "NodeAffinity",
    "NodeShape",
    "NvidiaRuntime",
    "ObjRef",
    "Outcome",
    "PodClaim",
    "PodTemplate",
    "ProgressDeadline",
    "QuantityError",
    "QueuedWorkload",
    "RelatedRef",
    "RelatedRole",
    "Remediation",
    "ReplicaGroup",
    "RequestMatch",
    "Resource",
    "Result",
    "ServerClass",
    "Severity",
    "Snapshot",
    "StackDaemonSet",
    "Taint",
    "Target",
    "active_cluster_policy",
    "admission_checks",
    "admitted_pods",
    "agent_pods_by_node",
    "argv",
    "as_list",
    "as_mapping",
    "avoids_gpu_nodes",
    "builtin_device_plugin",
    "check",
    "claim_class_names",
    "claim_requests",
    "claim_uses",
    "claims_to_allocate",
    "classify",
    "clusterpolicy_placement_fix",
    "cohort_name",
    "cohort_root",
    "command_line",
    "component_enabled",
    "compute_domain_templates",
    "condition_is",
    "container_claims",
    "containers",
    "controller_owner",
    "count_field",
    "covered_resources",
    "credential_like",
    "daemonset_not_ready_fix",
    "daemonset_placement_fix",
    "daemonset_pod_tolerations",
    "daemonset_runs_on",
    "daemonset_schedules_on",
    "daemonset_untolerated_taints",
    "dedicating_taints",
    "deployment_mode",
    "device_class",
    "device_plugin_daemonsets",
    "effective_pod_request",
    "enabled_frameworks",
    "env_value",
    "env_values",
    "event_count",
    "event_note",
    "event_regarding",
    "event_time",
    "evictions",
    "extended_resource_classes",
    "fabric_family",
    "failed",
    "finished_as",
    "flavor_nodes",
    "flavor_quotas",
    "flavor_usage",
    "format_quantity",
    "generated_claim_name",
    "gets_gpus_through_dra",
    "gke_interfaces",
    "gpu_bound_nodes",
    "gpu_hosts",
    "gpu_nodes",
    "gpu_nodes_admitting",
    "gpu_pod_templates",
    "gpu_quantities",
    "gpu_selection_keys",
    "gpu_stack_daemonsets",
    "has_resource_status",
    "image_registry_and_path",
    "image_repository",
    "image_tag",
    "is_bootstrapping",
    "is_extended_resource",
    "is_fabric_resource",
    "is_finished",
    "is_gpu_bound_node",
    "is_gpu_host",
    "is_gpu_label",
    "is_gpu_node",
    "is_gpu_resource",
    "is_gpu_stack_image",
    "is_gpu_stack_node_agent",
    "is_gpu_taint",
    "is_joining",
    "is_operator_asset_template",
    "is_operator_operand",
    "is_placeholder",
    "is_stack_pod_in_system_namespace",
    "is_transient_taint",
    "json_pointer",
    "kueue_configuration",
    "label_selector_matches",
    "landing",
    "map_selector_matches",
    "match_request",
    "model_format",
    "model_size",
    "multi_node_templates",
    "names_gpu",
    "namespace_labels",
    "nfd_pci_labelled",
    "node_affinity_keys",
    "node_affinity_matches",
    "node_affinity_of",
    "node_devices",
    "node_fabric",
    "node_gpu_count",
    "node_gpus",
    "node_is_ready",
    "node_is_schedulable",
    "node_selection",
    "node_shape",
    "node_taints",
    "nodepool_gpu_scope",
    "nodepool_requirements",
    "nodepool_taints",
    "nodepool_template_labels",
    "nodes_alike",
    "nvidia_runtime",
    "operand_deployed",
    "operand_label",
    "operator_deployed",
    "operator_node_labels",
    "owned_pods",
    "owner_kinds",
    "parse_quantity",
    "passed",
    "per_gpu_share",
    "pod_claim_object",
    "pod_claims",
    "pod_fabric",
    "pod_is_active",
    "pod_is_ready",
    "pod_requests_gpu",
    "pod_spec",
    "pod_templates",
    "pods_on_node",
    "podset_templates",
    "pointer",
    "policy_operand_runs_on",
    "policy_toleration_patch",
    "progress_deadline",
    "quantities",
    "queue_name",
    "queued_workloads",
    "ray_cluster_spec_path",
    "redact_argv",
    "redact_text",
    "relate",
    "replica_groups",
    "replicated_job_pods",
    "requeue_count",
    "resource_groups",
    "runs_on_spot",
    "runtime_name",
    "schedules_on",
    "select",
    "select_runtime",
    "selection_may_match",
    "selects_nvidia_gpus",
    "stack_agent_runs_on",
    "str_map",
    "taints_of",
    "template_gpus",
    "template_pods",
    "template_spec",
    "templates_of",
    "tolerates",
    "top_owner",
    "untolerated_taints",
    "workload_blocker",
    "workload_cluster_queue",
    "workload_condition",
    "workload_gpus",
    "workload_owner",
    "workload_priority",
    "workload_requests",
    "workloads_of",
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
    admission: AdmissionRule | None = None,
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

    `admission` is the check's form at admission, for checks decidable from the one object
    being created (`gpu-audit admission` renders it as a ValidatingAdmissionPolicy).
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
            admission=admission,
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
    inherited = None
    if isinstance(target, Container | PodTemplate):
        as_base = _on_base(target, path)
        if as_base is not None:
            base_target, base_path = as_base
            inherited = _result(outcome, base_target, message, base_path, severity, fix)
    return Result(
        outcome,
        ref,
        f"{subject} {message}",
        path,
        severity,
        dict(fix or {}),
        pod_spec_path,
        _related(ref, related),
        inherited,
    )


def _on_base(target: Container | PodTemplate, path: str) -> tuple[Target, str] | None:
    """The same target and path in the template `target`'s template is derived from: the
    container of the same name, the field at the same place. None when the base has no such
    container or the path lies outside the container and the pod spec."""
    template = target.template if isinstance(target, Container) else target
    base = template.base
    if base is None:
        return None
    moves = [(template.path, base.path)]
    base_target: Target = base
    if isinstance(target, Container):
        found = next(
            (c for c in base.containers() if (c.name, c.init) == (target.name, target.init)),
            None,
        )
        if found is None:
            return None
        base_target = found
        moves.insert(0, (target.path, found.path))
    for old, new in moves:
        if path == old or path.startswith((f"{old}.", f"{old}[")):
            return base_target, new + path[len(old) :]
    return None


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
