import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    DEPLOY_PREFIX,
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
    component_enabled,
    failed,
    gpu_nodes,
    passed,
)

# ClusterPolicy component -> the node label that opts a node out of that operand.
_OPERAND = {"driver": "driver", "toolkit": "container-toolkit"}


@dataclass(frozen=True, slots=True)
class Preinstalled:
    """What a node's OS image ships. `components` are ClusterPolicy keys."""

    os: str
    components: tuple[str, ...]


def _preinstalled(node: Resource) -> Preinstalled | None:
    info = as_mapping(node.status.get("nodeInfo"))
    image, kernel = str(info.get("osImage", "")), str(info.get("kernelVersion", ""))
    both = ("driver", "toolkit")
    if image.startswith("Amazon Linux") and "amzn2" in kernel:  # AL2 and AL2023 (amzn2023)
        return Preinstalled(f"EKS accelerated AMI ({image})", both)
    if image.startswith("Bottlerocket") or (
        node.labels.get("eks.amazonaws.com/compute-type") == "auto"
    ):
        return Preinstalled(f"Bottlerocket/EKS Auto Mode ({image or 'compute-type=auto'})", both)
    if "kubernetes.azure.com/accelerator" in node.labels:
        return Preinstalled("AKS GPU node pool", both)
    if "Container-Optimized OS" in image:
        # GKE COS: Google's installer owns the driver; the operator's toolkit is supported.
        return Preinstalled(f"GKE {image}", ("driver",))
    return None


def _wanted(policy: Resource, component: str) -> bool:
    if component == "driver" and as_mapping(policy.spec.get("driver")).get("useNvidiaDriverCRD"):
        return False  # NVIDIADriver objects own the driver then (GPU-STACK-009)
    return component_enabled(policy, component)


def _opted_out(node: Resource, component: str) -> bool:
    labels = node.labels
    value = labels.get(DEPLOY_PREFIX + _OPERAND[component])
    return labels.get(DEPLOY_PREFIX + "operands") == "false" or value in ("false", "pre-installed")


def _stuck_driver_pod(snapshot: Snapshot, node: Resource) -> str:
    """Live evidence: a driver pod on the node whose init containers keep failing."""
    for pod in snapshot.of("Pod"):
        if pod.spec.get("nodeName") != node.ref.name:
            continue
        if not pod.ref.name.startswith("nvidia-driver-daemonset"):
            continue
        for status in map(as_mapping, as_list(pod.status.get("initContainerStatuses"))):
            waiting = as_mapping(as_mapping(status.get("state")).get("waiting"))
            restarts = int(status.get("restartCount") or 0)
            if waiting.get("reason") == "CrashLoopBackOff" or restarts >= 3:
                return f"; pod {pod.ref.name} init container {status.get('name')} is failing"
    return ""


@check(
    id="GPU-STACK-002",
    title="ClusterPolicy does not deploy a driver or toolkit on nodes whose OS image has them",
    category=Category.STACK,
    severity=Severity.MEDIUM,
    requires=("ClusterPolicy.nvidia.com", "Node"),
    rationale="""
        EKS accelerated AL2/AL2023 AMIs, Bottlerocket NVIDIA variants, AKS GPU pools and GKE
        Container-Optimized OS ship the NVIDIA driver (and, except COS, the container toolkit).
        There is no driver container for Amazon Linux; on such hosts the driver pod waits in
        k8s-driver-manager until it labels the node pre-installed, or competes with the host
        driver, and a second toolkit install rewrites a containerd config the image manages.
    """,
    detection="""
        For the active ClusterPolicy, driver and toolkit count as enabled when `enabled` is
        unset (the driver not when useNvidiaDriverCRD hands it to NVIDIADriver objects). Each
        GPU node whose osImage/kernel or labels identify one of the images above fails unless
        it is opted out with nvidia.com/gpu.deploy.<operand>=false (or pre-installed, or
        operands=false). Ubuntu EKS AMIs are not flagged. The finding is medium because the
        operator usually self-heals by labelling the node pre-installed; it is high when a
        driver pod on the node is crash-looping. It names the ClusterPolicy when every GPU node
        it would install on is preinstalled, else each preinstalled node (mixed pools).
        AKS pools created with --skip-gpu-driver-install are indistinguishable in the API.
        Nodes the driver manager already labelled pre-installed are opted out, but when the
        policy's driver.version differs from their host driver (GFD's
        cuda.driver-version.full) the ClusterPolicy fails: that version never reaches them.
    """,
    severity_evidence="""
        Medium when the node's OS image (osImage, kernel, labels) ships the component the
        ClusterPolicy deploys there: the configured driver version cannot apply and a second
        toolkit rewrites the runtime config the image manages. High when a driver pod on
        such a node is crash-looping. Medium too when nodes labelled pre-installed run
        another driver version than driver.version: the configured version is silently not
        applied. Ubuntu EKS AMIs and other opted-out nodes are not judged.
    """,
    remediation="""
        $command   # $subject: $summary
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # every GPU node the ClusterPolicy targets ships the driver (or the toolkit): turn it off
        kubectl patch clusterpolicies.nvidia.com/<name> --type merge -p '{"spec":{"driver":{"enabled":false}}}'
        kubectl patch clusterpolicies.nvidia.com/<name> --type merge -p '{"spec":{"toolkit":{"enabled":false}}}'
        # only some of them do (mixed pools): opt those nodes out
        kubectl label node <node> nvidia.com/gpu.deploy.driver=false --overwrite
        kubectl label node <node> nvidia.com/gpu.deploy.container-toolkit=false --overwrite
    """,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/microsoft-aks.html",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/google-gke.html",
        "https://github.com/NVIDIA/gpu-operator/issues/686",
        "https://github.com/NVIDIA/gpu-operator/issues/476",
    ),
)
def cluster_policy_skips_preinstalled_driver_and_toolkit(snapshot: Snapshot) -> Iterator[Result]:
    policy = active_cluster_policy(snapshot)
    if policy is None:
        return
    nodes = gpu_nodes(snapshot)
    for component in ("driver", "toolkit"):
        if not _wanted(policy, component):
            yield passed(policy, f"{component}: not installed by the operator")
            continue
        if component == "driver":
            ignored = _ignored_driver_version(policy, nodes)
            if ignored is not None:
                yield ignored
        targets = [n for n in nodes if not _opted_out(n, component)]
        clashing = [
            (n, p) for n in targets if (p := _preinstalled(n)) and component in p.components
        ]
        if not clashing:
            if targets:
                yield passed(policy, f"{component}: no targeted GPU node ships it preinstalled")
            continue
        if len(clashing) == len(targets):
            yield _policy_finding(snapshot, policy, component, clashing)
        else:
            for node, found in clashing:
                yield _node_finding(snapshot, node, component, found)


