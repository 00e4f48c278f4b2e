"""Spark on Kubernetes: the driver and executor pods of a SparkApplication, as they are built.

A SparkApplication (sparkoperator.k8s.io/v1beta2, kubeflow/spark-operator) holds no pod spec:
`spec.driver` and `spec.executor` are SparkPodSpecs (cores, memory, gpu, image, env,
volumeMounts, tolerations...). A driver or executor pod is made in three steps, modelled here
(kubeflow/spark-operator at commit 38082f3318e9; Apache Spark's Kubernetes backend):

1. The pod template: `spec.<role>.template` (Spark >= 3.0) or a pod with one container named
   spark-kubernetes-driver / spark-kubernetes-executor (internal/controller/sparkapplication/
   submission.go, buildDriverPodTemplate, buildExecutorPodTemplate).
2. spark-submit's configuration (submission.go, driverConfOption, executorConfOption,
   nodeSelectorOption), applied by Spark's BasicDriverFeatureStep / BasicExecutorFeatureStep
   (https://spark.apache.org/docs/latest/running-on-kubernetes.html): the image
   (`spec.<role>.image`, else `spec.image`), a CPU request of `coreRequest`, else `cores`
   (default 1) and a CPU limit of `coreLimit`; a memory request and limit of the JVM memory
   (`memory`, default 1g) plus its overhead (`memoryOverhead`, else `memoryOverheadFactor`
   (default 0.1) of the memory, at least 384 MiB); custom resources of sparkConf
   `spark.<role>.resource.<name>.amount` with `.vendor` as limits of `<vendor>/<name>`;
   `spec.nodeSelector`; the service account of `spec.<role>.serviceAccount`.
3. The operator's mutating webhook, which mutates every pod it launches (internal/webhook/
   sparkpod_defaulter.go, mutateSparkPod; on in the Helm chart by default): env, envFrom,
   the `spec.volumes` its `volumeMounts` name, ports, hostNetwork, init and sidecar
   containers, DNS config, priority class, scheduler (`spec.batchScheduler` first), node
   selector, affinity, tolerations, `memoryLimit`, the GPU (addGPU: `spec.<role>.gpu` becomes
   `resources.limits[gpu.name] = gpu.quantity` on the Spark container; a GPU without a name
   or quantity is ignored), the container and pod security contexts, termination grace period,
   lifecycle and shareProcessNamespace.

Each template is named `driver` or `executor` and points at `spec.<role>`, where most of these
fields are written: the Spark container's own fields (image, env, volumeMounts,
securityContext) sit at `spec.<role>` itself, sidecars at `spec.<role>.sidecars[i]`, init
containers at `spec.<role>.initContainers[i]`, other containers of the pod template at
`spec.<role>.template.spec.containers[i]`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.operator_templates import OperatorTemplate
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

SPARK_APPLICATION = "SparkApplication.sparkoperator.k8s.io"
ROLES = ("driver", "executor")
# common.SparkDriverContainerName, common.Spark3DefaultExecutorContainerName; findContainer also
# takes common.SparkExecutorContainerName ("executor", Spark 2).
CONTAINER_NAMES = {
    "driver": ("spark-kubernetes-driver",),
    "executor": ("spark-kubernetes-executor", "executor"),
}
APP_NAME_LABEL = "sparkoperator.k8s.io/app-name"
LAUNCHED_LABEL = "sparkoperator.k8s.io/launched-by-spark-operator"
ROLE_LABEL = "spark-role"
_KUEUE_PREFIX = "kueue.x-k8s.io/"  # not propagated to the pods (driverConfOption)
_DEFAULT_MEMORY_MIB = 1024  # spark.driver.memory, spark.executor.memory: 1g
_MIN_OVERHEAD_MIB = 384  # spark.{driver,executor}.minMemoryOverhead
_DEFAULT_OVERHEAD_FACTOR = Decimal("0.1")
_JAVA_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_MIB_PER_UNIT = {"k": Decimal(1) / 1024, "": Decimal(1), "m": Decimal(1), "g": Decimal(1024)}
_MIB_PER_UNIT |= {"t": Decimal(1024**2), "p": Decimal(1024**3)}
_CUSTOM_RESOURCE = re.compile(r"^spark\.(driver|executor)\.resource\.([^.]+)\.amount$")


def role_templates(app: Resource) -> tuple[OperatorTemplate, ...]:
    """The driver and executor pods of a SparkApplication."""
    return tuple(_role_template(app, role) for role in ROLES)


def _role_template(app: Resource, role: str) -> OperatorTemplate:
    spec = app.spec
    part = as_mapping(spec.get(role))
    base = f"spec.{role}"
    template = as_mapping(part.get("template"))
    pod = dict(as_mapping(template.get("spec")))
    containers = [dict(as_mapping(c)) for c in as_list(pod.get("containers"))]
    paths = [
        (str(c.get("name", "")), f"{base}.template.spec.containers[{i}]")
        for i, c in enumerate(containers)
    ]
    if not containers:
        containers = [{"name": CONTAINER_NAMES[role][0]}]
    main = next((i for i, c in enumerate(containers) if c.get("name") in CONTAINER_NAMES[role]), 0)
    containers[main] = _spark_container(app, role, containers[main])
    paths = [(n, p) for n, p in paths if n != containers[main].get("name")]
    paths.append((str(containers[main]["name"]), base))
    init = [dict(as_mapping(c)) for c in as_list(pod.get("initContainers"))]
    for key, target in (("initContainers", init), ("sidecars", containers)):
        for index, extra in enumerate(map(as_mapping, as_list(part.get(key)))):
            if not any(_same(extra, c) for c in target):
                target.append(dict(extra))
                paths.append((str(extra.get("name", "")), f"{base}.{key}[{index}]"))
    pod["containers"] = containers
    if init:
        pod["initContainers"] = init
    _pod_fields(app, role, part, pod)
    labels = {
        **str_map(as_mapping(template.get("metadata")).get("labels")),
        **{k: v for k, v in app.labels.items() if not k.startswith(_KUEUE_PREFIX)},
        **str_map(part.get("labels")),
        APP_NAME_LABEL: app.ref.name,
        LAUNCHED_LABEL: "true",
        ROLE_LABEL: role,
    }
    annotations = {
        **str_map(as_mapping(template.get("metadata")).get("annotations")),
        **str_map(part.get("annotations")),
    }
    metadata = {"labels": labels, "annotations": annotations}
    return OperatorTemplate(role, base, pod, metadata, tuple(paths), str(containers[main]["name"]))


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """hasContainer: a sidecar or init container already in the pod (same name and image)."""
    return a.get("name") == b.get("name") and a.get("image") == b.get("image")


def _spark_container(app: Resource, role: str, container: dict[str, Any]) -> dict[str, Any]:
    """The Spark container: what spark-submit sets (image, CPU, memory, custom resources) and
    what the webhook adds to it."""
    spec = app.spec
    part = as_mapping(spec.get(role))
    out = dict(container)
    out.setdefault("name", CONTAINER_NAMES[role][0])
    image = part.get("image") or spec.get("image")
    if image:
        out["image"] = str(image)
    if spec.get("imagePullPolicy"):
        out["imagePullPolicy"] = str(spec["imagePullPolicy"])
    resources = as_mapping(out.get("resources"))
    requests = dict(as_mapping(resources.get("requests")))
    limits = dict(as_mapping(resources.get("limits")))
    memory = f"{_pod_memory_mib(spec, part)}Mi"
    requests["memory"] = limits["memory"] = memory
    cores = part.get("coreRequest") or part.get("cores") or 1
    requests["cpu"] = str(cores)
    if part.get("coreLimit"):
        limits["cpu"] = str(part["coreLimit"])
    limits.update(_custom_resources(spec, role))
    if part.get("memoryLimit"):
        limits["memory"] = _k8s_memory(str(part["memoryLimit"]))
    gpu = as_mapping(part.get("gpu"))
    quantity = gpu.get("quantity")
    if gpu.get("name") and isinstance(quantity, int) and quantity > 0:
        limits[str(gpu["name"])] = quantity
    out["resources"] = {"requests": requests, "limits": limits}
    for key in ("env", "envFrom", "ports"):
        if as_list(part.get(key)):
            out[key] = [*as_list(out.get(key)), *as_list(part.get(key))]
    mounts = _mounted(spec, part)
    if mounts:
        out["volumeMounts"] = [*as_list(out.get("volumeMounts")), *mounts]
    for key in ("securityContext", "lifecycle"):
        if isinstance(part.get(key), Mapping):
            out[key] = part[key]
    return out


def _mounted(spec: Mapping[str, Any], part: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """addVolumes: the volumeMounts that name one of spec.volumes (others are dropped)."""
    names = {str(as_mapping(v).get("name")) for v in as_list(spec.get("volumes"))}
    return [
        m
        for m in map(as_mapping, as_list(part.get("volumeMounts")))
        if str(m.get("name")) in names and not str(m.get("name")).startswith("spark-local-dir-")
    ]


def _pod_fields(app: Resource, role: str, part: Mapping[str, Any], pod: dict[str, Any]) -> None:
    """The pod-level fields spark-submit and the webhook set."""
    spec = app.spec
    mounted = {str(m.get("name")) for m in _mounted(spec, part)}
    volumes = [v for v in as_list(spec.get("volumes")) if as_mapping(v).get("name") in mounted]
    if volumes:
        pod["volumes"] = [*as_list(pod.get("volumes")), *volumes]
    selector = {**str_map(pod.get("nodeSelector")), **str_map(spec.get("nodeSelector"))}
    selector.update(str_map(part.get("nodeSelector")))
    if selector:
        pod["nodeSelector"] = selector
    tolerations = as_list(part.get("tolerations"))
    if tolerations:
        pod["tolerations"] = [*as_list(pod.get("tolerations")), *tolerations]
    if as_list(part.get("hostAliases")):
        pod["hostAliases"] = [*as_list(pod.get("hostAliases")), *as_list(part["hostAliases"])]
    for source, target in (
        ("affinity", "affinity"),
        ("dnsConfig", "dnsConfig"),
        ("podSecurityContext", "securityContext"),
        ("terminationGracePeriodSeconds", "terminationGracePeriodSeconds"),
        ("priorityClassName", "priorityClassName"),
        ("serviceAccount", "serviceAccountName"),
    ):
        if part.get(source) not in (None, ""):
            pod[target] = part[source]
    scheduler = spec.get("batchScheduler") or part.get("schedulerName")
    if scheduler:
        pod["schedulerName"] = str(scheduler)
    if part.get("hostNetwork") is True:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    if part.get("shareProcessNamespace") is True:
        pod["shareProcessNamespace"] = True
    secrets = [{"name": str(s)} for s in as_list(spec.get("imagePullSecrets")) if s]
    if secrets:
        pod["imagePullSecrets"] = secrets


def _pod_memory_mib(spec: Mapping[str, Any], part: Mapping[str, Any]) -> int:
    """The Spark container's memory request and limit: the JVM memory plus its overhead."""
    memory = _mib(part.get("memory")) or Decimal(_DEFAULT_MEMORY_MIB)
    overhead = _mib(part.get("memoryOverhead"))
    if overhead is None:
        try:
            factor = Decimal(str(spec.get("memoryOverheadFactor") or _DEFAULT_OVERHEAD_FACTOR))
        except ArithmeticError:
            factor = _DEFAULT_OVERHEAD_FACTOR
        overhead = max(memory * factor, Decimal(_MIN_OVERHEAD_MIB))
    return int(memory + overhead)


