from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpu_audit.api import (
    Category,
    FixKind,
    ObjRef,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_list,
    as_mapping,
    check,
    command_line,
    component_enabled,
    containers,
    daemonset_runs_on,
    env_value,
    failed,
    gpu_nodes,
    is_operator_operand,
    passed,
    pod_spec,
    policy_operand_runs_on,
)
from gpu_audit.checks.stack._common import (
    policy_patch_command,
    removal_command,
)

EXPORTER_PORT = 9400
REMOTE_ENV = "DCGM_REMOTE_HOSTENGINE_INFO"
REMOTE_ARGS = ("-r", "--remote-hostengine-info")
OPERATOR_EXPORTER = "nvidia-dcgm-exporter"
OPERATOR_ENGINE = "nvidia-dcgm"


@dataclass(frozen=True, slots=True)
class Component:
    """One DCGM process per node: an exporter (embedded engine or not) or a host engine."""

    label: str
    exporter: bool
    embedded_engine: bool
    daemonset: Resource | None = None  # None: the ClusterPolicy's operand, not in the input
    host_port: bool = False  # binds 9400 on the node (hostNetwork or hostPort)

    @property
    def is_engine(self) -> bool:
        return self.embedded_engine or not self.exporter

    @property
    def operator(self) -> bool:
        return self.daemonset is None or is_operator_operand(self.daemonset)


def _images(daemonset: Resource) -> list[str]:
    return [str(c.get("image", "")).lower() for c in containers(daemonset)]


def _is_exporter(daemonset: Resource) -> bool:
    if is_operator_operand(daemonset) and daemonset.ref.name == OPERATOR_EXPORTER:
        return True  # the operator fills the image in at run time
    return any("dcgm-exporter" in image for image in _images(daemonset))


def _is_engine(daemonset: Resource) -> bool:
    """nv-hostengine: the operator's nvidia-dcgm, standalone DCGM, EKS's dcgm-server."""
    if is_operator_operand(daemonset) and daemonset.ref.name == OPERATOR_ENGINE:
        return True
    if any("nv-hostengine" in command_line(c) for c in containers(daemonset)):
        return True
    return any(
        "/dcgm:" in image or "dcgm-server" in image
        for image in _images(daemonset)
        if "dcgm-exporter" not in image
    )


def _connects_to_remote_engine(daemonset: Resource, operator_engine: bool) -> bool:
    """Whether the exporter uses an existing host engine instead of embedding one. The
    operator sets DCGM_REMOTE_HOSTENGINE_INFO=nvidia-dcgm:5555 whenever it runs nvidia-dcgm."""
    if is_operator_operand(daemonset) and operator_engine:
        return True
    for container in containers(daemonset):
        if env_value(container, REMOTE_ENV):
            return True
        words = command_line(container).split()
        if any(w in REMOTE_ARGS or w.startswith("--remote-hostengine-info=") for w in words):
            return True
    return False


def _binds_host_port(daemonset: Resource) -> bool:
    spec = pod_spec(daemonset)
    if spec.get("hostNetwork") is True:
        return True
    return any(
        as_mapping(p).get("hostPort") == EXPORTER_PORT
        for c in containers(daemonset)
        for p in as_list(c.get("ports"))
    )


def _components(snapshot: Snapshot, policy: Resource | None) -> list[Component]:
    daemonsets = snapshot.of("DaemonSet")
    operator_engine = any(is_operator_operand(d) and _is_engine(d) for d in daemonsets) or (
        policy is not None and component_enabled(policy, "dcgm")
    )
    found = []
    for ds in daemonsets:
        label = f"DaemonSet {ds.ref.namespace}/{ds.ref.name}"
        if _is_exporter(ds):
            embedded = not _connects_to_remote_engine(ds, operator_engine)
            found.append(Component(label, True, embedded, ds, _binds_host_port(ds)))
        elif _is_engine(ds):
            found.append(Component(label, False, False, ds))
    return found


