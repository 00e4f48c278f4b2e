from __future__ import annotations

import ipaddress
import json
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import (
    RAY,
    RAY_SERVICE,
    TORCHSERVE,
    TRITON,
    VLLM,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    ObjRef,
    PodTemplate,
    Resource,
    Result,
    ServerClass,
    Severity,
    Snapshot,
    argv,
    as_list,
    as_mapping,
    check,
    classify,
    env_value,
    failed,
    image_tag,
    map_selector_matches,
    passed,
    pod_templates,
    ray_cluster_spec_path,
    str_map,
    templates_of,
    top_owner,
)

from ._common import (
    flag_value,
    has_flag,
    truthy,
)

ADMIN, METRICS, INFERENCE = "admin", "metrics", "inference"

# Ports each server listens on without configuration, so that a numeric targetPort reaches it
# even when the container does not declare the port (declaring ports is informational).
_DEFAULT_PORTS: dict[str, frozenset[int]] = {
    TORCHSERVE: frozenset({8080, 8081, 8082, 7070, 7071}),
    TRITON: frozenset({8000, 8001, 8002}),
    VLLM: frozenset({8000}),
    "tgi": frozenset({80, 8080}),
    RAY: frozenset({8265, 10001, 6379, 8080, 8000}),
    "sglang": frozenset({30000}),
    "ollama": frozenset({11434}),
    "nim": frozenset({8000}),
}
_ADMIN_PORTS: dict[str, frozenset[int]] = {
    TORCHSERVE: frozenset({8081, 7071}),  # management REST and gRPC
    RAY: frozenset({8265, 10001, 6379}),  # dashboard/Jobs API, client server, GCS
}
_METRICS_PORTS: dict[str, frozenset[int]] = {
    TORCHSERVE: frozenset({8082}),
    TRITON: frozenset({8002}),
    RAY: frozenset({8080}),
}
_INTERNAL_LB_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
    "networking.gke.io/load-balancer-type": "internal",
    "cloud.google.com/load-balancer-type": "internal",
    "service.beta.kubernetes.io/azure-load-balancer-internal": "true",
}
_OPEN_RANGES = ("0.0.0.0/0", "::/0")
_ONE_STEP_DOWN = {
    Severity.CRITICAL: Severity.HIGH,
    Severity.HIGH: Severity.MEDIUM,
    Severity.MEDIUM: Severity.LOW,
    Severity.LOW: Severity.LOW,
}


@dataclass(frozen=True, slots=True)
class _Exposure:
    container: Container
    server: ServerClass
    number: int | None  # the container port, when known
    port_name: str  # the container port's name, "" when undeclared
    kind: str
    why: str  # what makes an inference port an admin port, "" otherwise


