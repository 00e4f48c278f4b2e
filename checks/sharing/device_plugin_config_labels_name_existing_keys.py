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
from gpu_audit.checks.sharing._common import (
    NODE_CONFIG_LABEL,
    ConfigRef,
    config_map_of,
    config_refs,
    ref_nodes,
    selected_key,
)


@check(
    id="GPU-SHARE-003",
    title="Device-plugin config node labels name existing keys, and sharing configs are selected",
    category=Category.SHARING,
    severity=Severity.HIGH,
    requires=("ConfigMap", "Node", ("DaemonSet", "ClusterPolicy.nvidia.com")),
    rationale="""
        config-manager picks a node's config by the nvidia.com/device-plugin.config label; a
        value that is not a key of the ConfigMap makes it error ("specified config ... does not
        exist") and the node keeps whatever it advertised before. A sharing config that no
        label and no default selects is applied on zero nodes: the operator's fallback is the
        empty config, so time-slicing that was "configured" never happens.
    """,
    detection="""
        For each device-plugin config ConfigMap present in the input: every GPU node the plugin
        runs on whose label value (compared exactly, case-sensitive) is not a key fails (high);
        a labelled node with a valid key passes. When some key configures time-slicing or MPS
        but no GPU node selects any such key (label, default, or the nvdp chart's named/single
        fallback), the referring ClusterPolicy or DaemonSet fails (medium). Non-GPU nodes that
        carry the label are ignored.
    """,
    severity_evidence="""
        High for a GPU node whose config label names no key: its config-manager fails on it.
        Medium when sharing configs exist but no GPU node of the plugin selects any of them:
        the sharing someone configured is applied nowhere. Non-GPU nodes are not judged.
    """,
    remediation="""
        $command   # $summary
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # a node's nvidia.com/device-plugin.config label names no key of the ConfigMap: the value
        # must equal a data key of it
        kubectl label node <node> nvidia.com/device-plugin.config=<key> --overwrite
        # sharing configs that no GPU node selects: make one the default (or label the nodes that should share)
        kubectl patch clusterpolicies.nvidia.com/<cluster-policy> --type merge -p '{"spec":{"devicePlugin":{"config":{"default":"<key>"}}}}'
        helm upgrade --reuse-values <release> nvdp/nvidia-device-plugin -n <plugin-namespace> --set config.default=<key>   # a standalone device plugin
    """,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin#updating-per-node-configuration-with-a-node-label",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html",
    ),
)
def device_plugin_config_labels_name_existing_keys(snapshot: Snapshot) -> Iterator[Result]:
    seen: set[tuple[str, str]] = set()
    for ref in config_refs(snapshot):
        if config_map_of(snapshot, ref) is None or (ref.namespace, ref.name) in seen:
            continue
        seen.add((ref.namespace, ref.name))
        nodes = ref_nodes(snapshot, ref)
        yield from _labels(ref, nodes)
        yield from _sharing_selected(ref, nodes)


def _labels(ref: ConfigRef, nodes: tuple[Resource, ...]) -> Iterator[Result]:
    keys = sorted(ref.configs)
    for node in nodes:
        value = node.labels.get(NODE_CONFIG_LABEL)
        if value is None:
            continue
        path = f"metadata.labels.{NODE_CONFIG_LABEL}"
        if value in ref.configs:
            yield passed(node, f"selects config {value!r} of {ref.namespace}/{ref.name}", path=path)
            continue
        yield failed(
            node,
            f"label {NODE_CONFIG_LABEL}={value!r} is not a key of ConfigMap "
            f"{ref.namespace}/{ref.name} (keys: {', '.join(keys) or 'none'})",
            path=path,
            fix={
                "summary": f"the value must equal a data key of {ref.namespace}/{ref.name}",
                "command": f"kubectl label node {node.ref.name} "
                f"{NODE_CONFIG_LABEL}={keys[0] if keys else 'default'} --overwrite",
            },
        )


def _sharing_selected(ref: ConfigRef, nodes: tuple[Resource, ...]) -> Iterator[Result]:
    sharing = sorted(k for k, c in ref.configs.items() if c.shares)
    if not sharing or not nodes:
        return
    selected = {selected_key(ref, n) for n in nodes}
    if selected & set(sharing):
        yield passed(ref.referrer, f"sharing config(s) {', '.join(sharing)} are selected")
        return
    yield failed(
        ref.referrer,
        f"ConfigMap {ref.namespace}/{ref.name} defines sharing config(s) {', '.join(sharing)} "
        f"that none of the {len(nodes)} GPU node(s) selects (no default, no label)",
        path="spec.devicePlugin.config.default",
        severity=Severity.MEDIUM,
        fix={
            "summary": "select a default sharing config (or label the nodes that should share)",
            "command": _default_command(ref, sharing[0]),
        },
    )


def _default_command(ref: ConfigRef, key: str) -> str:
    if ref.referrer.ref.kind == "DaemonSet":
        release = ref.referrer.labels.get("app.kubernetes.io/instance", "nvdp")
        return (
            f"helm upgrade --reuse-values {release} nvdp/nvidia-device-plugin "
            f"-n {ref.namespace} --set config.default={key}"
        )
    return (
        f"kubectl patch clusterpolicies.nvidia.com/{ref.referrer.ref.name} --type merge "
        f'-p \'{{"spec":{{"devicePlugin":{{"config":{{"default":"{key}"}}}}}}}}\''
    )