def _virtual_operands(policy: Resource, found: list[Component]) -> list[tuple[str, Component]]:
    """The policy's enabled DCGM operands whose DaemonSet is not in the input."""
    operands = []
    has_engine = component_enabled(policy, "dcgm")
    if has_engine and not any(c.operator and not c.exporter for c in found):
        operands.append(
            ("dcgm", Component(f"ClusterPolicy {policy.ref.name} (dcgm)", False, False))
        )
    if component_enabled(policy, "dcgmExporter") and not any(
        c.operator and c.exporter for c in found
    ):
        label = f"ClusterPolicy {policy.ref.name} (dcgmExporter)"
        operands.append(("dcgm-exporter", Component(label, True, not has_engine)))
    return operands


def _on_node(
    snapshot: Snapshot, policy: Resource | None
) -> Iterator[tuple[Resource, list[Component]]]:
    found = _components(snapshot, policy)
    virtual = _virtual_operands(policy, found) if policy is not None else []
    for node in gpu_nodes(snapshot):
        here = [
            c for c in found if c.daemonset is not None and daemonset_runs_on(c.daemonset, node)
        ]
        here.extend(
            c for operand, c in virtual if policy and policy_operand_runs_on(policy, node, operand)
        )
        yield node, here


def _problems(here: list[Component]) -> list[str]:
    exporters = [c for c in here if c.exporter]
    engines = [c for c in here if c.is_engine]
    problems = []
    if len(exporters) > 1:
        clash = (
            " (both bind port 9400 on the node)" if sum(c.host_port for c in exporters) > 1 else ""
        )
        problems.append(
            f"{len(exporters)} dcgm-exporters{clash}: {', '.join(c.label for c in exporters)}"
        )
    if len(engines) > 1:
        names = ", ".join(c.label + (" (embedded engine)" if c.exporter else "") for c in engines)
        problems.append(f"{len(engines)} DCGM host engines: {names}")
    return problems


@check(
    id="GPU-STACK-005",
    title="Each GPU node runs one DCGM host engine and one dcgm-exporter",
    category=Category.STACK,
    severity=Severity.MEDIUM,
    requires=("DaemonSet", "Node"),
    rationale="""
        DCGM profiling metrics (DCGM_FI_PROF_*, such as tensor-core activity) use hardware
        counters that only one host engine per node can own, so a second engine blanks or
        breaks them. A dcgm-exporter without --remote-hostengine-info embeds its own engine.
        Two exporters on one node also double every DCGM series in Prometheus, which breaks
        sum() dashboards and GPU-utilisation autoscaling, and collide on port 9400 when they
        use the host network.
    """,
    detection="""
        Exporters are DaemonSets running a dcgm-exporter image (or the operator's
        nvidia-dcgm-exporter); host engines are DaemonSets running nv-hostengine or a DCGM
        image (the operator's nvidia-dcgm, standalone DCGM, EKS dcgm-server). An exporter
        counts as a second engine unless it connects to one (-r/--remote-hostengine-info or
        DCGM_REMOTE_HOSTENGINE_INFO; the operator sets it whenever it runs nvidia-dcgm).
        Placement is simulated per GPU node (selectors, affinity, tolerations, the operator's
        deploy labels); an enabled ClusterPolicy operand counts even when its DaemonSet is not
        in the input. Not flagged: the operator's nvidia-dcgm + nvidia-dcgm-exporter pair,
        exporters pinned to different node pools, agents that only scrape the exporter, and
        nodes running no DCGM component. Duplicate ServiceMonitors are left to the
        monitoring checks. The finding names the standalone DaemonSet to remove or repoint.
    """,
    severity_evidence="""
        Medium whenever it fails: two exporters, or two host engines, simulated onto the same
        GPU node double every series or break the profiling counters there. The operator's
        own engine-plus-exporter pair and exporters pinned to different pools pass.
    """,
    remediation="""
        # $subject: $summary
        $command
        $alternative
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # a standalone DCGM exporter or host engine on GPU nodes that already run one: remove it
        helm uninstall <release> -n <namespace>          # when Helm manages it
        kubectl -n <namespace> delete daemonset <name>   # otherwise
        # or keep this one and turn the operator's exporter (host engine: dcgm) off:
        kubectl patch clusterpolicies.nvidia.com/<cluster-policy> --type merge -p '{"spec":{"dcgmExporter":{"enabled":false}}}'
        # an exporter with an embedded host engine next to a running engine: connect to that one
        kubectl -n <namespace> set env daemonset/<name> DCGM_REMOTE_HOSTENGINE_INFO=<engine-service>.<engine-namespace>.svc:5555   # localhost:5555 with hostNetwork
        # copies on a node that no DaemonSet in the input explains: find them, and delete the copy
        # that the active ClusterPolicy does not own
        kubectl get daemonsets --all-namespaces -o wide | grep -i dcgm
    """,
    references=(
        "https://github.com/NVIDIA/dcgm-exporter/issues/7",
        "https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgm-exporter.html",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html",
    ),
)
def one_dcgm_host_engine_and_exporter_per_gpu_node(snapshot: Snapshot) -> Iterator[Result]:
    # standalone DaemonSet -> (it, {node: problems}, the other components it clashes with)
    clashes: dict[ObjRef, tuple[Resource, dict[str, list[str]], list[Component]]] = {}
    policy = active_cluster_policy(snapshot)
    for node, here in _on_node(snapshot, policy):
        if not here:
            continue  # no DCGM at all is a monitoring gap, not a duplicate
        problems = _problems(here)
        if not problems:
            yield passed(node, f"runs one DCGM stack: {', '.join(c.label for c in here)}")
            continue
        culprits = [c for c in here if not c.operator and c.daemonset is not None]
        if not culprits:
            yield _node_finding(node, problems)
        for culprit in culprits:
            assert culprit.daemonset is not None
            entry = clashes.setdefault(culprit.daemonset.ref, (culprit.daemonset, {}, []))
            entry[1][node.ref.name] = problems
            entry[2].extend(c for c in here if c is not culprit and c not in entry[2])
    for daemonset, nodes, others in clashes.values():
        yield _finding(daemonset, nodes, others, policy)


