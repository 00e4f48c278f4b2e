"""KubeRay: the pod specs of a RayCluster's head and worker groups, built the way the KubeRay
operator builds them, and of the same cluster spec embedded in a RayJob (spec.rayClusterSpec,
plus spec.submitterPodTemplate) or a RayService (spec.rayClusterConfig).

Sources, in https://github.com/ray-project/kuberay at feeaf72facab (the commit of the CRDs in
../shared/crds), ray-operator/controllers/ray/:
- common/pod.go: DefaultHeadPodTemplate / DefaultWorkerPodTemplate (the group's template, its
  labels through labelPod, a `metrics` port 8080 on the Ray container when it has none) and
  BuildPod, which adds to the Ray container (containers[0], utils.RayContainerIndex):
  - a memory-backed emptyDir `shared-mem` at /dev/shm for the object store (addEmptyDir),
    unless the container already mounts something at /dev/shm or rayStartParams sets
    plasma-directory; its sizeLimit is the container's memory limit, else its memory request
    (makeEmptyDirVolume, findMemoryReqOrLimit); a volume the pod already has by that name is
    mounted instead of added (checkIfVolumeExists);
  - liveness and readiness probes when it has none (initLivenessAndReadinessProbe, on unless
    the operator runs with ENABLE_PROBES_INJECTION=false): an HTTP GET of the dashboard
    agent's /api/healthz for Ray >= 2.53.0, wget of the raylet (and on the head the GCS)
    health endpoints before; a RayService's workers also check the Serve proxy, with a
    failure threshold of 1;
- rayjob_controller.go constructRayClusterForRayJob and rayservice_controller.go
  constructRayClusterForRayService: the RayCluster they own is a copy of the embedded spec;
- common/job.go GetSubmitterTemplate: a RayJob's submitterPodTemplate is used as given.

Not modelled, because none holds a GPU and each would only repeat what the Ray container shows:
the `wait-gcs-ready` init container of workers (the Ray container's image, env, mounts and
securityContext, 200m/256Mi), the autoscaler sidecar of the head (enableInTreeAutoscaling,
500m/512Mi), the `ray start` command appended to the Ray container's args, the submitter
container a SidecarMode RayJob adds to the head, and the volumes of token auth and TLS.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.operator_templates import OperatorTemplate
from gpu_audit.model import Resource

RAY_CLUSTER = "RayCluster.ray.io"
RAY_JOB = "RayJob.ray.io"
RAY_SERVICE = "RayService.ray.io"
RAY_TYPES = (RAY_CLUSTER, RAY_JOB, RAY_SERVICE)

# Where a RayJob and a RayService embed the RayClusterSpec (the Go field of RayService is
# RayClusterSpec, its JSON name rayClusterConfig).
_CLUSTER_SPEC_KEYS = {RAY_JOB: "rayClusterSpec", RAY_SERVICE: "rayClusterConfig"}

SHM = "/dev/shm"
SHARED_MEMORY_VOLUME = "shared-mem"  # common.SharedMemoryVolumeName
PLASMA_DIRECTORY = "plasma-directory"  # common.PlasmaDirectoryParamKey
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
CLUSTER_LABEL = "ray.io/cluster"
ORIGINATED_FROM_CRD_LABEL = "ray.io/originated-from-crd"
HEAD_GROUP = "headgroup"  # utils.RayNodeHeadGroupLabelValue
# labelPod: the labels a group's template or `labels` cannot override.
_FIXED_LABELS = frozenset({NODE_TYPE_LABEL, GROUP_LABEL, CLUSTER_LABEL})

METRICS_PORT_NAME = "metrics"  # utils.MetricsPortName
METRICS_PORT = 8080  # utils.DefaultMetricsPort
SERVE_PORT_NAME = "serve"  # utils.ServingPortName
SERVE_PORT = 8000  # utils.DefaultServingPort
DASHBOARD_PORT = 8265  # utils.DefaultDashboardPort
DASHBOARD_AGENT_PORT = 52365  # utils.DefaultDashboardAgentListenPort
_UNIFIED_HEALTH_CHECK = (2, 53)  # supportsUnifiedHealthCheck: 2.53.0
_VERSION = re.compile(r"\s*v?([0-9]+(?:\.[0-9]+)+)")
# utils.BaseWgetHealthCommand (timeout, port, path)
_WGET = "wget --tries 1 -T {} -q -O- http://localhost:{}/{} | grep success"


def ray_cluster_spec_path(kind: str) -> str | None:
    """Where a KubeRay object of `kind` holds its RayClusterSpec (headGroupSpec,
    workerGroupSpecs...); None for a kind that is not KubeRay's."""
    if kind not in RAY_TYPES:
        return None
    key = _CLUSTER_SPEC_KEYS.get(kind)
    return f"spec.{key}" if key else "spec"


