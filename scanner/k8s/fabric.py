"""The high-speed fabric of multi-node GPU jobs: EFA, RDMA (InfiniBand / RoCE) and GKE's
multi-network NICs, as nodes advertise them and pods request them; which GPU jobs span nodes
and which nodes they land on. Used by the FAB checks and `inventory`, through `gpu_audit.api`.

Facts, each from its source:

- AWS EFA: the EFA device plugin advertises `vpc.amazonaws.com/efa`, an integer count of the
  node's EFA interfaces, each dedicated to one pod; a pod gets EFA only by requesting it
  (https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html). A p5.48xlarge
  has 32 EFA interfaces for its 8 GPUs; AWS's NCCL test requests 32 per 8-GPU worker
  (https://github.com/aws-ia/terraform-aws-eks-blueprints/tree/main/patterns/nvidia-gpu-efa).
  Instances with the EFA driver pre-allocate 2 MiB huge pages that pods request as
  `hugepages-2Mi` (https://github.com/awsdocs/amazon-eks-user-guide, doc_source/node-efa.md);
  libfabric's EFA provider uses them for its bounce buffers "for the best performance"
  (https://github.com/ofiwg/libfabric/blob/main/prov/efa/docs/overview.md).
- RDMA: the NVIDIA Network Operator's RDMA shared device plugin advertises `rdma/<resourceName>`
  (`rdma/rdma_shared_device_a`, shared by up to rdmaHcaMax pods: one request gives the pod the
  HCAs) (https://docs.nvidia.com/networking/display/kubernetes2410/customizations/cr-full-example.html);
  AKS and other InfiniBand platforms name theirs `rdma/ib`, `rdma/shared_ib`.
- GKE: each additional network of a multi-network node pool is a node resource
  `networking.gke.io.networks/<network>` (and `<network>.IP`); GPUDirect-RDMA and -TCPX(O) pods
  request one per NIC and name the networks in the `networking.gke.io/interfaces` annotation
  (https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-rdma).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.k8s.gpu_hosts import gpu_quantities
from gpu_audit.k8s.gpu_resources import is_gpu_resource
from gpu_audit.k8s.kubeflow_trainer import TRAIN_JOB, referenced_runtime
from gpu_audit.k8s.node_shapes import gpu_nodes_admitting
from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.pods import (
    JOBSET,
    LEADER_WORKER_SET,
    PodTemplate,
    effective_pod_request,
    pod_requests_gpu,
    templates_of,
    top_owner,
)
from gpu_audit.k8s.quantities import QuantityError, parse_quantity
from gpu_audit.k8s.ray import RAY_TYPES
from gpu_audit.k8s.scheduling import schedules_on_key
from gpu_audit.k8s.training_jobs import (
    KUBEFLOW_REPLICA_KEYS,
    VOLCANO_JOB,
    count_field,
    pod_is_active,
    replica_groups,
)
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

EFA = "vpc.amazonaws.com/efa"
RDMA_PREFIX = "rdma/"
GKE_NETWORK_PREFIX = "networking.gke.io.networks/"
GKE_INTERFACES_ANNOTATION = "networking.gke.io/interfaces"
HUGEPAGES_2MI = "hugepages-2Mi"

EFA_FAMILY = "EFA"
RDMA_FAMILY = "RDMA"
GKE_FAMILY = "GKE multi-network"

# Kinds whose pods together make one job or one multi-node server.
FABRIC_JOB_TYPES = (
    *KUBEFLOW_REPLICA_KEYS,
    VOLCANO_JOB,
    "Job",
    "StatefulSet",
    JOBSET,
    LEADER_WORKER_SET,
    *RAY_TYPES,
    TRAIN_JOB,
)
# Kinds whose replicas are NCCL ranks by construction (the operator starts distributed
# training); the other kinds need NCCL evidence in the pod spec.
_DISTRIBUTED_KINDS = frozenset({*KUBEFLOW_REPLICA_KEYS, TRAIN_JOB})
# What in a pod spec shows NCCL communication between the pods: NCCL/libfabric variables,
# distributed launchers, MPI, multi-node model servers, nccl-tests binaries.
_NCCL_WORDS = re.compile(
    r"(nccl|torchrun|torch\.distributed|deepspeed|accelerate\s+launch|horovod|mpirun|megatron|"
    r"nemo|--nnodes|master_addr|\bvllm\b|sglang|_perf\b|FI_PROVIDER|FI_EFA)",
    re.IGNORECASE,
)


def fabric_family(resource: str) -> str:
    """The fabric a resource name belongs to ("" for none). GKE's `<network>.IP` resources
    count the network's IP addresses, not its NICs."""
    if resource == EFA:
        return EFA_FAMILY
    if resource.startswith(RDMA_PREFIX):
        return RDMA_FAMILY
    if resource.startswith(GKE_NETWORK_PREFIX) and not resource.endswith(".IP"):
        return GKE_FAMILY
    return ""


def is_fabric_resource(resource: str) -> bool:
    return bool(fabric_family(resource))


