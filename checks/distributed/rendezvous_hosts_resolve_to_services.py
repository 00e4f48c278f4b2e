import ipaddress
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpu_audit.api import (
    REDACTED,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    ObjRef,
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
    redact_argv,
    redact_text,
    str_map,
    templates_of,
)

# Operators that inject MASTER_ADDR / rendezvous settings and create the Services themselves.
_OPERATOR_KINDS = frozenset({"PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org"})
_ENV_KEYS = ("MASTER_ADDR", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT", "RDZV_ENDPOINT")
_FLAGS = ("--rdzv_endpoint", "--rdzv-endpoint", "--master_addr", "--master-addr")
_TCP_URL = re.compile(r"tcp://([^\s/'\"]+)")
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
        # Per child Job of a JobSet, per group and pod of a LeaderWorkerSet.
        "jobset.sigs.k8s.io/job-index",
        "jobset.sigs.k8s.io/job-global-index",
        "jobset.sigs.k8s.io/job-key",
        "jobset.sigs.k8s.io/restart-attempt",
        "leaderworkerset.sigs.k8s.io/group-index",
        "leaderworkerset.sigs.k8s.io/group-key",
        "leaderworkerset.sigs.k8s.io/worker-index",
        "leaderworkerset.sigs.k8s.io/template-revision-hash",
    }
)
# Operators that give their pods DNS records themselves: the headless Service (named after the
# subdomain) and the pods' hostnames, modelled in _operator_dns.
JOBSET = "JobSet.jobset.x-k8s.io"
LWS = "LeaderWorkerSet.leaderworkerset.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


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
        JobSets and LeaderWorkerSets are modelled as their controllers run them: a JobSet with
        spec.network.enableDNSHostnames (true by default) gets a headless Service named after
        spec.network.subdomain (default the JobSet name) selecting jobset-name, and its pods
        the hostnames <jobset>-<replicatedJob>-<jobIndex>-<podIndex>; a LeaderWorkerSet gets a
        headless Service named after it (subdomainPolicy Shared, the default; one per group,
        <lws>-<group>, with UniquePerReplica) and the hostnames <lws>-<group> (leader) and
        <lws>-<group>-<worker> (workers 1..size-1). A Service of that name in the input is the
        one that counts (the controllers do not replace an existing one). Their ranks may name
        any pod of the object (the driver's replicated job, the group's leader) and a Service
        that selects any of its templates.
    """,
    severity_evidence="""
        High whenever it fails: the input itself shows that the name has no DNS record the
        pods could resolve (no such Service, one that cannot select them, a hostname no pod
        gets), so every rank waits in rendezvous until the timeout. Names built from variables
        the input does not resolve, and addresses an operator injects, are not judged.
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
        "https://jobset.sigs.k8s.io/docs/concepts/#dns-hostnames-for-pods",
        "https://github.com/kubernetes-sigs/jobset/blob/08dfbdfd682714a9ab929633eca8dc95315187e7/pkg/controllers/jobset_controller.go",
        "https://github.com/kubernetes-sigs/jobset/blob/08dfbdfd682714a9ab929633eca8dc95315187e7/pkg/webhooks/jobset_webhook.go",
        "https://github.com/kubernetes-sigs/lws/blob/060ab4da17eea1f0865fcbd3236bb1075e2cea32/pkg/controllers/pod_controller.go",
        "https://github.com/kubernetes-sigs/lws/blob/060ab4da17eea1f0865fcbd3236bb1075e2cea32/pkg/controllers/leaderworkerset_controller.go",
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
    # The userinfo of https://user:pass@host is no part of the name, and a credential.
    host = host.split("/", 1)[0].rpartition("@")[2]
    if host.startswith("["):
        return ""  # an IPv6 literal
    host = host.rsplit(":", 1)[0]
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
        (
            i
            for i, c in enumerate(candidates)
            if _service(snapshot, template, c[-1], c[-2]) is not None
        ),
        0,
    )
    problem = f"{endpoint.source} {endpoint.host} does not resolve: {reasons[chosen]}"
    return failed(
        container,
        f"{problem}; every rank waits in rendezvous holding its GPUs",
        fix=_fix(snapshot, container, endpoint, candidates[chosen], problem),
    )