def ray_templates(resource: Resource) -> tuple[OperatorTemplate, ...]:
    """The head's, each worker group's and (RayJob) the submitter's pod spec."""
    kind = resource.ref.kind
    key = _CLUSTER_SPEC_KEYS.get(kind)
    cluster = as_mapping(resource.spec.get(key)) if key else resource.spec
    out = list(_cluster_templates(resource, cluster, ray_cluster_spec_path(kind) or "spec"))
    if kind == RAY_JOB:
        submitter = as_mapping(resource.spec.get("submitterPodTemplate"))
        spec = submitter.get("spec")
        if isinstance(spec, Mapping):
            out.append(
                OperatorTemplate(
                    "submitter",
                    "spec.submitterPodTemplate.spec",
                    spec,
                    as_mapping(submitter.get("metadata")),
                )
            )
    return tuple(out)


def _cluster_templates(
    owner: Resource, cluster: Mapping[str, Any], base: str
) -> Iterator[OperatorTemplate]:
    serve = owner.ref.kind == RAY_SERVICE or (
        owner.labels.get(ORIGINATED_FROM_CRD_LABEL) == "RayService"
    )
    # The RayCluster a RayJob or RayService creates gets a generated name.
    cluster_name = owner.ref.name if owner.ref.kind == RAY_CLUSTER else ""
    version = str(cluster.get("rayVersion") or "")
    groups = [("head", f"{base}.headGroupSpec", as_mapping(cluster.get("headGroupSpec")))]
    for index, raw in enumerate(as_list(cluster.get("workerGroupSpecs"))):
        group = as_mapping(raw)
        groups.append(
            (
                f"workerGroup {group.get('groupName') or ''}".rstrip(),
                f"{base}.workerGroupSpecs[{index}]",
                group,
            )
        )
    for role, path, group in groups:
        template = as_mapping(group.get("template"))
        spec = template.get("spec")
        if not isinstance(spec, Mapping):
            continue
        head = role == "head"
        node = _Node(
            "head" if head else "worker",
            HEAD_GROUP if head else str(group.get("groupName") or ""),
            str_map(group.get("rayStartParams")),
            serve,
        )
        metadata = as_mapping(template.get("metadata"))
        yield OperatorTemplate(
            role,
            f"{path}.template.spec",
            _pod_spec(spec, node, version),
            {
                **metadata,
                "labels": _labels(metadata, group, node, cluster_name),
                "annotations": str_map(metadata.get("annotations")),
            },
        )


@dataclass(frozen=True, slots=True)
class _Node:
    """What BuildPod takes of a group: the node type, the group name, its rayStartParams and
    whether a RayService created the cluster."""

    type: str
    group: str
    params: Mapping[str, str]
    serve: bool

    def port(self, key: str, default: int) -> int:
        """A port rayStartParams sets (getPort), else `default`."""
        value = self.params.get(key, "").strip()
        return int(value) if value.isdigit() and int(value) < 2**31 else default


