from __future__ import annotations

import json
from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_nodes,
    is_gpu_stack_node_agent,
    is_operator_asset_template,
    is_stack_pod_in_system_namespace,
    passed,
    pod_templates,
    schedules_on,
)

from ._common import is_platform_gpu_agent

# Host paths that hand a container device nodes directly: the whole /dev (or the host root,
# which contains it), GPU, render, RDMA, ROCm and VFIO passthrough nodes.
_DEVICE_PREFIXES = ("/dev/nvidia", "/dev/dri", "/dev/infiniband", "/dev/kfd", "/dev/vfio")
_NO_DEVICES = ("void", "none", "")
# Container fields, under `- name: <container>` of a pod-spec fragment.
_UNPRIVILEGED = """\
    securityContext:
      privileged: false
      allowPrivilegeEscalation: false"""
_GPU_LIMIT_COMMENT = """
    # if it uses GPUs: resources: {limits: {nvidia.com/gpu: 1}}"""
_VISIBLE_DEVICES_FROM_PLUGIN = """\
    env:
      - name: NVIDIA_VISIBLE_DEVICES
        $patch: delete   # strategic merge: removes the entry
    resources:
      limits:
        nvidia.com/gpu: 1   # the device plugin sets NVIDIA_VISIBLE_DEVICES to the allocated GPU"""


