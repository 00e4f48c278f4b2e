"""The NVIDIA device-plugin config file as the plugin reads it, and where the plugin finds it.

Mirrors NVIDIA/k8s-device-plugin api/config/v1: unknown keys are ignored, `version` must be
v1 (empty means v1), replicas must be integers >= 2, and MPS wins over timeSlicing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpu_audit.api import (
    QuantityError,
    Resource,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_list,
    as_mapping,
    daemonset_runs_on,
    device_plugin_daemonsets,
    env_value,
    gpu_nodes,
    is_operator_operand,
    operand_deployed,
    parse_quantity,
    templates_of,
)

CONFIG_MOUNT = "/available-configs"
NODE_CONFIG_LABEL = "nvidia.com/device-plugin.config"
TOP_LEVEL_KEYS = frozenset({"version", "flags", "resources", "sharing", "imex"})
SHARING_KEYS = frozenset({"renameByDefault", "failRequestsGreaterThanOne"})


@dataclass(frozen=True, slots=True)
class Problem:
    severity: Severity
    message: str


@dataclass(frozen=True, slots=True)
class SharedResource:
    name: str  # fully qualified, e.g. nvidia.com/gpu
    replicas: int


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """One config (one ConfigMap data key) after the plugin's own parsing rules."""

    key: str
    raw: Mapping[str, Any]
    problems: tuple[Problem, ...] = ()
    mode: str = "none"  # "none", "time-slicing" or "mps": the block the plugin uses
    resources: tuple[SharedResource, ...] = ()
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    mig_strategy: str = ""

    @property
    def shares(self) -> bool:
        return self.mode != "none"

    def shared_name(self, resource: str) -> str:
        """The name the node advertises for replicas of `resource`."""
        return f"{resource}.shared" if self.rename_by_default else resource


def qualified(name: str) -> str:
    return name if "/" in name else f"nvidia.com/{name}"


def parse_config(key: str, text: object) -> PluginConfig:
    try:
        raw = yaml.safe_load(str(text)) if text is not None else None
    except yaml.YAMLError as exc:
        return PluginConfig(key, {}, (Problem(Severity.HIGH, f"is not valid YAML: {exc}"),))
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return PluginConfig(key, {}, (Problem(Severity.HIGH, "is not a YAML mapping"),))
    problems = list(_top_level_problems(raw))
    sharing = as_mapping(raw.get("sharing"))
    mode, block = _effective_block(sharing)
    if "mps" in sharing and "timeSlicing" in sharing:
        problems.append(
            Problem(Severity.MEDIUM, "has both sharing.mps and sharing.timeSlicing: MPS wins")
        )
    resources: list[SharedResource] = []
    if block is not None:
        resources, found = _resources(mode, block)
        problems.extend(found)
    flags = as_mapping(raw.get("flags"))
    fail_gt_one = block is not None and (
        mode == "mps" or block.get("failRequestsGreaterThanOne") is True
    )
    return PluginConfig(
        key,
        raw,
        tuple(problems),
        mode,
        tuple(resources),
        block is not None and block.get("renameByDefault") is True,
        fail_gt_one,
        str(flags.get("migStrategy") or ""),
    )


def _top_level_problems(raw: Mapping[str, Any]) -> Iterator[Problem]:
    version = raw.get("version")
    if version not in (None, "", "v1"):
        yield Problem(Severity.HIGH, f"has version {version!r}: the plugin only knows v1")
    for unknown in sorted(str(k) for k in raw if str(k) not in TOP_LEVEL_KEYS):
        if unknown not in SHARING_KEYS:
            yield Problem(Severity.MEDIUM, f"has top-level key {unknown!r}, which is ignored")
    misplaced = SHARING_KEYS & (
        {str(k) for k in raw} | {str(k) for k in as_mapping(raw.get("flags"))}
    )
    for name in sorted(misplaced):
        yield Problem(
            Severity.MEDIUM,
            f"sets {name} outside sharing.timeSlicing/sharing.mps, where it is ignored",
        )


