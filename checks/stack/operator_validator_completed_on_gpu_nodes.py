from collections.abc import Iterator

from gpu_audit.api import (
    DEPLOY_PREFIX,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    node_is_ready,
    node_is_schedulable,
    passed,
)
from gpu_audit.checks.stack._common import (
    PodFailure,
    pod_failure,
)

VALIDATOR = "nvidia-operator-validator"
# The pods cuda-validation and plugin-validation start for their workload tests.
WORKLOAD_VALIDATORS = {
    "nvidia-cuda-validator": "cuda-validation",
    "nvidia-device-plugin-validator": "plugin-validation",
}
# Init containers in start order, and what a failure of each says about the node.
LAYERS = {
    "driver-validation": "the NVIDIA driver is not loaded (driver container not ready, or "
    "the host driver is missing)",
    "toolkit-validation": "the container runtime is not configured with the NVIDIA runtime "
    "(nvidia-smi not found in a container)",
    "cuda-validation": "a CUDA workload pod failed (driver/CUDA mismatch, RuntimeClass or "
    "Pod Security admission)",
    "plugin-validation": "the device plugin does not advertise nvidia.com/gpu, or its test "
    "pod cannot run",
}
HINTS = {
    "toolkit-validation": "# a host with its own toolkit: kubectl patch clusterpolicies.nvidia.com/"
    'cluster-policy --type merge -p \'{"spec":{"toolkit":{"enabled":false}}}\'',
    "driver-validation": "# then check the driver pod: kubectl -n $ns get pods -l "
    "app=nvidia-driver-daemonset -o wide",
}


def _opted_out(node: Resource | None) -> bool:
    if node is None:
        return False
    labels = node.labels
    return (
        labels.get(DEPLOY_PREFIX + "operands") == "false"
        or labels.get(DEPLOY_PREFIX + "operator-validator") == "false"
    )


def _usable(node: Resource | None) -> bool:
    """NotReady and cordoned nodes are GPU-NODE-006's findings."""
    return node is None or (node_is_ready(node) is not False and node_is_schedulable(node))


def _completed(pod: Resource) -> bool:
    statuses = [as_mapping(s) for s in as_list(pod.status.get("containerStatuses"))]
    return (
        pod.status.get("phase") == "Running"
        and bool(statuses)
        and all(s.get("ready") is True for s in statuses)
    )


def _layer(failure: PodFailure) -> str:
    return failure.container if failure.container in LAYERS else ""


def _workload_failure(
    snapshot: Snapshot, node_name: str
) -> tuple[str, Resource, PodFailure] | None:
    """A failed cuda/plugin test pod on the node: the layer it tests and why it failed. A
    plugin test pod that is only unschedulable for want of free GPUs is expected while
    workloads hold every GPU, so it is not evidence."""
    for app, layer in sorted(WORKLOAD_VALIDATORS.items()):
        for pod in snapshot.with_label("Pod", "app", app):
            if pod.spec.get("nodeName") != node_name:
                continue
            found = pod_failure(pod)
            if found and "Insufficient nvidia.com/gpu" in found.message:
                continue
            if found:
                return layer, pod, PodFailure(layer, f"test pod {pod.ref.name} {found.message}")
    return None


@check(
    id="GPU-STACK-008",
    title="The GPU Operator validator has completed all validations on every GPU node",
    category=Category.STACK,
    severity=Severity.HIGH,
    requires=("Pod",),
    rationale="""
        The validator is the GPU Operator's end-to-end test of a node: its init containers
        run driver-validation, toolkit-validation, cuda-validation and plugin-validation in
        that order, the last two by starting test pods (nvidia-cuda-validator,
        nvidia-device-plugin-validator). Until all pass the node is not ready for GPU work,
        and the first one that fails names the broken layer and so the fix.
    """,
    detection="""
        Live only: nvidia-operator-validator pods (label app=nvidia-operator-validator) by
        node. A node passes when its validator pod is Running with every container ready. It
        fails on clock-free evidence in the first unfinished init container (CrashLoopBackOff,
        RunContainerError and other stuck waits, a non-zero exit, 3+ restarts), or a failed
        nvidia-cuda-validator / nvidia-device-plugin-validator test pod on the node; the
        finding names the layer and what it means. Not flagged: validators still
        initialising (no clock to call them stuck), plugin test pods unschedulable only for
        want of free GPUs, nodes opted out with nvidia.com/gpu.deploy.operator-validator=false
        or operands=false, and NotReady or cordoned nodes (GPU-NODE-006). The validator
        DaemonSet's rollout itself is GPU-STACK-007's.
    """,
    severity_evidence="""
        High whenever it fails: a validator init container or test pod on the node shows
        clock-free failure (crash loop, non-zero exit, repeated restarts), so the node is not
        ready for GPU work. Validators still initialising are not judged.
    """,
    remediation="""
        # $subject: $summary
        kubectl -n $ns logs $pod -c $container
        kubectl -n $ns describe pod $pod
        $hint
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # Node <node>: the first validation that fails names the broken layer
        # (driver-validation, toolkit-validation, cuda-validation, plugin-validation)
        kubectl -n <operator-namespace> logs <validator-pod> -c <layer>
        kubectl -n <operator-namespace> describe pod <validator-pod>
        # driver-validation: then check the driver pod:
        #   kubectl -n <operator-namespace> get pods -l app=nvidia-driver-daemonset -o wide
        # toolkit-validation on a host with its own toolkit:
        #   kubectl patch clusterpolicies.nvidia.com/<cluster-policy> --type merge -p '{"spec":{"toolkit":{"enabled":false}}}'
        # the others: fix the layer above, then the validator reruns
    """,
    references=(
        "https://github.com/NVIDIA/gpu-operator/blob/main/assets/state-operator-validation/0500_daemonset.yaml",
        "https://github.com/NVIDIA/gpu-operator/issues/579",
        "https://github.com/NVIDIA/gpu-operator/issues/1374",
        "https://github.com/NVIDIA/gpu-operator/issues/1947",
    ),
)
def operator_validator_completed_on_gpu_nodes(snapshot: Snapshot) -> Iterator[Result]:
    for pod in snapshot.with_label("Pod", "app", VALIDATOR):
        node_name = str(pod.spec.get("nodeName") or "")
        node = snapshot.get("Node", "", node_name) if node_name else None
        if not node_name or _opted_out(node) or not _usable(node):
            continue
        target = node or pod
        if _completed(pod):
            yield passed(target, "passed every GPU Operator validation")
            continue
        found = pod_failure(pod)
        layer, failing_pod = (_layer(found), pod) if found else ("", pod)
        if found is None:  # the validator waits on a test pod, or is still working
            workload = _workload_failure(snapshot, node_name)
            if workload is not None:
                layer, failing_pod, found = workload
        if found is None or not layer:
            continue
        yield _finding(target, failing_pod, layer, found)


def _finding(target: Resource, pod: Resource, layer: str, found: PodFailure) -> Result:
    namespace = pod.ref.namespace
    return failed(
        target,
        f"has not passed {layer}: {LAYERS[layer]} ({found.message})",
        path="status",
        fix={
            "subject": f"{target.ref}",
            "summary": f"{layer} fails: {LAYERS[layer]}",
            "ns": namespace,
            "pod": pod.ref.name,
            "container": layer,
            "hint": HINTS.get(layer, "# fix the layer above, then the validator reruns").replace(
                "$ns", namespace
            ),
        },
    )
