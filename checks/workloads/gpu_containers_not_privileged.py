import json
from collections.abc import Iterator
from typing import Any

from gpu_audit.api import (
    NVIDIA_GPU,
    WORKLOAD_TYPES,
    AdmissionRule,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    is_gpu_stack_node_agent,
    is_operator_asset_template,
    passed,
    pod_templates,
    str_map,
)
from gpu_audit.checks.workloads._common import (
    added_capabilities,
    volume,
)

# Capabilities that let a container mknod or mount its way to every GPU device node.
_DANGEROUS_CAPS = frozenset({"SYS_ADMIN", "ALL"})
# Custom resources of the GPU Operator that own its operand DaemonSets.
_OPERATOR_OWNERS = frozenset({"ClusterPolicy", "NVIDIADriver"})


@check(
    id="GPU-WL-005",
    title="GPU workload containers are not privileged",
    category=Category.WORKLOADS,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        A privileged container gets every host device, so it sees and uses all GPUs of the
        node whatever its nvidia.com/gpu limit says, and collides with the pods those GPUs
        were allocated to. It is also a full node-escape primitive on the most expensive
        nodes of the cluster. SYS_ADMIN or host /dev mounts bypass the device plugin the same
        way.
    """,
    detection="""
        Every container and init container of pod templates that request GPUs, explicitly
        tolerate the nvidia.com/gpu taint, or select nodes by an nvidia.com/gpu* label:
        privileged: true fails high; capabilities.add SYS_ADMIN or ALL, or a hostPath mount of
        /dev, /dev/nvidia* or /dev/dri, fail medium. The GPU stack's own node agents
        (DaemonSets built only from NVIDIA operand images, and DaemonSets the GPU Operator owns
        through its ClusterPolicy or NVIDIADriver, whatever registry their images come from,
        and the operator's asset templates, whose namespace is its placeholder "FILLED BY THE
        OPERATOR") are not evaluated, nor are pods that only tolerate every taint (CNI, CSI
        and kube-proxy DaemonSets).
    """,
    severity_evidence="""
        High for a privileged container: the spec alone gives it every GPU device of the node
        next to the pods they are allocated to. Medium for SYS_ADMIN/ALL or a host device
        mount, which need a further step (mknod, mount) to reach the GPUs. The operator's own
        privileged operands are by design and not reported.
    """,
    remediation="""
        # $kind $namespace/$name, container $container: $action
        $fragment
        # Enforce it: kubectl label ns $namespace pod-security.kubernetes.io/enforce=baseline
    """,
    remediation_generic="""
        # the container's privileges dropped, nothing else of it changed (its resources stay:
        # the device plugin gives it the GPUs it asks for, and a sidecar or init container asks
        # for none)
        containers:
          - name: <container>
            securityContext:
              privileged: false
              capabilities: {add: [<the added capabilities but SYS_ADMIN and ALL>]}   # or null
            volumeMounts:
              - {mountPath: <the mount of host /dev>, $patch: delete}
        volumes:
          - {name: <the host /dev volume, when no other container mounts it>, $patch: delete}
        # Enforce it: kubectl label ns <namespace> pod-security.kubernetes.io/enforce=baseline
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://github.com/NVIDIA/k8s-device-plugin/issues/336",
        "https://github.com/NVIDIA/k8s-device-plugin/issues/161",
        "https://kubernetes.io/docs/concepts/security/pod-security-standards/",
        "https://github.com/NVIDIA/gpu-operator/blob/main/controllers/object_controls.go",
    ),
    remediation_root="pod_spec",
    admission=AdmissionRule(
        scope="container",
        where=f"""
            (@pod_gpu(t)
             || t.spec.?tolerations.orValue([]).exists(x, x.?key.orValue('') == '{NVIDIA_GPU}')
             || t.spec.?nodeSelector.orValue({{}}).exists(k, k.startsWith('{NVIDIA_GPU}')))
            && !@stack_agent(t)
            && !(object.kind == 'DaemonSet' && object.metadata.?ownerReferences.orValue([])
                 .exists(r, r.kind in {sorted(_OPERATOR_OWNERS)}
                         && r.apiVersion.startsWith('nvidia.com/')))
        """,
        valid=f"""
            !c.?securityContext.?privileged.orValue(false)
            && !c.?securityContext.?capabilities.?add.orValue([]).exists(x,
                   x.upperAscii() in {sorted(_DANGEROUS_CAPS | {"CAP_" + c for c in _DANGEROUS_CAPS})})
            && [t.spec.?volumes.orValue([]).filter(v, has(v.hostPath)
                   && (v.hostPath.path in ['/dev', '/dev/']
                       || v.hostPath.path.startsWith('/dev/nvidia')
                       || v.hostPath.path.startsWith('/dev/dri'))).map(v, v.name)].all(devices,
                 !c.?volumeMounts.orValue([]).exists(m, m.name in devices))
        """,
        message="a container of a GPU pod is privileged, adds SYS_ADMIN/ALL or mounts host "
        "/dev: it sees every GPU of the node, not just the allocated ones",
        note="SYS_ADMIN/ALL and host /dev mounts are medium in a scan, privileged high",
    ),
)
def gpu_containers_not_privileged(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if not _targets_gpus(template) or is_gpu_stack_node_agent(template):
            continue
        # The GPU Operator's own asset templates (assets/state-*/ of NVIDIA/gpu-operator) are
        # not objects anyone applies: the operator creates each in its namespace with its
        # ClusterPolicy as controller (controllers/object_controls.go DaemonSet), so the live
        # object is exempt as operator-owned.
        if _operator_owned_daemonset(template) or is_operator_asset_template(template.owner):
            continue
        for container in template.containers():
            yield _judge(template, container)


def _operator_owned_daemonset(template: PodTemplate) -> bool:
    """A DaemonSet the GPU Operator created for its ClusterPolicy or NVIDIADriver: its
    privileges are the operand's (driver, toolkit), whichever mirror its images come from."""
    owner = template.owner
    return owner.ref.kind == "DaemonSet" and any(
        str(ref.get("kind", "")) in _OPERATOR_OWNERS
        and str(ref.get("apiVersion", "")).startswith("nvidia.com/")
        for ref in map(as_mapping, as_list(owner.metadata.get("ownerReferences")))
    )


def _targets_gpus(template: PodTemplate) -> bool:
    if template.requests_gpu:
        return True
    tolerations = map(as_mapping, as_list(template.spec.get("tolerations")))
    if any(t.get("key") == NVIDIA_GPU for t in tolerations):
        return True
    return any(k.startswith(NVIDIA_GPU) for k in str_map(template.spec.get("nodeSelector")))


def _judge(template: PodTemplate, container: Container) -> Result:
    fix = _fix(template, container)
    context = f"{container.path}.securityContext"
    if container.privileged:
        return failed(
            container,
            "is privileged: it sees every GPU of the node, not just the allocated ones",
            path=f"{context}.privileged",
            fix=fix,
        )
    caps = sorted(added_capabilities(container) & _DANGEROUS_CAPS)
    if caps:
        return failed(
            container,
            f"adds capabilities {', '.join(caps)}, enough to reach every GPU device",
            path=f"{context}.capabilities.add",
            severity=Severity.MEDIUM,
            fix=fix,
        )
    device_mounts = _host_device_mounts(template, container)
    if device_mounts:
        return failed(
            container,
            f"mounts host device nodes {', '.join(p for p, _, _ in device_mounts)}, bypassing "
            "the device plugin",
            path=f"{container.path}.volumeMounts",
            severity=Severity.MEDIUM,
            fix=fix,
        )
    return passed(container, "is unprivileged and gets GPUs only through the device plugin")


def _fix(template: PodTemplate, container: Container) -> dict[str, str]:
    """Every way the container reaches the GPUs, taken away in one patch, and nothing else:
    privileged false; SYS_ADMIN and ALL out of capabilities.add (a list a patch replaces
    whole, so the other capabilities are written back); its mounts of host /dev deleted, and
    the volumes no other container mounts. Its resources stay as they are: a GPU is never
    given to a container that asks for none (a sidecar, an init container)."""
    fields: dict[str, Any] = {"name": container.name}
    context: dict[str, Any] = {}
    if container.privileged:
        context["privileged"] = False
    added = [
        str(c)
        for c in as_list(as_mapping(container.security_context.get("capabilities")).get("add"))
    ]
    kept = [c for c in added if c.upper().removeprefix("CAP_") not in _DANGEROUS_CAPS]
    if len(kept) < len(added):
        context["capabilities"] = {"add": kept or None}
    if context:
        fields["securityContext"] = context
    mounts = _host_device_mounts(template, container)
    if mounts:
        fields["volumeMounts"] = [{"mountPath": m, "$patch": "delete"} for _, m, _ in mounts]
    section = "initContainers" if container.init else "containers"
    fragment = {section: [fields]}
    others = {
        str(as_mapping(m).get("name", ""))
        for c in template.containers()
        if (c.name, c.init) != (container.name, container.init)
        for m in as_list(c.raw.get("volumeMounts"))
    }
    unused = sorted({v for _, _, v in mounts} - others)
    if unused:
        fragment["volumes"] = [{"name": v, "$patch": "delete"} for v in unused]
    if container.gpu_resource_names():
        action = "the device plugin still gives it the GPUs it asks for"
    elif container.init or container.is_sidecar or template.requests_gpu:
        action = "it asks for no GPU and gets none (the app containers keep theirs)"
    else:
        action = (
            "it asks for no GPU: if it uses the node's GPUs, give it an nvidia.com/gpu limit "
            "for those it needs"
        )
    return {
        "section": section,
        "container": container.name,
        "action": action,
        "fragment": "\n".join(f"{k}: {json.dumps(v)}" for k, v in fragment.items()),
    }


def _host_device_mounts(template: PodTemplate, container: Container) -> list[tuple[str, str, str]]:
    """(host path, mount path, volume name) of each mount of host /dev, /dev/nvidia* or
    /dev/dri."""
    found = []
    for mount in map(as_mapping, as_list(container.raw.get("volumeMounts"))):
        name = str(mount.get("name", ""))
        host = as_mapping(volume(template, name).get("hostPath"))
        path = str(host.get("path", "")).rstrip("/")
        if path == "/dev" or path.startswith(("/dev/nvidia", "/dev/dri")):
            found.append((path, str(mount.get("mountPath", "")), name))
    return found
