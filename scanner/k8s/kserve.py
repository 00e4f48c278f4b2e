"""KServe: the pod specs an InferenceService's components run, derived the way KServe derives them.

An InferenceService has up to three components, `spec.predictor`, `spec.transformer` and
`spec.explainer`. Each is a pod spec (its fields inline) plus component fields (replicas,
autoscaling, logger...) and, for the predictor, a model: `model:` (modelFormat + runtime) or a
framework key (`pytorch:`, `huggingface:`...) that the mutating webhook rewrites into `model:`
(pkg/apis/serving/v1beta1/inference_service_defaults.go, setPredictorModelDefaults). KServe turns
a model into a container named `kserve-container` by merging the model spec (a corev1.Container:
image, args, env, resources...) over the ServingRuntime's or ClusterServingRuntime's container of
that name (pkg/controller/v1beta1/inferenceservice/components/predictor.go, buildPodSpec;
pkg/controller/v1beta1/inferenceservice/utils/utils.go, MergeServingRuntimeAndInferenceServiceSpecs,
MergeRuntimeContainers, MergePodSpec, ReplacePlaceholders, UpdateImageTag;
pkg/utils/container_merge.go, MergeContainerWithPatch). All at
https://github.com/kserve/kserve (master of 2026-08).

Where the input also holds what KServe rendered (the predictor Deployment of a raw deployment,
the Knative revision's Deployment, or their Pods), that rendered pod spec is the component's
template: it is what runs, with KServe's and Knative's defaults, the -gpu image tag and the
storage initializer already in it. Otherwise the template is derived from the InferenceService
and the runtime in the input, with what KServe and Knative add themselves (see `_kserve_defaults`).

Every template names the InferenceService as the object to change: its containers point at
`spec.<component>.containers[i]` when the user declared them, and the model container at
`spec.<component>.<model key>` (`spec.predictor.model`), the place a fix is written (KServe merges
that spec over the runtime's container, so any field set there wins). Containers KServe or
Knative inject (storage-initializer, queue-proxy, a runtime's extra containers) point at the
component itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping, str_map, template_metadata, template_spec
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

INFERENCE_SERVICE = "InferenceService.serving.kserve.io"
SERVING_RUNTIME = "ServingRuntime.serving.kserve.io"
CLUSTER_SERVING_RUNTIME = "ClusterServingRuntime.serving.kserve.io"
KSERVE_TYPES = (INFERENCE_SERVICE, SERVING_RUNTIME, CLUSTER_SERVING_RUNTIME)

ISVC_LABEL = "serving.kserve.io/inferenceservice"  # constants.InferenceServicePodLabelKey
COMPONENT_LABEL = "component"  # constants.KServiceComponentLabel
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
SERVER_TYPE_ANNOTATION = "serving.kserve.io/server-type"
READONLY_ANNOTATION = "storage.kserve.io/readonly"
COMPONENTS = ("predictor", "transformer", "explainer")
KSERVE_CONTAINER = "kserve-container"
TRANSFORMER_CONTAINER = "transformer-container"
STORAGE_INITIALIZER = "storage-initializer"
MODEL_MOUNT = "/mnt/models"  # constants.DefaultModelLocalMountPath
PROVISION_VOLUME = "kserve-provision-location"  # constants.StorageInitializerVolumeName
PVC_SOURCE_VOLUME = "kserve-pvc-source"  # constants.PvcSourceMountName
DEFAULT_PORT = 8080  # constants.InferenceServiceDefaultHttpPort; Knative's default user port
CONFIG_MAP = "inferenceservice-config"

# The predictor's framework keys (v1beta1 PredictorSpec), each rewritten to model.modelFormat.
FRAMEWORKS = (
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
# Keys of a component that hold a model container rather than pod-spec fields.
MODEL_KEYS = ("model", *FRAMEWORKS, "art")
# The ClusterServingRuntime KServe installs for each format with autoSelect (config/runtimes),
# used when the input holds no runtime to select from.
DEFAULT_RUNTIMES = {
    "sklearn": "kserve-sklearnserver",
    "xgboost": "kserve-xgbserver",
    "lightgbm": "kserve-lgbserver",
    "tensorflow": "kserve-tensorflow-serving",
    "pytorch": "kserve-torchserve",
    "triton": "kserve-tritonserver",
    "onnx": "kserve-tritonserver",
    "huggingface": "kserve-huggingfaceserver",
    "pmml": "kserve-pmmlserver",
    "paddle": "kserve-paddleserver",
}
# constants.GetServerTypeFromRuntimeName: the server type of a runtime without the annotation.
_SERVER_TYPES = {
    "kserve-mlserver": "mlserver",
    "kserve-torchserve": "torchserve",
    "kserve-tritonserver": "tritonserver",
    "kserve-tensorflow-serving": "tensorflow-serving",
    "kserve-huggingfaceserver": "huggingfaceserver",
    "kserve-vllmserver": "vllmserver",
}
# UpdateImageTag: the servers whose GPU build is the same image with "-gpu" appended to the tag.
_GPU_SUFFIX_SERVERS = frozenset({"tensorflow-serving", "torchserve", "huggingfaceserver"})
# The storage initializer's resources in KServe's inferenceservice-config (storageInitializer).
_STORAGE_INITIALIZER_DEFAULTS = {
    "cpuRequest": "100m",
    "memoryRequest": "100Mi",
    "cpuLimit": "1",
    "memoryLimit": "1Gi",
}


@dataclass(frozen=True, slots=True)
class ComponentTemplate:
    """One component's pod spec: `spec` and `metadata` as a PodTemplate takes them, `path`
    the component in the InferenceService, `container_paths` where each container's fields
    are written in it, `rendered` when the spec is the one KServe rendered in the input."""

    role: str
    path: str
    spec: Mapping[str, Any]
    metadata: Mapping[str, Any]
    container_paths: tuple[tuple[str, str], ...]
    rendered: bool


# --------------------------------------------------------------------------- components


def deployment_mode(isvc: Resource) -> str:
    """Standard (raw Deployment), Knative or ModelMesh; KServe's configured default
    (Serverless, i.e. Knative) when neither the annotation nor the status says."""
    raw = isvc.annotations.get(DEPLOYMENT_MODE) or str(isvc.status.get("deploymentMode") or "")
    mode = raw.strip()
    if mode in ("RawDeployment", "Standard"):
        return "Standard"
    if mode == "ModelMesh":
        return "ModelMesh"
    return "Knative"


def model_key(component: Mapping[str, Any]) -> str:
    """The key of the component that holds its model container, "" for custom containers."""
    return next((k for k in MODEL_KEYS if isinstance(component.get(k), Mapping)), "")


def model_format(component: Mapping[str, Any]) -> str:
    """The model format a predictor serves (model.modelFormat.name or its framework key)."""
    key = model_key(component)
    if key == "model":
        return str(
            as_mapping(as_mapping(component.get("model")).get("modelFormat")).get("name") or ""
        )
    return key if key in FRAMEWORKS else ""


def runtime_name(component: Mapping[str, Any]) -> str:
    """The runtime a model names (model.runtime), "" when KServe selects one."""
    return str(as_mapping(component.get("model")).get("runtime") or "")


def component_templates(
    isvc: Resource, snapshot: Snapshot | None = None
) -> tuple[ComponentTemplate, ...]:
    """The pod specs of an InferenceService's components. A ModelMesh predictor has none of
    its own: its models load into the ServingRuntime's shared Deployment."""
    if deployment_mode(isvc) == "ModelMesh":
        return ()
    out = []
    for role in COMPONENTS:
        component = as_mapping(isvc.spec.get(role))
        if not component:
            continue
        rendered = _rendered(snapshot, isvc, role) if snapshot is not None else None
        if rendered is not None:
            spec, metadata = rendered
        else:
            spec, metadata = _derived(snapshot, isvc, role, component)
        out.append(
            ComponentTemplate(
                role,
                f"spec.{role}",
                spec,
                metadata,
                _container_paths(role, component, spec),
                rendered is not None,
            )
        )
    return tuple(out)


