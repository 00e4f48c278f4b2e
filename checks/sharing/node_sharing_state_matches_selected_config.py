from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    Category,
    FixKind,
    RelatedRef,
    RelatedRole,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    command_line,
    containers,
    device_plugin_daemonsets,
    failed,
    passed,
    relate,
)
from gpu_audit.checks.sharing._common import (
    COUNT_LABEL,
    PRODUCT_LABEL,
    SHARED_SUFFIX,
    STRATEGY_LABEL,
    ConfigRef,
    PluginConfig,
    capacity_of,
    config_map_of,
    config_refs,
    ref_nodes,
    selected_key,
)

MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
# The `app` label (and name) of the GPU Operator's device-plugin and GFD operand DaemonSets.
_OPERATOR_PLUGIN = "nvidia-device-plugin-daemonset"
_OPERATOR_GFD = "gpu-feature-discovery"


@dataclass(frozen=True, slots=True)
class Expected:
    """What a node must advertise under one config."""

    strategy: str  # none, time-slicing, mps
    replicas: dict[str, int]  # resource -> replicas (1 for unshared)
    renamed: bool


def _expected(config: PluginConfig) -> Expected:
    replicas = {r.name: r.replicas for r in config.resources}
    return Expected(config.mode, replicas, config.rename_by_default and config.shares)


def _label_int(node: Resource, key: str) -> int | None:
    value = node.labels.get(key)
    return int(value) if value is not None and value.isdigit() else None


def _mismatches(node: Resource, want: Expected) -> list[str]:
    """How the node's GFD labels and capacity differ from what the config makes it advertise."""
    labels = node.labels
    found = []
    have_strategy = labels.get(STRATEGY_LABEL)
    if have_strategy is not None and have_strategy != want.strategy:
        found.append(f"{STRATEGY_LABEL}={have_strategy} (config: {want.strategy})")
    if want.strategy == "mps" and have_strategy is None:
        return found  # GFD releases without the strategy label only label time-slicing replicas
    resources = {NVIDIA_GPU: want.replicas.get(NVIDIA_GPU, 1)}
    if labels.get(MIG_STRATEGY_LABEL) == "mixed":
        # Mixed MIG advertises per-profile resources; nvidia.com/gpu is only the non-MIG GPUs.
        resources = {r: n for r, n in want.replicas.items() if f"{r}.replicas" in labels}
    for resource, replicas in sorted(resources.items()):
        have = _label_int(node, f"{resource}.replicas")
        if have is not None and max(have, 1) != replicas:
            found.append(f"{resource}.replicas={have} (config: {replicas})")
    shared = want.replicas.get(NVIDIA_GPU, 1) > 1
    product = labels.get(PRODUCT_LABEL)
    if product is not None and labels.get(MIG_STRATEGY_LABEL) != "mixed":
        want_suffix = shared and not want.renamed
        if product.endswith(SHARED_SUFFIX) != want_suffix:
            found.append(
                f"{PRODUCT_LABEL}={product} ({'needs' if want_suffix else 'must not have'} "
                f"the {SHARED_SUFFIX} suffix)"
            )
    found.extend(_capacity_mismatches(node, want, shared))
    return found


def _capacity_mismatches(node: Resource, want: Expected, shared: bool) -> list[str]:
    """Capacity = gpu.count x replicas, under nvidia.com/gpu.shared when renamed. A renamed
    node may or may not still list nvidia.com/gpu: 0 (errata), so that key is never required."""
    count = _label_int(node, COUNT_LABEL)
    whole = capacity_of(node, NVIDIA_GPU)
    renamed_capacity = capacity_of(node, NVIDIA_GPU_SHARED)
    found = []
    if want.renamed and shared:
        if renamed_capacity in (None, 0) and whole:
            found.append(f"capacity lists {NVIDIA_GPU}: {whole} but no {NVIDIA_GPU_SHARED}")
        elif renamed_capacity and count and renamed_capacity != count * want.replicas[NVIDIA_GPU]:
            found.append(
                f"capacity {NVIDIA_GPU_SHARED}: {renamed_capacity} "
                f"(config: {count} x {want.replicas[NVIDIA_GPU]})"
            )
        return found
    if renamed_capacity:
        found.append(f"capacity still lists {NVIDIA_GPU_SHARED}: {renamed_capacity}")
    replicas = want.replicas.get(NVIDIA_GPU, 1)
    if whole is not None and count and whole != count * replicas:
        found.append(f"capacity {NVIDIA_GPU}: {whole} (config: {count} x {replicas})")
    return found


