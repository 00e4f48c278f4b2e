from collections.abc import Iterator

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    passed,
)

_CONFIG = "nvidia.com/mig.config"
_STATE = "nvidia.com/mig.config.state"
_PAUSED = "paused-for-mig-change"
# Operand deploy labels MIG Manager pauses during a change (client: GPU Operator v26.7).
_DEPLOY_LABELS = tuple(
    f"nvidia.com/gpu.deploy.{operand}"
    for operand in (
        "device-plugin",
        "gpu-feature-discovery",
        "dcgm-exporter",
        "dcgm",
        "nvsm",
        "client",
    )
)


@check(
    id="GPU-NODE-004",
    title="MIG reconfiguration finished successfully and left no operand paused",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=("Node",),
    rationale="""
        MIG Manager applies the profile named by nvidia.com/mig.config and reports the outcome
        in nvidia.com/mig.config.state. "failed" means the GPUs have another geometry than the
        one requested, or none. While it works it sets the operand deploy labels to
        paused-for-mig-change, so no device plugin runs on the node; if it gives up without
        resetting them, the node keeps its GPUs but advertises none.
    """,
    detection="""
        Every node with a nvidia.com/mig.config label: state "failed" fails; any
        nvidia.com/gpu.deploy.* label (device-plugin, gpu-feature-discovery, dcgm-exporter, dcgm,
        nvsm, client) left at paused-for-mig-change while the state is not pending fails; state
        "success" with nothing paused passes. Nodes in "pending" or "rebooting" are not
        evaluated: the check has no clock to tell a change in progress (10+ minutes on bare
        metal) from a stuck one. Deploy labels set to "false" by an admin and
        paused-for-driver-upgrade are not MIG Manager's and are not flagged.
    """,
    severity_evidence="""
        High whenever it fails: the node's own labels say the MIG change failed or left
        operands paused, so the node has another GPU layout than requested or advertises
        none. Nodes still pending or rebooting are not judged.
    """,
    remediation="""
        kubectl label node $name $labels --overwrite
        # if the change failed, read why:
        # kubectl -n gpu-operator logs -l app=nvidia-mig-manager --tail=200
        # and choosing a profile that exists in the MIG config (the <node>-mig-config ConfigMap):
        # kubectl label node $name nvidia.com/mig.config=all-1g.10gb --overwrite
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html",
        "https://github.com/NVIDIA/mig-parted/blob/main/pkg/mig/reconfigure/reconfigure.go",
        "https://github.com/NVIDIA/gpu-operator/issues/603",
    ),
)
def mig_reconfiguration_succeeded(snapshot: Snapshot) -> Iterator[Result]:
    for node in snapshot.of("Node"):
        labels = node.labels
        if _CONFIG not in labels:
            continue
        state = labels.get(_STATE, "")
        paused = [k for k in _DEPLOY_LABELS if labels.get(k) == _PAUSED]
        if state in ("pending", "rebooting"):
            continue
        result = _verdict(node, state, paused)
        if result is not None:
            yield result


def _verdict(node: Resource, state: str, paused: list[str]) -> Result | None:
    profile = node.labels[_CONFIG]
    # Resetting the deploy labels restarts the paused operands; with nothing paused the fix is
    # the profile itself, which the comment lines of the remediation explain.
    fix = {"labels": " ".join(f"{k}=true" for k in paused) or f"{_CONFIG}={profile}"}
    if state == "failed":
        return failed(
            node,
            f"MIG config {profile!r} failed to apply (state failed)"
            + (f"; {', '.join(paused)} still {_PAUSED}" if paused else ""),
            path=f"metadata.labels.{_STATE}",
            fix=fix,
        )
    if paused:
        return failed(
            node,
            f"{', '.join(paused)} left {_PAUSED} with state {state or 'unset'}: "
            "those operands are not running on the node",
            path="metadata.labels",
            fix=fix,
        )
    if state == "success":
        return passed(node, f"MIG config {profile!r} applied", path=f"metadata.labels.{_STATE}")
    return None