def _service_reason(snapshot: Snapshot, template: PodTemplate, name: str, namespace: str) -> str:
    service = _service(snapshot, template, namespace, name)
    if service is None:
        return f"no Service {name} in namespace {namespace}"
    if service.spec.get("type") == "ExternalName" or not service.spec.get("selector"):
        return ""
    if namespace != template.owner.ref.namespace:
        return f"Service {namespace}/{name} can only select pods of namespace {namespace}"
    if not _selects_pods_of(service, template):
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
    dns = _operator_dns(template)
    service = _service(snapshot, template, namespace, subdomain)
    if service is None:
        if dns is not None and dns.subdomains:
            return (
                f"no headless Service {subdomain} in namespace {namespace} (the pods of "
                f"{owner.ref} get their DNS records under {_or(dns.subdomains)}: "
                f"{dns.pattern})"
            )
        return f"no headless Service {subdomain} in namespace {namespace}"
    if service.spec.get("clusterIP") != "None":
        return f"Service {subdomain} is not headless (clusterIP set), so it has no pod records"
    if not _selects_pods_of(service, template):
        return f"headless Service {subdomain} does not select the pods"
    if subdomain not in _subdomains(template):
        if dns is not None and dns.subdomains:
            return (
                f"the pods of {owner.ref} get their DNS records under "
                f"{_or(dns.subdomains)}, not {subdomain}: {dns.pattern}"
            )
        field = "spec.serviceName" if owner.ref.kind == "StatefulSet" else "spec.subdomain"
        return f"the pod template's {field} is not {subdomain}"
    if not _has_hostname(template, hostname, subdomain):
        pattern = f" ({dns.pattern})" if dns is not None else ""
        return f"no pod of {owner.ref} has the hostname {hostname}{pattern}"
    return ""


def _subdomains(template: PodTemplate) -> frozenset[str]:
    """The subdomains the template's pods get DNS records under."""
    dns = _operator_dns(template)
    if dns is not None and dns.subdomains:
        return dns.subdomains
    if template.owner.ref.kind == "StatefulSet":
        return frozenset({str(template.owner.spec.get("serviceName", ""))})
    return frozenset({str(template.spec.get("subdomain", ""))})


def _or(names: frozenset[str]) -> str:
    listed = sorted(names)
    return (
        listed[0]
        if len(listed) == 1
        else f"{', '.join(listed[:3])}{'...' if len(listed) > 3 else ''}"
    )


@dataclass(frozen=True, slots=True)
class _OperatorDns:
    """Pod DNS that a JobSet or LeaderWorkerSet controller sets up itself."""

    services: Mapping[str, Mapping[str, str]]  # the headless Services it creates: selectors
    subdomains: frozenset[str]  # the pods' subdomains
    labels: Mapping[str, str]  # labels it puts on every pod of the template
    pattern: str  # the pods' DNS names, for messages


def _operator_dns(template: PodTemplate) -> _OperatorDns | None:
    owner = template.owner
    name = owner.ref.name
    if owner.ref.kind == JOBSET:
        # jobset_webhook.go defaults enableDNSHostnames to true; jobset_controller.go then
        # sets every pod's subdomain to GetSubdomain (spec.network.subdomain, else the JobSet
        # name) and creates the headless Service of that name selecting jobset-name.
        network = as_mapping(owner.spec.get("network"))
        labels = {JOBSET_NAME_LABEL: name, JOBSET_RJOB_LABEL: template.replica_type}
        pattern = f"{name}-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>"
        if network.get("enableDNSHostnames") is False:
            return _OperatorDns({}, frozenset(), labels, pattern)
        subdomain = str(network.get("subdomain") or name)
        pattern = pattern.replace("<subdomain>", subdomain)
        return _OperatorDns(
            {subdomain: {JOBSET_NAME_LABEL: name}}, frozenset({subdomain}), labels, pattern
        )
    if owner.ref.kind == LWS:
        # Shared (the default): one headless Service named after the LWS, the subdomain of
        # every pod; UniquePerReplica: one per group, named after its leader pod <lws>-<i>.
        labels = {LWS_NAME_LABEL: name}
        policy = as_mapping(owner.spec.get("networkConfig")).get("subdomainPolicy")
        if policy == "UniquePerReplica":
            groups = range(min(_count(owner.spec.get("replicas")), 1000))
            services = {f"{name}-{g}": {LWS_NAME_LABEL: name} for g in groups}
            pattern = f"{name}-<group>[-<worker>].{name}-<group>"
            return _OperatorDns(services, frozenset(services), labels, pattern)
        pattern = f"{name}-<group>[-<worker>].{name}"
        return _OperatorDns({name: {LWS_NAME_LABEL: name}}, frozenset({name}), labels, pattern)
    return None