def _container_paths(
    role: str, component: Mapping[str, Any], spec: Mapping[str, Any]
) -> tuple[tuple[str, str], ...]:
    base = f"spec.{role}"
    declared: dict[str, str] = {}
    for section in ("initContainers", "containers"):
        for index, raw in enumerate(map(as_mapping, as_list(component.get(section)))):
            name = str(raw.get("name") or "")
            if not name and section == "containers" and index == 0:
                name = KSERVE_CONTAINER  # CustomPredictor.Default names it
            if name:
                declared.setdefault(name, f"{base}.{section}[{index}]")
    key = model_key(component)
    if key:
        declared[KSERVE_CONTAINER] = f"{base}.{key}"
    names = [
        str(as_mapping(c).get("name", ""))
        for section in ("initContainers", "containers")
        for c in as_list(spec.get(section))
    ]
    return tuple((name, declared.get(name, base)) for name in names if name)


# --------------------------------------------------------------------------- rendered


def rendering_inference_service(snapshot: Snapshot, resource: Resource) -> Resource | None:
    """The InferenceService that rendered `resource` (a Deployment, ReplicaSet or Pod labelled
    serving.kserve.io/inferenceservice, owned by a Knative revision or by a controller the
    input does not hold), None for anything else. Raw-deployment objects name the
    InferenceService in their ownerReferences and are found by those."""
    if resource.ref.kind_name == "InferenceService":
        return None
    name = resource.labels.get(ISVC_LABEL)
    if not name:
        return None
    controllers = [
        as_mapping(r)
        for r in as_list(resource.metadata.get("ownerReferences"))
        if as_mapping(r).get("controller") is True
    ]
    if not controllers:
        return None
    return snapshot.get(INFERENCE_SERVICE, resource.ref.namespace, name)


