import re
from collections.abc import Iterator

from gpu_audit.api import (
    Category,
    FixKind,
    ObjRef,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    check,
    command_line,
    containers,
    daemonset_runs_on,
    failed,
    is_gpu_node,
    passed,
)
from gpu_audit.checks.stack._common import (
    helm_release,
    removal_command,
)

# The labels the operator's state manager keys on (gpuNodeLabels): NFD's vendor-only PCI labels.
OPERATOR_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
# Any NFD PCI label naming the NVIDIA vendor, also with class or device fields in it.
_NVIDIA_PCI = re.compile(r"^feature\.node\.kubernetes\.io/pci-[0-9a-f_]*10de[0-9a-f_]*\.present$")
_KARPENTER_GPU_VENDOR = "karpenter.k8s.aws/instance-gpu-manufacturer"


def _looks_gpu(node: Resource) -> bool:
    return is_gpu_node(node) or node.labels.get(_KARPENTER_GPU_VENDOR) == "nvidia"


def _operator_managed(node: Resource) -> bool:
    """Nodes opted out of every operand (nvidia.com/gpu.deploy.operands=false) need no label."""
    return node.labels.get("nvidia.com/gpu.deploy.operands") != "false"


def _renamed_pci_labels(node: Resource) -> list[str]:
    """NVIDIA PCI labels NFD wrote under another name (deviceLabelFields includes "device")."""
    return sorted(k for k in node.labels if _NVIDIA_PCI.match(k) and k not in OPERATOR_GPU_LABELS)


def _is_nfd_worker(daemonset: Resource) -> bool:
    """NFD master is a Deployment and nfd-gc another; only the per-node workers label nodes."""
    for container in containers(daemonset):
        if "node-feature-discovery" not in str(container.get("image", "")).lower():
            continue
        if "nfd-worker" in command_line(container) or "worker" in daemonset.ref.name:
            return True
    return False


@check(
    id="GPU-STACK-006",
    title="GPU nodes carry the NFD PCI label the GPU Operator keys on, from a single NFD",
    category=Category.STACK,
    severity=Severity.HIGH,
    requires=("Node",),
    rationale="""
        The GPU Operator treats a node as a GPU node only when NFD labelled it
        feature.node.kubernetes.io/pci-10de.present=true (or the pci-0302_10de / pci-0300_10de
        class variants). Without that label it creates no operands there ("No GPU node in the
        cluster, do not create DaemonSets"); an NFD worker config whose deviceLabelFields adds
        "device" renames the label and tears the stack down. Two NFD deployments (the
        operator's bundled one next to a standalone or nvdp-bundled one) double the label churn
        and API load, and their worker configs can disagree.
    """,
    detection="""
        With an active ClusterPolicy: every node that looks like an NVIDIA GPU node (GFD
        labels, GPU capacity, any NFD PCI label with vendor 10de, or Karpenter's
        instance-gpu-manufacturer=nvidia) must carry one of the three labels the operator keys
        on; a renamed NVIDIA PCI label (pci-10de_<device>.present) is named as the cause.
        Nodes opted out with nvidia.com/gpu.deploy.operands=false are skipped.
        Without a ClusterPolicy a missing label matters to nobody and is not evaluated. NFD
        workers are DaemonSets running a node-feature-discovery image as nfd-worker (the master
        Deployment and nfd-gc are the same deployment, not a second one); medium when two of
        them run on the same GPU node. That finding names the copy bundled into another Helm
        release (set nfd.enabled=false there) rather than a standalone NFD.
    """,
    severity_evidence="""
        High for a GPU node the active ClusterPolicy cannot see (no NFD PCI label): the
        operator deploys no operand there. Medium for a second NFD worker that the simulation
        places on the same GPU node: two masters relabel it and their configs can fight.
        Without a ClusterPolicy a missing label matters to nobody and is not evaluated.
    """,
    remediation="""
        # $subject: $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # Node <node> has no feature.node.kubernetes.io/pci-10de.present label: restore vendor-only PCI
        # labels in the NFD worker config, e.g. gpu-operator values
        # node-feature-discovery.worker.config.sources.pci.deviceLabelFields=[vendor]
        # (or deploy NFD: gpu-operator values nfd.enabled=true); until then:
        kubectl label node <node> feature.node.kubernetes.io/pci-10de.present=true --overwrite
        # a second NFD worker on the GPU nodes: keep one NFD deployment per cluster
        helm upgrade <release> nvidia/gpu-operator -n <namespace> --reuse-values --set nfd.enabled=false   # NFD bundled with gpu-operator (or nvdp/nvidia-device-plugin)
        helm uninstall <release> -n <namespace>          # a standalone NFD release
        kubectl -n <namespace> delete daemonset <name>   # not Helm-managed
    """,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html",
        "https://github.com/NVIDIA/gpu-operator/issues/1469",
        "https://github.com/NVIDIA/gpu-operator/issues/87",
        "https://github.com/NVIDIA/gpu-operator/issues/1551",
    ),
)
def gpu_nodes_carry_nfd_pci_label_from_one_nfd(snapshot: Snapshot) -> Iterator[Result]:
    nodes = [n for n in snapshot.of("Node") if _looks_gpu(n)]
    if active_cluster_policy(snapshot) is not None:
        for node in nodes:
            if _operator_managed(node):
                yield _label_result(node)
    yield from _worker_results(snapshot, nodes)


