from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    KSERVE_ISVC_LABEL,
    MULTI_POD_JOB_TYPES,
    RAY,
    TORCHSERVE,
    TRITON,
    VLLM,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
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
    is_stack_pod_in_system_namespace,
    passed,
    pod_templates,
    replica_groups,
)

# Control APIs that load or run code, on the ports the servers open by default.
_CONTROL_PORTS = {TORCHSERVE: frozenset({8081, 7071}), RAY: frozenset({8265, 10001, 6379})}
_CONTROL_PORT_NAMES = ("management", "dashboard", "admin")


@check(
    id="GPU-SEC-003",
    title="Inference and GPU pods do not share the host network, PID or IPC namespace",
    category=Category.NETWORK_SECURITY,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        On the host network every model-server port (TorchServe management 8081, Triton
        8001/8002, vLLM's unauthenticated non-/v1 routes, Ray 8265) is bound on the node's
        address, outside any Service, and most network plugins do not apply NetworkPolicy to
        host-network pods; two replicas on one node collide on ports. A hostPort publishes the
        port on every node the pod runs on. hostNetwork without dnsPolicy
        ClusterFirstWithHostNet silently uses the node's resolver, so Service names stop
        resolving. hostPID/hostIPC let a compromised model server see and signal node processes.
    """,
    detection="""
        Pod templates that run a model server (SRV-CLASSIFY, or a KServe predictor pod) or
        request GPUs, except the GPU/network stack's own pods: hostNetwork; hostNetwork
        without dnsPolicy ClusterFirstWithHostNet (dnsPolicy None with an explicit dnsConfig
        is accepted); a hostPort on a model-server container; hostPID or hostIPC. CPU-only
        pods that are not model servers are not evaluated.
    """,
    severity_evidence="""
        Model servers parse untrusted input: on the host network high when they serve a
        control API that loads or runs code (TorchServe management, Ray dashboard and Jobs
        API, Triton in EXPLICIT model control, vLLM dev mode), medium otherwise; a hostPort
        high on such a control port, medium on an inference port; hostPID/hostIPC medium.
        Training and other GPU pods run trusted code and often use the host network for RDMA:
        low. hostNetwork with cluster DNS lost is medium when the pod evidently resolves
        Services (a multi-pod training job, whose peers are Service names; spec.subdomain;
        .svc names in its command line or env), low otherwise.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        hostNetwork: false   # serve through a Service; RDMA via its device plugin or Multus
        hostPID: false
        hostIPC: false       # shared memory inside the pod: emptyDir {medium: Memory} at /dev/shm
        # if hostNetwork must stay (e.g. RoCE training), keep cluster DNS working:
        # hostNetwork: true
        # dnsPolicy: ClusterFirstWithHostNet
        # and drop hostPort from containers[].ports: publish through a Service instead
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/concepts/security/pod-security-standards/",
        "https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/#pod-s-dns-policy",
        "https://docs.pytorch.org/serve/_sources/security.md.txt",
        "https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_management.md",
    ),
    remediation_root="pod_spec",
)
def inference_pods_off_host_network(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if is_stack_pod_in_system_namespace(template):
            continue
        servers = [(c, s) for c in template.containers() if (s := classify(c)) is not None]
        serving = bool(servers) or KSERVE_ISVC_LABEL in template.labels
        if not serving and not template.requests_gpu:
            continue
        findings = list(_findings(template, serving, servers))
        if findings:
            yield from findings
        else:
            yield passed(template, "uses its own network, PID and IPC namespaces and no hostPort")


def _findings(
    template: PodTemplate, serving: bool, servers: list[tuple[Container, ServerClass]]
) -> Iterator[Result]:
    spec = template.spec
    what = servers[0][1].describe() if servers else "KServe predictor" if serving else ""
    control = next((api for c, s in servers if (api := _control_api(c, s))), "")
    if spec.get("hostNetwork") is True:
        if serving and control:
            problem = (
                f"model server {what} on the host network: every port, {control} included, "
                "is on the node IP, outside Services and NetworkPolicy"
            )
            yield _fail(template, problem, "hostNetwork", Severity.HIGH)
        elif serving:
            problem = (
                f"model server {what} on the host network: its inference port is on the node "
                "IP, outside Services and NetworkPolicy"
            )
            yield _fail(template, problem, "hostNetwork", Severity.MEDIUM)
        else:
            problem = "GPU pod on the host network; prefer the RDMA/EFA device plugins or Multus"
            yield _fail(template, problem, "hostNetwork", Severity.LOW)
        dns_policy = spec.get("dnsPolicy") or "ClusterFirst"
        explicit = dns_policy == "None" and bool(as_mapping(spec.get("dnsConfig")))
        if dns_policy != "ClusterFirstWithHostNet" and not explicit:
            needs = _needs_cluster_dns(template)
            problem = (
                f"hostNetwork with dnsPolicy {dns_policy}: the node's resolver is used and "
                "cluster Service names do not resolve"
                + (f"; {needs}" if needs else "; nothing in the spec names a Service")
            )
            yield _fail(template, problem, "dnsPolicy", Severity.MEDIUM if needs else Severity.LOW)
    for container, server in servers:
        for port in map(as_mapping, as_list(container.raw.get("ports"))):
            if port.get("hostPort"):
                admin = _control_port(server, port)
                problem = (
                    f"hostPort {port['hostPort']} publishes {server.describe()}"
                    f"{' control port' if admin else ''} on every node it runs on"
                )
                yield _fail(
                    template,
                    problem,
                    f"{container.path}.ports",
                    Severity.HIGH if admin else Severity.MEDIUM,
                )
    for field in ("hostPID", "hostIPC"):
        if spec.get(field) is True:
            yield _fail(
                template,
                f"{field}: true shares the node's namespace"
                + ("" if serving else " (a GPU pod running trusted code)"),
                field,
                Severity.MEDIUM if serving else Severity.LOW,
            )


def _control_api(container: Container, server: ServerClass) -> str:
    """The control API the server exposes that loads or runs code, "" for inference only."""
    if server.name == TORCHSERVE:
        return "TorchServe's management API"
    if server.name == RAY:
        return "the Ray dashboard and Jobs API"
    words = " ".join(argv(container)).replace("=", " ").split()
    if (
        server.name == TRITON
        and any(
            a == "--model-control-mode" and b.lower() == "explicit"
            for a, b in itertools.pairwise(words)
        )
        and "--http-restricted-api" not in words
    ):
        return "Triton's model load API (EXPLICIT model control)"
    if server.name == VLLM and env_value(container, "VLLM_SERVER_DEV_MODE") == "1":
        return "vLLM's development endpoints"
    return ""


def _control_port(server: ServerClass, port: Mapping[str, Any]) -> bool:
    number = port.get("containerPort")
    name = str(port.get("name") or "").lower()
    return number in _CONTROL_PORTS.get(server.name, ()) or any(
        word in name for word in _CONTROL_PORT_NAMES
    )


def _needs_cluster_dns(template: PodTemplate) -> str:
    """Why the pod evidently resolves cluster Service names, "" when nothing shows it."""
    owner = template.owner
    if (
        owner.ref.kind in MULTI_POD_JOB_TYPES
        and owner.ref.kind != "Job"
        and sum(g.replicas for g in replica_groups(owner)) > 1
    ):
        return "a multi-pod training job, whose pods reach each other by Service names"
    if template.spec.get("subdomain"):
        return "spec.subdomain: its peers resolve it through cluster DNS"
    for container in template.containers():
        values = [str(as_mapping(e).get("value") or "") for e in container.env().values()]
        if any(".svc" in t or "cluster.local" in t for t in [*argv(container), *values]):
            return f"{container.describe()} names a cluster Service (.svc)"
    return ""


def _fail(template: PodTemplate, problem: str, field: str, severity: Severity) -> Result:
    path = field if "." in field else f"{template.path}.{field}"
    return failed(
        template,
        problem,
        path=path,
        severity=severity,
        fix={"problem": problem},
    )
