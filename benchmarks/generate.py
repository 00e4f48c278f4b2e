"""A synthetic GPU cluster as `kubectl get -A -o json` prints it: one `kind: List` JSON file.

Deterministic for a seed and a scale. The cluster has one node per 30 pods (5,000 nodes at
150,000 pods, Kubernetes' published limits), in four pools: CPU nodes, and A100, H100 and
time-sliced L4 nodes labelled as NVIDIA GPU Feature Discovery labels them. Pods are bound to
nodes and carry status; they are owned by ReplicaSets of Deployments, by Jobs, by PyTorchJobs
and by the DaemonSets every node runs. Each team namespace also has Services, HPAs,
NetworkPolicies, ServiceMonitors and a ResourceQuota.

A known share (`--misconfigured`) of the GPU workloads carries one of a few deliberate faults
(fractional GPU request, privileged container, missing GPU toleration, GPU in requests only);
the counts are written to `<output>.meta.json` so that a run can be checked against them.
`--pods` is a budget: the API server refuses pods with a fractional or request-only GPU, so
those workloads have none, and the dump holds slightly fewer pods.

The shape is a parameter, so that no code is tuned to one: `--pending-pods` is the share of
all pods that are Pending GPU pods (they grow with the cluster, as in a busy one), each for one
of three reasons in turn (no GPU toleration, a GPU product no node has, more GPUs than a node
holds); `--node-classes` gives the nodes that many distinct shapes (a class label the Pending
pods select on, and allocatable memory per class); `--namespaces` sets the namespace count
(default: one per 150 pods); `--format yaml` writes the List as `kubectl get -o yaml` does.

Items are written one per line with compact separators: kubectl indents, but the objects are
the same, and the file stays small enough to generate quickly.
"""

from __future__ import annotations

import argparse
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml


class _YamlDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter when PyYAML was built with it (as kubectl, it sorts keys), without
    anchors and aliases: kubectl writes a mapping shared by several fields (a Deployment's
    labels, selector and template labels) out at each, and the loader counts aliased values
    against its alias limit."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


PODS_PER_NODE = 30
PODS_PER_NAMESPACE = 150
CREATED = "2025-11-20T08:00:00Z"
STARTED = "2025-11-20T08:01:12Z"
GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
KUBELET = "v1.33.2"
FAULTS = ("fractional-gpu", "privileged", "gpu-requests-only", "unpinned-image")
PENDING_FAULT = "no-gpu-toleration"  # the pods wait forever for a node: see --pending
# Why the --pending-pods workloads wait, in turn: no node tolerated, selected, or big enough.
PENDING_FAULTS = (PENDING_FAULT, "no-such-gpu", "too-many-gpus")
MISSING_PRODUCT = "NVIDIA-B200"  # selected by the no-such-gpu pods: no pool has it
NODE_CLASS = "example.com/node-class"
# The API server refuses such pods (extended resources must be whole and in limits), so their
# controllers exist but have no pods.
REJECTED = frozenset({"fractional-gpu", "gpu-requests-only"})
DEFAULT_TOLERATIONS = [
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
]
GPU_TOLERATION = {"effect": "NoSchedule", "key": GPU, "operator": "Exists"}


@dataclass(frozen=True)
class Pool:
    name: str
    share: float  # of all nodes
    instance: str
    cpu: str
    memory: str
    max_pods: str
    gpu_resource: str | None = None
    gpus: int = 0
    gfd: dict[str, str] = field(default_factory=dict)


def _gfd(product: str, count: int, memory: str, family: str, **extra: str) -> dict[str, str]:
    """The labels GPU Feature Discovery and the GPU Operator put on a GPU node."""
    labels = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": memory,
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/cuda.driver-version.major": "570",
        "nvidia.com/cuda.driver-version.minor": "124",
        "nvidia.com/cuda.driver-version.revision": "06",
        "nvidia.com/cuda.driver-version.full": "570.124.06",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "8",
        "nvidia.com/cuda.runtime-version.full": "12.8",
        "nvidia.com/gfd.timestamp": "1764600000",
    }
    for component in (
        "driver",
        "container-toolkit",
        "device-plugin",
        "gpu-feature-discovery",
        "dcgm",
        "dcgm-exporter",
        "operator-validator",
    ):
        labels[f"nvidia.com/gpu.deploy.{component}"] = "true"
    labels.update(extra)
    return labels


