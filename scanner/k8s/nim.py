"""NVIDIA NIM operator: the pod spec a NIMService runs, built the way the operator renders it.

A NIMService holds no pod template: its spec is rendered into a Deployment (standalone), a
LeaderWorkerSet (spec.multiNode) or a KServe InferenceService (inferencePlatform: kserve). The
NIM container's fields are written at the top of the NIMService's spec (spec.resources,
spec.env, spec.args...) beside the pod-level ones (spec.nodeSelector, spec.tolerations,
spec.runtimeClassName...), so the template's path is `spec` and the NIM container is written
inline there; a user's init and sidecar containers are written at spec.initContainers[i] and
spec.sidecarContainers[i].

Sources, in https://github.com/NVIDIA/k8s-nim-operator at f63f74d7ad22 (the commit of the CRD in
../shared/crds):
- api/apps/v1alpha1/nimservice_types.go: GetDeploymentParams, GetLWSParams and
  GetInferenceServiceParams (what goes into the pod), GetStandardEnv / GetEnv (the
  environment: the user's entries first, then the operator's it does not override,
  utils.MergeEnvVars), GetVolumes / GetVolumeMounts (a memory-backed emptyDir `dshm` at
  /dev/shm, sized by spec.storage.sharedMemorySizeLimit, always; the model store at
  /model-store; /scratch when there are init or sidecar containers), GetLeaderVolumes /
  GetWorkerVolumes (the MPI volumes of a multi-node NIM), GetDefaultLivenessProbe /
  GetDefaultReadinessProbe / GetDefaultStartupProbe and GetInferenceService*Probe (probes
  unless spec.<probe>.enabled is false), GetUserID / GetGroupID (runAsUser 1000, runAsGroup
  and fsGroup 2000 by default), GetContainerName (<name>-ctr), GetServiceAccountName;
- manifests/deployment.yaml, manifests/lws.yaml, manifests/inferenceservice.yaml: the
  templates (a toleration keeps only key, operator, value and effect; the multi-node pods get
  neither affinity, runtimeClassName, command nor the user's args; the workers no probes
  except the Ray workers' startup probe, no schedulerName and no labels);
- internal/controller/platform/standalone/nimservice.go: the model store (the NIMCache's PVC,
  spec.storage.pvc, an emptyDir or a hostPath), the Ray mode of a multi-node NIM
  (nim-serve-ray arguments, a `ray` port, its workers' `ray status` startup probe);
- internal/shared/resourceclaims.go: spec.draResources as pod resourceClaims, each claimed by
  every container (UpdateContainerResourceClaims).

Not modelled: the GPUs the operator assigns from a NIMCache profile when spec.resources asks
for none (addGPUResources: known only from the NIMCache's status; such a NIMService is seen
without GPUs), DRA claims created from claimCreationSpec and the ComputeDomain claim (their
names are hashes the input does not hold), the proxy's CA-certificate init container and
volumes, and the operator's environment copied into init and sidecar containers (the NIM
container's environment is judged once, on the NIM container).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.k8s.kserve import DEPLOYMENT_MODE
from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.operator_templates import OperatorTemplate
from gpu_audit.model import Resource

NIM_SERVICE = "NIMService.apps.nvidia.com"
DEFAULT_PORT = 8000  # DefaultAPIPort
MODEL_STORE = "/model-store"  # utils.DefaultModelStorePath
SHM = "/dev/shm"
_DEFAULT_USER, _DEFAULT_GROUP = 1000, 2000
# GetInitContainerVolumeMounts: init containers get the model store and /scratch only.
_INIT_MOUNTS = frozenset({"model-store", "scratch"})
_TOLERATION_FIELDS = ("key", "operator", "value", "effect")
_POD_FIELDS = ("schedulerName", "priorityClassName", "runtimeClassName", "nodeSelector", "affinity")
# What the multi-node (LeaderWorkerSet) templates leave out of the leader's and the worker's pod.
_NOT_IN_LEADER = frozenset({"affinity", "runtimeClassName"})
_NOT_IN_WORKER = _NOT_IN_LEADER | {"schedulerName"}


def nim_templates(nim: Resource) -> tuple[OperatorTemplate, ...]:
    """One pod spec, role "nim", or for a multi-node NIM the leader's and the worker's."""
    spec = nim.spec
    image = as_mapping(spec.get("image"))
    if not image:
        return ()
    multi = as_mapping(spec.get("multiNode"))
    if spec.get("inferencePlatform") != "kserve" and isinstance(spec.get("multiNode"), Mapping):
        ray = isinstance(multi.get("ray"), Mapping)
        return (
            _template(nim, "nim leader", "nim-leader", _Mode(leader=True, ray=ray)),
            _template(nim, "nim worker", "nim-worker", _Mode(worker=True, ray=ray)),
        )
    knative = spec.get("inferencePlatform") == "kserve" and str_map(spec.get("annotations")).get(
        DEPLOYMENT_MODE
    ) not in ("Standard", "RawDeployment")
    return (_template(nim, "nim", f"{nim.ref.name}-ctr", _Mode(knative=knative)),)


@dataclass(frozen=True, slots=True)
class _Mode:
    """Which of the operator's templates renders the pod: the Deployment's (all false), the
    LeaderWorkerSet's leader or worker (with Ray or MPI), or the InferenceService's in
    KServe's Knative mode."""

    leader: bool = False
    worker: bool = False
    ray: bool = False
    knative: bool = False

    @property
    def multi_node(self) -> bool:
        return self.leader or self.worker