def _label_result(node: Resource) -> Result:
    present = [k for k in OPERATOR_GPU_LABELS if node.labels.get(k) == "true"]
    if present:
        return passed(node, f"carries {present[0]}=true, so the operator manages it")
    renamed = _renamed_pci_labels(node)
    if renamed:
        cause = (
            f"NFD labelled it {renamed[0]} instead: the worker config's "
            'sources.pci.deviceLabelFields must be ["vendor"] (or include "class", not "device")'
        )
        command = (
            "# restore vendor-only PCI labels in the NFD worker config, e.g. gpu-operator values:\n"
            "# node-feature-discovery.worker.config.sources.pci.deviceLabelFields=[vendor]\n"
            f"kubectl label node {node.ref.name} {OPERATOR_GPU_LABELS[0]}=true --overwrite"
        )
    else:
        cause = "no NFD PCI label for vendor 10de: NFD is not running on it or not labelling PCI"
        command = (
            "# deploy NFD (gpu-operator values nfd.enabled=true) or fix its PCI source; "
            "until then:\n"
            f"kubectl label node {node.ref.name} {OPERATOR_GPU_LABELS[0]}=true --overwrite"
        )
    return failed(
        node,
        f"looks like an NVIDIA GPU node but has none of {', '.join(OPERATOR_GPU_LABELS)}: "
        f"the GPU Operator will not deploy its operands here ({cause})",
        path="metadata.labels",
        fix={
            "subject": f"Node {node.ref.name}",
            "summary": "the GPU Operator does not see this node as a GPU node",
            "command": command,
        },
    )


def _worker_results(snapshot: Snapshot, nodes: list[Resource]) -> Iterator[Result]:
    workers = [ds for ds in snapshot.of("DaemonSet") if _is_nfd_worker(ds)]
    if not workers:
        return
    duplicates: dict[ObjRef, list[str]] = {}
    kept: dict[str, Resource] = {}
    for node in nodes:
        here = sorted(
            (w for w in workers if daemonset_runs_on(w, node)),
            key=lambda w: (bool(_parent_chart(w)), w.ref.sort_key),
        )
        if not here:
            continue
        kept[node.ref.name] = here[0]
        for extra in here[1:]:
            duplicates.setdefault(extra.ref, []).append(node.ref.name)
    for worker in workers:
        if worker.ref in duplicates:
            yield _duplicate_finding(worker, duplicates[worker.ref], kept)
        elif any(k.ref == worker.ref for k in kept.values()):
            yield passed(worker, "is the only NFD worker on the GPU nodes it runs on")


def _parent_chart(worker: Resource) -> str:
    """The chart that bundles this NFD as a subchart ("" for a standalone NFD). Release names
    say it: gpu-operator and nvdp both render <release>-node-feature-discovery-worker, as does
    a standalone release, so the name alone cannot."""
    release = helm_release(worker)
    if "gpu-operator" in release:
        return "nvidia/gpu-operator"
    if "nvdp" in release or "device-plugin" in release:
        return "nvdp/nvidia-device-plugin"
    return ""


def _duplicate_finding(
    worker: Resource, node_names: list[str], kept: dict[str, Resource]
) -> Result:
    other = kept[node_names[0]]
    chart = _parent_chart(worker)
    if chart:
        command = (
            f"helm upgrade {helm_release(worker)} {chart} -n {worker.ref.namespace} --reuse-values "
            "--set nfd.enabled=false"
        )
    else:
        command = removal_command(worker)
    return failed(
        worker,
        f"is a second NFD worker on {len(node_names)} GPU node(s) "
        f"({', '.join(sorted(node_names))}), next to DaemonSet "
        f"{other.ref.namespace}/{other.ref.name}",
        path="spec.template.spec",
        severity=Severity.MEDIUM,
        fix={
            "subject": f"DaemonSet {worker.ref.namespace}/{worker.ref.name}",
            "summary": "keep one NFD deployment per cluster",
            "command": command,
        },
    )