POOLS = (
    Pool("cpu", 0.2, "m6i.4xlarge", "16", "64720228Ki", "234"),
    Pool(
        "a100",
        0.35,
        "p4d.24xlarge",
        "96",
        "1176478616Ki",
        "250",
        GPU,
        8,
        _gfd("NVIDIA-A100-SXM4-40GB", 8, "40960", "ampere", **{"nvidia.com/mig.capable": "true"}),
    ),
    Pool(
        "h100",
        0.35,
        "p5.48xlarge",
        "192",
        "2097152000Ki",
        "250",
        GPU,
        8,
        _gfd("NVIDIA-H100-80GB-HBM3", 8, "81559", "hopper"),
    ),
    Pool(
        "l4",
        0.1,
        "g6.xlarge",
        "4",
        "16069100Ki",
        "58",
        SHARED_GPU,
        4,
        _gfd(
            "NVIDIA-L4-SHARED",
            1,
            "23034",
            "ada-lovelace",
            **{
                "nvidia.com/gpu.replicas": "4",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
                "nvidia.com/device-plugin.config": "l4-time-sliced",
            },
        ),
    ),
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


@dataclass
class NodeState:
    name: str
    pool: Pool
    ip: str
    free_gpus: int
    pods: int = 0


@dataclass
class Cluster:
    """What the generator has placed so far."""

    rng: random.Random
    nodes: list[NodeState]
    by_pool: dict[str, list[NodeState]]
    cursor: dict[tuple[str, bool], int] = field(default_factory=dict)
    version: int = 1000
    pod_ip: int = 0
    faults: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((*FAULTS, *PENDING_FAULTS), 0)
    )
    gpu_workloads: int = 0
    pending_pods: int = 0
    pods: int = 0
    node_classes: int = 0
    pending_turn: int = 0

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def resource_version(self) -> str:
        self.version += 1
        return str(self.version)

    def suffix(self, length: int = 5) -> str:
        return "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))

    def next_pod_ip(self) -> str:
        self.pod_ip += 1
        n = self.pod_ip
        return f"10.{64 + (n >> 16) % 64}.{(n >> 8) & 255}.{n & 255}"

    def place(self, pool: str | None, gpus: int) -> NodeState | None:
        """A node of the pool with `gpus` free, or None: the pod stays Pending.
        Whole-node requests fill the pool from its other end, as a bin-packing scheduler
        profile would keep whole nodes free for them."""
        candidates = self.by_pool[pool] if pool else self.by_pool["cpu"]
        whole = bool(gpus) and gpus >= candidates[0].pool.gpus
        if whole:
            candidates = candidates[::-1]
        cursor = (pool or "cpu", whole)
        start = self.cursor.get(cursor, 0)
        for step in range(len(candidates)):
            node = candidates[(start + step) % len(candidates)]
            if node.free_gpus >= gpus and node.pods < int(node.pool.max_pods):
                node.free_gpus -= gpus
                node.pods += 1
                # GPU pods pack a node before the next (whole nodes stay free); others spread.
                self.cursor[cursor] = (start + step + (0 if gpus else 1)) % len(candidates)
                return node
        return None


def _meta(
    cluster: Cluster,
    name: str,
    namespace: str | None,
    labels: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"creationTimestamp": CREATED}
    if "generateName" in extra:
        meta["generateName"] = extra.pop("generateName")
    if labels:
        meta["labels"] = labels
    meta["name"] = name
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update(extra)
    meta["resourceVersion"] = cluster.resource_version()
    meta["uid"] = cluster.uid()
    return meta


def _owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "blockOwnerDeletion": True,
        "controller": True,
        "kind": kind,
        "name": name,
        "uid": uid,
    }


