from collections import defaultdict
from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    ObjRef,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_pod_templates,
    owner_kinds,
    passed,
    pod_is_active,
    pod_requests_gpu,
    top_owner,
)

# Namespaces of the control plane and the GPU stack: their pods are on every node and are not
# another tenant's workload.
_SYSTEM_NAMESPACES = frozenset(
    {
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "gpu-operator",
        "gpu-operator-resources",
        "nvidia-gpu-operator",
        "nvidia-device-plugin",
        "nvidia-dra-driver-gpu",
        "network-operator",
        "nvidia-network-operator",
        "node-feature-discovery",
    }
)


@check(
    id="GPU-WL-007",
    title="GPU containers set a memory request and limit",
    category=Category.WORKLOADS,
    severity=Severity.LOW,
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
        (Burstable) passes. Pods in the input show where the workload runs and what happened
        to it.
    """,
    severity_evidence="""
        Medium when the input shows that an unbounded container here can hurt, or be hurt
        by, another workload: one of its pods was OOM-killed or evicted for memory, a node it
        runs on reports MemoryPressure, or a node it runs on also runs a GPU pod of another
        workload or a pod of another tenant namespace (DaemonSets and the control plane and
        GPU stack namespaces do not count). Otherwise low: a GPU pod alone on its node, or a
        template whose placement the input does not show, is hygiene.
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
        "https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/",
    ),
    remediation_root="pod_spec",
)
def gpu_containers_set_memory_request_and_limit(snapshot: Snapshot) -> Iterator[Result]:
    placement = _Placement(snapshot)
    for template in gpu_pod_templates(snapshot):
        defaults = _limit_range_defaults(snapshot, template.owner.ref.namespace)
        for container in template.gpu_containers():
            yield _judge(container, defaults, placement)


class _Placement:
    """The Pods of the input by node and by top-most owner: where workloads run."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes = {n.ref.name: n for n in snapshot.of("Node")}
        self.by_node: dict[str, list[Resource]] = defaultdict(list)
        self.by_owner: dict[ObjRef, list[Resource]] = defaultdict(list)
        self.owner_of: dict[ObjRef, Resource] = {}
        for pod in snapshot.of("Pod"):
            owner = top_owner(snapshot, pod)
            self.owner_of[pod.ref] = owner
            self.by_owner[owner.ref].append(pod)
            node = str(pod.spec.get("nodeName") or "")
            if node and pod_is_active(pod):
                self.by_node[node].append(pod)

    def evidence(self, container: Container) -> list[str]:
        owner = container.template.owner
        found: list[str] = []
        nodes: set[str] = set()
        for pod in self.by_owner.get(owner.ref, []):
            found.extend(_terminations(pod, container.name))
            if pod_is_active(pod) and pod.spec.get("nodeName"):
                nodes.add(str(pod.spec["nodeName"]))
        for name in sorted(nodes):
            node = self.nodes.get(name)
            if node is not None and _memory_pressure(node):
                found.append(f"node {name} reports MemoryPressure")
            neighbours = sorted(
                f"{p.ref.namespace}/{p.ref.name}"
                for p in self.by_node[name]
                if self._is_neighbour(p, owner)
            )
            if neighbours:
                shown = ", ".join(neighbours[:3]) + (" ..." if len(neighbours) > 3 else "")
                found.append(f"node {name} also runs {shown}")
        return found

    def _is_neighbour(self, pod: Resource, owner: Resource) -> bool:
        """A pod of another workload that shares the node: a GPU pod, or another tenant's."""
        mine = self.owner_of.get(pod.ref)
        if mine is None or mine.ref == owner.ref:
            return False
        namespace = pod.ref.namespace
        if namespace in _SYSTEM_NAMESPACES or "DaemonSet" in owner_kinds(pod):
            return False
        if "kubernetes.io/config.mirror" in as_mapping(pod.metadata.get("annotations")):
            return False  # a static pod of the node itself
        return pod_requests_gpu(pod) or namespace != owner.ref.namespace


def _judge(container: Container, defaults: dict[str, bool], placement: _Placement) -> Result:
    has_limit = "memory" in container.limits or defaults["default"]
    has_request = "memory" in container.requests or has_limit or defaults["defaultRequest"]
    missing = [text for text, ok in (("limit", has_limit), ("request", has_request)) if not ok]
    if not missing:
        return passed(container, "has a memory request and limit")
    consequence = (
        "it can use all of the node's RAM and trigger the OOM killer for co-located pods"
        if not has_limit
        else "the scheduler does not reserve its memory"
    )
    evidence = placement.evidence(container)
    severity = Severity.MEDIUM if evidence else Severity.LOW
    shown = (
        "; ".join(evidence)
        if evidence
        else "the input shows no other workload on its nodes and no memory pressure"
    )
    return failed(
        container,
        f"has no memory {' or '.join(missing)}: {consequence}; {shown}",
        path=f"{container.path}.resources",
        severity=severity,
        fix={
            "section": "initContainers" if container.init else "containers",
            "container": container.name,
        },
    )


def _terminations(pod: Resource, container: str) -> list[str]:
    found = []
    message = str(pod.status.get("message") or "")
    if pod.status.get("reason") == "Evicted" and "memory" in message.lower():
        found.append(f"pod {pod.ref.name} was evicted: {message[:80]}")
    for status in map(as_mapping, as_list(pod.status.get("containerStatuses"))):
        if status.get("name") != container:
            continue
        for key in ("state", "lastState"):
            terminated = as_mapping(as_mapping(status.get(key)).get("terminated"))
            if terminated.get("reason") == "OOMKilled":
                found.append(f"pod {pod.ref.name} container {container} was OOM-killed")
                break
    return found


def _memory_pressure(node: Resource) -> bool:
    return any(
        c.get("type") == "MemoryPressure" and c.get("status") == "True"
        for c in map(as_mapping, as_list(node.status.get("conditions")))
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
