from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    Taint,
    check,
    containers,
    daemonset_placement_fix,
    daemonset_untolerated_taints,
    fabric_family,
    failed,
    gpu_pod_templates,
    image_repository,
    is_gpu_node,
    node_affinity_matches,
    node_fabric,
    passed,
    pod_fabric,
    pod_spec,
    relate,
)

# Device plugins of the fabric, by image repository -> the fabric they advertise.
# eks-charts stable/aws-efa-k8s-device-plugin (vpc.amazonaws.com/efa); the NVIDIA Network
# Operator's k8s-rdma-shared-dev-plugin (rdma/<resourceName>).
_PLUGINS = {
    "aws-efa-k8s-device-plugin": "EFA",
    "k8s-rdma-shared-dev-plugin": "RDMA",
}
# Node labels that show the fabric's hardware: the EFA node-group label of AWS's EFA pattern,
# NFD's PCI label for Mellanox (vendor 15b3) NICs, the Network Operator's MOFED label.
_HARDWARE_LABELS = {
    "EFA": ("vpc.amazonaws.com/efa.present",),
    "RDMA": (
        "feature.node.kubernetes.io/pci-15b3.present",
        "network.nvidia.com/operator.mofed.wait",
    ),
}


@check(
    id="GPU-FAB-002",
    title="EFA and RDMA device plugins tolerate the GPU nodes they are meant for",
    category=Category.FABRIC,
    severity=Severity.HIGH,
    requires=("DaemonSet", "Node"),
    rationale="""
        The EFA device plugin and the Network Operator's RDMA shared device plugin are what
        make a node advertise `vpc.amazonaws.com/efa` or `rdma/*`. Their charts tolerate only
        CriticalAddonsOnly by default (the EFA chart's `tolerations: []`); on GPU node groups
        tainted `nvidia.com/gpu:NoSchedule` the plugin never starts, the nodes advertise no
        fabric, pods that request it stay Pending and multi-node jobs that do not request it
        run over TCP.
    """,
    detection="""
        DaemonSets running the EFA device plugin (aws-efa-k8s-device-plugin) or the RDMA shared
        device plugin (k8s-rdma-shared-dev-plugin). The nodes each is meant for are the GPU
        nodes its nodeSelector and required node affinity select (the EFA chart selects EFA
        instance types); fails when the DaemonSet controller cannot place it on some of them
        because of taints it does not tolerate (the automatic DaemonSet tolerations count),
        and those nodes advertise none of the plugin's resource. Passes when it is placed on
        every such node.
    """,
    severity_evidence="""
        High when a workload in the input requests the plugin's resource (its pods cannot be
        placed on those nodes). Medium when the nodes show the fabric's hardware (the EFA
        node-group label vpc.amazonaws.com/efa.present, NFD's Mellanox PCI label or the
        Network Operator's MOFED label): multi-node jobs there use TCP. Low otherwise.
    """,
    remediation="""
        # $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # tolerate the GPU nodes' taints (Helm: --set tolerations[0].key=nvidia.com/gpu,...;
        # Network Operator: NicClusterPolicy spec.tolerations); the list is replaced whole:
        kubectl -n <namespace> patch daemonset <name> --type=strategic -p '{"spec":{"template":{"spec":{"tolerations":[<existing>, {"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]}}}}'
    """,
    references=(
        "https://github.com/aws/eks-charts/blob/5239609242f3430be50fb0b714a24d3ef2b47983/stable/aws-efa-k8s-device-plugin/values.yaml",
        "https://github.com/aws/eks-charts/blob/5239609242f3430be50fb0b714a24d3ef2b47983/stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml",
        "https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html",
        "https://github.com/aws-ia/terraform-aws-eks-blueprints/tree/main/patterns/nvidia-gpu-efa",
        "https://docs.nvidia.com/networking/display/kubernetes2570/customizations/cr-full-example.html",
        "https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#taints-and-tolerations",
    ),
)
def fabric_device_plugins_run_on_gpu_nodes(snapshot: Snapshot) -> Iterator[Result]:
    requested = {fabric_family(r) for t in gpu_pod_templates(snapshot) for r in pod_fabric(t)}
    gpu_nodes = [n for n in snapshot.of("Node") if is_gpu_node(n)]
    for daemonset in snapshot.of("DaemonSet"):
        family = _family(daemonset)
        if not family:
            continue
        spec = pod_spec(daemonset)
        meant = [n for n in gpu_nodes if node_affinity_matches(spec, n)]
        if not meant:
            continue
        blocked: list[tuple[Resource, tuple[Taint, ...]]] = []
        for node in meant:
            taints = daemonset_untolerated_taints(spec, node)
            if taints and not any(fabric_family(r) == family for r in node_fabric(node)):
                blocked.append((node, taints))
        if not blocked:
            yield passed(daemonset, f"is placed on all {len(meant)} GPU nodes it selects")
            continue
        yield _verdict(daemonset, spec, family, blocked, family in requested)


def _family(daemonset: Resource) -> str:
    for container in containers(daemonset):
        repository = image_repository(str(container.get("image", "")))
        for name, family in _PLUGINS.items():
            if repository.endswith(name):
                return family
    return ""


def _verdict(
    daemonset: Resource,
    spec: Mapping[str, Any],
    family: str,
    blocked: list[tuple[Resource, tuple[Taint, ...]]],
    requested: bool,
) -> Result:
    nodes = [n for n, _ in blocked]
    taints = tuple(dict.fromkeys(t for _, found in blocked for t in found))
    shown = ", ".join(n.ref.name for n in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
    taint_text = ", ".join(str(t) for t in taints)
    hardware = [n for n in nodes if any(n.labels.get(k) for k in _HARDWARE_LABELS[family])]
    if requested:
        severity, consequence = (
            Severity.HIGH,
            f"workloads request the {family} resource, and these nodes can never offer it",
        )
    elif hardware:
        severity, consequence = (
            Severity.MEDIUM,
            f"{len(hardware)} of them carry {family} hardware labels: multi-node jobs there "
            "run over TCP",
        )
    else:
        severity, consequence = (
            Severity.LOW,
            "nothing in the input requests the fabric or shows its hardware on those nodes",
        )
    fix = daemonset_placement_fix(
        daemonset,
        spec,
        taints,
        "not placed on the GPU nodes it selects",
        "select the fabric nodes",
    )
    return failed(
        daemonset,
        f"cannot run on {len(nodes)} GPU node{'s' if len(nodes) > 1 else ''} it selects "
        f"({shown}): untolerated taint {taint_text}; none advertises {family} devices; "
        f"{consequence}",
        severity=severity,
        fix=fix,
        related=[relate(n.ref, "symptom") for n in nodes],
    )
