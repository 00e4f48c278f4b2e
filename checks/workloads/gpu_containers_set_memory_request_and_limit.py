from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_pod_templates,
    passed,
)


@check(
    id="GPU-WL-007",
    title="GPU containers set a memory request and limit",
    category=Category.WORKLOADS,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        GPU jobs pin large host buffers: DataLoader workers, pinned memory, model loading and
        /dev/shm tmpfs. Without a memory limit one pod can exhaust the GPU node's RAM and get
        co-located GPU jobs OOM-killed; without a request the scheduler over-packs the node
        and the kubelet evicts under memory pressure, losing hours of GPU time.
    """,
    detection="""
        Every container that asks for GPUs: the memory limit comes from the container or the
        namespace's Container LimitRange default; the memory request from the container,
        else its limit (the API defaults the request to the limit), else the LimitRange
        defaultRequest. A missing limit or request fails. A request below the limit
        (Burstable) passes.
    """,
    remediation="""
        # $kind $namespace/$name, container $container
        $section:
          - name: $container
            resources:
              requests: {memory: 64Gi}
              limits: {memory: 64Gi}   # with cpu request == limit too, the pod gets Guaranteed QoS
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/tasks/configure-pod-container/assign-memory-resource/",
        "https://kubernetes.io/docs/concepts/policy/limit-range/",
    ),
    remediation_root="pod_spec",
)
def gpu_containers_set_memory_request_and_limit(snapshot: Snapshot) -> Iterator[Result]:
    for template in gpu_pod_templates(snapshot):
        defaults = _limit_range_defaults(snapshot, template.owner.ref.namespace)
        for container in template.gpu_containers():
            yield _judge(container, defaults)


def _judge(container: Container, defaults: dict[str, bool]) -> Result:
    has_limit = "memory" in container.limits or defaults["default"]
    has_request = "memory" in container.requests or has_limit or defaults["defaultRequest"]
    missing = [text for text, ok in (("limit", has_limit), ("request", has_request)) if not ok]
    if not missing:
        return passed(container, "has a memory request and limit")
    consequence = (
        "it can use all of the node's RAM and trigger the OOM killer for co-located GPU jobs"
        if not has_limit
        else "the scheduler does not reserve its memory"
    )
    return failed(
        container,
        f"has no memory {' or '.join(missing)}: {consequence}",
        path=f"{container.path}.resources",
        fix={
            "section": "initContainers" if container.init else "containers",
            "container": container.name,
        },
    )


def _limit_range_defaults(snapshot: Snapshot, namespace: str) -> dict[str, bool]:
    """Whether a Container LimitRange of the namespace defaults the memory limit/request."""
    found = {"default": False, "defaultRequest": False}
    for limit_range in snapshot.in_namespace("LimitRange", namespace):
        for item in map(as_mapping, as_list(limit_range.spec.get("limits"))):
            if item.get("type") != "Container":
                continue
            for key in found:
                if "memory" in as_mapping(item.get(key)):
                    found[key] = True
            # The API defaults `default` to `max` when only a max is given.
            if "memory" in as_mapping(item.get("max")):
                found["default"] = True
    return found