def node_fabric(node: Resource) -> dict[str, Decimal]:
    """Fabric resources the node can allocate (capacity when the dump has no allocatable)."""
    for section in ("allocatable", "capacity"):
        found: dict[str, Decimal] = {}
        for name, value in as_mapping(node.status.get(section)).items():
            if not is_fabric_resource(str(name)):
                continue
            try:
                quantity = parse_quantity(value)
            except QuantityError:
                continue
            if quantity > 0:
                found[str(name)] = quantity
        if found:
            return found
    return {}


def node_gpu_count(node: Resource) -> int:
    return int(sum(gpu_quantities(node, "allocatable").values(), Decimal(0)))


def pod_fabric(template: PodTemplate) -> dict[str, Decimal]:
    """Fabric resources one pod of the template requests."""
    return {n: v for n, v in effective_pod_request(template).items() if is_fabric_resource(n)}


def template_gpus(template: PodTemplate) -> int:
    request = effective_pod_request(template)
    return int(sum((v for n, v in request.items() if is_gpu_resource(n)), Decimal(0)))


def gke_interfaces(template: PodTemplate) -> str:
    """The GKE multi-network annotation of the pod template ("" when absent)."""
    return template.annotations.get(GKE_INTERFACES_ANNOTATION, "")


# --------------------------------------------------------------------------- multi-node jobs


def template_pods(template: PodTemplate, snapshot: Snapshot) -> int:
    """How many pods the owner runs from this template (its replicas), 1 when unknown."""
    owner = template.owner
    kind = owner.ref.kind
    spec = owner.spec
    if kind in (*KUBEFLOW_REPLICA_KEYS, VOLCANO_JOB, "Job"):
        for group in replica_groups(owner):
            if group.template.path == template.path:
                return group.replicas
        return 1
    if kind == "StatefulSet":
        return count_field(spec.get("replicas"), 1)
    if kind == JOBSET:
        for replicated in map(as_mapping, as_list(spec.get("replicatedJobs"))):
            if str(replicated.get("name", "")) == template.replica_type:
                job = as_mapping(as_mapping(replicated.get("template")).get("spec"))
                return count_field(replicated.get("replicas"), 1) * count_field(
                    job.get("parallelism"), 1
                )
        return 1
    if kind == LEADER_WORKER_SET:
        lws_group = as_mapping(spec.get("leaderWorkerTemplate"))
        size = count_field(lws_group.get("size"), 1)
        replicas = count_field(spec.get("replicas"), 1)
        leader_apart = bool(as_mapping(lws_group.get("leaderTemplate")))
        per_group = 1 if template.replica_type == "leader" else size - (1 if leader_apart else 0)
        return replicas * per_group
    if kind in RAY_TYPES:
        return _ray_group_pods(owner, template)
    if kind == TRAIN_JOB:
        return _trainjob_nodes(owner, snapshot) if template.replica_type == "node" else 1
    return 1


_RAY_WORKER_PATH = re.compile(r"workerGroupSpecs\[(\d+)\]")


def _ray_group_pods(owner: Resource, template: PodTemplate) -> int:
    match = _RAY_WORKER_PATH.search(template.path)
    if match is None:
        return 1  # the head, or a RayJob's submitter
    cluster_key = template.path.split(".workerGroupSpecs", 1)[0].split(".", 1)
    cluster = as_mapping(owner.spec.get(cluster_key[1])) if len(cluster_key) > 1 else owner.spec
    groups = as_list(cluster.get("workerGroupSpecs"))
    index = int(match.group(1))
    group = as_mapping(groups[index]) if index < len(groups) else {}
    return count_field(group.get("replicas"), 1) * count_field(group.get("numOfHosts"), 1)


def _trainjob_nodes(trainjob: Resource, snapshot: Snapshot) -> int:
    trainer = as_mapping(trainjob.spec.get("trainer"))
    runtime = referenced_runtime(snapshot, trainjob)
    policy = as_mapping(runtime.spec.get("mlPolicy")) if runtime is not None else {}
    return count_field(trainer.get("numNodes"), count_field(policy.get("numNodes"), 1))


@dataclass(frozen=True, slots=True)
class MultiNodeTemplate:
    """A GPU pod template of a job whose GPU pods span nodes and talk NCCL."""

    template: PodTemplate
    pods: int  # pods of this template
    job_gpu_pods: int  # GPU pods of the whole job
    gpus: int  # GPUs one pod of the template requests


def multi_node_templates(snapshot: Snapshot) -> tuple[MultiNodeTemplate, ...]:
    return snapshot.derived("fabric.multi_node_templates", _multi_node_templates)


def _multi_node_templates(snapshot: Snapshot) -> tuple[MultiNodeTemplate, ...]:
    out: list[MultiNodeTemplate] = []
    for owner in snapshot.of(*FABRIC_JOB_TYPES):
        if top_owner(snapshot, owner).ref != owner.ref:
            continue  # a JobSet's Jobs, a LeaderWorkerSet's StatefulSets: judged as the owner
        templates = [t for t in templates_of(owner, snapshot) if t.requests_gpu]
        counted = [(t, template_pods(t, snapshot)) for t in templates]
        gpu_pods = sum(n for _, n in counted)
        if gpu_pods < 2:
            continue
        if owner.ref.kind not in _DISTRIBUTED_KINDS and not any(_talks_nccl(t) for t in templates):
            continue
        out.extend(MultiNodeTemplate(t, n, gpu_pods, template_gpus(t)) for t, n in counted if n > 0)
    return tuple(out)