def _rendered(
    snapshot: Snapshot, isvc: Resource, role: str
) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The pod spec and metadata KServe rendered for the component, when the input holds its
    Deployment (the newest, when a canary keeps two revisions) or else one of its Pods."""
    namespace, name = isvc.ref.namespace, isvc.ref.name

    def ours(resource: Resource, labels: Mapping[str, str], spec: Mapping[str, Any]) -> bool:
        if resource.ref.namespace != namespace or labels.get(ISVC_LABEL) != name:
            return False
        if labels.get(COMPONENT_LABEL, "predictor") != role:
            return False
        names = {str(as_mapping(c).get("name", "")) for c in as_list(spec.get("containers"))}
        return KSERVE_CONTAINER in names or TRANSFORMER_CONTAINER in names

    deployments = [
        d
        for d in snapshot.with_label("Deployment", ISVC_LABEL, name)
        if ours(d, str_map(template_metadata(d.spec).get("labels")), template_spec(d.spec))
    ]
    if deployments:
        newest = max(
            deployments,
            key=lambda d: (str(d.metadata.get("creationTimestamp") or ""), d.ref.name),
        )
        return template_spec(newest.spec), template_metadata(newest.spec)
    pods = [p for p in snapshot.with_label("Pod", ISVC_LABEL, name) if ours(p, p.labels, p.spec)]
    if pods:
        pod = max(pods, key=lambda p: (p.status.get("phase") == "Running", p.ref.name))
        return pod.spec, pod.metadata
    return None


# --------------------------------------------------------------------------- derived


def _derived(
    snapshot: Snapshot | None, isvc: Resource, role: str, component: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The component's pod spec as KServe builds it from the InferenceService (and the
    runtime, when the input holds it)."""
    spec = {k: v for k, v in component.items() if k not in _NOT_POD_SPEC}
    labels = {**isvc.labels, **str_map(component.get("labels"))}
    annotations = str_map(component.get("annotations"))
    key = model_key(component)
    user_containers = [dict(as_mapping(c)) for c in as_list(component.get("containers"))]
    if key:
        model = dict(as_mapping(component.get(key)))
        runtime = select_runtime(snapshot, isvc, component) if snapshot is not None else None
        containers = _model_containers(isvc, key, model, runtime, user_containers)
        if runtime is None:
            _default_runtime_shm(component, containers[0], spec)
        else:
            spec = merge_pod_spec(as_mapping(runtime.spec), spec)
            runtime_spec = runtime.spec
            labels = {**str_map(runtime_spec.get("labels")), **labels}
            annotations = {**str_map(runtime_spec.get("annotations")), **annotations}
        spec["containers"] = containers
    elif user_containers:
        if len(user_containers) == 1 or not user_containers[0].get("name"):
            user_containers[0]["name"] = KSERVE_CONTAINER  # CustomPredictor/Transformer.Default
        spec["containers"] = user_containers
    _kserve_defaults(snapshot, isvc, component, spec)
    return spec, {"labels": labels, "annotations": annotations}