def _service(
    snapshot: Snapshot, template: PodTemplate, namespace: str, name: str
) -> Resource | None:
    """The Service `name` of `namespace`: the one in the input, else the headless Service the
    template's operator creates under that name (in the operator's namespace)."""
    found = snapshot.get("Service", namespace, name)
    if found is not None or namespace != template.owner.ref.namespace:
        return found
    dns = _operator_dns(template)
    if dns is None or name not in dns.services:
        return None
    raw = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": "None", "selector": dict(dns.services[name])},
    }
    return Resource(ObjRef("Service", namespace, name), "v1", raw, template.owner.source)


def _has_hostname(template: PodTemplate, hostname: str, subdomain: str = "") -> bool:
    """Whether one of the template's pods is named `hostname`. Ordinals are parsed, never
    enumerated: `completions` can be any number (a billion would be a billion names)."""
    owner = template.owner
    spec = owner.spec
    if owner.ref.kind == JOBSET:
        return _jobset_hostname(template, hostname)
    if owner.ref.kind == LWS:
        return _lws_hostname(template, hostname, subdomain)
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


def _ordinal(text: str, below: int, start: int = 0) -> bool:
    return (
        0 < len(text) <= 18
        and text.isascii()
        and text.isdigit()
        and str(int(text)) == text
        and start <= int(text) < below
    )


def _jobset_hostname(template: PodTemplate, hostname: str) -> bool:
    """Whether a pod of the JobSet (of any replicated job: ranks reach the driver's pods)
    is named `hostname`: <jobset>-<replicatedJob>-<jobIndex>-<podIndex>. The JobSet names its
    child Jobs <jobset>-<replicatedJob>-<jobIndex> (placement.GenJobName) and an Indexed Job
    (the JobSet's default completionMode) gives each pod the hostname <job>-<index>."""
    owner = template.owner
    for replicated in map(as_mapping, as_list(owner.spec.get("replicatedJobs"))):
        job = as_mapping(as_mapping(replicated.get("template")).get("spec"))
        pod = as_mapping(as_mapping(job.get("template")).get("spec"))
        if pod.get("hostname"):
            if hostname == str(pod["hostname"]):
                return True
            continue
        if job.get("completionMode", "Indexed") != "Indexed":
            continue
        prefix = f"{owner.ref.name}-{replicated.get('name', '')}-"
        if not hostname.startswith(prefix):
            continue
        job_index, _, pod_index = hostname[len(prefix) :].partition("-")
        if _ordinal(job_index, _count(replicated.get("replicas"))) and _ordinal(
            pod_index, _count(job.get("completions"))
        ):
            return True
    return False


def _lws_hostname(template: PodTemplate, hostname: str, subdomain: str) -> bool:
    """Whether a pod of the LeaderWorkerSet (leader or worker: workers reach their leader)
    is named `hostname` under `subdomain`. Leaders are the pods <lws>-<group> of the
    StatefulSet <lws>; workers the pods <lws>-<group>-<worker> (ordinals from 1) of the
    StatefulSet <lws>-<group>."""
    owner = template.owner
    group_spec = as_mapping(owner.spec.get("leaderWorkerTemplate"))
    prefix = f"{owner.ref.name}-"
    if not hostname.startswith(prefix):
        return False
    group, _, worker = hostname[len(prefix) :].partition("-")
    if not _ordinal(group, _count(owner.spec.get("replicas"))):
        return False
    unique = (
        as_mapping(owner.spec.get("networkConfig")).get("subdomainPolicy") == "UniquePerReplica"
    )
    if subdomain and subdomain != (f"{owner.ref.name}-{group}" if unique else owner.ref.name):
        return False
    return not worker or _ordinal(worker, _count(group_spec.get("size")), start=1)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _pod_labels(template: PodTemplate) -> dict[str, str]:
    labels = dict(template.labels)
    if template.owner.ref.kind == "Job":
        labels.update(dict.fromkeys(_JOB_LABELS, template.owner.ref.name))
    dns = _operator_dns(template)
    if dns is not None:
        labels.update(dns.labels)
    return labels