def _node(cluster: Cluster, state: NodeState, index: int) -> dict[str, Any]:
    pool, zone = state.pool, ZONES[index % len(ZONES)]
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": pool.instance,
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/nodegroup": pool.name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": state.name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": pool.instance,
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": zone,
        **pool.gfd,
    }
    node_class = index % cluster.node_classes if cluster.node_classes else 0
    if cluster.node_classes:
        labels[NODE_CLASS] = f"class-{node_class:03d}"
    capacity = {
        "cpu": pool.cpu,
        "ephemeral-storage": "104845292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": pool.memory,
        "pods": pool.max_pods,
    }
    if pool.gpu_resource:
        capacity[pool.gpu_resource] = str(pool.gpus)
    memory = int(pool.memory.removesuffix("Ki")) - 1024 * node_class  # reserved per class
    allocatable = {**capacity, "cpu": f"{int(pool.cpu) * 1000 - 90}m", "memory": f"{memory}Ki"}
    spec: dict[str, Any] = {"providerID": f"aws:///{zone}/i-{index:017x}"}
    if pool.gpu_resource == GPU:
        spec["taints"] = [{"effect": "NoSchedule", "key": GPU, "value": "true"}]
    images = [
        {
            "names": [f"registry.example.com/{name}@sha256:{cluster.rng.getrandbits(256):064x}"],
            "sizeBytes": cluster.rng.randrange(5_000_000, 900_000_000),
        }
        for name in ("kube-proxy", "aws-node", "pause", "coredns", "app", "dcgm-exporter")
    ]
    transitions = {"lastHeartbeatTime": "2025-12-01T10:00:00Z", "lastTransitionTime": CREATED}
    conditions = [
        {**transitions, "message": m, "reason": r, "status": "False", "type": t}
        for t, r, m in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        {
            **transitions,
            "message": "kubelet is posting ready status",
            "reason": "KubeletReady",
            "status": "True",
            "type": "Ready",
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(
            cluster,
            state.name,
            None,
            labels,
            annotations={
                "alpha.kubernetes.io/provided-node-ip": state.ip,
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        ),
        "spec": spec,
        "status": {
            "addresses": [
                {"address": state.ip, "type": "InternalIP"},
                {"address": f"{state.name}.ec2.internal", "type": "Hostname"},
            ],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": cluster.uid(),
                "containerRuntimeVersion": "containerd://1.7.25",
                "kernelVersion": "6.1.119-129.201.amzn2023.x86_64",
                "kubeProxyVersion": KUBELET,
                "kubeletVersion": KUBELET,
                "machineID": f"{cluster.rng.getrandbits(128):032x}",
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023.6.20250107",
                "systemUUID": cluster.uid(),
            },
        },
    }


@dataclass(frozen=True)
class Workload:
    """One controller's pods: their template and where they may go."""

    namespace: str
    app: str
    image: str
    pool: str | None  # GPU pool, or None for CPU nodes
    gpus: int
    fault: str | None = None
    port: int = 8080
    node_classes: tuple[str, ...] = ()


def _container(w: Workload, name: str) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    if w.gpus:
        resource = SHARED_GPU if w.pool == "l4" else GPU
        amount: Any = w.gpus
        if w.fault == "fractional-gpu":
            amount = "0.5"
        if w.fault == "gpu-requests-only":
            resources["requests"][resource] = str(amount)
        else:
            resources["limits"] = {resource: str(amount), "memory": "1Gi"}
    container: dict[str, Any] = {
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "image": w.image.rsplit(":", 1)[0] + ":latest" if w.fault == "unpinned-image" else w.image,
        "imagePullPolicy": "IfNotPresent",
        "name": name,
        "ports": [{"containerPort": w.port, "name": "http", "protocol": "TCP"}],
        "resources": resources,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if w.fault == "privileged":
        container["securityContext"] = {"privileged": True}
    else:
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        }
    return container


def _pod_spec(w: Workload, container: str, restart: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [_container(w, container)],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "restartPolicy": restart,
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
    }
    if w.pool and w.pool != "l4":
        product = next(p for p in POOLS if p.name == w.pool).gfd["nvidia.com/gpu.product"]
        if w.fault == "no-such-gpu":
            product = MISSING_PRODUCT
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
        if w.fault != PENDING_FAULT:
            spec["tolerations"] = [GPU_TOLERATION]
    if w.node_classes:  # the pod's classes: a selector on the label of the node shapes
        expression = {"key": NODE_CLASS, "operator": "In", "values": list(w.node_classes)}
        required = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    return spec


def _pod(
    cluster: Cluster,
    w: Workload,
    template: dict[str, Any],
    name: str,
    labels: dict[str, str],
    owner: dict[str, Any],
    generate_name: str,
) -> dict[str, Any]:
    spec = json.loads(json.dumps(template))  # each pod owns its spec, as when read from the API
    token_volume = f"kube-api-access-{cluster.suffix()}"
    spec["containers"][0]["volumeMounts"] = [
        {
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "name": token_volume,
            "readOnly": True,
        }
    ]
    spec["preemptionPolicy"] = "PreemptLowerPriority"
    # What the Priority admission plugin sets from the class (system-node-critical: 2000001000).
    spec["priority"] = 2000001000 if spec.get("priorityClassName") else 0
    spec["tolerations"] = [*spec.get("tolerations", []), *DEFAULT_TOLERATIONS]
    spec["volumes"] = [
        {
            "name": token_volume,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            "name": "kube-root-ca.crt",
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                    "path": "namespace",
                                }
                            ]
                        }
                    },
                ],
            },
        }
    ]
    cluster.pods += 1
    # A missing toleration never passes the GPU taint, nor a missing product the selector.
    node = cluster.place(w.pool, w.gpus) if w.fault not in PENDING_FAULTS else None
    if node is not None:
        spec["nodeName"] = node.name
        status = _running_status(cluster, node, spec["containers"][0])
    else:
        cluster.pending_pods += 1
        status = _pending_status(len(cluster.nodes), w)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(
            cluster,
            name,
            w.namespace,
            labels,
            generateName=generate_name,
            ownerReferences=[owner],
        ),
        "spec": spec,
        "status": status,
    }


