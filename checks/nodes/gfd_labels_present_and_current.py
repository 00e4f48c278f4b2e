from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    CLUSTER_POLICY,
    NVIDIA_MIG_PREFIX,
    Category,
    FixKind,
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
    gpu_hosts,
    gpu_pod_templates,
    gpu_quantities,
    has_resource_status,
    is_bootstrapping,
    node_affinity_keys,
    passed,
    policy_operand_runs_on,
)

_GFD = "gpu-feature-discovery"
_DEPLOY_LABEL = "nvidia.com/gpu.deploy.gpu-feature-discovery"
_TIMESTAMP = "nvidia.com/gfd.timestamp"
# Each requirement is met by any one of its labels: the driver major moved to
# cuda.driver-version.major, and cuda.driver.major is kept only as a deprecated alias.
_REQUIRED: tuple[tuple[str, ...], ...] = (
    ("nvidia.com/gpu.product",),
    ("nvidia.com/gpu.count",),
    ("nvidia.com/gpu.memory",),
    ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver.major"),
)
_MIN_STALE_SECONDS = 24 * 3600
_DEFAULT_SLEEP_SECONDS = 60
_DURATION = re.compile(r"^(\d+)(s|m|h)?$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


@check(
    id="GPU-NODE-007",
    title="GPU Feature Discovery labels are present and current on every GPU node it should label",
    category=Category.NODES,
    severity=Severity.MEDIUM,
    requires=("Node", ("DaemonSet", CLUSTER_POLICY)),
    rationale="""
        Workloads and autoscalers select GPU nodes by nvidia.com/gpu.product, gpu.memory,
        gpu.count and the CUDA driver version that GFD writes. A GPU node without them matches
        no such selector, so pods stay Pending while the node sits idle; labels GFD stopped
        refreshing keep describing a MIG layout or driver the node no longer has.
    """,
    detection="""
        When GFD is deployed (a gpu-feature-discovery DaemonSet, or a ClusterPolicy with gfd
        not disabled): every GPU node GFD runs on (its DaemonSet's selectors and taints, or
        the operator's gpu.deploy.gpu-feature-discovery label) that advertises GPUs or carries
        that deploy label must have nvidia.com/gpu.product, gpu.count, gpu.memory (or, under
        the mixed MIG strategy, a nvidia.com/mig-<profile>.memory) and
        nvidia.com/cuda.driver-version.major (or the deprecated cuda.driver.major). Without a
        clock the catalogue's "fresh" test compares nodes: a nvidia.com/gfd.timestamp more
        than max(24h, 10 x GFD_SLEEP_INTERVAL) older than the newest one in the input fails
        low; nodes without a timestamp (--no-timestamp) are not compared. Nodes still joining
        are skipped. Cloud labels (gke-accelerator) do not substitute. Selectors that use GFD
        values no node carries are GPU-SCHED-002's finding.
    """,
    severity_evidence="""
        Missing labels are medium when a GPU workload in the input selects on one of them
        (nodeSelector or required node affinity): it cannot land on the node. Without such
        a workload they are low, as are labels GFD stopped refreshing (no clock: compared
        with the newest node only).
    """,
    remediation="""
        kubectl get pods -A -o wide --field-selector spec.nodeName=$name | grep gpu-feature-discovery
        # $hint
        # labels GFD wrote: kubectl get node $name -o jsonpath='{.metadata.labels}'
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/README.md",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/lm/nvml.go",
    ),
)
def gfd_labels_present_and_current(snapshot: Snapshot) -> Iterator[Result]:
    policy = active_cluster_policy(snapshot)
    if policy is not None and not component_enabled(policy, "gfd"):
        policy = None
    daemonsets = [ds for ds in snapshot.of("DaemonSet") if _is_gfd(ds)]
    if policy is None and not daemonsets:
        return  # no GFD: nothing promises these labels
    stale_after = max(_MIN_STALE_SECONDS, 10 * _sleep_seconds(daemonsets, policy))
    nodes = [n for n in gpu_hosts(snapshot) if _labelled_by_gfd(n, daemonsets, policy)]
    newest = max((t for n in nodes if (t := _timestamp(n)) is not None), default=None)
    wanted = _selected_label_keys(snapshot) if nodes else {}
    for node in nodes:
        missing = _missing(node)
        timestamp = _timestamp(node)
        if missing:
            users = sorted({w for key in _missing_keys(node, missing) for w in wanted.get(key, ())})
            impact = (
                f": GPU workloads that select on them cannot land here ({', '.join(users[:3])}"
                f"{f' and {len(users) - 3} more' if len(users) > 3 else ''})"
                if users
                else "; no workload in the input selects on them"
            )
            yield failed(
                node,
                f"lacks the GFD labels {', '.join(missing)}{impact}",
                path="metadata.labels",
                severity=Severity.MEDIUM if users else Severity.LOW,
                fix={"hint": "GFD is not running or not labelling here: read its log on the node"},
            )
        elif newest is not None and timestamp is not None and newest - timestamp > stale_after:
            hours = (newest - timestamp) // 3600
            yield failed(
                node,
                f"GFD labels are {hours}h older than the newest on another node "
                f"({_TIMESTAMP}={timestamp}): GFD stopped relabelling this node",
                path=f"metadata.labels.{_TIMESTAMP}",
                severity=Severity.LOW,
                fix={"hint": "restart the GFD pod on the node; NFD must also be running"},
            )
        else:
            yield passed(node, "carries GFD's product, count, memory and driver labels")


def _missing_keys(node: Resource, missing: list[str]) -> set[str]:
    """Every label key a missing requirement stands for (a deprecated alias included)."""
    return {key for names in _REQUIRED if names[0] in missing for key in names}


def _selected_label_keys(snapshot: Snapshot) -> dict[str, set[str]]:
    """GFD label key -> the GPU workloads whose nodeSelector or required node affinity uses it."""
    found: dict[str, set[str]] = {}
    gfd_keys = {key for names in _REQUIRED for key in names}
    for template in gpu_pod_templates(snapshot):
        keys, _ = node_affinity_keys(template.spec)
        owner = template.owner.ref
        for key in keys & gfd_keys:
            found.setdefault(key, set()).add(f"{owner.kind_name} {owner.namespace}/{owner.name}")
    return found


def _is_gfd(daemonset: Resource) -> bool:
    if _GFD in daemonset.ref.name:
        return True
    return any(
        _GFD in command_line(c) or _GFD in str(c.get("image", "")) for c in containers(daemonset)
    )


def _labelled_by_gfd(node: Resource, daemonsets: list[Resource], policy: Resource | None) -> bool:
    """A GPU node GFD runs on and is expected to have labelled by now."""
    if is_bootstrapping(node):
        return False
    advertises = has_resource_status(node) and any(
        v > 0 for v in gpu_quantities(node, "allocatable").values()
    )
    if not (advertises or node.labels.get(_DEPLOY_LABEL) == "true"):
        return False
    if daemonsets:
        return any(daemonset_runs_on(ds, node) for ds in daemonsets)
    return policy is not None and policy_operand_runs_on(policy, node, _GFD)


def _missing(node: Resource) -> list[str]:
    labels = node.labels
    missing = [names[0] for names in _REQUIRED if not any(n in labels for n in names)]
    # Under mixed, MIG-only nodes describe memory per profile.
    per_profile = labels.get("nvidia.com/mig.strategy") == "mixed" and any(
        k.startswith(NVIDIA_MIG_PREFIX) and k.endswith(".memory") for k in labels
    )
    if per_profile and "nvidia.com/gpu.memory" in missing:
        missing.remove("nvidia.com/gpu.memory")
    return missing


def _timestamp(node: Resource) -> int | None:
    try:
        return int(node.labels[_TIMESTAMP])
    except (KeyError, ValueError):
        return None


def _sleep_seconds(daemonsets: list[Resource], policy: Resource | None) -> int:
    """The longest GFD_SLEEP_INTERVAL configured (DaemonSet env, ClusterPolicy gfd.env)."""
    values: list[str] = []
    for daemonset in daemonsets:
        for container in containers(daemonset):
            found = env_value(container, "GFD_SLEEP_INTERVAL")
            if found:
                values.append(found)
    if policy is not None:
        gfd: Mapping[str, Any] = as_mapping(policy.spec.get("gfd"))
        values.extend(
            str(as_mapping(e).get("value", ""))
            for e in as_list(gfd.get("env"))
            if as_mapping(e).get("name") == "GFD_SLEEP_INTERVAL"
        )
    seconds = [_seconds(v) for v in values]
    return max((s for s in seconds if s is not None), default=_DEFAULT_SLEEP_SECONDS)


def _seconds(duration: str) -> int | None:
    """A Go duration of one unit ("60s", "5m", "1h"); None for anything else."""
    match = _DURATION.match(duration.strip())
    if not match:
        return None
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
