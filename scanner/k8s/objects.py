"""Reading raw camelCase objects defensively: a field of the wrong type reads as empty."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_mapping(value: object) -> Mapping[str, Any]:
    # The loaders build plain dicts: testing for one first skips the ABC machinery of
    # isinstance(..., Mapping), which was a tenth of a large scan's check time.
    if value.__class__ is dict:
        return value
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def str_map(value: object) -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in as_mapping(value).items()}


def template_spec(spec: Mapping[str, Any], field: str = "template") -> Mapping[str, Any]:
    """`spec.<field>.spec`: the spec of the template an object's spec carries, {} when it is
    missing or mistyped. The pod spec of a Deployment, DaemonSet, StatefulSet or Job is
    `template_spec(resource.spec)`, a CronJob's JobSpec `template_spec(spec, "jobTemplate")`,
    a Karpenter NodePool's NodeClaim spec `template_spec(pool.spec)`. For the pod specs of any
    workload kind (a Pod, training jobs' replicas) use `templates_of` instead."""
    return as_mapping(as_mapping(spec.get(field)).get("spec"))


def template_metadata(spec: Mapping[str, Any], field: str = "template") -> Mapping[str, Any]:
    """`spec.<field>.metadata`, {} when it is missing or mistyped."""
    return as_mapping(as_mapping(spec.get(field)).get("metadata"))
