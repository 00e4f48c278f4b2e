from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    Category,
    FixKind,
    QuantityError,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_mapping,
    check,
    failed,
    format_quantity,
    gpu_hosts,
    gpu_quantities,
    has_resource_status,
    is_bootstrapping,
    parse_quantity,
    passed,
)
from gpu_audit.checks.nodes._common import dra_gpu_nodes

_VM_MODES = ("vm-passthrough", "vm-vgpu")


@check(
    id="GPU-NODE-001",
    title="Every GPU node advertises allocatable GPU resources",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=("Node",),
    rationale="""
        The scheduler only places GPU pods on nodes whose status.allocatable lists GPUs. A GPU
        node without them (device plugin disabled, paused by the MIG manager, an invalid MIG
        layout, or every GPU marked unhealthy after XID errors) is an expensive instance that
        takes no GPU pod. When no GPU node advertises GPUs, no GPU pod in the cluster can run.
    """,
    detection="""
        Live (nodes with status): every GPU node identified by labels, not by capacity (GFD/NFD
        labels, cloud accelerator labels), must have a positive allocatable nvidia.com/gpu,
        nvidia.com/gpu.shared or nvidia.com/mig-* resource. Passes too for nodes whose GPUs are
        published by the NVIDIA DRA driver (a gpu.nvidia.com ResourceSlice with devices) and, for
        vm-passthrough/vm-vgpu nodes, any positive nvidia.com/* resource. The message names the
        likely cause: disabled by label (medium), paused for a MIG change, MIG-INVALID product,
        capacity > 0 with allocatable 0 (unhealthy GPUs), or no plugin at all. Critical when no
        evaluated GPU node advertises GPUs. Nodes that are NotReady or still carry join-time
        taints are skipped (the check has no clock for the catalogue's 10-minute guard).
    """,
    remediation="""
        kubectl get pods -A -o wide -l app=nvidia-device-plugin-daemonset --field-selector spec.nodeName=$name
        # $hint
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/issues/58",
        "https://github.com/kubernetes/kubernetes/pull/57266",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html",
    ),
)
def gpu_nodes_advertise_allocatable_gpus(snapshot: Snapshot) -> Iterator[Result]:
    dra = dra_gpu_nodes(snapshot)
    nodes = [n for n in gpu_hosts(snapshot) if has_resource_status(n) and not is_bootstrapping(n)]
    verdicts = {n.ref.name: _problem(n, n.ref.name in dra) for n in nodes}
    # Every node short of GPUs: no GPU pod can run anywhere.
    cluster_wide = bool(nodes) and all(v is not None for v in verdicts.values())
    for node in nodes:
        problem = verdicts[node.ref.name]
        if problem is None:
            yield passed(node, f"advertises {_advertised(node)}", path="status.allocatable")
            continue
        message, severity, hint = problem
        if cluster_wide and severity is Severity.HIGH:
            severity = Severity.CRITICAL
            message += "; no GPU node in the input advertises GPUs"
        yield failed(
            node,
            message,
            path="status.allocatable",
            severity=severity,
            fix={"hint": hint},
        )


def _gpu_like(node: Resource) -> dict[str, Decimal]:
    quantities = gpu_quantities(node, "allocatable")
    if node.labels.get("nvidia.com/gpu.workload.config") in _VM_MODES:
        # KubeVirt passthrough/vGPU resources are named after the model (nvidia.com/GA102GL_A10).
        for name, value in as_mapping(node.status.get("allocatable")).items():
            if str(name).startswith("nvidia.com/"):
                try:
                    quantities[str(name)] = parse_quantity(value)
                except QuantityError:
                    continue
    return {k: v for k, v in quantities.items() if v > 0}


def _advertised(node: Resource) -> str:
    quantities = _gpu_like(node)
    if not quantities:
        return "its GPUs through the NVIDIA DRA driver (gpu.nvidia.com ResourceSlice)"
    return ", ".join(f"{k}={format_quantity(v)}" for k, v in sorted(quantities.items()))


def _problem(node: Resource, dra: bool) -> tuple[str, Severity, str] | None:
    """(message, severity, hint) for a GPU node without allocatable GPUs, else None."""
    if _gpu_like(node) or dra:
        return None
    labels = node.labels
    plugin = labels.get("nvidia.com/gpu.deploy.device-plugin", "")
    if "false" in (labels.get("nvidia.com/gpu.deploy.operands"), plugin):
        return (
            "has no allocatable GPUs: the device plugin is disabled by a node label",
            Severity.MEDIUM,
            f"if that was a mistake: kubectl label node {node.ref.name} nvidia.com/gpu.deploy.device-plugin=true --overwrite",
        )
    if plugin.startswith("paused-for-"):
        return (
            f"has no allocatable GPUs: the device plugin is {plugin} (see GPU-NODE-004)",
            Severity.HIGH,
            "check nvidia-mig-manager logs; the deploy labels are reset when the MIG change ends",
        )
    if labels.get("nvidia.com/gpu.product", "").endswith("-MIG-INVALID"):
        return (
            "has no allocatable GPUs: invalid MIG layout for mig.strategy=single (see GPU-NODE-003)",
            Severity.HIGH,
            "use a single-profile nvidia.com/mig.config or the mixed MIG strategy",
        )
    if any(v > 0 for v in gpu_quantities(node, "capacity").values()):
        return (
            "has GPU capacity but 0 allocatable: every GPU is marked unhealthy (XID errors)",
            Severity.HIGH,
            "look for XID errors in the plugin logs and dmesg; drain and reset or replace the GPU",
        )
    return (
        "has no allocatable GPUs: no device plugin has registered GPUs on this node",
        Severity.HIGH,
        "no plugin pod on the node: check the operator's nodeSelector and the NFD/GFD labels",
    )
