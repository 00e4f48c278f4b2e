from collections.abc import Iterator

from gpu_audit.api import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_DRIVER,
    RESOURCE_SLICE,
    Category,
    FixKind,
    RelatedRole,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    compute_domain_templates,
    containers,
    env_value,
    failed,
    node_devices,
    passed,
    pod_claims,
    relate,
)

CLIQUE_LABEL = "nvidia.com/gpu.clique"
_RESIZE = (
    "numNodes is immutable and deprecated: recreate the domain with numNodes: 0 (the workload "
    "decides when its peers are up), or add nodes that run the compute-domain kubelet plugin"
)
_DAEMON = "the IMEX daemon pods of the domain, and their logs, say why a daemon is not ready"
_DRIVER_KINDS = ("DaemonSet", "Deployment")


def _driver_setting(snapshot: Snapshot, variable: str, needle: str) -> Resource | None:
    """The DRA driver DaemonSet/Deployment of the input whose `variable` env contains
    `needle` (the chart passes featureGates as FEATURE_GATES=Name=value,... and the IMEX mode
    as IMEX_MODE)."""
    for workload in snapshot.of(*_DRIVER_KINDS):
        for container in containers(workload):
            value = env_value(container, variable) or ""
            if needle in value.replace(" ", ""):
                return workload
    return None


def _waiting_pods(snapshot: Snapshot, domain: Resource, nodes: set[str]) -> list[Resource]:
    """Pods bound to `nodes` that use the domain's channel template and are not Running."""
    templates = compute_domain_templates(snapshot, domain.ref.namespace)
    out = []
    for pod in snapshot.in_namespace("Pod", domain.ref.namespace):
        if str(pod.spec.get("nodeName") or "") not in nodes or pod.status.get("phase") == "Running":
            continue
        if any(c.template_name in templates for c in pod_claims(pod.spec, "spec")):
            out.append(pod)
    return out


@check(
    id="GPU-NODE-009",
    title="ComputeDomains can gather the nodes they wait for",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=(COMPUTE_DOMAIN, RESOURCE_SLICE),
    rationale="""
        A ComputeDomain (resource.nvidia.com, NVIDIA DRA driver) sets up a Multi-Node NVLink
        (IMEX) domain for the pods that claim its channel. Its controller reports it Ready
        only when at least spec.numNodes IMEX daemons have joined and all of them are ready.
        A node can join only where the driver's compute-domain kubelet plugin runs, which
        publishes the node's IMEX channels in a compute-domain.nvidia.com ResourceSlice. A
        numNodes larger than the nodes that can join keeps the domain NotReady for good;
        with the driver's IMEXDaemonsWithDNSNames feature gate off, every workload pod waits
        in ContainerCreating until numNodes daemons have joined. A domain reported NotReady
        because a node's IMEX daemon is not ready holds that node's workload pods.
    """,
    detection="""
        Each ComputeDomain: spec.numNodes (when above 0, its deprecated legacy meaning) against
        the nodes named by ResourceSlices of driver compute-domain.nvidia.com (how many carry
        GFD's nvidia.com/gpu.clique label is shown: only nodes of one NVLink clique share
        GPU memory); then status.status NotReady with the daemons status.nodes lists as
        NotReady. Skipped when the driver runs with host-managed IMEX (IMEX_MODE=hostManaged
        on its controller), where the controller reports every domain Ready.
    """,
    severity_evidence="""
        numNodes beyond the nodes that can join: high when a driver DaemonSet or Deployment in
        the input runs with IMEXDaemonsWithDNSNames=false (workload pods wait for the missing
        daemons); low otherwise (the default: only the status stays NotReady, and numNodes is
        deprecated). A NotReady daemon: low (it may be starting), medium when a pod on that
        node that claims the domain's channel is not Running.
    """,
    remediation="""
        # ComputeDomain $namespace/$name: $detail
        # $advice
        kubectl get computedomaincliques -A
        kubectl get pods -A -l resource.nvidia.com/computeDomain -o wide
    """,
    remediation_generic="""
        # recreate the ComputeDomain with numNodes: 0, or add nodes that run the compute-domain
        # kubelet plugin; for NotReady IMEX daemons:
        kubectl get computedomaincliques -A
        kubectl get pods -A -l resource.nvidia.com/computeDomain -o wide
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/site/content/docs/guides/compute-domain-workloads.md",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/site/content/docs/concepts/compute-domains.md",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/cmd/compute-domain-controller/computedomain.go",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/site/content/docs/prerequisites.md",
    ),
)
def compute_domains_can_gather_their_nodes(snapshot: Snapshot) -> Iterator[Result]:
    host_managed = _driver_setting(snapshot, "IMEX_MODE", "hostManaged")
    joinable = sorted(node_devices(snapshot, COMPUTE_DOMAIN_DRIVER))
    legacy = _driver_setting(snapshot, "FEATURE_GATES", "IMEXDaemonsWithDNSNames=false")
    for domain in snapshot.of(COMPUTE_DOMAIN):
        if host_managed is not None:
            yield passed(domain, f"host-managed IMEX ({host_managed.ref}): no daemons to gather")
            continue
        yield _domain(snapshot, domain, joinable, legacy)


def _domain(
    snapshot: Snapshot, domain: Resource, joinable: list[str], legacy: Resource | None
) -> Result:
    wanted = domain.spec.get("numNodes")
    wanted = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) else 0
    if wanted > len(joinable):
        cliqued = [n for n in joinable if _clique(snapshot, n)]
        detail = (
            f"numNodes is {wanted}, but only {len(joinable)} node(s) publish IMEX channels "
            f"(compute-domain.nvidia.com ResourceSlices), {len(cliqued)} of them with an "
            f"{CLIQUE_LABEL} label"
        )
        consequence = (
            f"with IMEXDaemonsWithDNSNames=false ({legacy.ref}) its workload pods wait for "
            "daemons that can never join"
            if legacy is not None
            else "the domain can never report Ready"
        )
        return failed(
            domain,
            f"{detail}: {consequence}",
            path="spec.numNodes",
            severity=None if legacy is not None else Severity.LOW,
            fix={"detail": detail, "advice": _RESIZE},
            related=[relate(legacy, RelatedRole.CAUSE)] if legacy is not None else [],
        )
    not_ready = sorted(
        str(n.get("name", ""))
        for n in map(as_mapping, as_list(domain.status.get("nodes")))
        if n.get("status") == "NotReady"
    )
    if domain.status.get("status") == "NotReady" and not_ready:
        waiting = _waiting_pods(snapshot, domain, set(not_ready))
        detail = f"the IMEX daemon is not ready on {', '.join(not_ready)}"
        held = (
            f"; {len(waiting)} pod(s) that claim its channel wait there"
            if waiting
            else " (it may be starting)"
        )
        return failed(
            domain,
            f"is NotReady: {detail}{held}",
            path="status.nodes",
            severity=Severity.MEDIUM if waiting else Severity.LOW,
            fix={"detail": detail, "advice": _DAEMON},
            related=[relate(p, RelatedRole.SYMPTOM) for p in waiting],
        )
    shown = f"numNodes {wanted}, " if wanted else ""
    return passed(domain, f"{shown}{len(joinable)} node(s) can join its IMEX domain")


def _clique(snapshot: Snapshot, node_name: str) -> bool:
    node = snapshot.get("Node", "", node_name)
    return node is not None and bool(node.labels.get(CLIQUE_LABEL))
