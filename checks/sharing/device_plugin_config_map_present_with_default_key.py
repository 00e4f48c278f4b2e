from collections.abc import Iterator

from gpu_audit.api import (
    Category,
    FixKind,
    RelatedRef,
    RelatedRole,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    gpu_quantities,
    passed,
    relate,
)
from gpu_audit.checks.sharing._common import (
    ConfigRef,
    config_map_of,
    config_refs,
    fallback_key,
    fallback_strategies,
    ref_nodes,
)

HELM_RELEASE = "meta.helm.sh/release-name"


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
        namespace is not in the input. A ConfigMap of that name in another namespace is the
        object to change (it has to live in the plugin's namespace): the finding is on it,
        with the ClusterPolicy or DaemonSet that names it as owner and the device-plugin
        DaemonSet and its GPU nodes as symptoms. Otherwise the finding is on the ClusterPolicy
        or plugin DaemonSet whose reference is wrong.
    """,
    severity_evidence="""
        High: the plugin pods cannot start (or cannot pick a config) on every node they
        serve. Critical when the ConfigMap is missing and none of those GPU nodes advertises
        an allocatable GPU: no GPU pod can be placed on them.
    """,
    remediation="""
        # $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # the ConfigMap sits in another namespace: copy it into the plugin's namespace (a pod
        # mounts only ConfigMaps of its own), then fix whatever created it in the wrong one
        kubectl -n <other-namespace> get configmap <configmap> -o yaml | sed -e '/^  namespace:/d' -e '/^  resourceVersion:/d' -e '/^  uid:/d' | kubectl -n <plugin-namespace> create -f -
        # the ConfigMap the device plugin config names exists nowhere: create it
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
        (cm for cm in snapshot.of("ConfigMap") if cm.ref.name == ref.name),
        key=lambda cm: cm.ref.sort_key,
    )
    if not elsewhere and not snapshot.in_namespace("ConfigMap", ref.namespace):
        return  # that namespace's ConfigMaps are not in the input: cannot tell
    nodes = ref_nodes(snapshot, ref)
    starved = bool(nodes) and not any(
        v > 0 for n in nodes for v in gpu_quantities(n, "allocatable").values()
    )
    severity = Severity.CRITICAL if starved else Severity.HIGH
    consequence = (
        f"; none of the {len(nodes)} GPU node(s) it serves advertises an allocatable GPU"
        if starved
        else ""
    )
    symptoms: list[RelatedRef] = [relate(n, RelatedRole.SYMPTOM) for n in nodes]
    if ref.daemonset is not None and ref.daemonset is not ref.referrer:
        symptoms.append(relate(ref.daemonset, RelatedRole.SYMPTOM))
    if not elsewhere:
        yield failed(
            ref.referrer,
            f"references ConfigMap {ref.name!r}, which does not exist in {ref.namespace}: "
            f"the device-plugin pods cannot mount it and do not start{consequence}",
            path=_path(ref),
            severity=severity,
            fix={
                "summary": f"create it in {ref.namespace}, the device plugin's namespace",
                "command": f"kubectl -n {ref.namespace} create configmap {ref.name} "
                "--from-file=any=./any.yaml",
            },
            related=symptoms,
        )
        return
    misplaced, others = elsewhere[0], elsewhere[1:]
    also = f" (copies also in {', '.join(c.ref.namespace for c in others)})" if others else ""
    yield failed(
        misplaced,
        f"is in {misplaced.ref.namespace}, but {ref.referrer.ref} mounts it for the device "
        f"plugin in {ref.namespace}, and a pod mounts only ConfigMaps of its own namespace"
        f"{also}: the device-plugin pods cannot start{consequence}",
        path="metadata.namespace",
        severity=severity,
        fix=_move_fix(misplaced, ref.namespace),
        related=[relate(ref.referrer, RelatedRole.OWNER), *symptoms],
    )


def _move_fix(config_map: Resource, namespace: str) -> dict[str, str]:
    """Copy the ConfigMap into the plugin's namespace; then whatever created it in the wrong
    one (a Helm release, GitOps) has to be told, or it puts it back there."""
    name, source = config_map.ref.name, config_map.ref.namespace
    release = config_map.annotations.get(HELM_RELEASE)
    origin = (
        f"\n# it was created by Helm release {release!r}: set the namespace of its time-slicing "
        f"ConfigMap to {namespace} there, then delete this copy from {source}"
        if release
        else f"\n# then delete the copy from {source}: kubectl -n {source} delete configmap {name}"
    )
    return {
        "summary": f"ConfigMap {source}/{name} must live in {namespace}, the device plugin's "
        "namespace",
        "command": f"kubectl -n {source} get configmap {name} -o yaml | sed -e '/^  namespace:/d' "
        "-e '/^  resourceVersion:/d' -e '/^  uid:/d' | "
        f"kubectl -n {namespace} create -f -{origin}",
    }