def _talks_nccl(template: PodTemplate) -> bool:
    for container in template.containers():
        words = [str(w) for w in as_list(container.raw.get("command"))]
        words += [str(w) for w in as_list(container.raw.get("args"))]
        words += [*container.env(), container.image]
        if _NCCL_WORDS.search(" ".join(words)):
            return True
    return False


# --------------------------------------------------------------------------- where they land


@dataclass(frozen=True, slots=True)
class Landing:
    """The GPU nodes a template's pods run on (`scheduled`) or may be placed on."""

    nodes: tuple[Resource, ...]
    scheduled: bool

    @property
    def fabric_nodes(self) -> tuple[Resource, ...]:
        return tuple(n for n in self.nodes if node_fabric(n))

    @property
    def all_fabric(self) -> bool:
        return bool(self.nodes) and len(self.fabric_nodes) == len(self.nodes)


def landing(snapshot: Snapshot, item: MultiNodeTemplate) -> Landing:
    """The nodes the job's GPU pods in the input are bound to, else the GPU nodes whose
    labels, affinity and taints admit the template and that have GPUs enough for one pod."""
    nodes_by_name = snapshot.derived(
        "fabric.nodes_by_name", lambda s: {n.ref.name: n for n in s.of("Node")}
    )
    bound = sorted(
        {
            str(p.spec.get("nodeName"))
            for p in _pods_by_owner(snapshot).get(item.template.owner.ref.sort_key, ())
            if p.spec.get("nodeName") and pod_is_active(p) and pod_requests_gpu(p)
        }
    )
    if bound:
        return Landing(tuple(nodes_by_name[n] for n in bound if n in nodes_by_name), True)
    spec, gpus = item.template.spec, max(item.gpus, 1)
    candidates = snapshot.derived(  # templates alike in placement share one pass
        ("fabric.candidates", schedules_on_key(spec), gpus),
        lambda s: _candidates(s, spec, gpus),
    )
    return Landing(candidates, False)


def _candidates(snapshot: Snapshot, spec: Mapping[str, Any], gpus: int) -> tuple[Resource, ...]:
    return tuple(n for n in gpu_nodes_admitting(snapshot, spec) if node_gpu_count(n) >= gpus)


def _pods_by_owner(snapshot: Snapshot) -> Mapping[tuple[str, str, str], tuple[Resource, ...]]:
    def build(s: Snapshot) -> Mapping[tuple[str, str, str], tuple[Resource, ...]]:
        out: dict[tuple[str, str, str], list[Resource]] = defaultdict(list)
        for pod in s.of("Pod"):
            top = top_owner(s, pod)
            if top.ref != pod.ref:
                out[top.ref.sort_key].append(pod)
        return {k: tuple(v) for k, v in out.items()}

    return snapshot.derived("fabric.pods_by_owner", build)


@dataclass(frozen=True, slots=True)
class NodeShape:
    """The fabric of the nodes a template lands on: per resource, the fewest any node has,
    and the GPUs of that node shape."""

    resources: Mapping[str, Decimal]
    gpus: int

    @property
    def families(self) -> frozenset[str]:
        return frozenset(fabric_family(r) for r in self.resources)


def node_shape(nodes: tuple[Resource, ...]) -> NodeShape:
    """The fabric every one of `nodes` offers (resources all of them advertise, at the
    smallest count) and the fewest GPUs among them."""
    shared: dict[str, Decimal] | None = None
    for node in nodes:
        fabric = node_fabric(node)
        if shared is None:
            shared = dict(fabric)
        else:
            shared = {k: min(v, fabric[k]) for k, v in shared.items() if k in fabric}
    gpus = min((node_gpu_count(n) for n in nodes), default=0)
    return NodeShape(shared or {}, gpus)


def per_gpu_share(shape: NodeShape, resource: str, gpus: int) -> int:
    """The devices of `resource` a pod with `gpus` GPUs should get on this node shape: the
    node's devices in proportion to its GPUs (32 EFA for the 8 GPUs of a p5.48xlarge)."""
    total = shape.resources.get(resource, Decimal(0))
    if shape.gpus <= 0 or gpus <= 0:
        return 0
    return int(total * Decimal(min(gpus, shape.gpus)) / Decimal(shape.gpus))


def env_values(template: PodTemplate) -> dict[str, tuple[str, str]]:
    """Literal environment values of the template's containers: name -> (value, container).
    The first container that sets a name wins; valueFrom entries are not literal."""
    out: dict[str, tuple[str, str]] = {}
    for container in template.containers():
        for name, entry in container.env().items():
            value: Any = entry.get("value")
            if isinstance(value, str) and name not in out:
                out[name] = (value, container.name)
    return out
