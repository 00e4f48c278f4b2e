from __future__ import annotations

from collections.abc import Iterator

from gpu_audit.api import (
    KSERVE_ISVC_LABEL,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Result,
    ServerClass,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    classify,
    failed,
    is_stack_pod_in_system_namespace,
    passed,
    pod_templates,
)


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
        request GPUs, except the GPU/network stack's own pods: hostNetwork on a model server
        (high) or on another GPU pod (medium, sometimes used for RDMA training); hostNetwork
        without dnsPolicy ClusterFirstWithHostNet (medium; dnsPolicy None with an explicit
        dnsConfig is accepted); a hostPort on a model-server container (high); hostPID or
        hostIPC (medium). CPU-only pods that are not model servers are not evaluated.
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
    if spec.get("hostNetwork") is True:
        if serving:
            problem = f"model server {what} on the host network: every port is on the node IP"
            yield _fail(template, problem, "hostNetwork", Severity.HIGH)
        else:
            problem = "GPU pod on the host network; prefer the RDMA/EFA device plugins or Multus"
            yield _fail(template, problem, "hostNetwork", Severity.MEDIUM)
        dns_policy = spec.get("dnsPolicy") or "ClusterFirst"
        explicit = dns_policy == "None" and bool(as_mapping(spec.get("dnsConfig")))
        if dns_policy != "ClusterFirstWithHostNet" and not explicit:
            problem = (
                f"hostNetwork with dnsPolicy {dns_policy}: the node's resolver is used and "
                "cluster Service names do not resolve"
            )
            yield _fail(template, problem, "dnsPolicy", Severity.MEDIUM)
    for container, server in servers:
        for port in map(as_mapping, as_list(container.raw.get("ports"))):
            if port.get("hostPort"):
                problem = (
                    f"hostPort {port['hostPort']} publishes {server.describe()} on every node "
                    "it runs on"
                )
                yield _fail(template, problem, f"{container.path}.ports", Severity.HIGH)
    for field in ("hostPID", "hostIPC"):
        if spec.get(field) is True:
            yield _fail(
                template, f"{field}: true shares the node's namespace", field, Severity.MEDIUM
            )


def _fail(template: PodTemplate, problem: str, field: str, severity: Severity) -> Result:
    path = field if "." in field else f"{template.path}.{field}"
    return failed(
        template,
        problem,
        path=path,
        severity=severity,
        fix={"problem": problem},
    )