def _template(nim: Resource, role: str, container_name: str, mode: _Mode) -> OperatorTemplate:
    spec = nim.spec
    port = _int(as_mapping(as_mapping(spec.get("expose")).get("service")).get("port"), DEFAULT_PORT)
    volumes, mounts = _storage(nim, mode)
    main: dict[str, Any] = {
        "name": container_name,
        "image": _image(spec.get("image")),
        "ports": _ports(spec, port, mode),
        "env": _env(spec, port),
        "volumeMounts": mounts,
    }
    image = as_mapping(spec.get("image"))
    if image.get("pullPolicy"):
        main["imagePullPolicy"] = image["pullPolicy"]
    if not mode.multi_node:
        main.update({k: spec[k] for k in ("command", "args") if as_list(spec.get(k))})
    elif mode.ray:
        ray_port = _ray_port(spec)
        main["args"] = (
            ["nim-serve-ray", "--head", "--port", str(ray_port)]
            if mode.leader
            else ["nim-serve-ray", "--head-address", f"$(LWS_LEADER_ADDRESS):{ray_port}"]
        )
    resources = as_mapping(spec.get("resources"))
    if resources:
        main["resources"] = {k: resources[k] for k in ("requests", "limits") if k in resources}
    main.update(_probes(spec, port, mode))
    sidecars = [
        {**_extra_container(raw), "volumeMounts": mounts}
        for raw in map(as_mapping, as_list(spec.get("sidecarContainers")))
    ]
    inits = [
        {**_extra_container(raw), "volumeMounts": [m for m in mounts if m["name"] in _INIT_MOUNTS]}
        for raw in map(as_mapping, as_list(spec.get("initContainers")))
    ]
    user, group = _int(spec.get("userID"), _DEFAULT_USER), _int(spec.get("groupID"), _DEFAULT_GROUP)
    pod: dict[str, Any] = {
        "securityContext": {"runAsUser": user, "runAsGroup": group, "fsGroup": group},
        "containers": [main, *sidecars],
        "volumes": volumes,
    }
    if not mode.worker:
        pod["serviceAccountName"] = nim.ref.name
    if inits:
        pod["initContainers"] = inits
    left_out = _NOT_IN_WORKER if mode.worker else _NOT_IN_LEADER if mode.leader else frozenset()
    pod.update({k: spec[k] for k in _POD_FIELDS if spec.get(k) and k not in left_out})
    tolerations = [
        {k: t[k] for k in _TOLERATION_FIELDS if k in t}
        for t in map(as_mapping, as_list(spec.get("tolerations")))
    ]
    if tolerations:
        pod["tolerations"] = tolerations
    secrets = [{"name": str(s)} for s in as_list(image.get("pullSecrets"))]
    if secrets:
        pod["imagePullSecrets"] = secrets
    _claim_dra_resources(spec, pod)
    paths = [(container_name, "spec")]
    paths += [
        (str(c.get("name", "")), f"spec.sidecarContainers[{i}]") for i, c in enumerate(sidecars)
    ]
    paths += [(str(c.get("name", "")), f"spec.initContainers[{i}]") for i, c in enumerate(inits)]
    return OperatorTemplate(
        role, "spec", pod, _metadata(nim, mode), tuple(paths), inline_container=container_name
    )


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ray_port(spec: Mapping[str, Any]) -> int:
    """spec.multiNode.ray.rayPort, 6379 by the CRD's default."""
    return _int(as_mapping(as_mapping(spec.get("multiNode")).get("ray")).get("rayPort"), 6379)


def _image(raw: object) -> str:
    image = as_mapping(raw)
    return f"{image.get('repository') or ''}:{image.get('tag') or ''}"


def _extra_container(raw: Mapping[str, Any]) -> dict[str, Any]:
    """GetInitContainers / GetSidecarContainers: a NIMContainerSpec as a container."""
    out: dict[str, Any] = {"name": raw.get("name"), "image": _image(raw.get("image"))}
    out.update({k: raw[k] for k in ("command", "args", "env", "workingDir") if raw.get(k)})
    return out


