from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from gpu_audit.api import (
    NODEPOOL,
    NVIDIA_MIG_PREFIX,
    Category,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_hosts,
    gpu_pod_templates,
    gpu_quantities,
    passed,
)

_STRATEGY = "nvidia.com/mig.strategy"
_CONFIG = "nvidia.com/mig.config"
_STATE = "nvidia.com/mig.config.state"
_PRODUCT = "nvidia.com/gpu.product"
_DEFAULT_CONFIGMAP = "default-mig-parted-config"
# Profiles of NVIDIA's default MIG config whose entries mix instance types, used only when the
# MIG config ConfigMap is not in the input.
_KNOWN_MIXED_PROFILES = frozenset({"all-balanced"})
_RESTART = "kubectl delete pods -A -l {app} --field-selector spec.nodeName={node}"


@check(
    id="GPU-NODE-003",
    title="The MIG strategy agrees with the ClusterPolicy, the nodes' MIG layout and the MIG resources workloads request",
    category=Category.NODES,
    severity=Severity.HIGH,
    requires=("Node",),
    rationale="""
        Under mig.strategy single every GPU of a node must carry the same MIG profile: a node
        with mixed profiles, MIG on some GPUs only, or an empty MIG GPU is labelled
        <model>-MIG-INVALID and advertises 0 GPUs. Under mixed the slices are advertised as
        nvidia.com/mig-<profile> and nothing as nvidia.com/gpu; under none a MIG-enabled GPU is
        advertised as a whole nvidia.com/gpu. A workload asking for a resource name the
        strategy does not produce stays Pending forever.
    """,
    detection="""
        GPU nodes that use or can use MIG (MIG labels, a -MIG- product or MIG capacity): fails
        high on a -MIG-INVALID product; on strategy single with a mig.config profile whose MIG
        config entries mix instance types, mix MIG on and off, or enable MIG without devices
        (read from the <node>-mig-config, the ClusterPolicy's migManager.config or
        default-mig-parted-config ConfigMap; without it only all-balanced is assumed mixed,
        medium); and on an applied profile that enables MIG while the strategy is none (no
        nvidia.com/mig.strategy label next to GFD labels). Fails medium when the node's label
        differs from the ClusterPolicy's spec.mig.strategy (a stale GFD), or shows positive
        nvidia.com/mig-* capacity under single. GPU pod templates requesting a
        nvidia.com/mig-<profile> that no node advertises (capacity or GFD count label) fail
        high, medium when Karpenter NodePools are in the input. all-disabled and nodes without
        MIG pass.
    """,
    severity_evidence="""
        High when the node's own labels show the failure (a -MIG-INVALID product, a profile
        applied under strategy none) or a GPU workload requests a MIG resource no node
        advertises; medium when the layout problem is only assumed from the profile's name,
        when GFD's strategy label disagrees with the ClusterPolicy or MIG resources remain
        under single (a stale pod), and for the unadvertised request while Karpenter
        NodePools could still launch such nodes. Mixed-strategy nodes advertising MIG
        resources and nvidia.com/gpu 0 are the design, not a finding.
    """,
    remediation="""
        $command
        # $hint
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # a MIG layout mig.strategy single cannot advertise (several instance types: MIG-INVALID,
        # 0 GPUs): switch the cluster to the mixed strategy
        kubectl patch clusterpolicies.nvidia.com/<cluster-policy> --type=merge -p '{"spec":{"mig":{"strategy":"mixed"}}}'
        helm upgrade nvdp nvdp/nvidia-device-plugin --reuse-values --set migStrategy=mixed   # without a ClusterPolicy
        # or keep single with a one-profile layout:
        kubectl label node <node> nvidia.com/mig.config=all-1g.10gb --overwrite
        # a MIG profile applied under strategy none: set single (mixed when the profile has several instance types)
        kubectl patch clusterpolicies.nvidia.com/<cluster-policy> --type=merge -p '{"spec":{"mig":{"strategy":"single"}}}'
        # GFD labels of another strategy, or MIG resources left under single: restart the pod on the node
        kubectl delete pods -A -l app=gpu-feature-discovery --field-selector spec.nodeName=<node>
        kubectl delete pods -A -l app=nvidia-device-plugin-daemonset --field-selector spec.nodeName=<node>
        # a workload requesting a MIG resource no node advertises: see what the nodes offer, and
        # request nvidia.com/gpu under single (or a MIG resource the nodes advertise)
        kubectl get nodes -L nvidia.com/mig.strategy,nvidia.com/gpu.product
    """,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/lm/mig-strategy.go",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/README.md",
    ),
)
def mig_strategy_consistent(snapshot: Snapshot) -> Iterator[Result]:
    policy = active_cluster_policy(snapshot)
    policy_strategy = (
        str(as_mapping(policy.spec.get("mig")).get("strategy") or "") if policy else ""
    )
    configs = _MigConfigs(snapshot, policy)
    hosts = gpu_hosts(snapshot)
    for node in hosts:
        if _uses_mig(node):
            yield from _node_results(node, policy, policy_strategy, configs)
    if hosts:
        yield from _workload_results(snapshot, hosts)