def _evaluated(node: Resource) -> bool:
    """Only nodes that GFD has labelled or whose plugin has registered say what they advertise."""
    labels = node.labels
    return (
        STRATEGY_LABEL in labels
        or f"{NVIDIA_GPU}.replicas" in labels
        or (COUNT_LABEL in labels and capacity_of(node, NVIDIA_GPU) is not None)
    )


@check(
    id="GPU-SHARE-006",
    title="The sharing state each node advertises matches the config selected for it",
    category=Category.SHARING,
    severity=Severity.MEDIUM,
    requires=("ConfigMap", "Node", ("DaemonSet", "ClusterPolicy.nvidia.com")),
    rationale="""
        The GPU Operator does not watch the device-plugin ConfigMap: after an edit the plugin
        and GFD keep applying the old config until their pods restart. The node keeps
        advertising the old replica count and sharing strategy, so capacity planning, quotas
        and placement built on the new config are wrong, and pods that meant to share (or not)
        land on the old layout.
    """,
    detection="""
        For every GPU node whose device plugin reads a ConfigMap present in the input, the
        config it selects (node label nvidia.com/device-plugin.config, else the default, else
        the nvdp chart's named/single fallback) gives the expected sharing strategy,
        replicas of nvidia.com/gpu and renameByDefault. They are compared with the GFD labels
        nvidia.com/gpu.sharing-strategy, nvidia.com/gpu.replicas (1 or 0 both mean unshared),
        the -SHARED suffix of nvidia.com/gpu.product (shared and not renamed), and capacity
        (gpu.count x replicas, under nvidia.com/gpu.shared when renamed; a leftover
        nvidia.com/gpu: 0 is expected and never required). Under MIG mixed, per-profile
        <profile>.replicas labels are compared instead. Not evaluated: nodes without GFD
        labels, nodes selecting a missing key (GPU-SHARE-003) or a config the plugin rejects
        (GPU-SHARE-002). No clock: the 2-minute GFD refresh grace is not applied. The finding
        is on the device-plugin DaemonSet that needs a restart, one for all its stale nodes
        (related as symptoms, GFD as a cause, the ConfigMap and the ClusterPolicy beside
        them); when that DaemonSet is not in the input, on each stale node.
    """,
    severity_evidence="""
        Medium: the node labels and capacity in the input show a sharing layout the selected
        config no longer describes, so placement and quotas built on the config are off. Not
        raised further: the plugin still advertises GPUs, and a restart applies the config.
    """,
    remediation="""
        # $subject: $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # the nodes do not advertise what their selected config asks for: restart the device plugin
        # (and GFD) so they apply it; the operator does not restart them after a ConfigMap edit
        kubectl -n <plugin-namespace> rollout restart daemonset/<device-plugin-daemonset>
        kubectl -n <plugin-namespace> rollout restart daemonset/<gfd-daemonset>
        # GPU Operator operands that are not in the input, by their app labels:
        kubectl -n <plugin-namespace> rollout restart daemonset -l app=nvidia-device-plugin-daemonset
        kubectl -n <plugin-namespace> rollout restart daemonset -l app=gpu-feature-discovery
    """,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/lm/resource.go",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/364",
        "https://github.com/NVIDIA/gpu-operator/issues/1144",
    ),
)
def node_sharing_state_matches_selected_config(snapshot: Snapshot) -> Iterator[Result]:
    seen: set[str] = set()
    for ref in config_refs(snapshot):
        if not ref.configs:
            continue  # the ConfigMap is not in the input (GPU-SHARE-001)
        plugin = _plugin(snapshot, ref)
        fresh: list[Resource] = []
        stale: list[_Stale] = []
        for node in ref_nodes(snapshot, ref):
            if node.ref.name in seen or not _evaluated(node):
                continue
            key = selected_key(ref, node)
            config = ref.configs.get(key) if key else None
            if config is None or any(p.severity is Severity.HIGH for p in config.problems):
                continue
            seen.add(node.ref.name)
            found = _mismatches(node, _expected(config))
            if found:
                stale.append(_Stale(node, key, found))
            else:
                fresh.append(node)
                if plugin is None:
                    yield passed(node, f"advertises what config {key!r} selects ({config.mode})")
        if plugin is None:
            # The plugin DaemonSet is not in the input: the nodes are what can be named.
            for item in stale:
                yield _node_finding(snapshot, ref, item)
        elif stale:
            yield _plugin_finding(snapshot, ref, plugin, stale, len(stale) + len(fresh))
        elif fresh:
            yield passed(
                plugin,
                f"has applied ConfigMap {ref.namespace}/{ref.name} on its {len(fresh)} GPU node(s)",
                path="spec.template",
            )


