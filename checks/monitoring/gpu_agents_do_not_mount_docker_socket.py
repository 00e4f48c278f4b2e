from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
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
    image_repository,
    passed,
    schedules_on,
    templates_of,
)

from ._common import is_dcgm_exporter

# Docker's and cri-dockerd's sockets, and the directories that hold them.
DOCKER_SOCKETS = frozenset(
    {
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/var/run/dockershim.sock",
        "/var/run/cri-dockerd.sock",
        "/run/cri-dockerd.sock",
    }
)
SOCKET_DIRS = frozenset({"/var/run", "/run"})
DOCKER_RUNTIMES = frozenset({"docker"})
CRI_RUNTIMES = frozenset({"containerd", "cri-o"})


def _is_gpu_agent(container: Container) -> bool:
    """dcgm-exporter, the device plugin, GFD and other GPU exporters. The container toolkit
    legitimately talks to the runtime socket to reconfigure it, so it is not an agent here."""
    repository = image_repository(container.image)
    if "container-toolkit" in repository:
        return False
    return (
        is_dcgm_exporter(container)
        or "k8s-device-plugin" in repository
        or "gpu-feature-discovery" in repository
        or ("gpu" in repository and "exporter" in repository)
    )


def _socket_volumes(template: PodTemplate) -> list[tuple[str, str, str]]:
    """(volume name, host path, hostPath type) of the hostPath volumes that expose the Docker
    socket."""
    found = []
    for volume in map(as_mapping, as_list(template.spec.get("volumes"))):
        host_path = as_mapping(volume.get("hostPath"))
        path = str(host_path.get("path", ""))
        normalized = path.rstrip("/") or path
        if normalized in DOCKER_SOCKETS or normalized in SOCKET_DIRS:
            found.append((str(volume.get("name", "")), path, str(host_path.get("type") or "")))
    return found


def _runtimes(snapshot: Snapshot, template: PodTemplate) -> set[str]:
    """Runtime names (containerd, cri-o, docker) of the nodes the DaemonSet lands on."""
    runtimes = set()
    for node in snapshot.of("Node"):
        version = str(as_mapping(node.status.get("nodeInfo")).get("containerRuntimeVersion", ""))
        if version and schedules_on(template.spec, node):
            runtimes.add(version.split("://", 1)[0].lower())
    return runtimes


@check(
    id="GPU-MON-005",
    title="GPU agents do not mount the Docker socket on containerd/CRI-O nodes",
    category=Category.MONITORING,
    severity=Severity.LOW,
    requires=("DaemonSet",),
    remediation_root="pod_spec",
    rationale="""
        Since dockershim was removed, containerd and CRI-O nodes run containers Docker cannot
        see: a docker.sock mount in dcgm-exporter or another GPU agent is dead weight, and
        with hostPath type Socket the pod fails to mount and the node has no exporter.
        dcgm-exporter needs only the kubelet pod-resources socket to attribute GPUs to pods.
        Where a node still runs Docker (cri-dockerd), a writable docker.sock in a pod is root
        on the node.
    """,
    detection="""
        DaemonSets with a GPU agent container (dcgm-exporter by image, the NVIDIA device
        plugin, GPU feature discovery, or an image named like a GPU exporter) that declare a
        hostPath volume for /var/run/docker.sock, /run/docker.sock, dockershim.sock,
        cri-dockerd.sock, or all of /var/run or /run. The runtime comes from
        status.nodeInfo.containerRuntimeVersion of the nodes the DaemonSet can schedule on:
        low on containerd/CRI-O or when no node says, high when any of them runs Docker, or
        when the volume is of hostPath type Socket on containerd/CRI-O nodes. Not
        flagged: /var/lib/kubelet/pod-resources, /run/nvidia and /run/containerd mounts, and
        the container toolkit, which needs the runtime socket. The patch deletes the volume
        and its mounts.
    """,
    severity_evidence="""
        High when a node the DaemonSet can land on runs Docker (status.nodeInfo): a writable
        docker.sock in the pod is root on that node; high too on containerd/CRI-O nodes when
        the volume has hostPath type Socket: the socket does not exist there, so the pod never
        starts and the node loses the agent. Low otherwise on containerd/CRI-O nodes (a dead
        mount) and when no node says its runtime.
    """,
    remediation="""
        # $subject: remove the Docker socket; dcgm-exporter needs only
        # /var/lib/kubelet/pod-resources. kubectl patch daemonset $name -n $namespace --patch-file fix.yaml
        $body
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # DaemonSet <namespace>/<name>: remove the Docker socket; dcgm-exporter needs only
        # /var/lib/kubelet/pod-resources. kubectl patch daemonset <name> -n <namespace> --patch-file fix.yaml
        volumes:
          - {name: <socket-volume>, $patch: delete}
        containers:   # and initContainers: every container that mounts it
          - name: <container>
            volumeMounts:
              - {mountPath: "<mount-path>", $patch: delete}
    """,
    references=(
        "https://github.com/NVIDIA/dcgm-exporter/blob/main/deployment/examples/dcgm-exporter.yaml",
        "https://kubernetes.io/docs/tasks/administer-cluster/migrating-from-dockershim/check-if-dockershim-removal-affects-you/",
        "https://docs.datadoghq.com/agent/guide/docker-deprecation/",
        "https://kubernetes.io/docs/concepts/storage/volumes/#hostpath-volume-types",
    ),
)
def gpu_agents_do_not_mount_docker_socket(snapshot: Snapshot) -> Iterator[Result]:
    for daemonset in snapshot.of("DaemonSet"):
        for template in templates_of(daemonset):
            agents = [c for c in template.containers() if _is_gpu_agent(c)]
            if not agents:
                continue
            volumes = _socket_volumes(template)
            if not volumes:
                yield passed(template, "mounts no Docker socket")
                continue
            yield _finding(daemonset, template, volumes, _runtimes(snapshot, template))