_VERSION = re.compile(r"^\d+(\.\d+){0,2}$")
_HOST_DRIVER = "nvidia.com/cuda.driver-version.full"


def _ignored_driver_version(policy: Resource, nodes: tuple[Resource, ...]) -> Result | None:
    """The driver.version the policy asks for, on nodes whose driver manager found a host
    driver (deploy.driver=pre-installed) of another version (GFD's label): the operator never
    replaces a preinstalled driver, so the configured version is silently not applied."""
    wanted = str(as_mapping(policy.spec.get("driver")).get("version") or "")
    if not _VERSION.match(wanted):
        return None  # unset, a placeholder, or a tag we cannot compare
    running: dict[str, str] = {}
    for node in nodes:
        labels = node.labels
        if labels.get(DEPLOY_PREFIX + "operands") == "false":
            continue
        host = labels.get(_HOST_DRIVER, "")
        if labels.get(DEPLOY_PREFIX + "driver") != "pre-installed" or not host:
            continue
        if host.split(".")[: wanted.count(".") + 1] != wanted.split("."):
            running[node.ref.name] = host
    if not running:
        return None
    shown = ", ".join(f"{n} ({v})" for n, v in sorted(running.items())[:3])
    more = f" and {len(running) - 3} more" if len(running) > 3 else ""
    return failed(
        policy,
        f"driver.version {wanted} is never installed on {len(running)} GPU node(s) the driver "
        f"manager labelled pre-installed, which keep their host driver: {shown}{more}",
        path="spec.driver.version",
        fix={
            "subject": f"ClusterPolicy {policy.ref.name}",
            "summary": "the operator does not replace a preinstalled driver: upgrade it in the "
            "node image, or drop the operator's driver there",
            "command": "kubectl patch clusterpolicies.nvidia.com/"
            f"{policy.ref.name} --type merge -p "
            '\'{"spec":{"driver":{"enabled":false}}}\'',
        },
    )


def _severity(evidence: str) -> Severity | None:
    return Severity.HIGH if evidence else None


def _policy_finding(
    snapshot: Snapshot,
    policy: Resource,
    component: str,
    clashing: list[tuple[Resource, Preinstalled]],
) -> Result:
    evidence = "".join(_stuck_driver_pod(snapshot, n) for n, _ in clashing)
    images = sorted({p.os for _, p in clashing})
    return failed(
        policy,
        f"{component}.enabled is on, but every GPU node it targets ships it: "
        f"{', '.join(images)}{evidence}",
        path=f"spec.{component}.enabled",
        severity=_severity(evidence),
        fix={
            "subject": f"ClusterPolicy {policy.ref.name}",
            "summary": f"the OS image provides the {component}",
            "command": "kubectl patch clusterpolicies.nvidia.com/"
            f"{policy.ref.name} --type merge -p "
            f'\'{{"spec":{{"{component}":{{"enabled":false}}}}}}\'',
        },
    )


def _node_finding(
    snapshot: Snapshot, node: Resource, component: str, found: Preinstalled
) -> Result:
    evidence = _stuck_driver_pod(snapshot, node)
    label = DEPLOY_PREFIX + _OPERAND[component]
    return failed(
        node,
        f"runs {found.os}, which ships the {component}, but the ClusterPolicy deploys it "
        f"here (other GPU nodes need it, so opt this one out){evidence}",
        path=f"metadata.labels.{label}",
        severity=_severity(evidence),
        fix={
            "subject": f"Node {node.ref.name}",
            "summary": f"the OS image provides the {component}",
            "command": f"kubectl label node {node.ref.name} {label}=false --overwrite",
        },
    )
