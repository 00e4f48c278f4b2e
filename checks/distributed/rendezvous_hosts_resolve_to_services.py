import ipaddress
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    map_selector_matches,
    passed,
    pod_templates,
    str_map,
)

# Operators that inject MASTER_ADDR / rendezvous settings and create the Services themselves.
_OPERATOR_KINDS = frozenset({"PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org"})
_ENV_KEYS = ("MASTER_ADDR", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT", "RDZV_ENDPOINT")
_FLAGS = ("--rdzv_endpoint", "--rdzv-endpoint", "--master_addr", "--master-addr")
_TCP_URL = re.compile(r"tcp://([^\s:/'\"]+)")
_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_LOCAL_HOSTS = frozenset({"localhost", "localhost.localdomain"})
_CLUSTER_SUFFIXES = (".svc.cluster.local", ".svc")
# Labels the Job and StatefulSet controllers add to every pod (or a per-pod value): a Service
# selector on them still matches the job's pods.
_JOB_LABELS = ("job-name", "batch.kubernetes.io/job-name")
_PER_POD_LABELS = frozenset(
    {
        "batch.kubernetes.io/job-completion-index",
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
        "controller-uid",
        "batch.kubernetes.io/controller-uid",
    }
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    source: str  # "env MASTER_ADDR" or "--rdzv_endpoint"
    host: str


@check(
    id="GPU-DIST-003",
    title="Rendezvous and master addresses resolve to a Service that selects the job's pods",
    category=Category.DISTRIBUTED,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES, "Service"),
    rationale="""
        MASTER_ADDR, --rdzv_endpoint or a tcp:// init method that names a DNS name no Service
        backs (an invented trainer-0.trainer, a Service in another namespace, a headless
        Service whose selector misses the pods, an Indexed Job without a subdomain) leaves
        every rank waiting in rendezvous until the timeout, holding all its GPUs.
    """,
    detection="""
        Hosts in MASTER_ADDR, PET_MASTER_ADDR, PET_RDZV_ENDPOINT, RDZV_ENDPOINT env values and
        in --rdzv_endpoint / --master_addr / tcp:// arguments, with $(VAR) and $VAR resolved
        from the container's env (unresolved values, IP literals and localhost are skipped).
        PyTorchJob and MPIJob templates are skipped: the operator injects these values. A host
        resolves as a Service name (svc, svc.ns, svc.ns.svc[.cluster.local]) when that Service
        exists and, in the pod's namespace, selects the pods (controller-added job-name labels
        count); or as a pod record (host.subdomain[.ns]) when a headless Service named after the
        subdomain selects the pods, the template sets that subdomain (a StatefulSet's
        serviceName) and the host is one of its pod hostnames (<job>-<index> of an Indexed Job,
        <sts>-<ordinal>, or spec.hostname). ExternalName and selector-less Services pass.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        apiVersion: v1
        kind: Service
        metadata:
          name: $service
          namespace: $namespace
        spec:
          clusterIP: None                 # headless: one DNS record per pod
          publishNotReadyAddresses: true  # ranks must resolve before they are Ready
          selector: $selector
        ---
        # and in the $kind:
        $pod_patch
    """,
    fix_kind=FixKind.MANIFEST,
    remediation_generic="""
        # <kind> <namespace>/<name>: a headless Service that gives each pod a DNS record
        apiVersion: v1
        kind: Service
        metadata:
          name: <service>
          namespace: <namespace>
        spec:
          clusterIP: None                 # headless: one DNS record per pod
          publishNotReadyAddresses: true  # ranks must resolve before they are Ready
          selector: {<label>: <value>}    # the pod template's labels; a Job: {batch.kubernetes.io/job-name: <name>}
        ---
        # and in the <kind> (a Job's pod template cannot change: recreate it with this):
        spec:
          template:
            spec:
              subdomain: <service>   # must equal the Service name
              containers:            # when an existing ClusterIP Service is kept, the new headless one is
                - name: <container>  # <service>-headless: point the rendezvous host at it
                  env:
                    - {name: MASTER_ADDR, value: <pod-hostname>.<service>}
        # a StatefulSet: spec.serviceName: <service> instead (it cannot change in place: delete the
        # StatefulSet with --cascade=orphan and apply it again)
    """,
    references=(
        "https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/",
        "https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/",
        "https://github.com/kubernetes/kubernetes/issues/74950",
        "https://github.com/kubeflow/training-operator/blob/1417bbc35b6e7840b3ecab1cec17dbf553ad9e85/pkg/controller.v1/pytorch/envvar.go",
    ),
)
def rendezvous_hosts_resolve_to_services(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if template.owner.ref.kind in _OPERATOR_KINDS or _volcano_svc_plugin(template.owner):
            continue
        for container in template.containers():
            seen: set[str] = set()
            for endpoint in _endpoints(container):
                if endpoint.host not in seen:
                    seen.add(endpoint.host)
                    yield _judge(snapshot, template, container, endpoint)


def _volcano_svc_plugin(owner: Resource) -> bool:
    """Volcano's svc plugin creates the headless Service and pod hostnames itself."""
    return owner.ref.kind == "Job.batch.volcano.sh" and "svc" in as_mapping(
        owner.spec.get("plugins")
    )


def _endpoints(container: Container) -> Iterator[Endpoint]:
    env = {
        name: str(entry["value"])
        for name, entry in container.env().items()
        if isinstance(entry.get("value"), str | int)
    }
    for key in _ENV_KEYS:
        if key in env:
            host = _host(_expand(env[key], env))
            if host:
                yield Endpoint(f"env {key}", host)
    tokens: list[str] = []
    for part in as_list(container.raw.get("command")) + as_list(container.raw.get("args")):
        try:
            tokens.extend(shlex.split(str(part)))
        except ValueError:
            tokens.extend(str(part).split())
    for index, token in enumerate(tokens):
        for flag in _FLAGS:
            value = None
            if token.startswith(flag + "="):
                value = token.split("=", 1)[1]
            elif token == flag and index + 1 < len(tokens):
                value = tokens[index + 1]
            if value is not None and (host := _host(_expand(value, env))):
                yield Endpoint(flag, host)
        for match in _TCP_URL.finditer(token):
            if host := _host(_expand(match.group(1), env)):
                yield Endpoint("tcp:// init method", host)


def _expand(value: str, env: Mapping[str, str]) -> str:
    value = _K8S_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)
    return _SHELL_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)


