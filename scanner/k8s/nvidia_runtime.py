"""Whether a GPU pod gets the NVIDIA container runtime without asking for it.

The device plugin only allocates GPUs; a container sees them when something injects the device
nodes and driver libraries at container creation. That is either the NVIDIA runtime (the
`nvidia` containerd handler the Container Toolkit registers), or the container runtime's own
CDI support, fed by a device plugin that returns CDI devices through the CRI (its
DEVICE_LIST_STRATEGY `cdi-cri`). A pod gets the NVIDIA runtime when it is the node's default
runtime, or when it selects it with `runtimeClassName`. A GPU pod that gets neither starts
under runc holding a GPU it cannot see.

What the input shows:

- The toolkit's set-as-default flag (env NVIDIA_RUNTIME_SET_AS_DEFAULT, CONTAINERD_SET_AS_DEFAULT,
  CRIO_SET_AS_DEFAULT, DOCKER_SET_AS_DEFAULT; default true), in the toolkit DaemonSet or in the
  ClusterPolicy's `toolkit.env`: "When set to false, only containers in pods with a
  runtimeClassName equal to CONTAINERD_RUNTIME_CLASS will be run with the
  nvidia-container-runtime" (GPU Operator, "Specifying configuration options for containerd",
  https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html;
  flag definitions in NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/container/
  runtime/runtime.go).
- GPU Operator v25.10 and later enable CDI: the toolkit sets NVIDIA_RUNTIME_SET_AS_DEFAULT=false
  and the device plugin runs with DEVICE_LIST_STRATEGY=cdi-annotations,cdi-cri, so containerd
  or CRI-O inject the GPUs themselves and no runtimeClassName is needed (NVIDIA/gpu-operator
  controllers/object_controls.go, transformToolkitCtrForCDI, transformDevicePluginCtrForCDI;
  https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/cdi.html).
- K3s and RKE2 generate containerd's config themselves: they register the `nvidia` handler they
  detect but keep runc as the default unless the node runs with `--default-runtime`
  (k3s-io/k3s#8700, #9702); the toolkit's own change survives only when it writes RKE2's
  config.toml.tmpl. RKE2's GPU Operator guide therefore says pods need `runtimeClassName:
  nvidia` with GPU Operator v25.3.x, and no longer with v25.10.x (CDI)
  (https://github.com/rancher/rke2-docs/blob/main/docs/add-ons/gpu_operators.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_audit.k8s.gpu_hosts import gpu_nodes
from gpu_audit.k8s.gpu_operator import active_cluster_policy, component_enabled, containers
from gpu_audit.k8s.gpu_operator import device_plugin_daemonsets as _device_plugins
from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

SET_AS_DEFAULT_ENV = (
    "NVIDIA_RUNTIME_SET_AS_DEFAULT",
    "CONTAINERD_SET_AS_DEFAULT",
    "CRIO_SET_AS_DEFAULT",
    "DOCKER_SET_AS_DEFAULT",
)
RUNTIME_NAME_ENV = ("NVIDIA_RUNTIME_NAME", "CONTAINERD_RUNTIME_CLASS", "DOCKER_RUNTIME_NAME")
DEFAULT_HANDLER = "nvidia"
_NODE_ARGS = ("k3s.io/node-args", "rke2.io/node-args")
_K3S_VERSION = re.compile(r"\+(k3s|rke2)\d*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class NvidiaRuntime:
    """What the input says about the NVIDIA runtime on the GPU nodes.

    `default` is True when GPU pods get it (or CDI injection) without a runtimeClassName, False
    when only pods that select `handler` get it, None when the input does not say. `evidence`
    describes why; `source` is the object that shows it and `nodes` the GPU nodes it applies to
    (all GPU nodes in the input unless the evidence is per node)."""

    default: bool | None
    handler: str
    evidence: str
    source: Resource | None
    nodes: tuple[Resource, ...]
    gpu_nodes: int


def nvidia_runtime(snapshot: Snapshot) -> NvidiaRuntime:
    return snapshot.derived("nvidia_runtime", _nvidia_runtime)


def _nvidia_runtime(snapshot: Snapshot) -> NvidiaRuntime:
    nodes = gpu_nodes(snapshot)
    toolkit_env, toolkit_source = _toolkit_env(snapshot)
    handler = next(
        (toolkit_env[n] for n in RUNTIME_NAME_ENV if toolkit_env.get(n)), DEFAULT_HANDLER
    )

    def verdict(
        default: bool | None, why: str, source: Resource | None, on: tuple[Resource, ...] = nodes
    ) -> NvidiaRuntime:
        return NvidiaRuntime(default, handler, why, source, on, len(nodes))

    cdi = _cdi_cri_plugin(snapshot)
    if cdi is not None:
        return verdict(
            True,
            f"DaemonSet {cdi.ref.namespace}/{cdi.ref.name} returns CDI devices through the CRI "
            "(DEVICE_LIST_STRATEGY cdi-cri): the container runtime injects the GPUs itself",
            cdi,
        )
    flag = next(
        ((n, toolkit_env[n]) for n in SET_AS_DEFAULT_ENV if toolkit_env.get(n) is not None),
        None,
    )
    if flag is not None and flag[1].strip().lower() in ("false", "0"):
        where = _describe(toolkit_source)
        return verdict(
            False,
            f"{where} sets {flag[0]}={flag[1]}: the '{handler}' runtime is not the default, only "
            f"pods with a RuntimeClass of handler {handler} get it",
            toolkit_source,
        )
    rancher = tuple(n for n in nodes if _k3s_or_rke2(n))
    if rancher:
        plain = tuple(
            n for n in rancher if not str(_default_runtime_arg(n) or "").startswith(handler)
        )
        if not plain:
            return verdict(
                True,
                f"the GPU nodes run K3s/RKE2 with --default-runtime {handler}",
                rancher[0],
            )
        config = toolkit_env.get("CONTAINERD_CONFIG", "")
        if not config.endswith(".tmpl"):
            flavour = "RKE2" if any("rke2" in _version(n) for n in plain) else "K3s"
            return verdict(
                False,
                f"{len(plain)} of {len(nodes)} GPU nodes run {flavour} "
                f"({_version(plain[0])}), whose containerd keeps runc as the default runtime "
                "unless the node runs with --default-runtime; the GPU Operator's toolkit does "
                "not change that (it does not write config.toml.tmpl) and the device plugin "
                "does not use CDI",
                plain[0],
                plain,
            )
    if flag is not None or (toolkit_source is not None and _containerd_or_docker(snapshot)):
        value = f"{flag[0]}={flag[1]}" if flag else "the default set-as-default=true"
        return verdict(
            True,
            f"{_describe(toolkit_source)} configures the '{handler}' runtime as the default "
            f"({value})",
            toolkit_source,
        )
    return verdict(None, "the input does not show how the GPU nodes' runtime is configured", None)


def _describe(resource: Resource | None) -> str:
    if resource is None:
        return "the toolkit"
    ref = resource.ref
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return f"{ref.kind_name} {where}"


def _toolkit_env(snapshot: Snapshot) -> tuple[dict[str, str], Resource | None]:
    """The container toolkit's environment: its DaemonSet's (what runs), else the active
    ClusterPolicy's toolkit.env (what the operator renders)."""
    for daemonset in snapshot.of("DaemonSet"):
        for container in containers(daemonset):
            image = str(container.get("image", ""))
            if (
                "container-toolkit" in image
                or container.get("name") == "nvidia-container-toolkit-ctr"
            ):
                return _env(container), daemonset
    policy = active_cluster_policy(snapshot)
    if policy is not None and component_enabled(policy, "toolkit"):
        return _env(as_mapping(policy.spec.get("toolkit"))), policy
    return {}, None


