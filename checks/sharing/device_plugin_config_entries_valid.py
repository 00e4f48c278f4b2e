from collections.abc import Iterator

from gpu_audit.api import (
    NVIDIA_GPU,
    NVIDIA_MIG_PREFIX,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_mapping,
    check,
    containers,
    env_value,
    failed,
    passed,
)
from gpu_audit.checks.sharing._common import (
    ConfigRef,
    PluginConfig,
    Problem,
    config_map_of,
    config_refs,
    fallback_key,
    ref_nodes,
    selected_key,
)


def effective_mig_strategy(snapshot: Snapshot, ref: ConfigRef, config: PluginConfig) -> str:
    """Flag precedence: the MIG_STRATEGY env (set by the operator from the ClusterPolicy),
    then the ClusterPolicy, then the config file's flags.migStrategy, then none."""
    if ref.daemonset is not None:
        for container in containers(ref.daemonset):
            value = env_value(container, "MIG_STRATEGY")
            if value:
                return value
    policy = active_cluster_policy(snapshot)
    if ref.operator and policy is not None:
        strategy = as_mapping(policy.spec.get("mig")).get("strategy")
        return str(strategy or "single")  # the operator chart's default
    return config.mig_strategy or "none"


def _mig_problems(snapshot: Snapshot, ref: ConfigRef, config: PluginConfig) -> Iterator[Problem]:
    strategy = effective_mig_strategy(snapshot, ref, config)
    for resource in config.resources:
        if resource.name.startswith(NVIDIA_MIG_PREFIX) and strategy != "mixed":
            yield Problem(
                Severity.MEDIUM,
                f"{resource.name} exists only with migStrategy mixed (effective: {strategy}); "
                "the entry is skipped",
            )
        if config.mode == "mps" and resource.name != NVIDIA_GPU:
            yield Problem(Severity.HIGH, f"MPS supports only nvidia.com/gpu, not {resource.name}")
    if config.mode == "mps" and strategy == "mixed":
        yield Problem(Severity.HIGH, "MPS with mig-strategy mixed: the plugin refuses to start")
    if ref.operator and config.mig_strategy and config.mig_strategy != strategy:
        yield Problem(
            Severity.LOW,
            f"flags.migStrategy {config.mig_strategy} is overridden by the operator's "
            f"MIG_STRATEGY {strategy}",
        )


def _selected_keys(snapshot: Snapshot, ref: ConfigRef) -> set[str]:
    """The keys the plugin applies: each GPU node's choice (label, default, fallback). With no
    GPU node of the plugin in the input, the key an unlabelled node would get."""
    nodes = ref_nodes(snapshot, ref)
    if not nodes:
        return {ref.default or fallback_key(ref)} - {""}
    return {selected_key(ref, n) for n in nodes} - {""}


_ORDER = (Severity.LOW, Severity.MEDIUM, Severity.HIGH)


@check(
    id="GPU-SHARE-002",
    title="Every device-plugin config entry parses and means what its author intended",
    category=Category.SHARING,
    severity=Severity.HIGH,
    requires=("ConfigMap", ("DaemonSet", "ClusterPolicy.nvidia.com")),
    rationale="""
        The device plugin rejects a config with an unknown version, an empty resources list or
        replicas below 2, and crash-loops on every node that selects it. It silently ignores
        unknown or misplaced keys (renameByDefault under flags), per-resource rename/devices,
        timeSlicing next to mps (MPS wins) and MIG resources without the mixed strategy, so
        the sharing its author configured never happens.
    """,
    detection="""
        Each data key of the ConfigMap referenced by the ClusterPolicy
        (spec.devicePlugin.config.name) or mounted at /available-configs by a standalone
        plugin DaemonSet, parsed with the plugin's rules (api/config/v1). High: invalid YAML,
        version other than v1, empty resources, missing name/replicas, replicas not an integer
        >= 2, MPS on a non-GPU resource or with the mixed MIG strategy. Medium: ignored keys,
        both mps and timeSlicing, MIG resources while the effective strategy (MIG_STRATEGY env,
        then ClusterPolicy spec.mig.strategy, then flags.migStrategy) is not mixed. Low:
        per-resource rename/devices, flags.migStrategy overridden by the operator, and any
        problem in a key that no node selects today. `devices: all` is not flagged.
    """,
    severity_evidence="""
        A problem keeps its severity only in a key the plugin applies: a key some GPU node of
        the plugin selects (its nvidia.com/device-plugin.config label, else the default, else
        the fallback), or, with none of its GPU nodes in the input, the key an unlabelled node
        would get. Any other key (a default every node overrides with its label, a spare
        config) is low: nothing reads it today.
    """,
    remediation="""
        # $kind $namespace/$name, key $key: $problems
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: $name
          namespace: $namespace
        data:
          "$key": |-
            version: v1
            sharing:
              timeSlicing:
                renameByDefault: true            # here, not under flags
                failRequestsGreaterThanOne: true
                resources:
                  - name: nvidia.com/gpu
                    replicas: 4                  # an integer >= 2
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/api/config/v1/replicas.go",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/1433",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html",
    ),
)
def device_plugin_config_entries_valid(snapshot: Snapshot) -> Iterator[Result]:
    seen: set[tuple[str, str]] = set()
    for ref in config_refs(snapshot):
        config_map = config_map_of(snapshot, ref)
        if config_map is None or (ref.namespace, ref.name) in seen:
            continue
        seen.add((ref.namespace, ref.name))
        selected = _selected_keys(snapshot, ref)
        for key, config in ref.configs.items():
            problems = [*config.problems, *_mig_problems(snapshot, ref, config)]
            yield _verdict(config_map, key, problems, key in selected)


def _verdict(config_map: Resource, key: str, problems: list[Problem], selected: bool) -> Result:
    path = f"data.{key}"
    if not problems:
        return passed(config_map, f"config {key!r} is valid", path=path)
    worst = max((p.severity for p in problems), key=_ORDER.index)
    text = "; ".join(p.message for p in problems)
    suffix = "" if selected else " (no node selects this key yet)"
    return failed(
        config_map,
        f"config {key!r} {text}{suffix}",
        path=path,
        severity=worst if selected else Severity.LOW,
        fix={"key": key, "problems": text.replace("\n", " ")},
    )