def _running_status(cluster: Cluster, node: NodeState, container: dict[str, Any]) -> dict[str, Any]:
    ip = cluster.next_pod_ip()
    conditions = [
        {"lastProbeTime": None, "lastTransitionTime": STARTED, "status": "True", "type": t}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]
    conditions.append(
        {
            "lastProbeTime": None,
            "lastTransitionTime": CREATED,
            "status": "True",
            "type": "PodScheduled",
        }
    )
    return {
        "conditions": conditions,
        "containerStatuses": [
            {
                "containerID": f"containerd://{cluster.rng.getrandbits(256):064x}",
                "image": container["image"],
                "imageID": f"{container['image'].split(':')[0]}@sha256:{cluster.rng.getrandbits(256):064x}",
                "lastState": {},
                "name": container["name"],
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": STARTED}},
                "volumeMounts": [
                    {
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "name": container["volumeMounts"][0]["name"],
                        "readOnly": True,
                        "recursiveReadOnly": "Disabled",
                    }
                ],
            }
        ],
        "hostIP": node.ip,
        "hostIPs": [{"ip": node.ip}],
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "qosClass": "Burstable",
        "startTime": CREATED,
    }


def _pending_status(nodes: int, w: Workload) -> dict[str, Any]:
    resource = SHARED_GPU if w.pool == "l4" else GPU
    reason = {
        PENDING_FAULT: "node(s) had untolerated taint {nvidia.com/gpu: true}",
        "no-such-gpu": "node(s) didn't match Pod's node affinity/selector",
    }.get(w.fault or "", f"Insufficient {resource}")
    message = (
        f"0/{nodes} nodes are available: {nodes} {reason}. "
        f"preemption: 0/{nodes} nodes are available."
    )
    return {
        "conditions": [
            {
                "lastProbeTime": None,
                "lastTransitionTime": CREATED,
                "message": message,
                "reason": "Unschedulable",
                "status": "False",
                "type": "PodScheduled",
            }
        ],
        "phase": "Pending",
        "qosClass": "Burstable",
    }


def _template(w: Workload, labels: dict[str, str], restart: str) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": _pod_spec(w, w.app, restart)}


def _deployment(cluster: Cluster, w: Workload, replicas: int) -> Iterator[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": w.app}
    template = _template(w, labels, "Always")
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(
            cluster,
            w.app,
            w.namespace,
            labels,
            annotations={"deployment.kubernetes.io/revision": "1"},
        ),
        "spec": {
            "progressDeadlineSeconds": 600,
            "replicas": replicas,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": labels},
            "strategy": {
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                "type": "RollingUpdate",
            },
            "template": template,
        },
        "status": {
            "availableReplicas": replicas,
            "observedGeneration": 1,
            "readyReplicas": replicas,
            "replicas": replicas,
            "updatedReplicas": replicas,
        },
    }
    yield deployment
    hash_ = cluster.suffix(10)
    rs_name = f"{w.app}-{hash_}"
    rs_labels = {**labels, "pod-template-hash": hash_}
    rs_template = {"metadata": {"labels": rs_labels}, "spec": template["spec"]}
    replica_set: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": _meta(
            cluster,
            rs_name,
            w.namespace,
            rs_labels,
            ownerReferences=[_owner("apps/v1", "Deployment", w.app, deployment["metadata"]["uid"])],
        ),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": rs_labels},
            "template": rs_template,
        },
        "status": {"availableReplicas": replicas, "readyReplicas": replicas, "replicas": replicas},
    }
    yield replica_set
    owner = _owner("apps/v1", "ReplicaSet", rs_name, replica_set["metadata"]["uid"])
    for _ in range(0 if w.fault in REJECTED else replicas):
        yield _pod(
            cluster,
            w,
            template["spec"],
            f"{rs_name}-{cluster.suffix()}",
            rs_labels,
            owner,
            f"{rs_name}-",
        )


