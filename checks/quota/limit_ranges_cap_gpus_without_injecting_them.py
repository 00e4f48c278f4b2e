from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    AdmissionRule,
    Category,
    FixKind,
    QuantityError,
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
    parse_quantity,
    passed,
    pod_templates,
)

_SECTIONS = ("max", "min", "default", "defaultRequest")
# The LimitRanger admission plugin records what it set on a pod in this annotation
# ("LimitRanger plugin set: nvidia.com/gpu request for container x; ...").
LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"


@check(
    id="GPU-QUOTA-003",
    title="LimitRanges cap GPUs per container without injecting GPUs into every container",
    category=Category.QUOTA,
    severity=Severity.CRITICAL,
    requires=("LimitRange",),
    rationale="""
        The API server defaults a Container LimitRange's `default` to its `max`, and
        `defaultRequest` to `default`, then to `min`. A GPU `max` without an explicit
        `default: 0` therefore gives every container that does not mention GPUs (sidecars,
        notebook helpers, CPU-only pods) N GPUs at admission, so CPU pods go Pending or take
        GPUs. A `min` alone gives them a GPU request without a limit, which is rejected.
    """,
    detection="""
        Every `type: Container` item of every LimitRange, for each GPU resource it names:
        the effective default (default, else max) and default request (defaultRequest, else
        the effective default, else min) are computed as the API server does. A positive
        effective default fails critical (GPUs injected); a positive default request without a
        default fails high (every container without a GPU limit is rejected); a default that
        differs from the default request fails high (the API rejects such a LimitRange for a
        non-overcommittable resource). Items whose GPU default and default request are 0, and
        `type: Pod` items (never defaulted), pass. Workloads of the namespace in the input
        are the visible victims: containers that do not mention the GPU resource, and pods
        the LimitRanger annotated as having set it.
    """,
    severity_evidence="""
        Critical when a workload of the namespace in the input is hit: a container that does
        not name the GPU resource (it is given GPUs, or rejected for a request without a
        limit), or a pod whose kubernetes.io/limit-ranger annotation shows the GPU was set
        for it. High when the input shows no such workload yet (the next one is), and high for
        a default that differs from the default request (the API rejects the LimitRange).
    """,
    remediation="""
        # $kind $namespace/$name, spec.limits[$index]: cap $resource without injecting it
        apiVersion: v1
        kind: LimitRange
        metadata:
          name: $name
          namespace: $namespace
        spec:
          limits:
            - type: Container
              max: {$resource: "$max"}
              default: {$resource: "0"}          # explicit 0: nothing is injected
              defaultRequest: {$resource: "0"}
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/apis/core/v1/defaults.go",
        "https://github.com/canonical/bundle-kubeflow/issues/599",
        "https://kubernetes.io/docs/concepts/policy/limit-range/",
    ),
    admission=AdmissionRule(
        scope="object",
        kinds=("LimitRange",),
        valid=f"""
            object.spec.?limits.orValue([]).all(item, item.?type.orValue('') != 'Container'
              || {list(_SECTIONS)}.all(s, item[?s].orValue({{}}).all(r, !@gpu_resource(r)
                || [item[?'default'].orValue({{}})[?r].orValue(
                        item[?'max'].orValue({{}})[?r].orValue(''))].all(d,
                   [item[?'defaultRequest'].orValue({{}})[?r].orValue(
                        d != '' ? d : item[?'min'].orValue({{}})[?r].orValue(''))].all(q,
                     !(d != '' && q != '' && quantity(d).compareTo(quantity(q)) != 0)
                     && !(d != '' && quantity(d).isGreaterThan(quantity('0')))
                     && !(d == '' && q != '' && quantity(q).isGreaterThan(quantity('0'))))))))
        """,
        message="a Container limit defaults a GPU resource to more than 0, or defaults its "
        "request without a limit: every container that does not name it gets GPUs or is "
        "rejected",
    ),
)
def limit_ranges_cap_gpus_without_injecting_them(snapshot: Snapshot) -> Iterator[Result]:
    for limit_range in snapshot.of("LimitRange"):
        for index, item in enumerate(map(as_mapping, as_list(limit_range.spec.get("limits")))):
            names = sorted({str(k) for s in _SECTIONS for k in as_mapping(item.get(s))} - {""})
            for resource in filter(is_gpu_resource, names):
                victims = _victims(snapshot, limit_range.ref.namespace, resource)
                yield _judge(limit_range, index, item, resource, victims)


def _victims(snapshot: Snapshot, namespace: str, resource: str) -> list[str]:
    """The workloads of the namespace a GPU default applies to: a container that names no
    `resource`, or a pod the LimitRanger annotated as having set it."""
    found = []
    for template in pod_templates(snapshot):
        owner = template.owner
        if owner.ref.namespace != namespace:
            continue
        set_by_plugin = resource in template.annotations.get(LIMIT_RANGER_ANNOTATION, "")
        unnamed = any(
            resource not in c.limits and resource not in c.requests for c in template.containers()
        )
        if set_by_plugin or unnamed:
            found.append(f"{owner.ref.kind_name} {owner.ref.name}")
    return sorted(set(found))


def _quantity(item: Mapping[str, Any], section: str, resource: str) -> Decimal | None:
    value = as_mapping(item.get(section)).get(resource)
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _judge(
    limit_range: Resource,
    index: int,
    item: Mapping[str, Any],
    resource: str,
    victims: list[str],
) -> Result:
    path = f"spec.limits[{index}]"
    if item.get("type") != "Container":
        return passed(limit_range, f"caps {resource} for {item.get('type')}s; nothing is defaulted")
    q = {s: _quantity(item, s, resource) for s in _SECTIONS}
    default = q["default"] if q["default"] is not None else q["max"]
    request = next((v for v in (q["defaultRequest"], default, q["min"]) if v is not None), None)
    fix = {
        "index": str(index),
        "resource": resource,
        "max": format_quantity(q["max"]) if q["max"] is not None else "1",
    }
    # Validation runs after defaulting: a mismatch means the object never exists live.
    if default is not None and request is not None and default != request:
        return failed(
            limit_range,
            f"has {resource} default {format_quantity(default)} but default request "
            f"{format_quantity(request)}; the API rejects this for a non-overcommittable resource",
            path=path,
            severity=Severity.HIGH,
            fix=fix,
        )
    severity = Severity.CRITICAL if victims else Severity.HIGH
    hit = (
        f"; hit here: {', '.join(victims[:5])}{' ...' if len(victims) > 5 else ''}"
        if victims
        else "; no workload of the namespace in the input is hit yet"
    )
    if default is not None and default > 0:
        source = "default" if q["default"] is not None else "max (the API copies it to default)"
        return failed(
            limit_range,
            f"sets {resource} {source} {format_quantity(default)}: every container that does "
            f"not mention {resource} is admitted with {format_quantity(default)} GPU(s){hit}",
            path=path,
            severity=severity,
            fix=fix,
        )
    if request is not None and request > 0 and default is None:
        return failed(
            limit_range,
            f"defaults the {resource} request to {format_quantity(request)} without a limit: "
            f"every container without a GPU limit is rejected (request without limit){hit}",
            path=path,
            severity=severity,
            fix=fix,
        )
    return passed(limit_range, f"caps {resource} and injects none (default 0)", path=path)
