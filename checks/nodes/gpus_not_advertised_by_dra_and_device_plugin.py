from collections.abc import Iterator

from gpu_audit.api import (
    NVIDIA_GPU_DRIVER,
    Category,
    FixKind,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    format_quantity,
    gpu_quantities,
    passed,
)
from gpu_audit.checks.nodes._common import dra_gpu_nodes


@check(
    id="GPU-NODE-008",
    title="No node advertises its GPUs through both DRA ResourceSlices and the NVIDIA device plugin",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=("ResourceSlice", "Node"),
    rationale="""
        The NVIDIA DRA driver cannot run next to the NVIDIA device plugin on one node: both
        hand out the same physical GPUs, and neither the ResourceClaim allocator nor the
        extended-resource accounting sees the other's allocations, so a ResourceClaim and an
        nvidia.com/gpu limit can be given one device. The GPU Operator supports one model per
        cluster: a GPUCluster (DRA) or a ClusterPolicy (device plugin), not both.
    """,
    detection="""
        Nodes named by a ResourceSlice of driver gpu.nvidia.com that lists devices: fails when
        the same Node also has a positive nvidia.com/gpu, nvidia.com/gpu.shared or
        nvidia.com/mig-* capacity (a device plugin registered them); passes otherwise. A stale
        nvidia.com/gpu: 0 key is harmless. Slices of compute-domain.nvidia.com (ComputeDomains,
        IMEX channels) are meant to run next to the device plugin and are ignored here (whether
        ComputeDomains can gather their nodes is GPU-NODE-009's), as are DeviceClasses with
        extendedResourceName, which serve nvidia.com/gpu requests from DRA without node
        capacity (a pod asking for GPUs both ways is GPU-SCHED-010's). Slice nodes absent from the input are not evaluated; the
        chart-values and GPUCluster parts of the catalogue entry are not implemented (the
        former needs Helm values, the latter is GPU-STACK-001's).
    """,
    severity_evidence="""
        High whenever it fails: the same node showing DRA devices and positive device-plugin
        capacity is itself the evidence that one GPU can be handed out twice. A stale
        nvidia.com/gpu: 0 key is not evidence and passes.
    """,
    remediation="""
        kubectl label node $name nvidia.com/gpu.deploy.device-plugin=false --overwrite
        # (GPU Operator clusters; a standalone nvidia-device-plugin chart needs a node affinity
        # that excludes DRA nodes instead). Or keep the device plugin and run DRA for
        # ComputeDomains only:
        # helm upgrade nvidia-dra-driver-gpu nvidia/nvidia-dra-driver-gpu --reuse-values --set resources.gpus.enabled=false
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/",
        "https://nvidia.github.io/cloud-native-docs/review/pr-478/gpu-operator/latest/dra-intro-install.html",
        "https://nvidia.github.io/cloud-native-docs/review/pr-445/gpu-operator/latest/gpu-operator-dra.html",
    ),
)
def gpus_not_advertised_by_dra_and_device_plugin(snapshot: Snapshot) -> Iterator[Result]:
    for name in sorted(dra_gpu_nodes(snapshot)):
        node = snapshot.get("Node", "", name)
        if node is None:
            continue
        plugin = {k: v for k, v in sorted(gpu_quantities(node, "capacity").items()) if v > 0}
        if not plugin:
            yield passed(node, f"advertises its GPUs only through DRA ({NVIDIA_GPU_DRIVER})")
            continue
        shown = ", ".join(f"{k}={format_quantity(v)}" for k, v in plugin.items())
        yield failed(
            node,
            f"has {NVIDIA_GPU_DRIVER} ResourceSlice devices and device-plugin capacity {shown}: "
            "the same GPUs can be allocated twice",
            path="status.capacity",
        )
