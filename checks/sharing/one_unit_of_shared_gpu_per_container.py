import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    NVIDIA_GPU,
    NVIDIA_MIG_PREFIX,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_mapping,
    check,
    failed,
    gpu_nodes,
    gpu_nodes_admitting,
    passed,
    pod_templates,
)
from gpu_audit.checks.sharing._common import strict_shared_names


def _is_shared_name(resource: str) -> bool:
    # renameByDefault (or a MIG profile renamed the same way) advertises "<name>.shared".
    return resource.startswith("nvidia.com/") and resource.endswith(".shared")


def _replicas(node: Resource, resource: str) -> int:
    key = "nvidia.com/gpu.replicas" if resource == NVIDIA_GPU else f"{resource}.replicas"
    try:
        return int(node.labels.get(key, "1"))
    except ValueError:
        return 1


def _replicates(node: Resource, resource: str) -> bool:
    """Whether the node advertises time-sliced/MPS replicas under `resource` itself (not
    renamed to .shared)."""
    if resource == NVIDIA_GPU:
        product = node.labels.get("nvidia.com/gpu.product")
        if product is not None:
            return product.endswith("-SHARED")  # GFD appends it only when not renamed
        capacity = as_mapping(node.status.get("capacity"))
        return _replicas(node, resource) > 1 and f"{resource}.shared" not in capacity
    return resource.startswith(NVIDIA_MIG_PREFIX) and _replicas(node, resource) > 1


def _targets(snapshot: Snapshot, container: Container) -> tuple[Resource, ...]:
    # Only the fields placement reads decide: templates alike in them share one pass over
    # the GPU nodes.
    spec = container.template.spec
    affinity = as_mapping(spec.get("affinity")).get("nodeAffinity")
    placement = [spec.get(k) for k in ("nodeName", "nodeSelector", "tolerations")]
    key = json.dumps([*placement, affinity], sort_keys=True, default=str)
    return snapshot.derived(("sharing.targets", key), lambda s: _matching_gpu_nodes(s, spec))


def _matching_gpu_nodes(snapshot: Snapshot, spec: Mapping[str, Any]) -> tuple[Resource, ...]:
    node_name = spec.get("nodeName")
    if node_name:
        return tuple(n for n in gpu_nodes(snapshot) if n.ref.name == node_name)
    return gpu_nodes_admitting(snapshot, spec)


@check(
    id="GPU-SHARE-004",
    title="Containers request exactly 1 unit of a time-sliced or MPS shared GPU resource",
    category=Category.SHARING,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        A time-sliced or MPS replica is an access slot, not a fraction of a GPU: asking for 2
        gives no extra compute or memory, and both slots may come from the same physical GPU.
        With failRequestsGreaterThanOne (always on under MPS) the kubelet rejects the pod with
        UnexpectedAdmissionError "maximum request size for shared resources is 1", and the pod
        has to be deleted by hand.
    """,
    detection="""
        Every container and init container: a request above 1 of a renamed shared resource
        (nvidia.com/<name>.shared) fails; high when a device-plugin config in the input sets
        failRequestsGreaterThanOne or uses MPS for it, medium otherwise. A request above 1 of
        nvidia.com/gpu or a MIG resource fails only when node objects are present and every GPU
        node the template can land on (nodeSelector, required affinity, tolerations, or
        spec.nodeName) replicates that resource unrenamed (product label ending -SHARED,
        <resource>.replicas > 1); low when only some of them do. Requests of 2 whole GPUs on
        unshared nodes pass; fractional quantities are left to GPU-WL-001.
    """,
    severity_evidence="""
        High when the input shows the kubelet rejects the request: failRequestsGreaterThanOne
        or MPS for that resource (a device-plugin config, or a node's MPS sharing label).
        Medium when the pod would hold several slots without that flag, of a renamed .shared
        resource or on nodes that all replicate the resource: slots that add no GPU. Low when
        only some of the nodes it can land on share.
    """,
    remediation="""
        # $kind $namespace/$name, container $container: one slot of a shared GPU
        $section:
          - name: $container
            resources:
              limits:
                $resource: 1   # more slots do not mean more GPU; need more? use whole GPUs
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin#with-cuda-time-slicing",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/1208",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html",
    ),
    remediation_root="pod_spec",
)
def one_unit_of_shared_gpu_per_container(snapshot: Snapshot) -> Iterator[Result]:
    strict = strict_shared_names(snapshot)
    for template in pod_templates(snapshot):
        for container in template.containers():
            for resource in container.gpu_resource_names():
                quantity = container.gpu_quantity(resource)
                if quantity is None or quantity % 1 != 0:
                    continue
                yield from _evaluate(snapshot, container, resource, quantity, strict)


def _evaluate(
    snapshot: Snapshot,
    container: Container,
    resource: str,
    quantity: Decimal,
    strict: frozenset[str],
) -> Iterator[Result]:
    path = f"{container.path}.resources.limits"
    fix = {
        "section": "initContainers" if container.init else "containers",
        "container": container.name,
        "resource": resource,
    }
    count = int(quantity)
    if _is_shared_name(resource):
        if count <= 1:
            yield passed(container, f"requests {count} unit of {resource}", path=path)
            return
        severity = Severity.HIGH if resource in strict else Severity.MEDIUM
        yield failed(
            container,
            f"requests {count} units of the shared resource {resource}; each unit is one "
            "time-slice/MPS slot, not more GPU",
            path=path,
            severity=severity,
            fix=fix,
        )
        return
    if count <= 1 or not snapshot.has("Node"):
        return
    targets = _targets(snapshot, container)
    shared = [n for n in targets if _replicates(n, resource)]
    if not shared:
        yield passed(container, f"requests {count} of {resource} on unshared nodes", path=path)
        return
    names = ", ".join(n.ref.name for n in shared)
    if len(shared) < len(targets):
        yield failed(
            container,
            f"requests {count} of {resource} and may land on shared nodes ({names})",
            path=path,
            severity=Severity.LOW,
            fix=fix,
        )
        return
    mps = any(n.labels.get("nvidia.com/gpu.sharing-strategy") == "mps" for n in shared)
    yield failed(
        container,
        f"requests {count} of {resource}, which every node it can run on ({names}) "
        "advertises as time-sliced/MPS replicas",
        path=path,
        severity=Severity.HIGH if mps or resource in strict else Severity.MEDIUM,
        fix=fix,
    )