def _job(cluster: Cluster, w: Workload, parallelism: int) -> Iterator[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": w.app}
    template = _template(w, labels, "Never")
    uid = cluster.uid()
    job_labels = {**labels, "batch.kubernetes.io/controller-uid": uid}
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(cluster, w.app, w.namespace, labels),
        "spec": {
            "activeDeadlineSeconds": 86400,
            "backoffLimit": 3,
            "completionMode": "NonIndexed",
            "completions": parallelism,
            "parallelism": parallelism,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "suspend": False,
            "template": {"metadata": {"labels": job_labels}, "spec": template["spec"]},
            "ttlSecondsAfterFinished": 3600,
        },
        "status": {"active": parallelism, "startTime": STARTED},
    }
    job["metadata"]["uid"] = uid
    yield job
    owner = _owner("batch/v1", "Job", w.app, uid)
    for _ in range(0 if w.fault in REJECTED else parallelism):
        name = f"{w.app}-{cluster.suffix()}"
        yield _pod(cluster, w, template["spec"], name, job_labels, owner, f"{w.app}-")


def _pytorch_job(cluster: Cluster, w: Workload, workers: int) -> Iterator[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": w.app}
    template = _template(w, labels, "OnFailure")
    template["spec"]["containers"][0]["command"] = [
        "torchrun",
        f"--nnodes={workers + 1}",
        f"--nproc-per-node={w.gpus}",
        "train.py",
    ]
    template["spec"]["containers"][0]["name"] = "pytorch"
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _meta(cluster, w.app, w.namespace, labels),
        "spec": {
            "runPolicy": {
                "activeDeadlineSeconds": 172800,
                "backoffLimit": 3,
                "cleanPodPolicy": "Running",
                "schedulingPolicy": {"minAvailable": workers + 1},
            },
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": template},
            },
        },
        "status": {"conditions": [{"type": "Running", "status": "True", "reason": "Running"}]},
    }
    yield job
    owner = _owner("kubeflow.org/v1", "PyTorchJob", w.app, job["metadata"]["uid"])
    for role, count in (("master", 1), ("worker", workers)):
        for index in range(0 if w.fault in REJECTED else count):
            pod_labels = {
                **labels,
                "training.kubeflow.org/job-name": w.app,
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(index),
            }
            yield _pod(
                cluster, w, template["spec"], f"{w.app}-{role}-{index}", pod_labels, owner, ""
            )


def _service(cluster: Cluster, w: Workload) -> dict[str, Any]:
    n = cluster.rng.getrandbits(16)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cluster, w.app, w.namespace, {"app.kubernetes.io/name": w.app}),
        "spec": {
            "clusterIP": f"172.20.{n >> 8}.{n & 255}",
            "clusterIPs": [f"172.20.{n >> 8}.{n & 255}"],
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}],
            "selector": {"app.kubernetes.io/name": w.app},
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    }


def _hpa(cluster: Cluster, w: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(cluster, w.app, w.namespace),
        "spec": {
            "maxReplicas": 20,
            "metrics": [
                {
                    "resource": {
                        "name": "cpu",
                        "target": {"averageUtilization": 70, "type": "Utilization"},
                    },
                    "type": "Resource",
                }
            ],
            "minReplicas": 2,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": w.app},
        },
        "status": {"currentReplicas": 3, "desiredReplicas": 3},
    }


def _service_monitor(cluster: Cluster, w: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(cluster, w.app, w.namespace, {"release": "kube-prometheus-stack"}),
        "spec": {
            "endpoints": [{"interval": "30s", "port": "http"}],
            "selector": {"matchLabels": {"app.kubernetes.io/name": w.app}},
        },
    }


