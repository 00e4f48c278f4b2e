from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpu_audit.api import (
    DEPLOY_PREFIX,
    Category,
    FixKind,
    ObjRef,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_mapping,
    check,
    component_enabled,
    daemonset_runs_on,
    device_plugin_daemonsets,
    failed,
    gpu_nodes,
    is_operator_operand,
    passed,
    policy_operand_runs_on,
    templates_of,
)

OPERATOR = "operator"
STANDALONE = "standalone"
BUILTIN = "builtin"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_OPT_OUT = "gke-no-default-nvidia-gpu-device-plugin"


@dataclass(frozen=True, slots=True)
class Owner:
    kind: str  # OPERATOR, STANDALONE or BUILTIN
    label: str
    daemonset: Resource | None = None


@check(
    id="GPU-STACK-004",
    title="Each GPU node has exactly one owner of the NVIDIA device plugin",
    category=Category.STACK,
    severity=Severity.HIGH,
    requires=("DaemonSet", "Node"),
    rationale="""
        Two device plugins on one node register the same resource (nvidia.com/gpu) with the
        same kubelet: capacity follows whichever registered last, and removing one drops it to
        0. Their sharing and MIG configurations can differ, so what the node advertises becomes
        nondeterministic. Bottlerocket NVIDIA variants and EKS Auto Mode run the plugin as a
        host service, and GKE runs its own plugin DaemonSet, so any extra plugin there is a
        second owner.
    """,
    detection="""
        Device-plugin DaemonSets are those that mount /var/lib/kubelet/device-plugins and run
        the NVIDIA (k8s-device-plugin), GKE (nvidia-gpu-device-plugin) or HAMi plugin image;
        GFD, the MPS control daemon, config-manager-only and KubeVirt/Kata sandbox plugins are
        not counted. Each one's nodeSelector, required node affinity and tolerations are
        simulated against every GPU node (operator operands with the deploy labels the
        operator sets on GPU nodes). An enabled ClusterPolicy counts as an owner even when its
        DaemonSet is not in the input; Bottlerocket/EKS Auto Mode nodes and GKE GPU nodes
        without gke-no-default-nvidia-gpu-device-plugin=true count their built-in plugin.
        Not flagged: a DaemonSet that schedules no pod (desiredNumberScheduled 0) and
        deliberate splits where selectors keep the owners on different nodes. The finding
        names the standalone DaemonSet to restrict, or the node to opt out of the operator's
        plugin when the duplicate is a built-in one.
    """,
    severity_evidence="""
        High whenever it fails: two owners whose placement (selectors, affinity, tolerations,
        or a platform's built-in plugin) lands on the same GPU node make what it advertises
        depend on which registered last. Owners kept apart by selectors, and DaemonSets that
        schedule no pod, are not findings.
    """,
    remediation="""
        # $subject: $summary
        # Keep one plugin per node: remove this one (helm uninstall / kubectl delete), or
        # apply the patch below (its expressions are ANDed into every existing term).
        $patch
    """,
    fix_kind=FixKind.PATCH,
    remediation_root="pod_spec",
    remediation_generic="""
        # Keep one plugin per node: remove the standalone DaemonSet <namespace>/<name> (helm uninstall /
        # kubectl delete), or keep it off the nodes another plugin owns (merge the expressions into
        # every existing term; each finding lists those that apply):
        spec:
          template:
            spec:
              affinity:
                nodeAffinity:
                  requiredDuringSchedulingIgnoredDuringExecution:
                    nodeSelectorTerms:
                      - matchExpressions:
                          - {key: nvidia.com/gpu.deploy.device-plugin, operator: NotIn, values: ["true"]}   # the GPU Operator's plugin
                          - {key: cloud.google.com/gke-accelerator, operator: DoesNotExist}                 # GKE's built-in plugin
                          - {key: kubernetes.io/hostname, operator: NotIn, values: ["<node>"]}              # another plugin, Bottlerocket / EKS Auto Mode
        ---
        # Node <node> whose built-in plugin already owns it: opt it out of the GPU Operator's plugin
        metadata:
          labels:
            nvidia.com/gpu.deploy.device-plugin: "false"
    """,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/issues/255",
        "https://docs.aws.amazon.com/eks/latest/userguide/ml-eks-k8s-device-plugin.html",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/google-gke.html",
    ),
)
def one_device_plugin_owner_per_gpu_node(snapshot: Snapshot) -> Iterator[Result]:
    owners = _owners_by_node(snapshot)
    # standalone DaemonSet -> {node name: the other owners there}
    clashes: dict[ObjRef, tuple[Resource, dict[str, list[Owner]]]] = {}
    for node, found in owners:
        if len(found) == 1:
            yield passed(node, f"has one device-plugin owner: {found[0].label}")
            continue
        if len(found) < 2:
            continue  # no plugin at all is a node-capacity problem, not a duplicate
        standalone = [o for o in found if o.kind == STANDALONE and o.daemonset is not None]
        for owner in standalone:
            assert owner.daemonset is not None
            entry = clashes.setdefault(owner.daemonset.ref, (owner.daemonset, {}))
            entry[1][node.ref.name] = [o for o in found if o is not owner]
        if not standalone:
            yield _node_finding(node, found)
    for daemonset, nodes in clashes.values():
        yield _daemonset_finding(daemonset, nodes)


