from collections.abc import Iterator

from gpu_audit.api import (
    Category,
    FixKind,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    passed,
)
from gpu_audit.checks.sharing._common import (
    ConfigRef,
    config_map_of,
    config_refs,
    fallback_key,
    fallback_strategies,
)


def _path(ref: ConfigRef) -> str:
    if ref.referrer.ref.kind == "DaemonSet":
        return "spec.template.spec.volumes"
    return "spec.devicePlugin.config"


@check(
    id="GPU-SHARE-001",
    title="The device-plugin config ConfigMap exists in the plugin's namespace with its default key",
    category=Category.SHARING,
    severity=Severity.HIGH,
    requires=("ConfigMap", ("DaemonSet", "ClusterPolicy.nvidia.com")),
    rationale="""
        A pod can mount only ConfigMaps of its own namespace, and the operator mounts the
        plugin config without optional: true, so a missing ConfigMap leaves the device-plugin
        pod in ContainerCreating on every GPU node and no GPU is advertised. A default key that
        is not in the ConfigMap makes config-manager fail ("specified config ... does not
        exist"), and a standalone plugin with several configs, no default and none named
        "default" cannot pick one.
    """,
    detection="""
        The ConfigMap named by ClusterPolicy spec.devicePlugin.config.name (looked up in the
        operator's namespace: the plugin DaemonSet's, else status.namespace), or mounted at
        /available-configs by a standalone plugin DaemonSet. Fails when it is absent from that
        namespace (and ConfigMaps of that namespace are in the input, or one of the same name
        sits in another namespace), when the default (spec.devicePlugin.config.default or
        DEFAULT_CONFIG) is not one of its keys, or when there is no default and the fallback
        strategies (FALLBACK_STRATEGIES, `named,single` for the nvdp chart) select nothing.
        Not flagged: an operator config without a default (FALLBACK_STRATEGIES=empty by
        design; GPU-SHARE-003 reports sharing selected nowhere), and references whose
        namespace is not in the input.
    """,
    remediation="""
        $command   # $summary
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # the ConfigMap the device plugin config names is not in the plugin's namespace: create it
        kubectl -n <plugin-namespace> create configmap <configmap> --from-file=any=./any.yaml
        # the default config is not a key of the ConfigMap: add that key (or point the default at an existing key)
        kubectl -n <plugin-namespace> edit configmap <configmap>
        # no default config, and no key the fallback strategies select (standalone nvdp chart):
        helm upgrade --reuse-values <release> nvdp/nvidia-device-plugin -n <plugin-namespace> --set config.default=<key>
    """,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html",
        "https://github.com/NVIDIA/gpu-operator/issues/412",
        "https://github.com/NVIDIA/k8s-device-plugin/blob/main/cmd/config-manager/main.go",
    ),
)
def device_plugin_config_map_present_with_default_key(snapshot: Snapshot) -> Iterator[Result]:
    for ref in config_refs(snapshot):
        if not ref.namespace:
            continue  # operator namespace unknown: nothing to look the ConfigMap up in
        if config_map_of(snapshot, ref) is None:
            yield from _missing(snapshot, ref)
            continue
        keys = sorted(ref.configs)
        where = f"ConfigMap {ref.namespace}/{ref.name}"
        if ref.default and ref.default not in ref.configs:
            yield failed(
                ref.referrer,
                f"selects default config {ref.default!r}, which is not a key of {where} "
                f"(keys: {', '.join(keys) or 'none'})",
                path=_path(ref),
                fix={
                    "summary": f"add key {ref.default!r} (or point the default at an existing key)",
                    "command": f"kubectl -n {ref.namespace} edit configmap {ref.name}",
                },
            )
        elif not ref.default and not ref.operator and not fallback_key(ref):
            strategies = ",".join(fallback_strategies(ref))
            yield failed(
                ref.referrer,
                f"has no default config and fallback strategies {strategies} select none of "
                f"the {len(keys)} keys of {where}",
                path=_path(ref),
                fix={
                    "summary": "set the default config (nvdp chart value config.default)",
                    "command": "helm upgrade --reuse-values "
                    f"{ref.referrer.labels.get('app.kubernetes.io/instance', 'nvdp')} "
                    "nvdp/nvidia-device-plugin "
                    f"-n {ref.namespace} --set config.default={keys[0] if keys else 'default'}",
                },
            )
        else:
            yield passed(ref.referrer, f"reads {where}; default {ref.default or '(fallback)'}")


def _missing(snapshot: Snapshot, ref: ConfigRef) -> Iterator[Result]:
    elsewhere = sorted(
        cm.ref.namespace for cm in snapshot.of("ConfigMap") if cm.ref.name == ref.name
    )
    if not elsewhere and not snapshot.in_namespace("ConfigMap", ref.namespace):
        return  # that namespace's ConfigMaps are not in the input: cannot tell
    where = (
        f"; it is in {', '.join(elsewhere)}, but a pod mounts only its own namespace's"
        if elsewhere
        else ""
    )
    yield failed(
        ref.referrer,
        f"references ConfigMap {ref.name!r}, which does not exist in {ref.namespace}{where}",
        path=_path(ref),
        fix={
            "summary": f"create it in {ref.namespace}, the device plugin's namespace",
            "command": f"kubectl -n {ref.namespace} create configmap {ref.name} "
            "--from-file=any=./any.yaml",
        },
    )