def _host(value: str) -> str:
    """The DNS name in an endpoint, "" for IPs, localhost and what could not be resolved."""
    host = value.strip().split("://", 1)[-1]
    if host.startswith("["):
        return ""  # an IPv6 literal
    host = host.split("/", 1)[0].rsplit(":", 1)[0] if ":" in host else host.split("/", 1)[0]
    host = host.strip().rstrip(".").lower()
    if not host or "$" in host or host in _LOCAL_HOSTS:
        return ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    return ""


def _judge(
    snapshot: Snapshot, template: PodTemplate, container: Container, endpoint: Endpoint
) -> Result:
    namespace = template.owner.ref.namespace
    host = endpoint.host
    explicit = host.endswith(_CLUSTER_SUFFIXES)
    for suffix in _CLUSTER_SUFFIXES:
        if host.endswith(suffix):
            host = host[: -len(suffix)]
            break
    parts = host.split(".")
    reasons: list[str] = []
    # DNS search order in the pod: <name>.<ns>.svc first (pod records under a subdomain of
    # the pod's namespace), then <name>.svc (a Service in another namespace).
    candidates: list[tuple[str, ...]] = []
    if len(parts) == 1:
        candidates.append(("service", parts[0], namespace))
    elif len(parts) == 2:
        if not explicit:
            candidates.append(("pod", parts[0], parts[1], namespace))
        candidates.append(("service", parts[0], parts[1]))
    elif len(parts) == 3:
        candidates.append(("pod", parts[0], parts[1], parts[2]))
    else:
        return passed(container, f"{endpoint.source} names {endpoint.host}, outside the cluster")
    for candidate in candidates:
        if candidate[0] == "service":
            reason = _service_reason(snapshot, template, candidate[1], candidate[2])
        else:
            reason = _pod_reason(snapshot, template, candidate[1], candidate[2], candidate[3])
        if not reason:
            return passed(container, f"{endpoint.source} {endpoint.host} resolves to its pods")
        reasons.append(reason)
    # Explain the reading whose Service exists (the one the author most likely meant).
    chosen = next(
        (i for i, c in enumerate(candidates) if snapshot.get("Service", c[-1], c[-2]) is not None),
        0,
    )
    problem = f"{endpoint.source} {endpoint.host} does not resolve: {reasons[chosen]}"
    return failed(
        container,
        f"{problem}; every rank waits in rendezvous holding its GPUs",
        fix=_fix(snapshot, container, endpoint, candidates[chosen], problem),
    )


def _service_reason(snapshot: Snapshot, template: PodTemplate, name: str, namespace: str) -> str:
    service = snapshot.get("Service", namespace, name)
    if service is None:
        return f"no Service {name} in namespace {namespace}"
    if service.spec.get("type") == "ExternalName" or not service.spec.get("selector"):
        return ""
    if namespace != template.owner.ref.namespace:
        return f"Service {namespace}/{name} can only select pods of namespace {namespace}"
    if not _selects(service, template):
        return (
            f"Service {name} selects none of the pods ({_flow(str_map(service.spec['selector']))})"
        )
    return ""


def _pod_reason(
    snapshot: Snapshot, template: PodTemplate, hostname: str, subdomain: str, namespace: str
) -> str:
    owner = template.owner
    if namespace != owner.ref.namespace:
        return f"pod records live in the pod's namespace {owner.ref.namespace}, not {namespace}"
    service = snapshot.get("Service", namespace, subdomain)
    if service is None:
        return f"no headless Service {subdomain} in namespace {namespace}"
    if service.spec.get("clusterIP") != "None":
        return f"Service {subdomain} is not headless (clusterIP set), so it has no pod records"
    if not _selects(service, template):
        return f"headless Service {subdomain} does not select the pods"
    if _subdomain(template) != subdomain:
        field = "spec.serviceName" if owner.ref.kind == "StatefulSet" else "spec.subdomain"
        return f"the pod template's {field} is not {subdomain}"
    if not _has_hostname(template, hostname):
        return f"no pod of {owner.ref} has the hostname {hostname}"
    return ""


