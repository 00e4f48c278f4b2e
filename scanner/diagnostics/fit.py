"""Resource accounting shared by the inventory and the Pending explanations.

It counts what kube-scheduler counts. A pod's request is its effective request (init containers,
sidecars and overhead included). A pod holds node resources when it is bound (`spec.nodeName`
set) and not finished: Succeeded and Failed pods hold nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from gpu_audit.k8s.gpu_resources import is_gpu_resource
from gpu_audit.k8s.objects import (
    as_list,
    as_mapping,
)
from gpu_audit.k8s.pods import (
    container_requests,
    effective_pod_request,
    effective_request_key,
    templates_of,
)
from gpu_audit.k8s.quantities import (
    add_quantities,
    quantities,
)
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
ZERO = Decimal(0)


def pod_phase(pod: Resource) -> str:
    return str(pod.status.get("phase") or "Pending")


def is_finished(pod: Resource) -> bool:
    return pod_phase(pod) in FINISHED_PHASES


def node_name_of(pod: Resource) -> str:
    return str(pod.spec.get("nodeName") or "")


def is_bound(pod: Resource) -> bool:
    """Counted on its node by the scheduler: bound and not Succeeded/Failed."""
    return bool(node_name_of(pod)) and not is_finished(pod)


def pod_request(pod: Resource) -> dict[str, Decimal]:
    templates = templates_of(pod)
    return effective_pod_request(templates[0]) if templates else {}


def gpu_part(request: Mapping[str, Decimal]) -> dict[str, Decimal]:
    return {name: value for name, value in request.items() if is_gpu_resource(name)}


def requests_gpu(pod: Resource) -> bool:
    return bool(gpu_part(pod_request(pod)))


def _terminated_containers(pod: Resource) -> set[str]:
    names: set[str] = set()
    for section in ("initContainerStatuses", "containerStatuses"):
        for status in map(as_mapping, as_list(pod.status.get(section))):
            if "terminated" in as_mapping(status.get("state")):
                names.add(str(status.get("name", "")))
    return names


def finished_gpu_holder(pod: Resource) -> bool:
    """A bound, unfinished pod whose GPU containers have all exited: it keeps its GPUs
    allocated (the pod is not Succeeded/Failed) while nothing uses them, e.g. a sidecar or a
    second container keeps it Running."""
    # The statuses first: most pods have no exited container, and reading them is cheaper
    # than parsing every container's requests.
    terminated = _terminated_containers(pod)
    templates = templates_of(pod)
    if not terminated or not templates or not is_bound(pod):
        return False
    holders = [
        c.name
        for c in templates[0].containers()
        if not (c.init and not c.is_sidecar) and gpu_part(container_requests(c))
    ]
    return bool(holders) and set(holders) <= terminated


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's allocatable and what the pods bound to it request."""

    node: Resource
    capacity: Mapping[str, Decimal]
    allocatable: Mapping[str, Decimal]
    requested: Mapping[str, Decimal]
    pods: tuple[Resource, ...] = field(default=())

    def free(self, resource: str) -> Decimal:
        return self.allocatable.get(resource, ZERO) - self.requested.get(resource, ZERO)


@dataclass(frozen=True, slots=True)
class ClusterUsage:
    """Every node's usage, and the effective request of every pod, computed once."""

    nodes: Mapping[str, NodeUsage]
    requests: Mapping[str, Mapping[str, Decimal]]  # "namespace/name" -> effective request

    def request_of(self, pod: Resource) -> Mapping[str, Decimal]:
        return self.requests.get(f"{pod.ref.namespace}/{pod.ref.name}", {})


def cluster_usage(snapshot: Snapshot) -> ClusterUsage:
    """One pass over the pods, grouping the bound ones by node name."""
    requests: dict[str, Mapping[str, Decimal]] = {}
    bound: dict[str, list[Resource]] = defaultdict(list)
    # The replicas of a workload request alike: each distinct set of containers' resources is
    # summed once.
    alike: dict[str, Mapping[str, Decimal]] = {}
    for pod in snapshot.of("Pod"):
        key = effective_request_key(pod.spec)
        request = alike.get(key)
        if request is None:
            request = alike[key] = pod_request(pod)
        requests[f"{pod.ref.namespace}/{pod.ref.name}"] = request
        if is_bound(pod):
            bound[node_name_of(pod)].append(pod)
    nodes: dict[str, NodeUsage] = {}
    for node in snapshot.of("Node"):
        requested: dict[str, Decimal] = {}
        pods = tuple(bound.get(node.ref.name, ()))
        for pod in pods:
            add_quantities(requested, requests[f"{pod.ref.namespace}/{pod.ref.name}"])
        nodes[node.ref.name] = NodeUsage(
            node,
            quantities(node.status.get("capacity")),
            quantities(node.status.get("allocatable")),
            requested,
            pods,
        )
    return ClusterUsage(nodes, requests)


def as_number(value: Decimal) -> int | float:
    """JSON numbers: whole quantities as integers (GPU counts always are)."""
    return int(value) if value == value.to_integral_value() else float(value)