def _finding(
    daemonset: Resource,
    nodes: Mapping[str, list[str]],
    others: list[Component],
    policy: Resource | None,
) -> Result:
    summary = "; ".join(f"{n}: {', '.join(p)}" for n, p in sorted(nodes.items()))
    command, alternative = _fix(daemonset, others, policy)
    return failed(
        daemonset,
        f"duplicates DCGM on {len(nodes)} GPU node(s) ({summary})",
        path="spec.template.spec",
        fix={
            "subject": f"DaemonSet {daemonset.ref.namespace}/{daemonset.ref.name}",
            "summary": f"{len(nodes)} GPU node(s) run more than one DCGM exporter or engine",
            "command": command,
            "alternative": alternative,
        },
    )


def _fix(daemonset: Resource, others: list[Component], policy: Resource | None) -> tuple[str, str]:
    """Remove the standalone copy; when it only embeds a second engine, point it at the one
    already running instead."""
    engine = next((c for c in others if c.is_engine and not c.exporter), None)
    exporter_clash = _is_exporter(daemonset) and any(c.exporter for c in others)
    if _is_exporter(daemonset) and not exporter_clash and engine is not None:
        address = _engine_address(engine, daemonset)
        return (
            f"kubectl -n {daemonset.ref.namespace} set env daemonset/{daemonset.ref.name} "
            f"{REMOTE_ENV}={address}",
            "# connects to the existing host engine (a node-local Service or the host network)",
        )
    alternative = "# or keep this one and remove the other copy"
    if policy is not None and any(c.operator for c in others):
        component = "dcgmExporter" if exporter_clash else "dcgm"
        patch = policy_patch_command(policy.ref.name, component, False)
        alternative = f"# or keep this one and turn the operator's off:\n# {patch}"
    return removal_command(daemonset), alternative


def _engine_address(engine: Component, client: Resource) -> str:
    if engine.daemonset is None:
        return f"{OPERATOR_ENGINE}.{client.ref.namespace}.svc:5555"
    if pod_spec(engine.daemonset).get("hostNetwork") is True:
        return "localhost:5555"  # valid when the exporter uses hostNetwork too
    return f"{engine.daemonset.ref.name}.{engine.daemonset.ref.namespace}.svc:5555"


def _node_finding(node: Resource, problems: list[str]) -> Result:
    """Only operator operands clash (for example a stale second operator install)."""
    return failed(
        node,
        "; ".join(problems),
        path="metadata.labels",
        fix={
            "subject": f"Node {node.ref.name}",
            "summary": "; ".join(problems),
            "command": "kubectl get daemonsets --all-namespaces -o wide | grep -i dcgm",
            "alternative": "# delete the copy that the active ClusterPolicy does not own",
        },
    )