def _subdomain(template: PodTemplate) -> str:
    if template.owner.ref.kind == "StatefulSet":
        return str(template.owner.spec.get("serviceName", ""))
    return str(template.spec.get("subdomain", ""))


def _has_hostname(template: PodTemplate, hostname: str) -> bool:
    """Whether one of the template's pods is named `hostname`. Ordinals are parsed, never
    enumerated: `completions` can be any number (a billion would be a billion names)."""
    owner = template.owner
    spec = owner.spec
    if template.spec.get("hostname"):
        return hostname == str(template.spec["hostname"])
    if owner.ref.kind == "StatefulSet":
        count = spec.get("replicas")
    elif owner.ref.kind == "Job" and spec.get("completionMode") == "Indexed":
        count = spec.get("completions")
    else:
        return False  # other pods get a DNS record under a subdomain only with spec.hostname
    prefix, _, ordinal = hostname.rpartition("-")
    return (
        prefix == owner.ref.name
        and 0 < len(ordinal) <= 18
        and ordinal.isascii()
        and ordinal.isdigit()
        and str(int(ordinal)) == ordinal
        and int(ordinal) < _count(count)
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _pod_labels(template: PodTemplate) -> dict[str, str]:
    labels = dict(template.labels)
    if template.owner.ref.kind == "Job":
        labels.update(dict.fromkeys(_JOB_LABELS, template.owner.ref.name))
    return labels


def _selects(service: Resource, template: PodTemplate) -> bool:
    selector = {
        k: v for k, v in str_map(service.spec.get("selector")).items() if k not in _PER_POD_LABELS
    }
    return map_selector_matches(selector, _pod_labels(template))


def _flow(mapping: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(mapping.items())), separators=(", ", ": "))


def _fix(
    snapshot: Snapshot,
    container: Container,
    endpoint: Endpoint,
    candidate: tuple[str, ...],
    problem: str,
) -> dict[str, str]:
    template = container.template
    owner = template.owner
    service = candidate[2] if candidate[0] == "pod" else candidate[1]
    if owner.ref.kind == "Job":
        selector = {"batch.kubernetes.io/job-name": owner.ref.name}
    else:
        selector = template.labels or {"app": owner.ref.name}
    existing = snapshot.get("Service", owner.ref.namespace, service)
    rename = ""
    if candidate[0] == "pod" and existing is not None and existing.spec.get("clusterIP") != "None":
        # A Service's clusterIP cannot be changed to None in place, and other clients may use
        # the ClusterIP Service: the pod records come from a new headless Service.
        rename = f"{candidate[1]}.{service}-headless"
        service = f"{service}-headless"
    if owner.ref.kind == "StatefulSet":
        patch = (
            "# spec.serviceName cannot change in place: if it differs, delete the StatefulSet\n"
            "# with --cascade=orphan and apply it again with\n"
            f"spec:\n  serviceName: {service}"
        )
    elif "[" in template.path:
        patch = f"# set subdomain: {service} in {template.path}"
    else:
        keys = template.path.split(".")
        pad = "  " * len(keys)
        lines = [f"{'  ' * depth}{key}:" for depth, key in enumerate(keys)]
        lines.append(f"{pad}subdomain: {service}   # must equal the Service name")
        if rename:
            lines += _point_at(container, endpoint, rename, pad)
        patch = "\n".join(lines)
    if owner.ref.kind in ("Job", "Pod"):
        patch = (
            f"# (a {owner.ref.kind}'s pod template cannot change: recreate it with this)\n{patch}"
        )
    return {"problem": problem, "service": service, "selector": _flow(selector), "pod_patch": patch}


def _point_at(container: Container, endpoint: Endpoint, host: str, pad: str) -> list[str]:
    """The container's endpoint rewritten to `host`: the env entry, or the command and args
    that spell the old host out (lists are replaced whole by a strategic merge)."""
    section = "initContainers" if container.init else "containers"
    lines = [f"{pad}{section}:", f"{pad}  - name: {container.name}"]
    if endpoint.source.startswith("env "):
        name = endpoint.source.removeprefix("env ")
        old = str(container.env()[name].get("value", ""))
        # A value built from $(VARS) is replaced by the host it resolved to.
        value = old.replace(endpoint.host, host) if endpoint.host in old else host
        entry = json.dumps({"name": name, "value": value})
        return [*lines, f"{pad}    env:", f"{pad}      - {entry}"]
    for field in ("command", "args"):
        parts = [str(p) for p in as_list(container.raw.get(field))]
        if any(endpoint.host in part for part in parts):
            rewritten = [part.replace(endpoint.host, host) for part in parts]
            lines.append(f"{pad}    {field}: {json.dumps(rewritten)}")
    if len(lines) == 2:  # the host is built from variables
        return [f"{pad}# and point {endpoint.source} at {host}"]
    return lines
