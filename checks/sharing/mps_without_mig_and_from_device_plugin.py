from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    passed,
    pod_templates,
)
from gpu_audit.checks.sharing._common import (
    NODE_CONFIG_LABEL,
    config_refs,
    ref_nodes,
    selected_key,
)

MPS_CONTROL = "nvidia-cuda-mps-control"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_DISABLED = "all-disabled"


def _mig_enabled(node: Resource) -> bool:
    """GFD reports MIG in use, or mig-manager is told to partition the GPUs."""
    labels = node.labels
    if labels.get(MIG_CONFIG_LABEL, MIG_DISABLED) != MIG_DISABLED:
        return True
    if labels.get(MIG_STRATEGY_LABEL) in ("single", "mixed"):
        return any(k.startswith("nvidia.com/mig-") and k.endswith(".count") for k in labels)
    return False


def _mps_nodes(snapshot: Snapshot) -> Iterator[tuple[Resource, str]]:
    """(GPU node, selected key) for every node whose plugin applies an MPS config."""
    for ref in config_refs(snapshot):
        for node in ref_nodes(snapshot, ref):
            key = selected_key(ref, node)
            config = ref.configs.get(key)
            if config is not None and config.mode == "mps":
                yield node, key


def _runs_mps_control(container: Container) -> bool:
    words = as_list(container.raw.get("command")) + as_list(container.raw.get("args"))
    return any(MPS_CONTROL in str(w) for w in words)


def _is_device_plugin_image(container: Container) -> bool:
    # The operator's and the nvdp chart's MPS control daemon run from the plugin image.
    return "k8s-device-plugin" in container.image.lower()


@check(
    id="GPU-SHARE-005",
    title="MPS is not combined with MIG and node-wide MPS comes from the device plugin",
    category=Category.SHARING,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        The device plugin does not support MPS on MIG devices and aborts ("sharing using MPS
        is not supported for MIG devices"), so a MIG node whose selected config uses MPS
        advertises no GPUs. A pod that starts nvidia-cuda-mps-control -d by hand changes
        nothing the node advertises: other pods still get whole exclusive nvidia.com/gpu, and
        clients that do connect share a daemon with no per-client memory or thread limits.
    """,
    detection="""
        GPU nodes whose device-plugin config (node label, default or fallback) uses
        sharing.mps fail (high) when MIG is in use: nvidia.com/mig.config other than
        all-disabled, or a MIG strategy label with MIG slice counts; MPS nodes without MIG
        pass. Pod templates that run nvidia-cuda-mps-control fail unless the image is
        the device plugin's (the operator's nvidia-device-plugin-mps-control-daemon and the
        nvdp chart's mps-control-daemon). Not flagged here: MPS with mig-strategy mixed
        (GPU-SHARE-002, a config finding) and GKE-managed MPS, a different implementation.
    """,
    severity_evidence="""
        High for an MPS config selected on a MIG node: the plugin refuses to start there. A
        hand-started MPS daemon is medium when the pod opens it to other pods (hostIPC, or a
        hostPath for the MPS pipe directory), the node-wide MPS the device plugin should
        provide; it is low when it serves only the pod's own processes.
    """,
    remediation="""
        # $subject: $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # Node <node> selects an MPS config while MIG is enabled: MPS is unsupported on MIG devices;
        # disable MIG or pick a config without MPS (time-slicing works on MIG slices)
        kubectl label node <node> nvidia.com/mig.config=all-disabled --overwrite
        # a workload that starts nvidia-cuda-mps-control itself: remove the hand-made MPS daemon;
        # configure MPS in the device-plugin config (sharing.mps) instead
        kubectl -n <namespace> delete <kind> <name>
    """,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin#with-cuda-mps",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/plugin/mps.go",
    ),
)
def mps_without_mig_and_from_device_plugin(snapshot: Snapshot) -> Iterator[Result]:
    for node, key in _mps_nodes(snapshot):
        if not _mig_enabled(node):
            yield passed(node, f"uses MPS config {key!r} on GPUs without MIG")
            continue
        mig = node.labels.get(MIG_CONFIG_LABEL, node.labels.get(MIG_STRATEGY_LABEL, ""))
        yield failed(
            node,
            f"selects MPS config {key!r} but MIG is enabled ({mig}): the plugin will not start",
            path=f"metadata.labels.{NODE_CONFIG_LABEL}",
            fix={
                "subject": f"Node {node.ref.name}",
                "summary": "MPS is unsupported on MIG devices; disable MIG or pick a "
                "config without MPS (time-slicing works on MIG slices)",
                "command": f"kubectl label node {node.ref.name} "
                f"{MIG_CONFIG_LABEL}={MIG_DISABLED} --overwrite",
            },
        )
    yield from _ad_hoc_daemons(snapshot)


def _shared_beyond_pod(template: PodTemplate) -> str:
    """How the template opens its MPS daemon to other pods ("" when it does not): the host's
    IPC namespace, or a host directory for the MPS pipe and log (CUDA_MPS_PIPE_DIRECTORY,
    /tmp/nvidia-mps by default) that other pods can mount."""
    if template.spec.get("hostIPC") is True:
        return "hostIPC"
    for volume in map(as_mapping, as_list(template.spec.get("volumes"))):
        path = str(as_mapping(volume.get("hostPath")).get("path", ""))
        if "mps" in path.lower():
            return f"hostPath {path}"
    return ""


def _ad_hoc_daemons(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        for container in template.containers():
            if not _runs_mps_control(container) or _is_device_plugin_image(container):
                continue
            owner = template.owner
            shared = _shared_beyond_pod(template)
            scope = (
                f"and shares it with other pods ({shared}): node-wide MPS must come from "
                "sharing.mps in the device-plugin config, or the node keeps advertising "
                "exclusive GPUs"
                if shared
                else "inside the pod only (no hostIPC, no host MPS directory): its own "
                "processes share the GPU with no per-client limits; other pods are unaffected"
            )
            yield failed(
                container,
                f"starts {MPS_CONTROL} itself {scope}",
                path=f"{container.path}.command",
                severity=Severity.MEDIUM if shared else Severity.LOW,
                fix={
                    "subject": f"{owner.ref.kind_name} {owner.ref.namespace}/{owner.ref.name}",
                    "summary": "remove the hand-made MPS daemon; configure MPS in the "
                    "device-plugin config (sharing.mps) instead",
                    "command": f"kubectl -n {owner.ref.namespace or 'default'} delete "
                    f"{owner.ref.kind_name.lower()} {owner.ref.name}",
                },
            )
