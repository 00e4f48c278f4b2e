"""GPU monitoring checks (GPU-MON-002/005) on cases the fixtures do not cover, with NVIDIA's
own manifests (../shared/upstream) as look-alike inputs."""

from __future__ import annotations

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    DCGM_EXPORTER_IMAGE,
    NFD_PCI_LABEL,
    Doc,
    container,
    daemonset,
    gpu_node,
    pod_spec,
    run_check_on,
    service,
    upstream_manifest,
    verdicts,
    verdicts_of,
)

# --------------------------------------------------------------------------- GPU-MON-005


def test_upstream_device_plugin_and_gfd_mount_no_docker_socket() -> None:
    node = gpu_node(
        "gpu-1", labels=NFD_PCI_LABEL, nodeInfo={"containerRuntimeVersion": "containerd://1.7.27"}
    )
    files = [
        upstream_manifest("k8s-device-plugin", "nvidia-device-plugin.yml"),
        upstream_manifest("k8s-device-plugin", "gpu-feature-discovery-daemonset.yaml"),
    ]
    assert verdicts(run_check_on("GPU-MON-005", [node], files=files)) == [
        ("DaemonSet default/gpu-feature-discovery", Outcome.PASS, None),
        ("DaemonSet kube-system/nvidia-device-plugin-daemonset", Outcome.PASS, None),
    ]


def test_docker_socket_with_unknown_runtime_is_low() -> None:
    spec = pod_spec(
        container(DCGM_EXPORTER_IMAGE, name="e", gpus=None),
        volumes=[{"name": "d", "hostPath": {"path": "/run/docker.sock"}}],
    )
    exporter = daemonset("dcgm-exporter", spec, namespace="monitoring", labels={"app": "x"})
    run = run_check_on("GPU-MON-005", [exporter])
    assert verdicts(run) == [("DaemonSet monitoring/dcgm-exporter", Outcome.FAIL, Severity.LOW)]
    assert "does not say" in run.findings[0].result.message


# --------------------------------------------------------------------------- GPU-MON-002


def test_ignore_namespace_selectors_keeps_cross_namespace_monitor_out() -> None:
    labels = {"app": "dcgm"}
    exporter = daemonset(
        "dcgm-exporter",
        pod_spec(container(DCGM_EXPORTER_IMAGE, name="e", gpus=None)),
        namespace="gpu",
        labels=labels,
    )
    metrics = service(
        "dcgm-exporter",
        "gpu",
        labels=labels,
        selector=labels,
        ports=[{"name": "metrics", "port": 9400}],
    )

    def monitor(namespace: str) -> Doc:
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "dcgm", "namespace": namespace},
            "spec": {
                "namespaceSelector": {"any": True},
                "selector": {"matchLabels": labels},
                "endpoints": [{"port": "metrics"}],
            },
        }

    prometheus = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "k8s", "namespace": "monitoring"},
        "spec": {
            "serviceMonitorSelector": {},
            "serviceMonitorNamespaceSelector": {},
            "ignoreNamespaceSelectors": True,
        },
    }
    objects = [exporter, metrics, monitor("gpu"), monitor("monitoring"), prometheus]
    # With ignoreNamespaceSelectors the monitor in `monitoring` only looks in `monitoring`.
    assert verdicts_of("GPU-MON-002", objects) == [
        ("DaemonSet gpu/dcgm-exporter", Outcome.PASS, None)
    ]
    prometheus["spec"] = {"serviceMonitorSelector": {}, "serviceMonitorNamespaceSelector": {}}
    assert verdicts_of("GPU-MON-002", objects) == [
        ("ServiceMonitor monitoring/dcgm", Outcome.FAIL, Severity.MEDIUM)
    ]