@check(
    id="GPU-SRV-003",
    title=(
        "Model-server management, metrics and dashboard ports are not exposed through "
        "LoadBalancer or NodePort Services"
    ),
    category=Category.SERVING,
    severity=Severity.CRITICAL,
    requires=("Service", WORKLOAD_TYPES),
    rationale="""
        TorchServe's management API (8081/7071) registers models, and a model archive is
        arbitrary Python; the Ray dashboard and Jobs API (8265) and client port (10001) run
        arbitrary code by design; Triton with dynamic model loading turns its inference port
        into a model-loading API. A LoadBalancer, NodePort or externalIPs Service publishes such
        ports outside the cluster, usually without any authentication. Metrics ports (TorchServe
        8082, Triton 8002) leak model names and traffic and are an easy DoS target.
    """,
    detection="""
        Services of type LoadBalancer or NodePort, or with externalIPs, that have a selector:
        each port's targetPort (number or name; the port when unset) is resolved against the
        containers of the pod templates the selector matches in the Service's namespace (or,
        when it matches none, of the Pods it selects, one per owner: operators select by
        labels they add to the pods, as KubeRay does). A
        container port is attributed to the container that declares it, or, when no container
        declares a numeric port, to a model server that listens on it by default. Containers are
        classified by image and command line (SRV-CLASSIFY); the rule that matched is printed.
        Not flagged: ClusterIP Services; inference ports (the purpose of a public Service)
        unless Triton runs with --model-control-mode=explicit without --http-restricted-api
        (POLL mode refuses load and unload requests), or vLLM with VLLM_SERVER_DEV_MODE=1;
        ports served by a sidecar such as an auth proxy; selector-less Services (their
        endpoints are not known offline). A head Service KubeRay renders is reported on the
        RayCluster, RayService or RayJob whose headGroupSpec.serviceType gives it its type
        (the operator reconciles the Service back).
    """,
    severity_evidence="""
        Admin ports critical and metrics ports high when the input shows them reachable from
        anywhere: a LoadBalancer that is neither internal nor source-restricted, a NodePort
        while a Node in the input has an ExternalIP address, a public externalIP. One step
        lower when token auth is on (TorchServe >= 0.11 without --disable-token-auth, Ray
        RAY_AUTH_MODE=token), and one step lower for an internal or source-restricted load
        balancer, a NodePort with no node shown to have an external address, or private
        externalIPs (reachable from the cluster's networks, not from anyone).
    """,
    remediation="""
        # $change
        apiVersion: v1
        kind: Service
        metadata:
          name: $name-internal
          namespace: $namespace
        spec:
          type: ClusterIP
          selector: $selector
          ports:
            - name: $port_name
              port: $port
              targetPort: $target
        # Keep the public Service inference-only, behind an authenticating gateway (OIDC/mTLS),
        # and restrict it: loadBalancerSourceRanges or an internal load balancer annotation.
        # Triton: drop --model-control-mode explicit/poll or add --http-restricted-api.
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://kubernetes.io/docs/concepts/services-networking/service/",
        "https://docs.pytorch.org/serve/_sources/security.md.txt",
        "https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/customization_guide/deploy.html",
        "https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-auth.html",
        "https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_management.md",
        "https://kubernetes.io/docs/reference/node/node-status/#addresses",
        "https://github.com/ray-project/kuberay/blob/master/ray-operator/controllers/ray/common/service.go",
        "https://github.com/ray-project/kuberay/pull/2670",
    ),
)
def model_server_control_ports_not_publicly_exposed(snapshot: Snapshot) -> Iterator[Result]:
    by_namespace: dict[str, list[PodTemplate]] = defaultdict(list)
    for template in pod_templates(snapshot):
        by_namespace[template.owner.ref.namespace].append(template)
    public_nodes = any(_has_external_address(n) for n in snapshot.of("Node"))
    for service in snapshot.of("Service"):
        exposure = _exposure(service)
        selector = str_map(service.spec.get("selector"))
        if not exposure or not selector:
            continue
        templates = [
            t
            for t in by_namespace.get(service.ref.namespace, ())
            if map_selector_matches(selector, t.labels)
        ] or _pods_selected(snapshot, service, selector)
        if not any(classify(c) for t in templates for c in t.containers(include_init=False)):
            continue  # fronts no model server: not this check's business
        limited = _limited_reach(service, public_nodes)
        yield from _evaluate(snapshot, service, exposure, limited, selector, templates)


def _pods_selected(
    snapshot: Snapshot, service: Resource, selector: Mapping[str, str]
) -> list[PodTemplate]:
    """When the selector matches no template: the Pods it selects, one per top owner. An
    operator can select by labels it adds to the pods it creates (KubeRay's ray.io/cluster,
    ray.io/node-type), which no template in the input carries."""
    seen: set[ObjRef] = set()
    out: list[PodTemplate] = []
    for pod in snapshot.in_namespace("Pod", service.ref.namespace):
        if not map_selector_matches(selector, pod.labels):
            continue
        owner = top_owner(snapshot, pod).ref
        if owner not in seen:
            seen.add(owner)
            out.extend(templates_of(pod))
    return out


def _evaluate(
    snapshot: Snapshot,
    service: Resource,
    exposure: str,
    limited: str,
    selector: Mapping[str, str],
    templates: list[PodTemplate],
) -> Iterator[Result]:
    found = False
    ray = _ray_owner(snapshot, service)
    for index, port in enumerate(map(as_mapping, as_list(service.spec.get("ports")))):
        target = port.get("targetPort", port.get("port"))
        for template in templates:
            for hit in _resolve(template, target):
                if hit.kind == INFERENCE:
                    continue
                found = True
                yield _finding(service, ray, exposure, limited, selector, index, port, hit)
    if not found:
        yield passed(
            service,
            f"{exposure} exposes no model-server management, metrics or dashboard port",
        )


def _ray_owner(snapshot: Snapshot, service: Resource) -> Resource | None:
    """The KubeRay object whose headGroupSpec.serviceType gives `service` its type: KubeRay
    (common/service.go) renders the head Services from it and reconciles them back, so a change
    to the Service does not last."""
    owner = top_owner(snapshot, service)
    ray = owner.ref != service.ref and ray_cluster_spec_path(owner.ref.kind) is not None
    return owner if ray else None


def _finding(
    service: Resource,
    ray: Resource | None,
    exposure: str,
    limited: str,
    selector: Mapping[str, str],
    index: int,
    port: Mapping[str, Any],
    hit: _Exposure,
) -> Result:
    severity = Severity.CRITICAL if hit.kind == ADMIN else Severity.HIGH
    notes = []
    if hit.kind == ADMIN and _authenticated(hit.container, hit.server.name):
        severity = Severity.HIGH
        notes.append("token auth is on")
    if limited:
        severity = _ONE_STEP_DOWN[severity]
        notes.append(limited)
    owner = hit.container.template.owner.ref
    if hit.why:
        notes.insert(0, hit.why)
    target = str(port.get("targetPort", port.get("port", "")))
    shown = " ".join(
        filter(None, (str(hit.number or ""), f"({hit.port_name})" * bool(hit.port_name)))
    )
    message = (
        f"{exposure} publishes {hit.server.name} {hit.kind} port {shown} of {owner} "
        f"{hit.container.describe()}; classified by {hit.server.rule}"
    )
    if notes:
        message += f" ({'; '.join(notes)})"
    change = (
        f"{service.ref}: remove spec.ports[{index}] ({hit.server.name} {hit.kind} port "
        f"{target})\n# from the public Service and reach it through an internal Service instead:"
    )
    subject, path = service, f"spec.ports[{index}]"
    if ray is not None:
        subject, path = ray, f"{ray_cluster_spec_path(ray.ref.kind)}.headGroupSpec.serviceType"
        message = f"Service {service.ref.name} (KubeRay renders it from {path}): {message}"
        change = (
            f"{ray.ref}: set {path} to ClusterIP (the head Service carries every head port)\n"
            "# and publish Ray Serve alone"
            + (" (spec.serveService)" if ray.ref.kind == RAY_SERVICE else "")
            + "; reach the head through an internal Service:"
        )
    return failed(
        subject,
        message,
        path=path,
        severity=severity,
        fix={
            "change": change,
            "index": str(index),
            "server": hit.server.name,
            "port_kind": hit.kind,
            "port_name": str(port.get("name") or hit.port_name or hit.kind),
            "port": str(port.get("port", hit.number or "")),
            "target": target,
            "selector": json.dumps(dict(selector), sort_keys=True),
        },
    )


def _exposure(service: Resource) -> str:
    """How the Service reaches outside the cluster ("" when it does not)."""
    kind = str(service.spec.get("type") or "ClusterIP")
    if kind in ("LoadBalancer", "NodePort"):
        return f"{kind} Service"
    if as_list(service.spec.get("externalIPs")):
        return "Service with externalIPs"
    return ""


def _limited_reach(service: Resource, public_nodes: bool) -> str:
    """Why the Service is not shown reachable from anywhere, "" when it is."""
    kind = service.spec.get("type")
    if kind == "LoadBalancer":
        annotations = service.annotations
        if any(
            annotations.get(key, "").lower() == value
            for key, value in _INTERNAL_LB_ANNOTATIONS.items()
        ):
            return "load balancer is internal"
        ranges = [str(r).strip() for r in as_list(service.spec.get("loadBalancerSourceRanges"))]
        if ranges and not any(r in _OPEN_RANGES for r in ranges):
            return "load balancer is source-restricted"
        return ""
    if kind == "NodePort":
        if public_nodes:
            return ""
        return "no Node in the input has an ExternalIP address: reachable from the nodes' networks"
    ips = [str(ip) for ip in as_list(service.spec.get("externalIPs"))]
    if ips and all(_private(ip) for ip in ips):
        return "its externalIPs are private addresses"
    return ""


def _has_external_address(node: Resource) -> bool:
    return any(
        as_mapping(a).get("type") == "ExternalIP"
        and not _private(str(as_mapping(a).get("address")))
        for a in as_list(node.status.get("addresses"))
    )


def _private(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return ip.is_private or ip.is_loopback or ip.is_link_local


def _resolve(template: PodTemplate, target: object) -> Iterator[_Exposure]:
    """The model-server container port a Service targetPort lands on in `template`."""
    containers = [c for c in template.containers() if not c.init or c.is_sidecar]
    if isinstance(target, str) and not target.isdigit():
        for container in containers:
            for declared in map(as_mapping, as_list(container.raw.get("ports"))):
                if declared.get("name") == target:
                    yield from _classified(container, _int(declared.get("containerPort")), target)
                    return  # a named port resolves to the first container declaring it
        return
    number = _int(target)
    if number is None:
        return
    for container in containers:
        for declared in map(as_mapping, as_list(container.raw.get("ports"))):
            if _int(declared.get("containerPort")) == number:
                yield from _classified(container, number, str(declared.get("name") or ""))
                return
    for container in containers:
        server = classify(container)
        if server and number in _DEFAULT_PORTS.get(server.name, ()):
            yield from _classified(container, number, "")
            return


def _classified(container: Container, number: int | None, name: str) -> Iterator[_Exposure]:
    server = classify(container)
    if server is not None:  # a sidecar (auth proxy, mesh) owns the port: not a model server
        kind, why = _port_kind(container, server, number, name)
        yield _Exposure(container, server, number, name, kind, why)


def _port_kind(
    container: Container, server: ServerClass, number: int | None, name: str
) -> tuple[str, str]:
    lowered = name.lower()
    if (number in _ADMIN_PORTS.get(server.name, ())) or any(
        word in lowered for word in ("management", "dashboard", "admin")
    ):
        return ADMIN, ""
    if number in _METRICS_PORTS.get(server.name, ()) or "metrics" in lowered:
        return METRICS, ""
    if server.name == TRITON and _triton_dynamic_loading(argv(container)):
        return ADMIN, "--model-control-mode allows loading models (code) over this port"
    if server.name == VLLM and env_value(container, "VLLM_SERVER_DEV_MODE") == "1":
        return ADMIN, "VLLM_SERVER_DEV_MODE=1 enables the development endpoints"
    return INFERENCE, ""


def _triton_dynamic_loading(args: list[str]) -> bool:
    """Only EXPLICIT mode serves the model load API; NONE and POLL answer it with an error."""
    mode = (flag_value(args, "--model-control-mode") or "none").lower()
    return mode == "explicit" and not has_flag(args, "--http-restricted-api")


def _authenticated(container: Container, server: str) -> bool:
    if server == TORCHSERVE:
        disabled = has_flag(argv(container), "--disable-token-auth") or truthy(
            env_value(container, "TS_DISABLE_TOKEN_AUTHORIZATION")
        )
        return not disabled and _torchserve_has_token_auth(image_tag(container.image))
    if server == RAY:
        return (env_value(container, "RAY_AUTH_MODE") or "").lower() == "token"
    return False


def _torchserve_has_token_auth(tag: str) -> bool:
    """Token authorization is on by default from TorchServe 0.11.0; unknown tags are not."""
    parts = tag.split("-", 1)[0].split(".")
    try:
        version: Sequence[int] = [int(p) for p in parts[:2]]
    except ValueError:
        return False
    return len(version) == 2 and tuple(version) >= (0, 11)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