@dataclass(frozen=True, slots=True)
class _Stale:
    """A node that advertises something other than what its selected config asks for."""

    node: Resource
    key: str
    found: list[str]

    def describe(self) -> str:
        return f"{self.node.ref.name} (config {self.key!r}): {'; '.join(self.found)}"


def _plugin(snapshot: Snapshot, ref: ConfigRef) -> Resource | None:
    """The device-plugin DaemonSet that reads the config, when it is in the input."""
    return ref.daemonset or next(
        (d for d in device_plugin_daemonsets(snapshot) if d.ref.namespace == ref.namespace), None
    )


def _gfd(snapshot: Snapshot, namespace: str, plugin: Resource | None) -> list[Resource]:
    return [
        d
        for d in snapshot.of("DaemonSet")
        if d.ref.namespace == namespace and d is not plugin and _runs_gfd(d)
    ]


def _context(snapshot: Snapshot, ref: ConfigRef, plugin: Resource | None) -> list[RelatedRef]:
    """What stands around the stale plugin: GFD (its labels are stale too, and it needs the
    same restart), the ConfigMap the plugin reads, the ClusterPolicy that owns operands."""
    related = [relate(d, RelatedRole.CAUSE) for d in _gfd(snapshot, ref.namespace, plugin)]
    config_map = config_map_of(snapshot, ref)
    if config_map is not None:
        related.append(relate(config_map, RelatedRole.SELECTED_BY))
    if ref.operator and ref.referrer is not plugin:
        related.append(relate(ref.referrer, RelatedRole.OWNER))
    return related


def _plugin_finding(
    snapshot: Snapshot, ref: ConfigRef, plugin: Resource, stale: list[_Stale], evaluated: int
) -> Result:
    shown = "; ".join(s.describe() for s in stale[:3])
    more = f"; and {len(stale) - 3} more node(s)" if len(stale) > 3 else ""
    return failed(
        plugin,
        f"has not applied ConfigMap {ref.namespace}/{ref.name} on {len(stale)} of its "
        f"{evaluated} GPU node(s), which still advertise another sharing layout: {shown}{more}. "
        "Its pods load the config when they start or when a node's config label changes "
        "(config-manager watches the label, not the ConfigMap), and the GPU Operator does not "
        "restart them after a ConfigMap edit",
        path="spec.template",
        fix={
            "subject": f"DaemonSet {plugin.ref.namespace}/{plugin.ref.name}",
            "summary": "restart the device plugin (and GFD) so they apply the selected config",
            "command": _restarts(snapshot, ref),
        },
        related=[
            *(relate(s.node, RelatedRole.SYMPTOM) for s in stale),
            *_context(snapshot, ref, plugin),
        ],
    )


def _node_finding(snapshot: Snapshot, ref: ConfigRef, stale: _Stale) -> Result:
    return failed(
        stale.node,
        f"does not advertise config {stale.key!r} of ConfigMap {ref.namespace}/{ref.name}: "
        f"{'; '.join(stale.found)}. The plugin has not applied it (the operator does not "
        "restart it after a ConfigMap edit)",
        path="metadata.labels",
        fix={
            "subject": f"Node {stale.node.ref.name}",
            "summary": f"restart the device plugin so it applies {stale.key!r}",
            "command": _restarts(snapshot, ref),
        },
        related=_context(snapshot, ref, None),
    )


def _restarts(snapshot: Snapshot, ref: ConfigRef) -> str:
    """Restarts of the plugin and GFD DaemonSets that read the config: the ones in the input,
    else (a ClusterPolicy without its operands in the input) the operator's operands by the
    `app` label it gives them."""
    namespace = ref.namespace
    plugin = _plugin(snapshot, ref)
    gfd = _gfd(snapshot, namespace, plugin)
    restart = f"kubectl -n {namespace} rollout restart daemonset"
    lines = [f"{restart}/{plugin.ref.name}" if plugin else f"{restart} -l app={_OPERATOR_PLUGIN}"]
    lines += [f"{restart}/{d.ref.name}" for d in gfd]
    if not gfd and plugin is None:
        lines.append(f"{restart} -l app={_OPERATOR_GFD}")
    elif not gfd:
        lines.append("# and GFD's DaemonSet, if GFD runs in its own (none is in the input)")
    return "\n".join(lines)


def _runs_gfd(daemonset: Resource) -> bool:
    return any(
        c.get("name") == _OPERATOR_GFD or _OPERATOR_GFD in command_line(c)
        for c in containers(daemonset)
    )
