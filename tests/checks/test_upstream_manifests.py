"""Every check against real manifests no one on this project wrote: NVIDIA's device plugin and
GPU Operator (../shared/upstream, read at test time, never copied here).

The GPU Operator's assets are templates: the operator fills in the namespace and the images at
run time. They are scanned the way the operator deploys them (`render_operand`), with the images
of the upstream Helm chart's values.yaml. Each file's findings are compared with the list below,
which was reviewed finding by finding (see the reasons next to them): a new finding on these
files is a false positive until proven otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.engine import run_checks
from gpu_audit.errors import InputError
from gpu_audit.model import CheckStatus
from gpu_audit.registry import load_checks
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import load_files

UPSTREAM = Path(__file__).resolve().parents[3] / "shared" / "upstream"
OPERATOR_ASSETS = UPSTREAM / "gpu-operator" / "assets"
CHECKS = load_checks(plugins=False)

pytestmark = pytest.mark.skipif(not UPSTREAM.is_dir(), reason=f"{UPSTREAM} is not present")

PLACEHOLDERS = ("FILLED BY THE OPERATOR", "FILLED BY OPERATOR")
OPERATOR_NAMESPACE = "gpu-operator"
# Images from the chart's values.yaml (validator, node-status-exporter and the validation init
# containers run the operator image; the driver manager image also runs the VFIO manager).
VALIDATOR = "nvcr.io/nvidia/gpu-operator:v25.10.0"
DRIVER_MANAGER = "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0"
DEVICE_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
STATE_IMAGES = {
    "gpu-feature-discovery": DEVICE_PLUGIN,
    "state-device-plugin": DEVICE_PLUGIN,
    "state-mps-control-daemon": DEVICE_PLUGIN,
    "state-dcgm": "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04",
    "state-dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
    "state-driver": "nvcr.io/nvidia/driver:595.91.07",
    "state-container-toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0",
    "state-mig-manager": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0",
    "state-operator-validation": VALIDATOR,
    "state-node-status-exporter": VALIDATOR,
    "state-sandbox-validation": VALIDATOR,
    "state-vgpu-manager": "nvcr.io/nvidia/vgpu-manager:595.91.07",
    "state-vgpu-device-manager": "nvcr.io/nvidia/cloud-native/vgpu-device-manager:v0.5.0",
    "state-sandbox-device-plugin": "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.6.0",
    "state-kata-device-plugin": "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.6.0",
    "state-vfio-manager": DRIVER_MANAGER,
    "state-cc-manager": "nvcr.io/nvidia/cloud-native/k8s-cc-manager:v0.4.3",
    "state-kata-manager": "nvcr.io/nvidia/cloud-native/k8s-kata-manager:v0.2.3",
}
CONTAINER_IMAGES = {
    "k8s-driver-manager": DRIVER_MANAGER,
    "nvidia-fs-ctr": "nvcr.io/nvidia/cloud-native/nvidia-fs:2.29.4",
    "nvidia-gdrcopy-ctr": "nvcr.io/nvidia/cloud-native/gdrdrv:v2.6",
}
# Only on OpenShift, with an image from OpenShift's registry; the operator drops it elsewhere.
OPENSHIFT_ONLY = frozenset({"openshift-driver-toolkit-ctr"})


def _image_for(state: str, container: str) -> str:
    if container in CONTAINER_IMAGES:
        return CONTAINER_IMAGES[container]
    if "validation" in container or container.endswith("-validator"):
        return VALIDATOR
    return STATE_IMAGES[state]


def _render(node: Any, state: str) -> Any:
    """The object as the operator creates it on Kubernetes (not OpenShift)."""
    node = copy.deepcopy(node)
    metadata = node.get("metadata") or {}
    if metadata.get("namespace") in PLACEHOLDERS:
        metadata["namespace"] = OPERATOR_NAMESPACE
    selector = (node.get("spec") or {}).get("namespaceSelector") or {}
    if "matchNames" in selector:  # the operator's ServiceMonitors watch its own namespace
        names = selector["matchNames"]
        selector["matchNames"] = [OPERATOR_NAMESPACE if n in PLACEHOLDERS else n for n in names]
    spec = ((node.get("spec") or {}).get("template") or {}).get("spec") or {}
    for section in ("initContainers", "containers"):
        kept = [c for c in spec.get(section) or [] if c.get("name") not in OPENSHIFT_ONLY]
        for container in kept:
            if container.get("image") in PLACEHOLDERS:
                container["image"] = _image_for(state, container["name"])
        if section in spec:
            spec[section] = kept
    return node


def load(path: Path, work: Path) -> Snapshot:
    """The upstream file as it is, or an operator asset rendered into `work`."""
    if not path.is_relative_to(OPERATOR_ASSETS):
        return load_files([str(path)])
    state = path.relative_to(OPERATOR_ASSETS).parts[0]
    text = path.read_text(encoding="utf-8")
    rendered = work / state / path.name
    rendered.parent.mkdir(parents=True, exist_ok=True)
    docs = [_render(doc, state) for doc in yaml.safe_load_all(text) if doc]
    rendered.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return load_files([str(rendered)])


def findings(path: Path, work: Path) -> set[tuple[str, str]]:
    """(check id, message) of every finding; no check may raise on real input."""
    runs = run_checks(CHECKS.values(), load(path, work))
    errors = [f"{r.check.id}: {r.error_detail}" for r in runs if r.status is CheckStatus.ERROR]
    assert not errors, errors
    return {(r.check.id, f.result.message) for r in runs for f in r.findings}


def upstream_files() -> Iterator[Path]:
    for path in sorted(UPSTREAM.rglob("*")):
        if path.is_file() and path.suffix in (".yaml", ".yml") and path.name != "values.yaml":
            yield path


# --------------------------------------------------------------------------- expected findings

NO_CRITICAL_PRIORITY = (
    "runs an NVIDIA node agent without priorityClassName system-node-critical, so it can be "
    "evicted or preempted before higher-priority pods on its nodes"
)
# Upstream's static GFD DaemonSets set no priority class (the plugin's and the operator's do).
GFD_STATIC = {("GPU-STACK-010", f"DaemonSet default/gpu-feature-discovery {NO_CRITICAL_PRIORITY}")}

EXPECTED: dict[str, set[tuple[str, str]]] = {
    "k8s-device-plugin/gpu-feature-discovery-daemonset.yaml": GFD_STATIC,
    "k8s-device-plugin/gpu-feature-discovery-daemonset-with-mig-single.yaml": GFD_STATIC,
    "k8s-device-plugin/gpu-feature-discovery-daemonset-with-mig-mixed.yaml": GFD_STATIC,
}


def test_every_upstream_file_is_covered() -> None:
    files = list(upstream_files())
    assert len(files) > 100, f"expected the upstream manifests under {UPSTREAM}"


@pytest.mark.parametrize("path", list(upstream_files()), ids=lambda p: str(p.relative_to(UPSTREAM)))
def test_upstream_file_has_exactly_the_reviewed_findings(path: Path, tmp_path: Path) -> None:
    name = str(path.relative_to(UPSTREAM))
    assert findings(path, tmp_path) == EXPECTED.get(name, set())


@pytest.mark.parametrize("name", ["gpu-operator/values.yaml", "k8s-device-plugin/values.yaml"])
def test_helm_values_are_rejected_as_input_naming_the_file(name: str) -> None:
    # Chart values are not Kubernetes objects: a clear input error, never a scan of nothing.
    with pytest.raises(InputError) as info:
        load_files([str(UPSTREAM / name)])
    assert info.value.problems == (f"{UPSTREAM / name}: document 1: missing kind",)


def test_the_device_plugin_manifest_passes_the_checks_that_evaluate_it(tmp_path: Path) -> None:
    manifest = UPSTREAM / "k8s-device-plugin" / "nvidia-device-plugin.yml"
    runs = run_checks(CHECKS.values(), load(manifest, tmp_path))
    passed = {r.check.id for r in runs if r.status is CheckStatus.PASSED}
    # Priority, valid strategies and no Docker socket: evaluated, and fine.
    assert {"GPU-STACK-010", "GPU-SHARE-008", "GPU-MON-005"} <= passed


def test_the_operator_assets_together_are_a_consistent_cluster(tmp_path: Path) -> None:
    """All rendered operands in one scan: the cross-object checks (ServiceMonitor -> Service
    ports, one exporter per node, ...) find nothing wrong in NVIDIA's own deployment."""
    assets = [p for p in upstream_files() if p.is_relative_to(OPERATOR_ASSETS)]
    for path in assets:
        load(path, tmp_path)
    runs = run_checks(CHECKS.values(), load_files([str(tmp_path)]))
    assert [f.result.message for r in runs for f in r.findings] == []
    statuses = {r.check.id: r.status for r in runs}
    assert statuses["GPU-MON-003"] is CheckStatus.PASSED
    assert statuses["GPU-MON-006"] is CheckStatus.PASSED