# --------------------------------------------------------------------------- nodes


def _uses_mig(node: Resource) -> bool:
    labels = node.labels
    return (
        _CONFIG in labels
        or labels.get(_STRATEGY) in ("single", "mixed")
        or labels.get("nvidia.com/mig.capable") == "true"
        or "-MIG-" in labels.get(_PRODUCT, "")
        or any(k.startswith(NVIDIA_MIG_PREFIX) for k in gpu_quantities(node, "capacity"))
    )


def _node_strategy(node: Resource) -> str | None:
    """The strategy GFD reports: its label, or none when GFD labels the node without it."""
    labels = node.labels
    if _STRATEGY in labels:
        return labels[_STRATEGY]
    return "none" if _PRODUCT in labels or "nvidia.com/gpu.count" in labels else None


def _node_results(
    node: Resource, policy: Resource | None, policy_strategy: str, configs: _MigConfigs
) -> Iterator[Result]:
    labels = node.labels
    strategy = _node_strategy(node)
    profile = labels.get(_CONFIG)
    name = node.ref.name
    set_mixed = _set_strategy(policy, "mixed")
    uniform = f"or keep single with a one-profile layout: kubectl label node {name} {_CONFIG}=all-1g.10gb --overwrite"
    problems: list[tuple[str, Severity | None, str, str]] = []
    if labels.get(_PRODUCT, "").endswith("-MIG-INVALID"):
        problems.append(
            (
                f"{_PRODUCT}={labels[_PRODUCT]}: mig.strategy single with a non-uniform MIG "
                "layout advertises 0 GPUs",
                None,
                set_mixed,
                uniform,
            )
        )
    elif strategy == "single" and profile:
        layout = configs.single_strategy_problem(name, profile)
        if layout is not None:
            reason, assumed = layout
            problems.append(
                (
                    f"MIG profile {profile!r} {reason}, which mig.strategy single labels "
                    "MIG-INVALID with 0 GPUs" + (" (assumed from its name)" if assumed else ""),
                    Severity.MEDIUM if assumed else None,
                    set_mixed,
                    uniform,
                )
            )
    applied = profile is not None and labels.get(_STATE) == "success"
    if strategy == "none" and applied and configs.enables_mig(name, str(profile)):
        problems.append(
            (
                f"MIG profile {profile!r} is applied but the MIG strategy is none: the "
                "MIG-enabled GPUs are advertised as whole nvidia.com/gpu (unverified "
                "whether CUDA can use them)",
                None,
                _set_strategy(policy, "single"),
                "use mixed instead when the profile has several instance types",
            )
        )
    if policy_strategy and _STRATEGY in labels and labels[_STRATEGY] != policy_strategy:
        problems.append(
            (
                f"GFD labels MIG strategy {labels[_STRATEGY]} but ClusterPolicy "
                f"{policy.ref.name if policy else ''} sets {policy_strategy} (stale GFD pod "
                "or an override)",
                Severity.MEDIUM,
                _RESTART.format(app="app=gpu-feature-discovery", node=name),
                "the restarted GFD pod relabels the node with the ClusterPolicy's strategy",
            )
        )
    if strategy == "single":
        stale = sorted(
            k
            for k, v in gpu_quantities(node, "capacity").items()
            if k.startswith(NVIDIA_MIG_PREFIX) and v > 0
        )
        if stale:
            problems.append(
                (
                    f"advertises {', '.join(stale)} under mig.strategy single (a device plugin "
                    "still runs the mixed strategy)",
                    Severity.MEDIUM,
                    _RESTART.format(app="app=nvidia-device-plugin-daemonset", node=name),
                    "the restarted device plugin advertises the single-strategy nvidia.com/gpu",
                )
            )
    if not problems:
        yield passed(node, f"MIG strategy {strategy or 'unknown'} fits its MIG layout")
    for message, severity, command, hint in problems:
        yield failed(
            node,
            message,
            path="metadata.labels",
            severity=severity,
            fix={"command": command, "hint": hint},
        )


def _set_strategy(policy: Resource | None, strategy: str) -> str:
    if policy is None:
        return f"helm upgrade nvdp nvdp/nvidia-device-plugin --reuse-values --set migStrategy={strategy}"
    patch = json.dumps({"spec": {"mig": {"strategy": strategy}}}, separators=(",", ":"))
    return f"kubectl patch clusterpolicies.nvidia.com/{policy.ref.name} --type=merge -p '{patch}'"