def _mib(value: object) -> Decimal | None:
    """A JVM memory string (512m, 2g; no unit: MiB) in MiB, None when absent or unreadable."""
    match = _JAVA_MEMORY.match(str(value)) if value not in (None, "") else None
    if match is None:
        return None
    return Decimal(match.group(1)) * _MIB_PER_UNIT[match.group(2).lower()]


def _k8s_memory(value: str) -> str:
    """util.ConvertJavaMemoryStringToK8sMemoryString: 4g -> 4Gi; other strings as they are."""
    match = _JAVA_MEMORY.match(value)
    if match is None:
        return value
    unit = match.group(2).lower()
    return f"{match.group(1)}{unit.upper()}i" if unit else match.group(1)


def _custom_resources(spec: Mapping[str, Any], role: str) -> dict[str, str]:
    """KubernetesUtils.buildResourcesQuantities: spark.<role>.resource.<name>.amount with a
    .vendor, as a limit of <vendor>/<name> (spark-rapids asks for GPUs this way)."""
    conf = str_map(spec.get("sparkConf"))
    out: dict[str, str] = {}
    for key, amount in sorted(conf.items()):
        match = _CUSTOM_RESOURCE.match(key)
        if match is None or match.group(1) != role:
            continue
        vendor = conf.get(f"spark.{role}.resource.{match.group(2)}.vendor", "")
        if vendor:
            out[f"{vendor}/{match.group(2)}"] = amount
    return out


def launching_application(snapshot: Snapshot, pod: Resource) -> Resource | None:
    """The SparkApplication an executor Pod belongs to. Spark makes the driver Pod the
    executors' controller (the driver names the application through its own ownerReference);
    the operator labels both with the application's name."""
    if pod.ref.kind != "Pod" or pod.labels.get(LAUNCHED_LABEL) != "true":
        return None
    name = pod.labels.get(APP_NAME_LABEL)
    return snapshot.get(SPARK_APPLICATION, pod.ref.namespace, name) if name else None