def _env(container: object) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in map(as_mapping, as_list(as_mapping(container).get("env"))):
        if entry.get("name") and "value" in entry:
            found[str(entry["name"])] = str(
                entry.get("value") if entry.get("value") is not None else ""
            )
    return found


def _cdi_cri_plugin(snapshot: Snapshot) -> Resource | None:
    """A device plugin DaemonSet that hands CDI devices to the runtime through the CRI."""
    for daemonset in _device_plugins(snapshot):
        for container in containers(daemonset):
            strategy = _env(container).get("DEVICE_LIST_STRATEGY", "")
            if "cdi-cri" in [s.strip() for s in strategy.split(",")]:
                return daemonset
    return None


def _containerd_or_docker(snapshot: Snapshot) -> bool:
    """The toolkit sets a default runtime for containerd and Docker; CRI-O may use a hook."""
    runtimes = {
        str(as_mapping(as_mapping(n.status).get("nodeInfo")).get("containerRuntimeVersion", ""))
        for n in gpu_nodes(snapshot)
    }
    return not runtimes or any(r.startswith(("containerd://", "docker://")) for r in runtimes)


def _version(node: Resource) -> str:
    return str(as_mapping(node.status.get("nodeInfo")).get("kubeletVersion", ""))


def _k3s_or_rke2(node: Resource) -> bool:
    info = as_mapping(node.status.get("nodeInfo"))
    runtime = str(info.get("containerRuntimeVersion", ""))
    return bool(_K3S_VERSION.search(_version(node))) or "-k3s" in runtime


def _default_runtime_arg(node: Resource) -> str | None:
    """The --default-runtime a K3s/RKE2 node was started with, from its node-args annotation."""
    for key in _NODE_ARGS:
        raw = node.annotations.get(key)
        if not raw:
            continue
        args: list[str] = [str(a) for a in re.findall(r'"([^"]*)"', raw)]
        for index, arg in enumerate(args):
            if arg.startswith("--default-runtime="):
                return arg.split("=", 1)[1]
            if arg == "--default-runtime" and index + 1 < len(args):
                return args[index + 1]
    return None