def _metadata(nim: Resource, mode: _Mode) -> dict[str, Any]:
    """GetServiceLabels (standard labels, then spec.labels) and the pod annotations
    (GetNIMServiceAnnotations without the spec hash). The LWS worker template has no labels."""
    spec = nim.spec
    storage = as_mapping(spec.get("storage"))
    scc = "hostmount-anyuid" if storage.get("hostPath") else "nonroot"
    if as_mapping(spec.get("proxy")).get("certConfigMap"):
        scc = "anyuid"
    annotations = {"openshift.io/required-scc": scc, **str_map(spec.get("annotations"))}
    if mode.worker:
        return {"labels": {}, "annotations": annotations}
    name = nim.ref.name
    labels = {
        "app": f"{name}-lws" if mode.leader else name,
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/part-of": "nim-service",
        "app.kubernetes.io/managed-by": "k8s-nim-operator",
    }
    if mode.leader:
        labels["nim-llm-role"] = "leader"
    return {"labels": {**labels, **str_map(spec.get("labels"))}, "annotations": annotations}


def _env(spec: Mapping[str, Any], port: int) -> list[Any]:
    """GetEnv: the user's entries, then the standard ones they do not set."""
    user = [as_mapping(e) for e in as_list(spec.get("env"))]
    standard: list[Mapping[str, Any]] = [
        {"name": "NIM_CACHE_PATH", "value": MODEL_STORE},
        {"name": "OUTLINES_CACHE_DIR", "value": "/tmp/outlines"},
        {"name": "NIM_SERVER_PORT", "value": str(port)},
        {"name": "NIM_HTTP_API_PORT", "value": str(port)},
        {"name": "NIM_JSONL_LOGGING", "value": "1"},
        {"name": "NIM_LOG_LEVEL", "value": "INFO"},
    ]
    secret = spec.get("authSecret")
    if secret:
        standard.append(
            {
                "name": "NGC_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": "NGC_API_KEY"}},
            }
        )
    service = as_mapping(as_mapping(spec.get("expose")).get("service"))
    for key, names in (
        ("grpcPort", ("NIM_GRPC_API_PORT", "NIM_TRITON_GRPC_PORT")),
        ("metricsPort", ("NIM_TRITON_METRICS_PORT",)),
    ):
        if isinstance(service.get(key), int):
            standard += [{"name": name, "value": str(service[key])} for name in names]
    taken = {e.get("name") for e in user}
    return [*user, *(e for e in standard if e["name"] not in taken)]


def _ports(spec: Mapping[str, Any], port: int, mode: _Mode) -> list[dict[str, Any]]:
    service = as_mapping(as_mapping(spec.get("expose")).get("service"))
    wanted = [("api", port)]
    if not mode.multi_node:
        wanted += [
            (n, service[k])
            for n, k in (("grpc", "grpcPort"), ("metrics", "metricsPort"))
            if isinstance(service.get(k), int) and not (mode.knative and n == "metrics")
        ]
    elif mode.ray:
        wanted.append(("ray", _ray_port(spec)))
    out = []
    for name, number in wanted:
        entry: dict[str, Any] = {"containerPort": number, "protocol": "TCP"}
        if not mode.knative:  # GetInferenceServicePorts: Knative allows no port names
            entry["name"] = name
        out.append(entry)
    return out


def _probes(spec: Mapping[str, Any], port: int, mode: _Mode) -> dict[str, Any]:
    if mode.worker:
        if not mode.ray:
            return {}
        return {
            "startupProbe": {
                "exec": {"command": ["/bin/sh", "-c", "ray status"]},
                "initialDelaySeconds": 30,
                "timeoutSeconds": 5,
                "periodSeconds": 10,
                "failureThreshold": 3,
            }
        }
    grpc = as_mapping(as_mapping(spec.get("expose")).get("service")).get("grpcPort")
    out = {}
    for key, path, delay, failures in (
        ("livenessProbe", "/v1/health/live", 15, 3),
        ("readinessProbe", "/v1/health/ready", 15, 3),
        ("startupProbe", "/v1/health/ready", 30, 30 if mode.knative else 120),
    ):
        field = as_mapping(spec.get(key))
        if field.get("enabled") is False:
            continue
        given = field.get("probe")
        if isinstance(given, Mapping):
            out[key] = given
            continue
        if not mode.knative:
            handler: dict[str, Any] = {"httpGet": {"path": path, "port": "api"}}
        elif isinstance(grpc, int):
            handler = {"grpc": {"port": grpc}}
        else:
            handler = {"httpGet": {"path": path, "port": port}}
        out[key] = {
            **handler,
            "initialDelaySeconds": delay,
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": failures,
        }
    return out


