from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    AdmissionRule,
    Category,
    Container,
    FixKind,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    containers,
    failed,
    gpu_nodes,
    is_gpu_stack_node_agent,
    passed,
    pod_templates,
)
from gpu_audit.checks.workloads._common import (
    env_list_value,
    gpu_count,
    resolved_env,
)

VARIABLE = "NVIDIA_VISIBLE_DEVICES"
ACCEPT_ENVVAR = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
# Values with which the NVIDIA runtime injects no GPU at all.
NO_GPU_VALUES = frozenset({"", "void", "none"})

# Container fields, under `- name: <container>` of the pod spec's container list.
_REMOVE = """\
    env:   # the device plugin sets it for the allocated GPUs
      - name: NVIDIA_VISIBLE_DEVICES
        $patch: delete   # strategic merge: removes the entry"""
_VOID = """\
    env:
      - name: NVIDIA_VISIBLE_DEVICES
        value: void   # or delete it and request the GPU: resources.limits.nvidia.com/gpu: 1"""


@check(
    id="GPU-WL-004",
    title="Containers that request no GPU do not set NVIDIA_VISIBLE_DEVICES",
    category=Category.WORKLOADS,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        Unless the container toolkit is told to ignore it, the NVIDIA runtime honours
        NVIDIA_VISIBLE_DEVICES from the container's own environment. A pod that requests no
        GPU but sets it to "all" (or to device ids) uses every GPU of the node while the
        scheduler, quotas and cost reports count none, and it collides with the pods those
        GPUs were allocated to.
    """,
    detection="""
        Every container and init container, except the GPU stack's own node agents (DaemonSets
        built only from NVIDIA operand images: device plugin, GFD, DCGM, MIG manager, driver,
        toolkit, validator, NFD, network operator). NVIDIA_VISIBLE_DEVICES is read from env,
        then envFrom, resolving ConfigMaps present in the input; values from Secrets or field
        refs are not judged. A container without GPUs whose value is not void/none/empty
        fails high; low when the cluster ignores the variable for unprivileged containers
        (toolkit ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED=false with a
        volume-mounts or CDI device-list strategy in the ClusterPolicy or plugin DaemonSet, or
        only Bottlerocket GPU nodes), but high again for privileged containers. A GPU container
        that hard-codes the variable fails medium: which value wins is not settled upstream.
        Images that bake the variable in (CUDA base images) are not visible in the manifest
        and are not flagged.
    """,
    severity_evidence="""
        The cluster's runtime configuration is the evidence. High for a container without a
        GPU request that names GPUs, unless the toolkit ignores the variable for unprivileged
        containers (ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED=false with a
        volume-mounts or CDI device list, or Bottlerocket nodes), which lowers it to low; a
        privileged container stays high. A GPU container hard-coding the variable is medium,
        low in such a cluster.
    """,
    remediation="""
        # $kind $namespace/$name, container $container
        $section:
          - name: $container
        $snippet
        # Cluster-wide, GPU Operator Helm values (unprivileged containers then ignore the variable):
        # toolkit:
        #   env:
        #     - {name: ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED, value: "false"}
        #     - {name: ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS, value: "true"}
        # devicePlugin:
        #   env:
        #     - {name: DEVICE_LIST_STRATEGY, value: volume-mounts}
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # <kind> <namespace>/<name>, container <container> sets NVIDIA_VISIBLE_DEVICES without a GPU request
        containers:
          - name: <container>
            env:
              - name: NVIDIA_VISIBLE_DEVICES
                value: void   # or delete it and request the GPU: resources.limits.nvidia.com/gpu: 1
        # a container that requests GPUs and hard-codes it: delete the entry, the device plugin sets
        # it for the allocated GPUs: env: [{name: NVIDIA_VISIBLE_DEVICES, $patch: delete}]
        # Cluster-wide, GPU Operator Helm values (unprivileged containers then ignore the variable):
        # toolkit:
        #   env:
        #     - {name: ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED, value: "false"}
        #     - {name: ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS, value: "true"}
        # devicePlugin:
        #   env:
        #     - {name: DEVICE_LIST_STRATEGY, value: volume-mounts}
    """,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/issues/61",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/1605",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/90",
    ),
    remediation_root="pod_spec",
    admission=AdmissionRule(
        scope="container",
        where="!@stack_agent(t)",
        valid=f"""
            [c.?env.orValue([]).filter(e, e.?name.orValue('') == '{VARIABLE}')]
            .all(es, size(es) == 0 || [es[size(es) - 1]].all(e,
              (has(e.valueFrom) && !has(e.value))
              || (!(c.?resources.?limits.orValue({{}}).exists(k, @gpu_resource(k)
                      && [c.resources.limits[k]].all(v, @positive(v)))
                    || c.?resources.?requests.orValue({{}}).exists(k, @gpu_resource(k)
                      && !(k in c.?resources.?limits.orValue({{}}))
                      && [c.resources.requests[k]].all(v, @positive(v))))
                  && e.?value.orValue('').trim().lowerAscii() in {sorted(NO_GPU_VALUES)})))
        """,
        message="sets NVIDIA_VISIBLE_DEVICES to GPUs without requesting one (the runtime exposes "
        "them outside the scheduler's accounting), or hard-codes it next to a GPU request",
        note="from env only: a value from envFrom or a ConfigMap is left to scans, and so is "
        "the cluster-wide runtime setting that lowers it to low",
    ),
)
def no_visible_devices_env_without_gpu_request(snapshot: Snapshot) -> Iterator[Result]:
    mitigated = _envvar_ignored_when_unprivileged(snapshot)
    for template in pod_templates(snapshot):
        if is_gpu_stack_node_agent(template):
            continue
        for container in template.containers():
            yield from _judge(snapshot, container, mitigated)


def _judge(snapshot: Snapshot, container: Container, mitigated: bool) -> Iterator[Result]:
    is_set, value = resolved_env(snapshot, container, VARIABLE)
    has_gpu = gpu_count(container) > 0
    if not is_set:
        if has_gpu:
            yield passed(container, f"requests GPUs and leaves {VARIABLE} to the device plugin")
        return
    if value is None:
        return  # from a Secret, a field ref or an absent ConfigMap: unknown
    if has_gpu:
        ignored = mitigated and not container.privileged
        yield failed(
            container,
            f"requests GPUs but hard-codes {VARIABLE}={value!r}; "
            + (
                "the cluster ignores it for unprivileged containers and mounts the allocated "
                "devices instead"
                if ignored
                else "the device plugin's value may not win and the container can see more "
                "GPUs than it was allocated"
            ),
            severity=Severity.LOW if ignored else Severity.MEDIUM,
            fix={"section": _section(container), "container": container.name, "snippet": _REMOVE},
        )
    elif value.strip().lower() in NO_GPU_VALUES:
        yield passed(container, f"requests no GPU and sets {VARIABLE}={value!r} (no GPU)")
    else:
        privileged = container.privileged
        severity = Severity.LOW if mitigated and not privileged else Severity.HIGH
        note = (
            "the cluster ignores it for unprivileged containers"
            if severity is Severity.LOW
            else "the NVIDIA runtime will expose those GPUs outside the scheduler's accounting"
        )
        yield failed(
            container,
            f"requests no GPU but sets {VARIABLE}={value!r}; {note}",
            severity=severity,
            fix={"section": _section(container), "container": container.name, "snippet": _VOID},
        )


def _section(container: Container) -> str:
    return "initContainers" if container.init else "containers"


def _envvar_ignored_when_unprivileged(snapshot: Snapshot) -> bool:
    """Whether unprivileged containers' NVIDIA_VISIBLE_DEVICES is ignored cluster-wide."""
    nodes = gpu_nodes(snapshot)
    if nodes and all(
        "bottlerocket" in str(as_mapping(n.status.get("nodeInfo")).get("osImage", "")).lower()
        for n in nodes
    ):
        return True  # Bottlerocket's runtime defaults: envvar off, volume mounts on
    envs = list(_component_envs(snapshot))
    accept = [v for env in envs if (v := env_list_value(env, ACCEPT_ENVVAR)) is not None]
    strategies = [v for env in envs if (v := env_list_value(env, "DEVICE_LIST_STRATEGY"))]
    cdi = any(
        as_mapping(p.spec.get("cdi")).get("enabled") is True
        for p in snapshot.of("ClusterPolicy.nvidia.com")
    )
    off = bool(accept) and all(v.strip().lower() == "false" for v in accept)
    return off and (cdi or any(_not_envvar_only(s) for s in strategies))


def _component_envs(snapshot: Snapshot) -> Iterator[list[object]]:
    """The env lists that configure the toolkit and device plugin: ClusterPolicy component
    env, and the env of the operand DaemonSets' containers (standalone installs)."""
    for policy in snapshot.of("ClusterPolicy.nvidia.com"):
        for component in ("toolkit", "devicePlugin"):
            yield as_list(as_mapping(policy.spec.get(component)).get("env"))
    for daemonset in snapshot.of("DaemonSet"):
        for raw in containers(daemonset):
            yield as_list(raw.get("env"))


def _not_envvar_only(strategy: str) -> bool:
    parts = {p.strip() for p in strategy.split(",") if p.strip()}
    return bool(parts - {"envvar"})