# Component fields that are not pod-spec fields (ComponentExtensionSpec, the model keys, the
# predictor's multi-node workerSpec and storage fields).
_NOT_POD_SPEC = frozenset(
    {
        *MODEL_KEYS,
        "minReplicas",
        "maxReplicas",
        "scaleTarget",
        "scaleMetric",
        "scaleMetricType",
        "autoScaling",
        "containerConcurrency",
        "timeout",
        "canaryTrafficPercent",
        "logger",
        "batcher",
        "labels",
        "annotations",
        "deploymentStrategy",
        "workerSpec",
        "storageUris",
        "storageContainerName",
        "name",
    }
)


# Fields of a model spec that are not corev1.Container fields (PredictorExtensionSpec, ModelSpec,
# ARTExplainerSpec).
_NOT_CONTAINER = (
    "modelFormat",
    "runtime",
    "runtimeVersion",
    "protocolVersion",
    "storageUri",
    "storageURI",
    "storage",
    "type",
    "config",
)


def _model_containers(
    isvc: Resource,
    key: str,
    model: dict[str, Any],
    runtime: Resource | None,
    user_containers: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """buildPodSpec: the model's kserve-container (merged over the runtime's), the
    transformer-container (runtime's and InferenceService's merged), the runtime's other
    containers, then the InferenceService's other containers."""
    runtime_version = str(model.get("runtimeVersion") or "")
    for field in _NOT_CONTAINER:
        model.pop(field, None)
    runtime_containers = (
        [dict(as_mapping(c)) for c in as_list(runtime.spec.get("containers"))] if runtime else []
    )
    base = next((c for c in runtime_containers if c.get("name") == KSERVE_CONTAINER), None)
    container = merge_container(base, model) if base is not None else dict(model)
    container["name"] = KSERVE_CONTAINER
    container = _replace_placeholders(container, isvc)
    _update_image_tag(container, runtime_version, runtime)
    out = [container]
    runtime_transformer = next(
        (c for c in runtime_containers if c.get("name") == TRANSFORMER_CONTAINER), None
    )
    user_transformer = next(
        (c for c in user_containers if c.get("name") == TRANSFORMER_CONTAINER), None
    )
    if runtime_transformer is not None and user_transformer is not None:
        out.append(
            _replace_placeholders(merge_container(runtime_transformer, user_transformer), isvc)
        )
    elif runtime_transformer is not None or user_transformer is not None:
        out.append(_replace_placeholders(runtime_transformer or user_transformer or {}, isvc))
    out.extend(
        c
        for c in runtime_containers
        if c.get("name") not in (KSERVE_CONTAINER, TRANSFORMER_CONTAINER)
    )
    out.extend(c for c in user_containers if c.get("name") != TRANSFORMER_CONTAINER)
    return out


# KServe's own ClusterServingRuntimes that mount a memory-backed /dev/shm in kserve-container
# (config/runtimes/kserve-huggingfaceserver.yaml, kserve-vllmserver.yaml: volume devshm,
# emptyDir medium Memory). When the input does not hold the runtime, the InferenceService still
# gets it, so no check reports the runtime's 64 MiB /dev/shm for it.
_RUNTIMES_WITH_SHM = frozenset({"kserve-huggingfaceserver", "kserve-vllmserver"})


def _default_runtime_shm(
    component: Mapping[str, Any], container: dict[str, Any], spec: dict[str, Any]
) -> None:
    name = runtime_name(component) or DEFAULT_RUNTIMES.get(model_format(component), "")
    if name not in _RUNTIMES_WITH_SHM:
        return
    mounts = [as_mapping(m) for m in as_list(container.get("volumeMounts"))]
    if not any(m.get("mountPath") == "/dev/shm" for m in mounts):
        container["volumeMounts"] = [*mounts, {"name": "devshm", "mountPath": "/dev/shm"}]
    volumes = as_list(spec.get("volumes"))
    if not any(as_mapping(v).get("name") == "devshm" for v in volumes):
        spec["volumes"] = [*volumes, {"name": "devshm", "emptyDir": {"medium": "Memory"}}]


def _kserve_defaults(
    snapshot: Snapshot | None,
    isvc: Resource,
    component: Mapping[str, Any],
    spec: dict[str, Any],
) -> None:
    """What KServe and Knative add to every component pod, so that no finding blames the
    InferenceService for it:

    - a container port 8080 on kserve-container when it declares none: Knative's default user
      port, and the port KServe's raw Service targets (reconcilers/service/service_reconciler.go);
    - a TCP readiness probe on kserve-container and transformer-container when they have none:
      the raw Deployment reconciler adds it on the first port (reconcilers/deployment/
      deployment_reconciler.go, setDefaultPodSpec), Knative adds the same default
      (knative/serving pkg/apis/serving/v1/revision_defaults.go, applyProbes);
    - for a single storageUri, what the pod webhook injects (pkg/webhook/admission/pod/
      storage_initializer_injector.go, CommonStorageInitialization; pkg/utils/storage.go,
      AddModelMount): a pvc:// source mounted at /mnt/models, or else the storage-initializer
      init container downloading into an emptyDir `kserve-provision-location` mounted at
      /mnt/models (read-only in the model container unless storage.kserve.io/readonly is
      "false"). A volume of that name the user declares is kept (AddModelMount), which is how
      a sizeLimit is given. oci:// (modelcar) sources are not modelled.
    """
    containers = [dict(as_mapping(c)) for c in as_list(spec.get("containers"))]
    for container in containers:
        if container.get("name") not in (KSERVE_CONTAINER, TRANSFORMER_CONTAINER):
            continue
        if container.get("name") == KSERVE_CONTAINER and not as_list(container.get("ports")):
            container["ports"] = [{"containerPort": DEFAULT_PORT, "protocol": "TCP"}]
        if not container.get("readinessProbe"):
            ports = [as_mapping(p) for p in as_list(container.get("ports"))]
            port = ports[0].get("containerPort", DEFAULT_PORT) if ports else DEFAULT_PORT
            container["readinessProbe"] = {
                "tcpSocket": {"port": port},
                "timeoutSeconds": 1,
                "periodSeconds": 10,
                "successThreshold": 1,
                "failureThreshold": 3,
            }
    spec["containers"] = containers
    uri = storage_uri(component)
    if not uri or uri.startswith("oci://"):
        return
    readonly = isvc.annotations.get(READONLY_ANNOTATION) != "false"
    targets = [c for c in containers if c.get("name") in (KSERVE_CONTAINER, TRANSFORMER_CONTAINER)]
    if not targets:
        return
    if uri.startswith("pvc://"):
        claim, _, sub_path = uri[len("pvc://") :].partition("/")
        volume = {"name": PVC_SOURCE_VOLUME, "persistentVolumeClaim": {"claimName": claim}}
        mount: dict[str, Any] = {
            "name": PVC_SOURCE_VOLUME,
            "mountPath": MODEL_MOUNT,
            "readOnly": readonly,
        }
        if sub_path:
            mount["subPath"] = sub_path
    else:
        volume = {"name": PROVISION_VOLUME, "emptyDir": {}}
        mount = {"name": PROVISION_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": readonly}
        init = as_list(spec.get("initContainers"))
        if not any(as_mapping(c).get("name") == STORAGE_INITIALIZER for c in init):
            spec["initContainers"] = [*init, _storage_initializer(snapshot, uri)]
    for container in targets:
        mounts = [as_mapping(m) for m in as_list(container.get("volumeMounts"))]
        if not any(m.get("mountPath") == MODEL_MOUNT for m in mounts):
            container["volumeMounts"] = [*mounts, mount]
    volumes = as_list(spec.get("volumes"))
    if not any(as_mapping(v).get("name") == volume["name"] for v in volumes):
        spec["volumes"] = [*volumes, volume]


def storage_uri(component: Mapping[str, Any]) -> str:
    """The single model URI a component downloads: the model's storageUri (or storage.path's
    key), an explainer's storageUri, or a custom container's STORAGE_URI env variable."""
    key = model_key(component)
    if key:
        model = as_mapping(component.get(key))
        uri = model.get("storageUri") or model.get("storageURI")
        return str(uri or "")
    for container in map(as_mapping, as_list(component.get("containers"))):
        if container.get("name", KSERVE_CONTAINER) != KSERVE_CONTAINER:
            continue
        for entry in map(as_mapping, as_list(container.get("env"))):
            if entry.get("name") == "STORAGE_URI" and entry.get("value"):
                return str(entry["value"])
    return ""


def _storage_initializer(snapshot: Snapshot | None, uri: str) -> dict[str, Any]:
    """The init container the pod webhook injects (utils.CreateInitContainerWithConfig), with
    the image and resources of inferenceservice-config when the input holds it (the image
    is unknown otherwise)."""
    config = {**_STORAGE_INITIALIZER_DEFAULTS, **_config_section(snapshot, "storageInitializer")}
    container: dict[str, Any] = {
        "name": STORAGE_INITIALIZER,
        "args": [uri, MODEL_MOUNT],
        "resources": {
            "requests": {"cpu": config["cpuRequest"], "memory": config["memoryRequest"]},
            "limits": {"cpu": config["cpuLimit"], "memory": config["memoryLimit"]},
        },
        "volumeMounts": [{"name": PROVISION_VOLUME, "mountPath": MODEL_MOUNT}],
    }
    if config.get("image"):
        container["image"] = str(config["image"])
    return container


def _config_section(snapshot: Snapshot | None, key: str) -> dict[str, Any]:
    """One JSON section of KServe's inferenceservice-config ConfigMap, {} when not in the input."""
    if snapshot is None:
        return {}
    for config_map in snapshot.of("ConfigMap"):
        if config_map.ref.name != CONFIG_MAP:
            continue
        raw = as_mapping(config_map.raw.get("data")).get(key)
        try:
            parsed = json.loads(str(raw)) if raw else {}
        except ValueError:
            return {}
        return (
            {str(k): v for k, v in parsed.items() if v not in ("", None)}
            if isinstance(parsed, dict)
            else {}
        )
    return {}


# --------------------------------------------------------------------------- runtimes


def select_runtime(
    snapshot: Snapshot, isvc: Resource, component: Mapping[str, Any]
) -> Resource | None:
    """The ServingRuntime or ClusterServingRuntime a predictor's model runs on, when the input
    holds it: the named one (a ServingRuntime of the namespace first), else the first that
    supports the format with autoSelect (namespace runtimes, then cluster ones, each by
    the format's priority), as reconcileModel / GetSupportingRuntimes do. Disabled and
    multi-model runtimes are skipped, and a runtime with a workerSpec only serves a predictor
    with one."""
    name = runtime_name(component)
    namespace = isvc.ref.namespace
    if name:
        return snapshot.get(SERVING_RUNTIME, namespace, name) or snapshot.get(
            CLUSTER_SERVING_RUNTIME, "", name
        )
    fmt = model_format(component)
    if not fmt:
        return None
    version = str(
        as_mapping(as_mapping(component.get("model")).get("modelFormat")).get("version") or ""
    )
    multinode = "workerSpec" in component
    found = []
    for group in (
        snapshot.in_namespace(SERVING_RUNTIME, namespace),
        snapshot.of(CLUSTER_SERVING_RUNTIME),
    ):
        candidates = [
            r
            for r in sorted(group, key=lambda r: r.ref.name)
            if _supports(r, fmt, version) and ("workerSpec" in r.spec) == multinode
        ]
        found.extend(sorted(candidates, key=lambda r: -_priority(r, fmt)))
    return found[0] if found else None


def _supports(runtime: Resource, fmt: str, version: str) -> bool:
    spec = runtime.spec
    if spec.get("disabled") is True or spec.get("multiModel") is True:
        return False
    for entry in map(as_mapping, as_list(spec.get("supportedModelFormats"))):
        if str(entry.get("name", "")) != fmt or entry.get("autoSelect") is not True:
            continue
        if not version or str(entry.get("version") or "") == version:
            return True
    return False


def _priority(runtime: Resource, fmt: str) -> int:
    for entry in map(as_mapping, as_list(runtime.spec.get("supportedModelFormats"))):
        if str(entry.get("name", "")) == fmt and isinstance(entry.get("priority"), int):
            return int(entry["priority"])
    return -1  # a runtime without a priority comes after those with one


def server_type(runtime: Resource | None, name: str) -> str:
    """The runtime's serving.kserve.io/server-type annotation, else the type its name implies."""
    if runtime is not None:
        annotated = runtime.annotations.get(SERVER_TYPE_ANNOTATION, "")
        if annotated:
            return annotated
        name = runtime.ref.name
    return _SERVER_TYPES.get(name, "")


# --------------------------------------------------------------------------- merging

# Lists a strategic merge patch merges by key (corev1.Container, corev1.PodSpec); other lists
# are replaced by the patch's.
_CONTAINER_LIST_KEYS = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "resizePolicy": "resourceName",
}
_POD_LIST_KEYS = {"volumes": "name", "imagePullSecrets": "name", "resourceClaims": "name"}
# MergePodSpec: the runtime's pod-level fields that reach the pod.
_RUNTIME_POD_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "volumes",
    "imagePullSecrets",
    "schedulerName",
    "resourceClaims",
)