def _effective_block(sharing: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
    if sharing.get("mps") is not None:
        return "mps", as_mapping(sharing.get("mps"))
    if sharing.get("timeSlicing") is not None:
        return "time-slicing", as_mapping(sharing.get("timeSlicing"))
    return "none", None


def _resources(mode: str, block: Mapping[str, Any]) -> tuple[list[SharedResource], list[Problem]]:
    entries = as_list(block.get("resources"))
    if not entries:
        return [], [Problem(Severity.HIGH, f"{mode}: no resources specified")]
    out: list[SharedResource] = []
    problems: list[Problem] = []
    for index, entry in enumerate(map(as_mapping, entries)):
        where = f"{mode} resources[{index}]"
        name, replicas = entry.get("name"), entry.get("replicas")
        if not name or replicas is None:
            problems.append(Problem(Severity.HIGH, f"{where}: needs both name and replicas"))
            continue
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
            problems.append(
                Problem(Severity.HIGH, f"{where}: replicas {replicas!r} must be an integer >= 2")
            )
            continue
        if "rename" in entry or entry.get("devices", "all") != "all":
            problems.append(
                Problem(Severity.LOW, f"{where}: per-resource rename/devices is ignored")
            )
        out.append(SharedResource(qualified(str(name)), replicas))
    return out, problems


# --------------------------------------------------------------------------- where configs live


@dataclass(frozen=True, slots=True)
class ConfigRef:
    """A device-plugin DaemonSet (or the ClusterPolicy) and the ConfigMap it points at."""

    referrer: Resource
    namespace: str
    name: str
    default: str
    operator: bool
    daemonset: Resource | None = None
    configs: dict[str, PluginConfig] = field(default_factory=dict)


def _mounted_config_map(daemonset: Resource) -> str:
    for template in templates_of(daemonset):
        mounts = {
            str(m.get("name", ""))
            for c in template.containers()
            for m in map(as_mapping, as_list(c.raw.get("volumeMounts")))
            if m.get("mountPath") == CONFIG_MOUNT
        }
        for volume in map(as_mapping, as_list(template.spec.get("volumes"))):
            if str(volume.get("name", "")) in mounts and volume.get("configMap"):
                return str(as_mapping(volume.get("configMap")).get("name", ""))
    return ""


def daemonset_env(daemonset: Resource, name: str) -> str:
    """The first non-empty literal value of env `name` in any container, init included."""
    for template in templates_of(daemonset):
        for container in template.containers():
            value = env_value(container, name)
            if value:
                return value
    return ""


def config_refs(snapshot: Snapshot) -> tuple[ConfigRef, ...]:
    """Every device-plugin config reference, each with its parsed ConfigMap (if present)."""
    refs: list[ConfigRef] = []
    policy = active_cluster_policy(snapshot)
    daemonsets = device_plugin_daemonsets(snapshot)
    operator_ds = next((d for d in daemonsets if is_operator_operand(d)), None)
    if policy is not None:
        config = as_mapping(as_mapping(policy.spec.get("devicePlugin")).get("config"))
        name = str(config.get("name") or "")
        namespace = (
            operator_ds.ref.namespace
            if operator_ds is not None
            else str(policy.status.get("namespace") or "")
        )
        if name:
            refs.append(
                ConfigRef(
                    policy, namespace, name, str(config.get("default") or ""), True, operator_ds
                )
            )
    for daemonset in daemonsets:
        if policy is not None and is_operator_operand(daemonset):
            continue  # its config comes from the ClusterPolicy
        name = _mounted_config_map(daemonset)
        if name:
            refs.append(
                ConfigRef(
                    daemonset,
                    daemonset.ref.namespace,
                    name,
                    daemonset_env(daemonset, "DEFAULT_CONFIG"),
                    is_operator_operand(daemonset),
                    daemonset,
                )
            )
    return tuple(_with_configs(snapshot, r) for r in refs)


def _with_configs(snapshot: Snapshot, ref: ConfigRef) -> ConfigRef:
    config_map = snapshot.get("ConfigMap", ref.namespace, ref.name) if ref.namespace else None
    if config_map is None:
        return ref
    data = as_mapping(config_map.raw.get("data"))
    ref.configs.update({str(k): parse_config(str(k), v) for k, v in sorted(data.items())})
    return ref


def config_map_of(snapshot: Snapshot, ref: ConfigRef) -> Resource | None:
    return snapshot.get("ConfigMap", ref.namespace, ref.name) if ref.namespace else None


def fallback_strategies(ref: ConfigRef) -> tuple[str, ...]:
    if ref.daemonset is not None:
        value = daemonset_env(ref.daemonset, "FALLBACK_STRATEGIES")
        if value:
            return tuple(s.strip() for s in value.split(",") if s.strip())
    return ("empty",) if ref.operator else ("named", "single")


def fallback_key(ref: ConfigRef) -> str:
    """The key config-manager picks with no label and no default ("" for none)."""
    for strategy in fallback_strategies(ref):
        if strategy == "named" and "default" in ref.configs:
            return "default"
        if strategy == "single" and len(ref.configs) == 1:
            return next(iter(ref.configs))
    return ""


def selected_key(ref: ConfigRef, node: Resource) -> str:
    """config-manager's choice: node label, else DEFAULT_CONFIG, else the fallbacks
    (FALLBACK_STRATEGIES: `empty` for the operator, `named,single` for the nvdp chart)."""
    label = node.labels.get(NODE_CONFIG_LABEL)
    if label:
        return label
    return ref.default or fallback_key(ref)


def strict_shared_names(snapshot: Snapshot) -> frozenset[str]:
    """Advertised names whose plugin rejects requests > 1 (failRequestsGreaterThanOne, MPS)."""
    return frozenset(
        config.shared_name(resource.name)
        for ref in config_refs(snapshot)
        for config in ref.configs.values()
        if config.fail_requests_greater_than_one
        for resource in config.resources
    )


def ref_nodes(snapshot: Snapshot, ref: ConfigRef) -> tuple[Resource, ...]:
    """The GPU nodes whose plugin reads this config."""
    nodes = gpu_nodes(snapshot)
    if ref.daemonset is not None:
        return tuple(n for n in nodes if daemonset_runs_on(ref.daemonset, n))
    return tuple(n for n in nodes if operand_deployed(n, "device-plugin"))


# --------------------------------------------------------------------------- what GFD says

# GFD labels (k8s-device-plugin internal/lm/resource.go): <resource>.replicas is 1 without
# sharing (0 when the labeller runs with sharing disabled); the product gets -SHARED when the
# replicas keep the resource's own name (shared and not renamed).
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
COUNT_LABEL = "nvidia.com/gpu.count"
PRODUCT_LABEL = "nvidia.com/gpu.product"
SHARED_SUFFIX = "-SHARED"


def capacity_of(node: Resource, name: str) -> int | None:
    """The node's status.capacity of `name` as a whole number (None when absent or invalid)."""
    value = as_mapping(node.status.get("capacity")).get(name)
    if value is None:
        return None
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return None
