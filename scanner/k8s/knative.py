"""Knative Serving: the pod a Service's revisions run, built the way Knative builds it.

A Knative Service (serving.knative.dev/v1) carries a revision template at `spec.template`; each
change to it creates a Revision, and the revision reconciler turns the Revision into a
Deployment whose pods run the user's containers beside Knative's queue-proxy. What Knative
adds is modelled here so that no finding blames the Service for it, from knative/serving
(main of 2026-08, commit 98e5ef90aa70):

- pkg/apis/serving/v1/revision_defaults.go (RevisionSpec.SetDefaults): unnamed containers are
  named `user-container` (`user-container-<n>` when there are several; init containers
  `init-container[-<n>]`), the serving container (the only one, or the one with a port) gets a
  TCP readiness probe when it has none, `enableServiceLinks` defaults to false
  (config-defaults `enable-service-links`) and `timeoutSeconds` to 300 (`revision-timeout-
  seconds`).
- pkg/reconciler/revision/resources/deploy.go (makePodSpec, BuildUserContainers,
  makeServingContainer, makeContainer, BuildPodSpec): the serving container's ports become the
  single `user-port` (its first containerPort, else 8080) with `PORT` in its environment; every
  user container gets K_REVISION, K_CONFIGURATION and K_SERVICE and a preStop hook; HTTP, TCP
  and gRPC readiness probes are taken off the user containers (queue-proxy runs them against
  the container); a liveness probe without a port is pointed at the user port; the queue-proxy
  container is appended (pkg/reconciler/revision/resources/queue.go, makeQueueContainer: no
  resources unless config-deployment sets them); terminationGracePeriodSeconds is the revision
  timeout; runtimeClassName comes from config-deployment `runtime-class-name` when the
  template sets none (pkg/deployment/config.go, PodRuntimeClassName: the entry whose label
  selector matches the revision's labels, the most specific one winning).
- pkg/reconciler/configuration/resources/revision.go (updateRevisionLabels): the revision's pods
  carry serving.knative.dev/configuration and serving.knative.dev/service = the Service name.

config-deployment is read from the input when it holds it (the ConfigMap in knative-serving).
Fields behind Knative's feature flags (`kubernetes.podspec-tolerations`, `-nodeselector`,
`-affinity`, `-runtimeclassname`, `-securitycontext`... in config-features, disabled by
default) are read as written: the webhook refuses a Service that sets one while its flag is off,
so one in the input was accepted.

The template is named `revision` and points at `spec.template.spec`, where a fix is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.operator_templates import OperatorTemplate
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

KNATIVE_SERVICE = "Service.serving.knative.dev"
ROLE = "revision"
TEMPLATE_PATH = "spec.template.spec"
SERVICE_LABEL = "serving.knative.dev/service"
CONFIGURATION_LABEL = "serving.knative.dev/configuration"
QUEUE_PROXY = "queue-proxy"
USER_CONTAINER = "user-container"
INIT_CONTAINER = "init-container"
USER_PORT_NAME = "user-port"
DEFAULT_USER_PORT = 8080
DEFAULT_TIMEOUT_SECONDS = 300
PROGRESS_DEADLINE_ANNOTATION = "serving.knative.dev/progress-deadline"
DEFAULT_PROGRESS_DEADLINE_S = 600
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_GO_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
QUEUE_ADMIN_PORT = 8022  # networking.QueueAdminPort: the preStop drain endpoint
DRAIN_PATH = "/wait-for-drain"  # queue.RequestQueueDrainPath
QUEUE_PORT = 8012  # networking.BackendHTTPPort
SYSTEM_NAMESPACE = "knative-serving"
DEPLOYMENT_CONFIG = "config-deployment"
_PROBE_KINDS = ("httpGet", "tcpSocket", "grpc")
# The controller owns a revision's Deployment: Revision (serving.knative.dev) -> Deployment.
_REVISION = ("Revision", "serving.knative.dev")


def revision_templates(
    service: Resource, snapshot: Snapshot | None = None
) -> tuple[OperatorTemplate, ...]:
    """The pod of the Service's revisions (none without spec.template.spec). The queue-proxy
    container Knative adds points at the template itself."""
    template = as_mapping(service.spec.get("template"))
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return ()
    metadata = as_mapping(template.get("metadata"))
    labels = {
        **str_map(metadata.get("labels")),
        CONFIGURATION_LABEL: service.ref.name,
        SERVICE_LABEL: service.ref.name,
    }
    pod = _revision_pod(spec, service, _deployment_config(snapshot), labels)
    pod_metadata = {"labels": labels, "annotations": str_map(metadata.get("annotations"))}
    injected = ((QUEUE_PROXY, TEMPLATE_PATH),)
    return (OperatorTemplate(ROLE, TEMPLATE_PATH, pod, pod_metadata, injected),)


def _revision_pod(
    spec: Mapping[str, Any], service: Resource, config: Mapping[str, Any], labels: Mapping[str, str]
) -> dict[str, Any]:
    pod = {k: v for k, v in spec.items() if k not in _REVISION_ONLY}
    init = _named(spec.get("initContainers"), INIT_CONTAINER)
    if init:
        pod["initContainers"] = init
    containers = _named(spec.get("containers"), USER_CONTAINER)
    serving = _serving_index(containers)
    port = _user_port(containers[serving] if serving is not None else {})
    knative_env = [
        {"name": "K_CONFIGURATION", "value": service.ref.name},
        {"name": "K_SERVICE", "value": service.ref.name},
    ]
    revision = str_map(as_mapping(service.spec.get("template")).get("metadata")).get("name")
    if revision:
        knative_env.insert(0, {"name": "K_REVISION", "value": revision})
    pod["containers"] = [
        *(
            _user_container(c, port if index == serving else None, knative_env)
            for index, c in enumerate(containers)
        ),
        _queue_proxy(config, port),
    ]
    timeout = spec.get("timeoutSeconds")
    pod["terminationGracePeriodSeconds"] = (
        timeout if isinstance(timeout, int) and timeout > 0 else DEFAULT_TIMEOUT_SECONDS
    )
    pod.setdefault("enableServiceLinks", False)
    runtime_class = _runtime_class(config, labels)
    if runtime_class and not pod.get("runtimeClassName"):
        pod["runtimeClassName"] = runtime_class
    return pod


# RevisionSpec fields that are not PodSpec fields.
_REVISION_ONLY = frozenset(
    {"containerConcurrency", "timeoutSeconds", "idleTimeoutSeconds", "responseStartTimeoutSeconds"}
)


def _named(raw: object, default: str) -> list[dict[str, Any]]:
    """applyDefaultContainerNames: `default`, or `default-<n>` when there are several or the
    name is taken, for containers without a name."""
    containers = [dict(as_mapping(c)) for c in as_list(raw)]
    taken = {str(c.get("name")) for c in containers if c.get("name")}
    suffix = 0
    for container in containers:
        if container.get("name"):
            continue
        name = default
        if len(containers) > 1 or name in taken:
            while f"{default}-{suffix}" in taken:
                suffix += 1
            name = f"{default}-{suffix}"
            suffix += 1
        taken.add(name)
        container["name"] = name
    return containers


def _serving_index(containers: list[dict[str, Any]]) -> int | None:
    """The container that serves traffic: the only one, else the one that declares a port."""
    if len(containers) == 1:
        return 0
    return next((i for i, c in enumerate(containers) if as_list(c.get("ports"))), None)


def _user_port(container: Mapping[str, Any]) -> int:
    """getUserPort: the serving container's first containerPort, else 8080."""
    ports = [as_mapping(p) for p in as_list(container.get("ports"))]
    port = ports[0].get("containerPort") if ports else None
    return port if isinstance(port, int) and port > 0 else DEFAULT_USER_PORT


