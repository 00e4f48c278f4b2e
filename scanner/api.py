"""The only import surface for check authors, built-in or third-party.

A check is a decorated pure function of the snapshot that yields `passed(...)` or `failed(...)`
for every object it evaluated, and nothing for objects it does not apply to.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Mapping

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
from gpu_audit.redact import credential_like, is_placeholder
from gpu_audit.snapshot import Snapshot

__all__ = [
    "AMD_GPU",
    "NVIDIA_GPU",
    "NVIDIA_GPU_SHARED",
    "NVIDIA_MIG_PREFIX",
    "WORKLOAD_TYPES",
    "Category",
    "Check",
    "Container",
    "ObjRef",
    "PodTemplate",
    "QuantityError",
    "Resource",
    "Result",
    "Severity",
    "Snapshot",
    "Taint",
    "Target",
    "as_list",
    "as_mapping",
    "check",
    "controller_owner",
    "credential_like",
    "effective_pod_request",
    "failed",
    "format_quantity",
    "gpu_nodes",
    "gpu_pod_templates",
    "is_extended_resource",
    "is_gpu_node",
    "is_gpu_resource",
    "is_placeholder",
    "label_selector_matches",
    "map_selector_matches",
    "node_affinity_matches",
    "node_is_ready",
    "node_is_schedulable",
    "node_taints",
    "parse_quantity",
    "passed",
    "pod_templates",
    "quantities",
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