class _MigConfigs:
    """The MIG Manager configurations in the input: per-node `<node>-mig-config` ConfigMaps
    (GPU Operator >= v26.3), the ClusterPolicy's custom one, or the default one."""

    def __init__(self, snapshot: Snapshot, policy: Resource | None) -> None:
        self._by_name: dict[str, Mapping[str, Any]] = {}
        for configmap in snapshot.of("ConfigMap"):
            parsed = _parse(configmap)
            if parsed is not None:
                self._by_name.setdefault(configmap.ref.name, parsed)
        custom = (
            as_mapping(as_mapping(policy.spec.get("migManager")).get("config")) if policy else {}
        )
        self._cluster_name = str(custom.get("name") or _DEFAULT_CONFIGMAP)

    def _entries(self, node: str, profile: str) -> list[Mapping[str, Any]] | None:
        for name in (f"{node}-mig-config", self._cluster_name, _DEFAULT_CONFIGMAP):
            configs = self._by_name.get(name)
            if configs is not None and profile in configs:
                return [as_mapping(e) for e in as_list(configs[profile])]
        return None

    def enables_mig(self, node: str, profile: str) -> bool:
        entries = self._entries(node, profile)
        if entries is None:
            return profile != "all-disabled"
        return any(e.get("mig-enabled") is True for e in entries)

    def single_strategy_problem(self, node: str, profile: str) -> tuple[str, bool] | None:
        """Why the profile cannot work under the single strategy, and whether that was
        assumed from its name; None when it can."""
        entries = self._entries(node, profile)
        if entries is None:
            return ("mixes instance types", True) if profile in _KNOWN_MIXED_PROFILES else None
        # Entries for other GPU models (device-filter) never apply together.
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for entry in entries:
            found = entry.get("device-filter")
            key = ",".join(sorted(map(str, as_list(found)))) or str(found or "")
            groups.setdefault(key, []).append(entry)
        for group in groups.values():
            enabled = {e.get("mig-enabled") is True for e in group}
            if len(enabled) > 1:
                return ("enables MIG on some GPUs only", False)
            types = {str(t) for e in group for t in as_mapping(e.get("mig-devices"))}
            if len(types) > 1:
                return (f"mixes instance types {', '.join(sorted(types))}", False)
            if True in enabled and not types:
                return ("enables MIG without MIG devices", False)
        return None


def _parse(configmap: Resource) -> Mapping[str, Any] | None:
    """`mig-configs` of a MIG config ConfigMap (key config.yaml), or None for other ConfigMaps."""
    text = as_mapping(configmap.raw.get("data")).get("config.yaml")
    if not isinstance(text, str) or "mig-configs" not in text:
        return None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return None  # an unreadable MIG config is MIG Manager's failure, GPU-NODE-004 reports it
    configs = as_mapping(document).get("mig-configs")
    return as_mapping(configs) if isinstance(configs, Mapping) else None


# --------------------------------------------------------------------------- workloads


def _workload_results(snapshot: Snapshot, hosts: tuple[Resource, ...]) -> Iterator[Result]:
    advertised: dict[str, str] = {}  # MIG resource -> a node that has it
    single_profiles: dict[str, str] = {}  # profile under single -> a node
    for node in hosts:
        for name, value in gpu_quantities(node, "allocatable").items():
            if name.startswith(NVIDIA_MIG_PREFIX) and value > 0:
                advertised.setdefault(name, node.ref.name)
        for key, count in node.labels.items():
            if (
                key.startswith(NVIDIA_MIG_PREFIX)
                and key.endswith(".count")
                and count not in ("", "0")
            ):
                advertised.setdefault(key.removesuffix(".count"), node.ref.name)
        product = node.labels.get(_PRODUCT, "")
        if node.labels.get(_STRATEGY) == "single" and "-MIG-" in product:
            single_profiles.setdefault(product.rsplit("-MIG-", 1)[1], node.ref.name)
    pools = bool(snapshot.of(NODEPOOL))
    for template in gpu_pod_templates(snapshot):
        for resource in _mig_requests(template):
            yield _workload_verdict(template, resource, advertised, single_profiles, pools)


def _mig_requests(template: PodTemplate) -> list[str]:
    names = {n for c in template.containers() for n in c.gpu_resource_names()}
    return sorted(n for n in names if n.startswith(NVIDIA_MIG_PREFIX))


def _workload_verdict(
    template: PodTemplate,
    resource: str,
    advertised: Mapping[str, str],
    single_profiles: Mapping[str, str],
    pools: bool,
) -> Result:
    if resource in advertised:
        return passed(template, f"requests {resource}, advertised by node {advertised[resource]}")
    profile = resource.removeprefix(NVIDIA_MIG_PREFIX)
    if profile in single_profiles:
        reason = (
            f"node {single_profiles[profile]} has {profile} slices under mig.strategy single, "
            "which advertises them as nvidia.com/gpu"
        )
        hint = f"request nvidia.com/gpu instead of {resource}, or switch the cluster to mixed"
    else:
        reason = "no node advertises it (wrong profile name, or the strategy is not mixed)"
        hint = f"request a MIG resource the nodes advertise, or configure {profile} slices with strategy mixed"
    return failed(
        template,
        f"requests {resource}: {reason}"
        + ("; a NodePool may still launch such nodes" if pools else ""),
        severity=Severity.MEDIUM if pools else None,
        fix={
            "command": "kubectl get nodes -L nvidia.com/mig.strategy,nvidia.com/gpu.product",
            "hint": hint,
        },
    )