def _owners_by_node(snapshot: Snapshot) -> list[tuple[Resource, list[Owner]]]:
    plugins = device_plugin_daemonsets(snapshot)
    policy = active_cluster_policy(snapshot)
    virtual_operator = (
        policy is not None
        and component_enabled(policy, "devicePlugin")
        and not any(is_operator_operand(ds) for ds in plugins)
    )
    gke_daemonset_present = any(_is_gke_plugin(ds) for ds in plugins)
    out = []
    for node in gpu_nodes(snapshot):
        found = [
            Owner(
                OPERATOR if is_operator_operand(ds) else STANDALONE,
                f"DaemonSet {ds.ref.namespace}/{ds.ref.name}",
                ds,
            )
            for ds in plugins
            if daemonset_runs_on(ds, node)
        ]
        if (
            virtual_operator
            and policy is not None
            and policy_operand_runs_on(policy, node, "device-plugin")
        ):
            found.append(Owner(OPERATOR, f"ClusterPolicy {policy.ref.name} (devicePlugin)"))
        found.extend(_builtin_owners(node, gke_daemonset_present))
        out.append((node, found))
    return out


def _is_gke_plugin(daemonset: Resource) -> bool:
    return daemonset.ref.name.startswith("nvidia-gpu-device-plugin")


def _builtin_owners(node: Resource, gke_daemonset_present: bool) -> list[Owner]:
    found = []
    os_image = str(as_mapping(node.status.get("nodeInfo")).get("osImage", ""))
    if (
        os_image.startswith("Bottlerocket")
        or node.labels.get("eks.amazonaws.com/compute-type") == "auto"
    ):
        found.append(Owner(BUILTIN, "Bottlerocket/EKS Auto Mode host device plugin"))
    if (
        GKE_ACCELERATOR in node.labels
        and node.labels.get(GKE_OPT_OUT) != "true"
        and not gke_daemonset_present
    ):
        found.append(Owner(BUILTIN, "GKE built-in device plugin"))
    return found


def _describe(owners: list[Owner]) -> str:
    return ", ".join(o.label for o in owners)


def _node_finding(node: Resource, found: list[Owner]) -> Result:
    return failed(
        node,
        f"has {len(found)} owners of the NVIDIA device plugin: {_describe(found)}",
        path="metadata.labels",
        fix={
            "subject": f"Node {node.ref.name}",
            "summary": "the built-in plugin already owns this node; opt it out of the "
            "GPU Operator's plugin",
            "patch": "metadata:\n  labels:\n    " + DEPLOY_PREFIX + 'device-plugin: "false"',
        },
    )


def _daemonset_finding(daemonset: Resource, nodes: Mapping[str, list[Owner]]) -> Result:
    others = {o.label: o for found in nodes.values() for o in found}
    summary = "; ".join(f"{n}: also {_describe(found)}" for n, found in sorted(nodes.items()))
    # on the pod template: the engine writes the fix into the terms the DaemonSet has
    return failed(
        next(iter(templates_of(daemonset)), daemonset),
        f"runs a second NVIDIA device plugin on {len(nodes)} GPU node(s) ({summary})",
        path="spec.template.spec.affinity",
        fix={
            "subject": f"DaemonSet {daemonset.ref.namespace}/{daemonset.ref.name}",
            "summary": summary,
            "patch": _affinity_patch(list(others.values()), sorted(nodes)),
        },
    )


def _affinity_patch(others: list[Owner], node_names: list[str]) -> str:
    expressions = []
    if any(o.kind == OPERATOR for o in others):
        expressions.append(
            f'{{key: {DEPLOY_PREFIX}device-plugin, operator: NotIn, values: ["true"]}}'
        )
    if any(o.label.startswith("GKE") for o in others):
        expressions.append(f"{{key: {GKE_ACCELERATOR}, operator: DoesNotExist}}")
    if any(o.kind == STANDALONE or o.label.startswith("Bottlerocket") for o in others):
        # No standard label marks these nodes; pin the exclusion to their names.
        names = ", ".join(f'"{n}"' for n in node_names)
        expressions.append(f"{{key: kubernetes.io/hostname, operator: NotIn, values: [{names}]}}")
    lines = [
        "affinity:",
        "  nodeAffinity:",
        "    requiredDuringSchedulingIgnoredDuringExecution:",
        "      nodeSelectorTerms:",
        "        - matchExpressions:",
    ]
    lines.extend(f"            - {e}" for e in expressions)
    return "\n".join(lines)
