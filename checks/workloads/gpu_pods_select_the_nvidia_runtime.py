from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    NvidiaRuntime,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    gpu_pod_templates,
    is_gpu_stack_node_agent,
    nvidia_runtime,
    passed,
    relate,
)

RUNTIME_CLASS = "RuntimeClass"
# Handlers that run a container as it is, without injecting GPUs.
_PLAIN_HANDLERS = frozenset({"runc", "crun"})


@check(
    id="GPU-WL-008",
    title="GPU pods select the NVIDIA runtime where it is not the nodes' default",
    category=Category.WORKLOADS,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES, ("Node", "DaemonSet", "ClusterPolicy.nvidia.com", RUNTIME_CLASS)),
    rationale="""
        The device plugin only allocates a GPU; the NVIDIA container runtime (or CDI support in
        containerd/CRI-O) is what puts the device nodes and driver libraries into the
        container. Where the `nvidia` runtime is registered but is not the default (the
        toolkit's set-as-default turned off, or K3s/RKE2, whose containerd keeps runc unless
        started with --default-runtime), a GPU pod without runtimeClassName starts under runc:
        the GPU stays allocated to it while CUDA finds no device (kserve#4722, RKE2's GPU
        Operator guide: "runtimeClassName: nvidia <== Only needed for v25.3.x").
    """,
    detection="""
        Evidence that the NVIDIA runtime is not the GPU nodes' default: the container toolkit
        (its DaemonSet's env, else the ClusterPolicy's toolkit.env) sets
        NVIDIA_RUNTIME_SET_AS_DEFAULT / CONTAINERD_SET_AS_DEFAULT (or the CRI-O/Docker
        variant) to false; or GPU nodes run K3s or RKE2 (kubeletVersion +k3s/+rke2) without
        --default-runtime nvidia in their node-args annotation, and the toolkit does not write
        RKE2's config.toml.tmpl. Not flagged: clusters whose device plugin hands CDI devices
        to the runtime through the CRI (DEVICE_LIST_STRATEGY cdi-cri, GPU Operator v25.10+),
        which need no runtime class; clusters where the toolkit keeps the default (true). Then
        every GPU pod template (InferenceService components included) without runtimeClassName,
        or naming a RuntimeClass whose handler is runc or crun, fails; a class whose handler is
        the toolkit's (CONTAINERD_RUNTIME_CLASS, default nvidia, or nvidia-cdi/nvidia-legacy)
        passes; other handlers (Kata, gVisor) bring GPUs their own way and are not judged. GPU-stack
        node agents are not evaluated (the operator sets their runtime class itself).
    """,
    severity_evidence="""
        High when the evidence covers every GPU node in the input (a cluster-wide toolkit
        setting, or all GPU nodes on K3s/RKE2): wherever the pod lands it holds a GPU it cannot
        use. Medium when only some GPU nodes lack the default, so only the pods placed there
        lose their GPU. Without evidence in the input (no toolkit, no K3s/RKE2 nodes) the check
        says nothing.
    """,
    remediation="""
        # $kind $namespace/$name: $why
        runtimeClassName: $runtime_class$note
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # a GPU pod where the NVIDIA runtime is not the default: select it by its RuntimeClass
        # (the handler the toolkit registers, CONTAINERD_RUNTIME_CLASS, default nvidia)
        runtimeClassName: nvidia
        # or make it the node default once: K3s/RKE2 --default-runtime nvidia (config.yaml
        # default-runtime: nvidia), or the toolkit's CONTAINERD_SET_AS_DEFAULT=true
    """,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/cdi.html",
        "https://github.com/NVIDIA/gpu-operator/blob/main/controllers/object_controls.go",
        "https://github.com/NVIDIA/nvidia-container-toolkit/blob/main/cmd/nvidia-ctk-installer/container/runtime/runtime.go",
        "https://github.com/rancher/rke2-docs/blob/main/docs/add-ons/gpu_operators.md",
        "https://github.com/k3s-io/k3s/issues/8700",
        "https://github.com/kserve/kserve/issues/4722",
        "https://kubernetes.io/docs/concepts/containers/runtime-class/",
    ),
    remediation_root="pod_spec",
)
def gpu_pods_select_the_nvidia_runtime(snapshot: Snapshot) -> Iterator[Result]:
    runtime = nvidia_runtime(snapshot)
    if runtime.default is None:
        return
    classes = {c.ref.name: c for c in snapshot.of(RUNTIME_CLASS)}
    for template in gpu_pod_templates(snapshot):
        if is_gpu_stack_node_agent(template):
            continue
        name = str(template.spec.get("runtimeClassName") or "")
        handler = _handler(classes, name)
        if runtime.default:
            yield passed(
                template, f"gets the NVIDIA runtime without a RuntimeClass: {runtime.evidence}"
            )
        elif name and _is_nvidia(handler, runtime.handler):
            yield passed(template, f"selects RuntimeClass {name} (handler {handler})")
        elif not name or handler in _PLAIN_HANDLERS:
            yield _finding(template, name, handler, runtime, classes)
        # another handler (Kata, gVisor...) brings the GPU its own way: not judged here


def _handler(classes: dict[str, Resource], name: str) -> str:
    """The handler of RuntimeClass `name`; the name itself when the class is not in the input
    (the GPU Operator and K3s name their classes after their handlers)."""
    found = classes.get(name)
    return str(found.raw.get("handler") or "") if found is not None else name


def _is_nvidia(handler: str, nvidia: str) -> bool:
    return handler == nvidia or handler.startswith("nvidia")


def _finding(
    template: PodTemplate,
    name: str,
    handler: str,
    runtime: NvidiaRuntime,
    classes: dict[str, Resource],
) -> Result:
    everywhere = runtime.gpu_nodes == 0 or len(runtime.nodes) >= runtime.gpu_nodes
    selected = [
        c for c in classes.values() if _is_nvidia(str(c.raw.get("handler") or ""), runtime.handler)
    ]
    suggested = selected[0].ref.name if selected else runtime.handler
    what = (
        f"selects RuntimeClass {name} (handler {handler}), not the NVIDIA runtime"
        if name
        else "sets no runtimeClassName"
    )
    where = (
        "on every GPU node"
        if everywhere
        else f"on {len(runtime.nodes)} of {runtime.gpu_nodes} GPU nodes"
    )
    message = (
        f"requests GPUs and {what}, while the NVIDIA runtime is not the default {where} "
        f"({runtime.evidence}): its containers start under runc, holding the GPU without "
        "seeing it"
    )
    note = (
        ""
        if selected
        else f"   # create RuntimeClass {suggested} (handler: {runtime.handler}) first"
    )
    causes = [runtime.source] if runtime.source is not None else []
    if runtime.source is not None and runtime.source.ref.kind_name == "Node":
        causes = list(runtime.nodes[:20])
    return failed(
        template,
        message,
        path=f"{template.path}.runtimeClassName",
        severity=None if everywhere else Severity.MEDIUM,
        fix={
            "why": f"{what}; the NVIDIA runtime is not the default {where}",
            "runtime_class": suggested,
            "note": note,
        },
        related=[relate(c, "cause") for c in causes],
    )
