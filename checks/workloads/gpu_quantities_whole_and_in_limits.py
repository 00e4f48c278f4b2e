from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    WORKLOAD_TYPES,
    AdmissionRule,
    Category,
    FixKind,
    QuantityError,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    format_quantity,
    is_extended_resource,
    parse_quantity,
    passed,
    pod_templates,
)


@check(
    id="GPU-WL-001",
    title="GPU quantities are whole numbers, set in limits, and equal to the request",
    category=Category.WORKLOADS,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        GPUs are an extended resource: the API server accepts only integers, requires a limit,
        and requires the request to equal the limit when both are given. Anything else fails
        validation: a Pod, Deployment, Job or CronJob is refused outright (its pod template is
        validated as a pod spec), and a training job's custom resource (PyTorchJob, MPIJob,
        Volcano Job) is accepted but every pod its operator creates is rejected, visible only
        as events, so the job silently never gets a pod.
    """,
    detection="""
        Every container and init container of every pod template: each extended resource
        (domain-prefixed, outside kubernetes.io) whose request or limit is not a whole-number
        quantity, has a request without a limit, or a request different from the limit.
        Quantities are compared as Kubernetes quantities, so 1, "1" and 1000m are equal.
    """,
    severity_evidence="""
        The spec is the evidence: the API server refuses the object, or every pod a training
        operator creates from it ("must be an integer", "Limit must be set for non
        overcommitable resources", "must be equal to ... limit"), so the workload never runs.
        Always high, whatever the cluster.
    """,
    remediation="""
        # $kind $namespace/$name, container $container
        # Need less than a GPU? Ask for a MIG slice or a time-sliced replica instead:
        #   limits: {nvidia.com/mig-1g.10gb: 1}   or   limits: {nvidia.com/gpu.shared: 1}
        $section:
          - name: $container
            resources:
              requests:
                $resource: $suggested
              limits:
                $resource: $suggested   # a whole number, equal to the request
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/",
        "https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#extended-resources",
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/apis/core/validation/validation.go",
    ),
    remediation_root="pod_spec",
    admission=AdmissionRule(
        scope="container",
        valid="""
            [c.?resources.?requests.orValue({}), c.?resources.?limits.orValue({})].all(m,
              m.all(k, !@extended(k)
                || [[c.?resources.?requests.orValue({})[?k],
                     c.?resources.?limits.orValue({})[?k]]].all(p,
                  p.all(o, !o.hasValue() || [o.value()].all(v, @whole(v)))
                  && p[1].hasValue()
                  && (!p[0].hasValue() || [p[0].value()].all(a, [p[1].value()].all(b,
                        type(a) == int && type(b) == int ? a == b
                        : type(a) == int ? quantity(b).asInteger() == dyn(a)
                        : type(b) == int ? quantity(a).asInteger() == dyn(b)
                        : quantity(a).compareTo(quantity(b)) == 0))))))
        """,
        message="an extended resource (GPU) is fractional, not a quantity, requested without "
        "a limit, or requested differently from its limit: every pod is rejected",
        note="built-in kinds are refused by the API server's own validation before admission; "
        "the policy matters for training-job custom resources",
    ),
)
def gpu_quantities_whole_and_in_limits(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        for container in template.containers():
            names = sorted(
                {str(k) for k in container.requests} | {str(k) for k in container.limits}
            )
            for resource in filter(is_extended_resource, names):
                problem, suggested = _problem(
                    container.requests.get(resource), container.limits.get(resource)
                )
                path = f"{container.path}.resources"
                if problem:
                    yield failed(
                        container,
                        f"{resource}: {problem}",
                        path=path,
                        fix={
                            "section": "initContainers" if container.init else "containers",
                            "container": container.name,
                            "resource": resource,
                            "suggested": suggested,
                        },
                    )
                else:
                    yield passed(container, f"{resource}: whole number set as a limit", path=path)


def _problem(request: object, limit: object) -> tuple[str, str]:
    """What is wrong ("" when nothing), and the whole number to suggest instead."""
    parsed: dict[str, Decimal] = {}
    for label, value in (("request", request), ("limit", limit)):
        if value is None:
            continue
        try:
            parsed[label] = parse_quantity(value)
        except QuantityError:
            return f"{label} {value!r} is not a valid quantity", "1"
    for label, quantity in parsed.items():
        if quantity % 1 != 0:
            return f"{label} {format_quantity(quantity)} is fractional; GPUs are whole devices", "1"
    suggested = format_quantity(parsed.get("limit", parsed.get("request", Decimal(1))))
    if "limit" not in parsed:
        return f"request {suggested} has no limit, which the API server rejects", suggested
    if "request" in parsed and parsed["request"] != parsed["limit"]:
        request_text = format_quantity(parsed["request"])
        return f"request {request_text} differs from limit {suggested}", suggested
    return "", suggested