def _labels(
    metadata: Mapping[str, Any], group: Mapping[str, Any], node: _Node, cluster_name: str
) -> dict[str, str]:
    """labelPod over mergeLabels(template labels, the group's `labels`)."""
    labels = {
        "ray.io/is-ray-node": "yes",
        NODE_TYPE_LABEL: node.type,
        GROUP_LABEL: node.group,
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    if cluster_name:
        labels[CLUSTER_LABEL] = cluster_name
    merged = {**str_map(metadata.get("labels")), **str_map(group.get("labels"))}
    labels.update({k: v for k, v in merged.items() if k not in _FIXED_LABELS})
    return labels


def _pod_spec(spec: Mapping[str, Any], node: _Node, version: str) -> Mapping[str, Any]:
    containers = [dict(as_mapping(c)) for c in as_list(spec.get("containers"))]
    if not containers:
        return spec
    out = dict(spec)
    ray = containers[0]
    if PLASMA_DIRECTORY not in node.params:
        _mount_shared_memory(out, ray)
    ports = [as_mapping(p) for p in as_list(ray.get("ports"))]
    if not any(p.get("name") == METRICS_PORT_NAME for p in ports):
        ray["ports"] = [*ports, {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT}]
    _add_probes(ray, node, version)
    out["containers"] = [ray, *containers[1:]]
    return out


def _mount_shared_memory(spec: dict[str, Any], container: dict[str, Any]) -> None:
    """addEmptyDir(shared-mem, /dev/shm, Memory) on the Ray container."""
    mounts = as_list(container.get("volumeMounts"))
    if any(as_mapping(m).get("mountPath") == SHM for m in mounts):
        return
    volumes = as_list(spec.get("volumes"))
    if not any(as_mapping(v).get("name") == SHARED_MEMORY_VOLUME for v in volumes):
        resources = as_mapping(container.get("resources"))
        limits, requests = (
            as_mapping(resources.get("limits")),
            as_mapping(resources.get("requests")),
        )
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        size = limits["memory"] if "memory" in limits else requests.get("memory")
        if size is not None:
            empty_dir["sizeLimit"] = size
        spec["volumes"] = [*volumes, {"name": SHARED_MEMORY_VOLUME, "emptyDir": empty_dir}]
    container["volumeMounts"] = [*mounts, {"name": SHARED_MEMORY_VOLUME, "mountPath": SHM}]


def _add_probes(container: dict[str, Any], node: _Node, version: str) -> None:
    """initLivenessAndReadinessProbe: probes on the Ray container where it has none."""
    head = node.type == "head"
    agent = node.port("dashboard-agent-listen-port", DASHBOARD_AGENT_PORT)
    commands = [_WGET.format(2, agent, "api/local_raylet_healthz")]
    if head:
        dashboard = node.port("dashboard-port", DASHBOARD_PORT)
        commands.append(_WGET.format(10, dashboard, "api/gcs_healthz"))

    def handler() -> dict[str, Any]:
        if _unified_health_check(version):
            return {"httpGet": {"path": "/api/healthz", "port": agent}}
        return {"exec": {"command": ["bash", "-c", " && ".join(commands)]}}

    timeout = 5 if head else 2
    if not container.get("livenessProbe"):
        container["livenessProbe"] = {
            **handler(),
            "initialDelaySeconds": 30,
            "timeoutSeconds": timeout,
            "periodSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 120,
        }
    if container.get("readinessProbe"):
        return
    readiness = {
        **handler(),
        "initialDelaySeconds": 10,
        "timeoutSeconds": timeout,
        "periodSeconds": 5,
        "successThreshold": 1,
        "failureThreshold": 10,
    }
    if node.serve and not head:
        # Workers of a RayService also report the Serve proxy's health, and leave the
        # Service's endpoints at the first failure.
        port = next(
            (
                as_mapping(p).get("containerPort", SERVE_PORT)
                for p in as_list(container.get("ports"))
                if as_mapping(p).get("name") == SERVE_PORT_NAME
            ),
            SERVE_PORT,
        )
        commands.append(_WGET.format(10, port, "-/healthz"))
        readiness.pop("httpGet", None)
        readiness["exec"] = {"command": ["bash", "-c", " && ".join(commands)]}
        readiness["failureThreshold"] = 1
    container["readinessProbe"] = readiness


def _unified_health_check(version: str) -> bool:
    """Ray >= 2.53.0, the version read as k8s.io/apimachinery's version.ParseGeneric reads it
    (an optional "v", two or more numeric components, anything after them ignored)."""
    match = _VERSION.match(version)
    if match is None:
        return False
    numbers = [int(n) for n in match.group(1).split(".")]
    return tuple(numbers) >= _UNIFIED_HEALTH_CHECK