def _storage(nim: Resource, mode: _Mode) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the NIM container's mounts (GetVolumes, GetVolumeMounts and their
    leader and worker forms)."""
    spec = nim.spec
    storage = as_mapping(spec.get("storage"))
    shm: dict[str, Any] = {"medium": "Memory"}
    if storage.get("sharedMemorySizeLimit") is not None:
        shm["sizeLimit"] = storage["sharedMemorySizeLimit"]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
    mounts: list[dict[str, Any]] = []
    store = _model_store(nim, storage)
    if store is not None:
        volume, sub_path = store
        volumes.append({"name": "model-store", **volume})
        mount: dict[str, Any] = {"name": "model-store", "mountPath": MODEL_STORE}
        if sub_path:
            mount["subPath"] = sub_path
        mounts.append(mount)
    mounts.append({"name": "dshm", "mountPath": SHM})
    if as_list(spec.get("initContainers")) or as_list(spec.get("sidecarContainers")):
        volumes.append({"name": "scratch", "emptyDir": {}})
        mounts.append({"name": "scratch", "mountPath": "/scratch"})
    if mode.multi_node and not mode.ray:
        name = nim.ref.name
        volumes += [
            {"name": "ssh-dotfiles", "emptyDir": {}},
            {"name": "ssh-pk", "secret": {"secretName": f"{name}-ssh-pk", "defaultMode": 256}},
            {
                "name": "start-mpi-script",
                "configMap": {"name": f"{name}-mpi-start-script", "defaultMode": 365},
            },
        ]
        mounts += [
            {"name": "ssh-dotfiles", "mountPath": "/opt/nim/llm/.ssh"},
            {"name": "ssh-pk", "mountPath": "/opt/nim/llm/pk"},
            {
                "name": "start-mpi-script",
                "mountPath": "/opt/nim/start-mpi-cluster.sh",
                "subPath": "start-mpi-cluster.sh",
            },
        ]
        if mode.leader:
            volumes.append(
                {
                    "name": "mpi-config",
                    "configMap": {"name": f"{name}-mpi-config", "defaultMode": 365},
                }
            )
            mounts.append({"name": "mpi-config", "mountPath": "/etc/mpi"})
        else:
            volumes.append({"name": "ssh-confs", "emptyDir": {}})
            mounts.append({"name": "ssh-confs", "mountPath": "/ssh-confs"})
    return volumes, mounts


def _model_store(nim: Resource, storage: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The model-store volume source and its subPath: the NIMCache's PVC (named <cache>-pvc
    when the NIMCache creates it), spec.storage.pvc (<name>-pvc when the operator creates it),
    an emptyDir or a hostPath; None when the spec names none (the operator then fails)."""
    read_only = storage.get("readOnly") is True
    cache = as_mapping(storage.get("nimCache")).get("name")
    pvc = as_mapping(storage.get("pvc"))
    if cache:
        claim = {"claimName": f"{cache}-pvc", "readOnly": read_only}
        return {"persistentVolumeClaim": claim}, ""
    if pvc.get("create") is True or pvc.get("name"):
        claim = {"claimName": str(pvc.get("name") or f"{nim.ref.name}-pvc"), "readOnly": read_only}
        return {"persistentVolumeClaim": claim}, str(pvc.get("subPath") or "")
    empty_dir = storage.get("emptyDir")
    if isinstance(empty_dir, Mapping):
        size = as_mapping(empty_dir).get("sizeLimit")
        return {"emptyDir": {"sizeLimit": size} if size is not None else {}}, ""
    if storage.get("hostPath"):
        return {"hostPath": {"path": storage["hostPath"], "type": "DirectoryOrCreate"}}, ""
    return None


def _claim_dra_resources(spec: Mapping[str, Any], pod: dict[str, Any]) -> None:
    """spec.draResources that name an existing ResourceClaim or ResourceClaimTemplate, as the
    pod's resourceClaims, claimed by every container (by each request when it lists some)."""
    claims = []
    for index, raw in enumerate(map(as_mapping, as_list(spec.get("draResources")))):
        claim = {"name": f"nim-dra-{index}"}
        if raw.get("resourceClaimName"):
            claim["resourceClaimName"] = str(raw["resourceClaimName"])
        elif raw.get("resourceClaimTemplateName"):
            claim["resourceClaimTemplateName"] = str(raw["resourceClaimTemplateName"])
        else:
            continue
        requests = [str(r) for r in as_list(raw.get("requests"))]
        uses = [{"name": claim["name"], "request": r} for r in requests] or [
            {"name": claim["name"]}
        ]
        for container in pod["containers"]:
            resources = dict(as_mapping(container.get("resources")))
            resources["claims"] = [*as_list(resources.get("claims")), *uses]
            container["resources"] = resources
        claims.append(claim)
    if claims:
        pod["resourceClaims"] = claims