def _namespace_objects(cluster: Cluster, namespace: str, gpu: bool) -> Iterator[dict[str, Any]]:
    yield {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta(
            cluster, namespace, None, {"kubernetes.io/metadata.name": namespace, "team": namespace}
        ),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    if gpu:
        yield {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta(cluster, "gpu-quota", namespace),
            "spec": {"hard": {f"requests.{GPU}": "64", "limits.memory": "4Ti"}},
            "status": {
                "hard": {f"requests.{GPU}": "64", "limits.memory": "4Ti"},
                "used": {f"requests.{GPU}": "0", "limits.memory": "0"},
            },
        }
    yield {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cluster, "default-deny-ingress", namespace),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    yield {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cluster, "allow-same-namespace", namespace),
        "spec": {
            "ingress": [{"from": [{"podSelector": {}}]}],
            "podSelector": {},
            "policyTypes": ["Ingress"],
        },
    }


def _system_objects(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """Namespaces of the platform and the DaemonSets (and their pods) of every node."""
    for namespace in ("kube-system", "gpu-operator", "monitoring"):
        yield {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(cluster, namespace, None, {"kubernetes.io/metadata.name": namespace}),
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
    daemonsets = (
        ("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.33.2", None),
        (
            "gpu-operator",
            "nvidia-device-plugin-daemonset",
            "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
            "nvidia.com/gpu.deploy.device-plugin",
        ),
        (
            "gpu-operator",
            "nvidia-dcgm-exporter",
            "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
            "nvidia.com/gpu.deploy.dcgm-exporter",
        ),
        (
            "gpu-operator",
            "gpu-feature-discovery",
            "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
            "nvidia.com/gpu.deploy.gpu-feature-discovery",
        ),
    )
    for namespace, name, image, selector in daemonsets:
        nodes = [n for n in cluster.nodes if selector is None or n.pool.gfd.get(selector)]
        labels = {"app": name}
        w = Workload(namespace, name, image, None, 0, port=9400)
        spec = _pod_spec(w, name, "Always")
        spec["priorityClassName"] = "system-node-critical"
        spec["tolerations"] = [{"operator": "Exists"}]
        if selector:
            spec["nodeSelector"] = {selector: "true"}
        ds: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": _meta(cluster, name, namespace, labels),
            "spec": {
                "revisionHistoryLimit": 10,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
                "updateStrategy": {
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
                    "type": "RollingUpdate",
                },
            },
            "status": {
                "currentNumberScheduled": len(nodes),
                "desiredNumberScheduled": len(nodes),
                "numberAvailable": len(nodes),
                "numberMisscheduled": 0,
                "numberReady": len(nodes),
                "observedGeneration": 1,
                "updatedNumberScheduled": len(nodes),
            },
        }
        yield ds
        owner = _owner("apps/v1", "DaemonSet", name, ds["metadata"]["uid"])
        for node in nodes:
            pod = _pod(cluster, w, spec, f"{name}-{cluster.suffix()}", labels, owner, f"{name}-")
            # A DaemonSet pod is bound to its node by the controller, not by the scheduler.
            pod["spec"]["nodeName"] = node.name
            pod["status"]["hostIP"] = node.ip
            pod["status"]["hostIPs"] = [{"ip": node.ip}]
            yield pod
    yield {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(cluster, "nvidia-dcgm-exporter", "gpu-operator", {"release": "kps"}),
        "spec": {
            "endpoints": [{"interval": "15s", "port": "gpu-metrics"}],
            "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
        },
    }
    yield {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(
            cluster, "nvidia-dcgm-exporter", "gpu-operator", {"app": "nvidia-dcgm-exporter"}
        ),
        "spec": {
            "clusterIP": "172.20.0.50",
            "ports": [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP", "targetPort": 9400}],
            "selector": {"app": "nvidia-dcgm-exporter"},
            "type": "ClusterIP",
        },
    }


def _pending_fault(cluster: Cluster, pending_pods: float, budget: int) -> str | None:
    """The next reason to wait when the Pending pods are behind their share of the pods."""
    if cluster.pending_pods >= pending_pods * (cluster.pods + min(budget, 4)):
        return None
    cluster.pending_turn += 1
    return PENDING_FAULTS[cluster.pending_turn % len(PENDING_FAULTS)]


def _pending_workload(cluster: Cluster, w: Workload) -> Workload:
    """`w` made to wait for its fault; the last two reasons select node classes. Time-sliced
    L4 nodes carry no GPU taint and no product selector: such a workload goes to H100s."""
    if w.pool == "l4" and w.fault != "too-many-gpus":
        w = replace(w, pool="h100")
    if w.fault == "too-many-gpus":
        w = replace(w, gpus=2 * next(p for p in POOLS if p.name == w.pool).gpus)
    if cluster.node_classes and w.fault in PENDING_FAULTS[1:]:
        picked = cluster.rng.sample(range(cluster.node_classes), min(2, cluster.node_classes))
        w = replace(w, node_classes=tuple(f"class-{c:03d}" for c in sorted(picked)))
    return w


def _team_workloads(
    cluster: Cluster,
    namespace: str,
    budget: int,
    share: float,
    pending: float,
    pending_pods: float = 0.0,
) -> Iterator[Any]:
    """Controllers and pods of one team namespace, `budget` pods in all."""
    rng = cluster.rng
    index = 0
    while budget > 0:
        index += 1
        roll = rng.random()
        fault = rng.choice(FAULTS) if rng.random() < share else None
        if fault is None and rng.random() < pending:
            fault = PENDING_FAULT
        if fault is None and pending_pods and roll >= 0.8:  # a GPU workload
            fault = _pending_fault(cluster, pending_pods, budget)
        if roll < 0.8:  # CPU web service: Deployment, Service, HPA
            w = Workload(namespace, f"web-{index}", "ghcr.io/example/api:1.8.2", None, 0)
            replicas = min(budget, rng.randint(3, 8))
            yield from _deployment(cluster, w, replicas)
            yield _service(cluster, w)
            yield _hpa(cluster, w)
        elif roll < 0.88:  # GPU inference: Deployment, Service, ServiceMonitor
            pool = rng.choice(("a100", "h100", "l4"))
            w = Workload(
                namespace,
                f"infer-{index}",
                "nvcr.io/nvidia/tritonserver:25.01-py3",
                pool,
                1,
                fault,
                8000,
            )
            replicas = min(budget, rng.randint(1, 4))
            cluster.gpu_workloads += 1
            if fault:
                cluster.faults[fault] += 1
                w = _pending_workload(cluster, w) if fault in PENDING_FAULTS else w
            yield from _deployment(cluster, w, replicas)
            yield _service(cluster, w)
            yield _service_monitor(cluster, w)
        elif roll < 0.985:  # GPU batch Job
            pool = rng.choice(("a100", "h100"))
            w = Workload(
                namespace, f"batch-{index}", "nvcr.io/nvidia/pytorch:24.08-py3", pool, 1, fault
            )
            replicas = min(budget, rng.randint(1, 4))
            cluster.gpu_workloads += 1
            if fault:
                cluster.faults[fault] += 1
                w = _pending_workload(cluster, w) if fault in PENDING_FAULTS else w
            yield from _job(cluster, w, replicas)
        else:  # distributed training: PyTorchJob on whole 8-GPU nodes
            pool = rng.choice(("a100", "h100"))
            w = Workload(
                namespace, f"train-{index}", "nvcr.io/nvidia/pytorch:24.08-py3", pool, 8, fault
            )
            workers = max(0, min(budget, rng.randint(2, 3)) - 1)
            replicas = workers + 1
            cluster.gpu_workloads += 1
            if fault:
                cluster.faults[fault] += 1
                w = _pending_workload(cluster, w) if fault in PENDING_FAULTS else w
            yield from _pytorch_job(cluster, w, workers)
        budget -= replicas


@dataclass(frozen=True)
class Shape:
    """What varies between benchmark clusters besides their size (see the module's doc)."""

    pending_pods: float = 0.0  # share of all pods that are Pending GPU pods
    node_classes: int = 0  # distinct node shapes; 0: the pools' own
    namespaces: int = 0  # 0: one per PODS_PER_NAMESPACE pods


def generate(
    pods: int,
    seed: int = 1,
    misconfigured: float = 0.1,
    pending: float = 0.0,
    summary: dict[str, Any] | None = None,
    shape: Shape = Shape(),
) -> Iterator[dict[str, Any]]:
    """Every object of the cluster; once exhausted, `summary` holds what was generated."""
    rng = random.Random(seed)
    node_count = max(4, pods // PODS_PER_NODE)
    states: list[NodeState] = []
    by_pool: dict[str, list[NodeState]] = {p.name: [] for p in POOLS}
    for pool in POOLS:
        for _ in range(max(1, round(node_count * pool.share))):
            n = len(states)
            state = NodeState(
                f"ip-10-0-{n >> 8}-{n & 255}.ec2.internal",
                pool,
                f"10.0.{n >> 8}.{n & 255}",
                pool.gpus,
            )
            states.append(state)
            by_pool[pool.name].append(state)
    cluster = Cluster(rng, states, by_pool, node_classes=shape.node_classes)
    for index, state in enumerate(states):
        yield _node(cluster, state, index)
    system = list(_system_objects(cluster))
    yield from system
    system_pods = sum(1 for o in system if o["kind"] == "Pod")
    remaining = max(0, pods - system_pods)
    namespaces = shape.namespaces or max(1, remaining // PODS_PER_NAMESPACE)
    for n in range(namespaces):
        namespace = f"team-{n:04d}"
        gpu = n % 10 != 9  # one namespace in ten runs GPU work without a GPU quota
        yield from _namespace_objects(cluster, namespace, gpu)
        budget = remaining // namespaces + (1 if n < remaining % namespaces else 0)
        yield from _team_workloads(
            cluster, namespace, budget, misconfigured, pending, shape.pending_pods
        )
    if summary is not None:
        summary.update(
            nodes=len(states),
            gpu_nodes=sum(1 for s in states if s.pool.gpus),
            namespaces=namespaces + 3,
            gpu_workloads=cluster.gpu_workloads,
            misconfigured_gpu_workloads=sum(cluster.faults.values()),
            faults=dict(sorted(cluster.faults.items())),
            pending_pods=cluster.pending_pods,
            node_classes=shape.node_classes,
        )


def write(
    path: Path,
    pods: int,
    seed: int = 1,
    misconfigured: float = 0.1,
    pending: float = 0.0,
    shape: Shape = Shape(),
    yaml_format: bool = False,
) -> dict[str, Any]:
    """Write the List to `path` (JSON, or YAML as `kubectl get -o yaml` prints it) and its
    summary to `path` + `.meta.json`; return the summary."""
    counts: dict[str, int] = {}
    generated: dict[str, Any] = {}
    with path.open("w", encoding="utf-8") as out:
        out.write("apiVersion: v1\nitems:\n" if yaml_format else '{"apiVersion":"v1","items":[\n')
        first = True
        for obj in generate(pods, seed, misconfigured, pending, generated, shape):
            counts[obj["kind"]] = counts.get(obj["kind"], 0) + 1
            if yaml_format:  # one item of the List: "- apiVersion: v1\n  kind: Pod\n..."
                out.write(yaml.dump([obj], Dumper=_YamlDumper, default_flow_style=False))
            else:
                out.write(("" if first else ",\n") + json.dumps(obj, separators=(",", ":")))
            first = False
        out.write(
            'kind: List\nmetadata:\n  resourceVersion: ""\n'
            if yaml_format
            else '\n],"kind":"List","metadata":{"resourceVersion":""}}\n'
        )
    summary = {
        "pods": counts.get("Pod", 0),
        "objects": sum(counts.values()),
        "kinds": dict(sorted(counts.items())),
        **generated,
        "seed": seed,
        "misconfigured_share": misconfigured,
        "pending_share": pending,
        "pending_pods_share": shape.pending_pods,
        "namespaces_requested": shape.namespaces,
        "format": "yaml" if yaml_format else "json",
        "bytes": path.stat().st_size,
    }
    Path(f"{path}.meta.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--misconfigured", type=float, default=0.1, help="share of GPU workloads")
    parser.add_argument(
        "--pending",
        type=float,
        default=0.0,
        help="share of the other GPU workloads without the GPU toleration (pods stay Pending)",
    )
    parser.add_argument(
        "--pending-pods", type=float, default=0.0, help="share of all pods that wait for a node"
    )
    parser.add_argument("--node-classes", type=int, default=0, help="distinct node shapes")
    parser.add_argument("--namespaces", type=int, default=0, help="0: one per 150 pods")
    parser.add_argument("--format", choices=("json", "yaml"), default="json")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    shape = Shape(args.pending_pods, args.node_classes, args.namespaces)
    summary = write(
        args.output,
        args.pods,
        args.seed,
        args.misconfigured,
        args.pending,
        shape,
        args.format == "yaml",
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