def merge_container(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """MergeRuntimeContainers: a strategic merge of the InferenceService's container over the
    runtime's, the runtime's args followed by the InferenceService's."""
    merged = _strategic_merge(base, overlay, _CONTAINER_LIST_KEYS)
    args = [*as_list(base.get("args")), *as_list(overlay.get("args"))]
    if args:
        merged["args"] = args
    if not merged.get("name"):
        merged["name"] = base.get("name")
    return merged


def merge_pod_spec(runtime_spec: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """MergePodSpec: the component's pod spec merged over the runtime's pod-level fields."""
    base = {k: runtime_spec[k] for k in _RUNTIME_POD_FIELDS if k in runtime_spec}
    return _strategic_merge(base, pod_spec, _POD_LIST_KEYS)


def _strategic_merge(
    base: Mapping[str, Any], patch: Mapping[str, Any], list_keys: Mapping[str, str]
) -> dict[str, Any]:
    merged = dict(base)
    for key, value in patch.items():
        old = merged.get(key)
        if key in list_keys and isinstance(old, list) and isinstance(value, list):
            merged[key] = _merge_list(old, value, list_keys[key])
        elif isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = _strategic_merge(old, value, {})
        else:
            merged[key] = value
    return merged


def _merge_list(old: Iterable[Any], new: Iterable[Any], key: str) -> list[Any]:
    """Items of `new` replace the items of `old` with the same key; new keys are appended."""

    def key_of(item: Any) -> str | int | None:
        value = as_mapping(item).get(key)
        return value if isinstance(value, str | int) and not isinstance(value, bool) else None

    new = list(new)
    replacements = {k: i for i in new if (k := key_of(i)) is not None}
    out = []
    for item in old:
        k = key_of(item)
        out.append(replacements.pop(k) if k is not None and k in replacements else item)
    out.extend(i for i in new if key_of(i) is None or key_of(i) in replacements)
    return out


_PLACEHOLDER = re.compile(
    r"\{\{\s*\.(Name|Namespace|Labels\.([\w.-]+)|Annotations\.([\w.-]+))\s*\}\}"
)


def _replace_placeholders(container: Mapping[str, Any], isvc: Resource) -> dict[str, Any]:
    """ReplacePlaceholders: {{.Name}}, {{.Namespace}}, {{.Labels.x}} and {{.Annotations.x}} in
    the runtime's container, filled from the InferenceService's metadata."""

    def value(match: re.Match[str]) -> str:
        what, label, annotation = match.groups()
        if what == "Name":
            return isvc.ref.name
        if what == "Namespace":
            return isvc.ref.namespace
        if label is not None:
            return isvc.labels.get(label, "")
        return isvc.annotations.get(annotation or "", "")

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return _PLACEHOLDER.sub(value, node)
        if isinstance(node, Mapping):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return dict(walk(container))


_TAG = re.compile(r":([\w.\-_]*)$")


def _update_image_tag(
    container: dict[str, Any], runtime_version: str, runtime: Resource | None
) -> None:
    """UpdateImageTag: runtimeVersion replaces the image's tag; without it, a GPU request (an
    nvidia.com/gpu or nvidia.com/mig-* limit) on TF Serving, TorchServe or the Hugging Face
    server appends -gpu to the tag. A digest-pinned image is left alone. (KServe up to 0.15.2
    counted only nvidia.com/gpu, kserve#4640.)"""
    image = str(container.get("image") or "")
    if not image or "@sha256:" in image:
        return
    if runtime_version:
        container["image"] = (
            _TAG.sub(f":{runtime_version}", image)
            if _TAG.search(image.rsplit("/", 1)[-1])
            else f"{image}:{runtime_version}"
        )
        return
    if server_type(runtime, "") not in _GPU_SUFFIX_SERVERS or not _TAG.search(
        image.rsplit("/", 1)[-1]
    ):
        return
    limits = as_mapping(as_mapping(container.get("resources")).get("limits"))
    gpu = any(str(k) == "nvidia.com/gpu" or str(k).startswith("nvidia.com/mig-") for k in limits)
    if gpu and not image.endswith("-gpu"):
        container["image"] = f"{image}-gpu"