@check(
    id="GPU-SEC-002",
    title="Workloads reach GPUs only through the device plugin, not hostPath /dev mounts",
    category=Category.NETWORK_SECURITY,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        The device plugin is what makes GPU access accountable: the scheduler counts
        nvidia.com/gpu, and MIG or time-slicing isolation is enforced by handing each container
        only its devices. A hostPath mount of /dev or /dev/nvidia*, a privileged container
        (which receives every host device node) or NVIDIA_VISIBLE_DEVICES set without a GPU
        request bypass that: other tenants' GPUs are used silently, the scheduler's accounting
        is wrong, and /dev also exposes disks and memory devices.
    """,
    detection="""
        Every pod template except the GPU and network stack's own (a system namespace such as
        gpu-operator or kube-system AND an NVIDIA/Mellanox/EFA component image, a DaemonSet
        built only from GPU-stack images in any namespace, or one of the GPU Operator's asset
        templates, whose namespace is the operator's "FILLED BY THE OPERATOR": the operator
        fills them in and runs them as its operands) and the managed
        platform's own GPU agents (kube-system DaemonSets labelled
        addonmanager.kubernetes.io/mode, or built only from GKE's GPU images such as
        nvidia-gpu-device-plugin, which mounts /dev by design): hostPath
        volumes of /, /dev or under /dev/nvidia*, /dev/dri, /dev/infiniband, /dev/kfd,
        /dev/vfio (and whether a container that mounts one is privileged); privileged
        containers that request GPUs or that can run on a GPU node without requesting one (when Nodes are in the input, only if the pod's selectors and
        tolerations admit a GPU node; never for kube-system agents, nor for TPU pods, which
        select cloud.google.com/gke-tpu-accelerator or ask for google.com/tpu); a literal
        NVIDIA_VISIBLE_DEVICES other than void/none in a container without a GPU request. Not
        flagged: /dev/shm as an emptyDir, other hostPaths, NVIDIA_VISIBLE_DEVICES coming from
        valueFrom.
    """,
    severity_evidence="""
        High when the spec itself hands the workload devices outside the device plugin: a
        hostPath of /, /dev or a GPU/RDMA device node mounted by a privileged container, a
        privileged container that requests GPUs, a literal NVIDIA_VISIBLE_DEVICES without a GPU
        request. Medium for a privileged container without a GPU request that the input shows
        can land on a GPU node (or when no Node is in the input). Low for such a hostPath that
        only unprivileged containers mount: the runtime's device cgroup lets them open none of
        its device nodes (node-exporter mounts the host root read-only this way).
    """,
    remediation="""
        # $kind $namespace/$name ($where): $problem
        # Request devices through the scheduler instead (a GPU, a MIG slice, a DRA
        # ResourceClaim; RDMA through its device plugin):
        $fragment
        # Enforce it namespace-wide:
        #   kubectl label namespace $namespace pod-security.kubernetes.io/enforce=baseline
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # Request devices through the scheduler instead (a GPU, a MIG slice, a DRA
        # ResourceClaim; RDMA through its device plugin).
        # a hostPath volume of /dev, the host root or a device node: delete it and its mounts
        volumes:
          - name: <volume>
            $patch: delete
        containers:
          - name: <container>
            volumeMounts:
              - mountPath: <mount-path>
                $patch: delete
        ---
        # a privileged container that gets (or may land on) GPUs:
        containers:
          - name: <container>
            securityContext:
              privileged: false
              allowPrivilegeEscalation: false
            # if it uses GPUs: resources: {limits: {nvidia.com/gpu: 1}}
        ---
        # NVIDIA_VISIBLE_DEVICES set without a GPU request:
        containers:
          - name: <container>
            env:
              - name: NVIDIA_VISIBLE_DEVICES
                $patch: delete   # strategic merge: removes the entry
            resources:
              limits:
                nvidia.com/gpu: 1   # the device plugin sets NVIDIA_VISIBLE_DEVICES to the allocated GPU
        # Enforce it namespace-wide:
        #   kubectl label namespace <namespace> pod-security.kubernetes.io/enforce=baseline
    """,
    references=(
        "https://kubernetes.io/docs/concepts/security/pod-security-standards/",
        "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/",
        "https://github.com/NVIDIA/k8s-device-plugin#readme",
        "https://github.com/GoogleCloudPlatform/container-engine-accelerators/blob/master/cmd/nvidia_gpu/device-plugin.yaml",
        "https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/tpus-autopilot",
        "https://github.com/NVIDIA/gpu-operator/blob/main/controllers/object_controls.go",
    ),
    remediation_root="pod_spec",
)
def gpu_devices_only_through_device_plugin(snapshot: Snapshot) -> Iterator[Result]:
    gpu_node_list = gpu_nodes(snapshot) if snapshot.count("Node") else None
    for template in pod_templates(snapshot):
        # NVIDIA's static manifests (GFD, device plugin) install into the current namespace,
        # often `default`: a DaemonSet built only from GPU-stack images is the stack too. The
        # GPU Operator's asset templates become its operands once it fills them in.
        if (
            is_stack_pod_in_system_namespace(template)
            or is_gpu_stack_node_agent(template)
            or is_operator_asset_template(template.owner)
        ):
            continue
        if platform := is_platform_gpu_agent(template):
            yield passed(template, f"is {platform}: it reaches devices by design")
            continue
        findings = [
            *_host_device_volumes(template),
            *(
                finding
                for container in template.containers()
                for finding in _container_findings(container, gpu_node_list)
            ),
        ]
        if findings:
            yield from findings
        else:
            yield passed(
                template,
                "mounts no host devices and runs no privileged or NVIDIA_VISIBLE_DEVICES "
                "container outside the device plugin",
            )


def _host_device_volumes(template: PodTemplate) -> Iterator[Result]:
    for index, volume in enumerate(map(as_mapping, as_list(template.spec.get("volumes")))):
        raw = as_mapping(volume.get("hostPath")).get("path")
        if not isinstance(raw, str):
            continue
        path = raw.rstrip("/") or "/"
        if path in ("/", "/dev") or path.startswith(_DEVICE_PREFIXES):
            what = "the host root (including /dev)" if path == "/" else path
            name = str(volume.get("name", ""))
            problem = f"hostPath volume {name} mounts {what}"
            # Only a privileged container is let through the runtime's device cgroup: in the
            # others the host's device nodes are visible and cannot be opened.
            if any(_mounts(c, name) and c.privileged for c in template.containers()):
                why, severity = (
                    "device nodes outside the device plugin's allocation and isolation",
                    None,
                )
            else:
                why = (
                    "its device nodes are visible, but no container that mounts it is "
                    "privileged, and the runtime's device cgroup refuses to open them"
                )
                severity = Severity.LOW
            yield failed(
                template,
                f"{problem}: {why}",
                path=f"{template.path}.volumes[{index}].hostPath",
                severity=severity,
                fix={
                    "where": f"volume {name}",
                    "problem": problem,
                    "fragment": _remove_volume(template, name),
                },
            )


def _mounts(container: Container, volume_name: str) -> bool:
    return any(
        as_mapping(m).get("name") == volume_name for m in as_list(container.raw.get("volumeMounts"))
    )


def _remove_volume(template: PodTemplate, name: str) -> str:
    """Strategic-merge deletes of the volume and of every mount of it (volumeMounts merge by
    mountPath): a mount of a volume that no longer exists makes the pod invalid."""
    lines = ["volumes:", f"  - name: {json.dumps(name)}", "    $patch: delete"]
    for section, containers in _by_section(template).items():
        entries = []
        for container in containers:
            paths = [
                str(m.get("mountPath", ""))
                for m in map(as_mapping, as_list(container.raw.get("volumeMounts")))
                if m.get("name") == name
            ]
            if paths:
                entries.append(f"  - name: {json.dumps(container.name)}")
                entries.append("    volumeMounts:")
                for mount_path in paths:
                    entries.append(f"      - mountPath: {json.dumps(mount_path)}")
                    entries.append("        $patch: delete")
        if entries:
            lines += [f"{section}:", *entries]
    return "\n".join(lines)


def _by_section(template: PodTemplate) -> dict[str, list[Container]]:
    sections: dict[str, list[Container]] = {}
    for container in template.containers():
        sections.setdefault(_section(container), []).append(container)
    return sections


def _section(container: Container) -> str:
    return "initContainers" if container.init else "containers"


def _container_findings(
    container: Container, gpu_node_list: tuple[Resource, ...] | None
) -> Iterator[Result]:
    requests_gpu = bool(container.gpu_resource_names())
    if container.privileged and (
        requests_gpu or _may_land_on_gpu_node(container.template, gpu_node_list)
    ):
        problem = "privileged container sees every host device, including every GPU"
        if not requests_gpu:
            problem += ", without requesting one"
        # A GPU container keeps its request; one without asks for a GPU only if it uses one.
        request = "" if requests_gpu else _GPU_LIMIT_COMMENT
        yield failed(
            container,
            problem,
            path=f"{container.path}.securityContext.privileged",
            severity=Severity.HIGH if requests_gpu else Severity.MEDIUM,
            fix={
                "where": container.describe(),
                "problem": problem,
                "fragment": _container_fragment(container, _UNPRIVILEGED + request),
            },
        )
    entry = container.env().get("NVIDIA_VISIBLE_DEVICES")
    value = entry.get("value") if entry is not None else None
    if isinstance(value, str) and value.strip().lower() not in _NO_DEVICES and not requests_gpu:
        # The value names devices, not a credential, so printing it is safe and useful.
        problem = (
            f"NVIDIA_VISIBLE_DEVICES={value} without a GPU request gets GPUs outside the "
            "scheduler wherever the runtime honours the variable for unprivileged containers"
        )
        yield failed(
            container,
            problem,
            path=f"{container.path}.env[NVIDIA_VISIBLE_DEVICES]",
            fix={
                "where": container.describe(),
                "problem": problem,
                "fragment": _container_fragment(container, _VISIBLE_DEVICES_FROM_PLUGIN),
            },
        )


def _container_fragment(container: Container, fields: str) -> str:
    return f"{_section(container)}:\n  - name: {json.dumps(container.name)}\n{fields}"


# GKE runs TPU work on TPU slice nodes: the pod selects the TPU version by the node label
# cloud.google.com/gke-tpu-accelerator and asks for google.com/tpu chips
# (https://cloud.google.com/kubernetes-engine/docs/how-to/tpus-autopilot). A TPU node has no GPU,
# so a privileged TPU container (JobSet's site/static/examples/tpu-multislice/
# v6e-jax-workload.yaml) sees none.
_TPU_NODE_LABEL = "cloud.google.com/gke-tpu-accelerator"
_TPU_RESOURCE = "google.com/tpu"


def _runs_on_tpu_nodes(template: PodTemplate) -> bool:
    return _TPU_NODE_LABEL in as_mapping(template.spec.get("nodeSelector")) or any(
        _TPU_RESOURCE in c.limits or _TPU_RESOURCE in c.requests for c in template.containers()
    )


def _may_land_on_gpu_node(
    template: PodTemplate, gpu_node_list: tuple[Resource, ...] | None
) -> bool:
    # Node agents in kube-system (CNI, CSI, kube-proxy) are privileged by design.
    if template.owner.ref.namespace == "kube-system" or _runs_on_tpu_nodes(template):
        return False
    if gpu_node_list is None:
        return True  # no Nodes in the input: any node may be a GPU node
    return any(schedules_on(template.spec, node) for node in gpu_node_list)