def _selects_pods_of(service: Resource, template: PodTemplate) -> bool:
    """Whether the Service selects the pods of the template or, for a JobSet or
    LeaderWorkerSet, of any of its templates (workers reach the leader's or driver's pods)."""
    peers = templates_of(template.owner) if _operator_dns(template) is not None else ()
    return any(_selects(service, t) for t in (template, *peers))


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
    dns = _operator_dns(template)
    if dns is not None and dns.subdomains:
        return _operator_fix(container, endpoint, candidate, problem, dns)
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


def _operator_fix(
    container: Container,
    endpoint: Endpoint,
    candidate: tuple[str, ...],
    problem: str,
    dns: _OperatorDns,
) -> dict[str, str]:
    """The controller names the Service and the pods itself: the fix is the endpoint. The
    Service the remediation shows is the one the controller creates (apply it only if it is
    missing)."""
    template = container.template
    owner = template.owner
    name = owner.ref.name
    subdomain = sorted(dns.subdomains)[0]
    hostname = candidate[1] if candidate[0] == "pod" else ""
    if owner.ref.kind == JOBSET:
        if not (hostname and _jobset_hostname(template, hostname)):
            first = next(
                (
                    str(r.get("name", ""))
                    for r in map(as_mapping, as_list(owner.spec.get("replicatedJobs")))
                ),
                template.replica_type,
            )
            hostname = f"{name}-{first}-0-0"
        host = f"{hostname}.{subdomain}"
        where = f"replicated job {template.replica_type}, {container.describe()}"
        patch = (
            f"# point {endpoint.source} of {where} at {host}\n"
            "# (spec.replicatedJobs cannot change while the JobSet runs unless it is suspended:\n"
            "# delete the JobSet and apply it again with the new value)"
        )
        creator = "the JobSet controller creates it when spec.network.enableDNSHostnames is true"
    else:
        # The LWS webhook injects LWS_LEADER_ADDRESS (<lws>-<group>.<subdomain>.<namespace>,
        # the leader of the pod's own group) first in every container's env.
        host = "$(LWS_LEADER_ADDRESS)"
        keys = template.path.split(".")
        pad = "  " * len(keys)
        lines = [f"{'  ' * depth}{key}:" for depth, key in enumerate(keys)]
        patch = "\n".join([*lines, *_point_at(container, endpoint, host, pad)])
        creator = "the LeaderWorkerSet controller creates it"
    return {
        "problem": f"{problem}\n# (Service {subdomain} below: {creator}; apply it only if it is missing)",
        "service": subdomain,
        "selector": _flow(dns.services[subdomain]),
        "pod_patch": patch,
    }


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
        entry = json.dumps({"name": name, "value": redact_text(value)})
        return [*_credentials_note(entry, pad), *lines, f"{pad}    env:", f"{pad}      - {entry}"]
    for field in ("command", "args"):
        parts = [str(p) for p in as_list(container.raw.get(field))]
        if any(endpoint.host in part for part in parts):
            # The whole list is shown, and it may pass credentials: never their values.
            rewritten = redact_argv([part.replace(endpoint.host, host) for part in parts])
            lines.append(f"{pad}    {field}: {json.dumps(rewritten)}")
    if len(lines) == 2:  # the host is built from variables
        return [f"{pad}# and point {endpoint.source} at {host}"]
    return [*_credentials_note("\n".join(lines), pad), *lines]


def _credentials_note(patch: str, pad: str) -> list[str]:
    """Above a patch that shows REDACTED in place of the input's credentials."""
    if REDACTED not in patch:
        return []
    return [
        f"{pad}# {REDACTED} stands for a credential the input passes here: keep its value",
        f"{pad}# (better: read it from a Secret)",
    ]