def _finding(
    daemonset: Resource,
    template: PodTemplate,
    volumes: list[tuple[str, str, str]],
    runtimes: set[str],
) -> Result:
    paths = ", ".join(path for _, path, _ in volumes)
    must_exist = [
        p for _, p, kind in volumes if kind == "Socket" and p.rstrip("/") not in SOCKET_DIRS
    ]
    if runtimes & DOCKER_RUNTIMES:
        severity = Severity.HIGH
        where = "a Docker node: a writable docker.sock in a pod is root on the node"
    elif runtimes and runtimes <= CRI_RUNTIMES and must_exist:
        severity = Severity.HIGH
        where = (
            f"{'/'.join(sorted(runtimes))} nodes, where Docker does not run: with hostPath "
            f"type Socket the kubelet refuses to start the pod ({', '.join(must_exist)} does "
            "not exist), so the agent does not run on those nodes"
        )
    elif runtimes and runtimes <= CRI_RUNTIMES:
        severity = Severity.LOW
        where = f"{'/'.join(sorted(runtimes))} nodes, where Docker does not run"
    else:
        severity = Severity.LOW
        where = "nodes whose runtime the input does not say"
    return failed(
        template,
        f"mounts the Docker socket ({paths}) on {where}",
        path=f"{template.path}.volumes",
        severity=severity,
        fix={
            "subject": f"DaemonSet {daemonset.ref.namespace}/{daemonset.ref.name}",
            "body": _patch(template, {name for name, _, _ in volumes}),
        },
    )


def _patch(template: PodTemplate, volume_names: set[str]) -> str:
    """A strategic-merge patch that deletes the volumes and every mount of them ($patch:
    delete by the lists' merge keys: volumes by name, volumeMounts by mountPath)."""
    lines = ["volumes:"]
    lines.extend(f"  - {{name: {name}, $patch: delete}}" for name in sorted(volume_names))
    for section in ("initContainers", "containers"):
        entries = [
            (str(raw.get("name", "")), _mounts_of(raw, volume_names))
            for raw in map(as_mapping, as_list(template.spec.get(section)))
        ]
        entries = [(name, mounts) for name, mounts in entries if mounts]
        if not entries:
            continue
        lines.append(f"{section}:")
        for name, mounts in entries:
            lines.append(f"  - name: {name}")
            lines.append("    volumeMounts:")
            lines.extend(f'      - {{mountPath: "{m}", $patch: delete}}' for m in mounts)
    return "\n".join(lines)


def _mounts_of(container: Mapping[str, Any], volume_names: set[str]) -> list[str]:
    return sorted(
        str(m.get("mountPath", ""))
        for m in map(as_mapping, as_list(container.get("volumeMounts")))
        if str(m.get("name", "")) in volume_names
    )