def _user_container(
    container: Mapping[str, Any], port: int | None, knative_env: list[dict[str, str]]
) -> dict[str, Any]:
    """makeServingContainer (the serving container: the user port, PORT, the liveness probe
    pointed at the port) and makeContainer (every user container)."""
    out = dict(container)
    env = [*as_list(container.get("env"))]
    if port is not None:
        out["ports"] = [{"name": USER_PORT_NAME, "containerPort": port}]
        env.append({"name": "PORT", "value": str(port)})
        liveness = as_mapping(container.get("livenessProbe"))
        for kind in ("httpGet", "tcpSocket"):
            if isinstance(liveness.get(kind), Mapping):
                out["livenessProbe"] = {**liveness, kind: {**liveness[kind], "port": port}}
    out["env"] = [*env, *knative_env]
    out["lifecycle"] = {"preStop": {"httpGet": {"port": QUEUE_ADMIN_PORT, "path": DRAIN_PATH}}}
    if any(k in as_mapping(container.get("readinessProbe")) for k in _PROBE_KINDS):
        del out["readinessProbe"]  # queue-proxy runs it against the container
    return out


def _queue_proxy(config: Mapping[str, Any], port: int) -> dict[str, Any]:
    """makeQueueContainer: the sidecar that proxies requests and runs the readiness probe
    (queueSecurityContext); resources only when config-deployment sets them."""
    container: dict[str, Any] = {
        "name": QUEUE_PROXY,
        "ports": [
            {"name": "http-autometric", "containerPort": 9090},
            {"name": "http-usermetric", "containerPort": 9091},
            {"name": "queue-port", "containerPort": QUEUE_PORT},
            {"name": "https-port", "containerPort": 8112},
        ],
        "env": [{"name": "USER_PORT", "value": str(port)}],
        "readinessProbe": {
            "httpGet": {
                "port": QUEUE_PORT,
                "httpHeaders": [{"name": "K-Network-Probe", "value": "queue"}],
            }
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    image = config.get("queue-sidecar-image") or config.get("queueSidecarImage")
    if image:
        container["image"] = str(image)
    resources: dict[str, dict[str, str]] = {}
    for kind, key in (("requests", "request"), ("limits", "limit")):
        for resource in ("cpu", "memory", "ephemeral-storage"):
            value = config.get(f"queue-sidecar-{resource}-{key}")
            if value:
                resources.setdefault(kind, {})[resource] = str(value)
    if resources:
        container["resources"] = resources
    return container


def _deployment_config(snapshot: Snapshot | None) -> Mapping[str, Any]:
    """The data of knative-serving/config-deployment, {} when the input does not hold it."""
    if snapshot is None:
        return {}
    found = snapshot.get("ConfigMap", SYSTEM_NAMESPACE, DEPLOYMENT_CONFIG)
    return as_mapping(found.raw.get("data")) if found is not None else {}


@dataclass(frozen=True, slots=True)
class ProgressDeadline:
    """How long Knative waits for a revision's pods to become Ready before it marks the
    revision failed and scales it to zero: `seconds` (None when the setting is not a Go
    duration, which Knative refuses) and where the value comes from."""

    seconds: float | None
    source: str


def progress_deadline(service: Resource, snapshot: Snapshot) -> ProgressDeadline:
    """The revision template's serving.knative.dev/progress-deadline annotation, else
    config-deployment's progress-deadline, else Knative's default (600s: pkg/deployment/
    config.go, ProgressDeadlineDefault; pkg/reconciler/revision/resources/deploy.go sets the
    Deployment's progressDeadlineSeconds from the annotation)."""
    metadata = as_mapping(as_mapping(service.spec.get("template")).get("metadata"))
    raw = str_map(metadata.get("annotations")).get(PROGRESS_DEADLINE_ANNOTATION)
    if raw is not None:
        return ProgressDeadline(
            _go_seconds(raw), f"its {PROGRESS_DEADLINE_ANNOTATION} annotation, {raw}"
        )
    configured = str_map(_deployment_config(snapshot)).get("progress-deadline")
    if configured is not None:
        return ProgressDeadline(
            _go_seconds(configured), f"config-deployment's progress-deadline, {configured}"
        )
    return ProgressDeadline(DEFAULT_PROGRESS_DEADLINE_S, "Knative's default progress deadline")


def _go_seconds(duration: str) -> float | None:
    """A Go duration ("600s", "10m", "1h30m") in seconds, None when it is not one."""
    text = duration.strip()
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _GO_UNIT_S[unit] for number, unit in parts)


def _runtime_class(config: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """PodRuntimeClassName: the runtime class whose selector matches the labels, the one with the
    most selector labels winning (ties by name)."""
    try:
        classes = yaml.safe_load(str(config.get("runtime-class-name") or "")) or {}
    except yaml.YAMLError:
        return ""
    best, specificity = "", -1
    for name, entry in sorted(as_mapping(classes).items()):
        selector = str_map(as_mapping(entry).get("selector"))
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        if len(selector) > specificity:
            best, specificity = str(name), len(selector)
    return best


def rendering_knative_service(snapshot: Snapshot, resource: Resource) -> Resource | None:
    """The Knative Service whose revision rendered `resource` (a Deployment Knative created
    for a Revision, which the input does not hold; its ReplicaSets and Pods reach the
    Deployment through their own owners), None for anything else."""
    name = resource.labels.get(SERVICE_LABEL)
    if not name or resource.ref.kind_name == "Service":
        return None
    for ref in map(as_mapping, as_list(resource.metadata.get("ownerReferences"))):
        group = str(ref.get("apiVersion", "")).split("/", 1)[0]
        if ref.get("controller") is True and (str(ref.get("kind", "")), group) == _REVISION:
            return snapshot.get(KNATIVE_SERVICE, resource.ref.namespace, name)
    return None
