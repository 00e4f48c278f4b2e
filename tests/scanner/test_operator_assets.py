"""The GPU Operator's asset templates (gpu_audit.k8s.operator_assets), on NVIDIA's own files
in ../shared/upstream/gpu-operator/assets: the operator fills in their namespace
("FILLED BY THE OPERATOR") and creates them itself, so a check does not judge them as written;
the same object in a real namespace is judged."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gpu_audit.engine import run_check
from gpu_audit.k8s.operator_assets import is_operator_asset_template
from gpu_audit.model import Outcome
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files
from tests.builders import run_check_on, upstream_manifest, verdicts

ASSETS = Path(__file__).resolve().parents[3] / "shared" / "upstream" / "gpu-operator" / "assets"
CHECKS = load_checks(plugins=False)


@pytest.mark.skipif(not ASSETS.is_dir(), reason=f"{ASSETS} is not present")
def test_every_asset_with_the_placeholder_namespace_is_a_template() -> None:
    resources = load_files([str(ASSETS)]).all()
    namespaced = [r for r in resources if "namespace" in r.metadata]
    assert len(namespaced) >= 80
    assert all(is_operator_asset_template(r) for r in namespaced)
    # A cluster-scoped asset whose name is the placeholder (the RuntimeClass) is one too;
    # one with a real name (a ClusterRole) is not marked.
    runtime_class = next(r for r in resources if r.ref.kind_name == "RuntimeClass")
    assert is_operator_asset_template(runtime_class)
    role = next(r for r in resources if r.ref.kind_name == "ClusterRole")
    assert not is_operator_asset_template(role)


@pytest.mark.skipif(not ASSETS.is_dir(), reason=f"{ASSETS} is not present")
def test_gpu_sec_002_leaves_the_assets_alone_and_judges_a_copy_in_a_real_namespace(
    tmp_path: Path,
) -> None:
    check = CHECKS["GPU-SEC-002"]
    run = run_check(check, load_files([str(ASSETS)]))
    assert not run.results
    # The VFIO manager's privileged containers, copied by a user into their namespace with
    # its placeholders left in: judged like any privileged DaemonSet.
    path = upstream_manifest("gpu-operator", "assets", "state-vfio-manager", "0500_daemonset.yaml")
    doc = copy.deepcopy(yaml.safe_load(path.read_text(encoding="utf-8")))
    doc["metadata"]["namespace"] = "ml"
    copied = tmp_path / "copied.yaml"
    copied.write_text(yaml.safe_dump(doc), encoding="utf-8")
    results = run_check(check, load_files([str(copied)])).results
    assert results and {r.outcome for r in results} == {Outcome.FAIL}


TEMPLATE = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: nvidia-vfio-manager, namespace: "NAMESPACE"}
spec:
  selector: {matchLabels: {app: nvidia-vfio-manager}}
  template:
    metadata: {labels: {app: nvidia-vfio-manager}}
    spec:
      containers:
        - name: nvidia-vfio-manager
          image: "FILLED BY THE OPERATOR"
          securityContext: {privileged: true}
      volumes:
        - {name: host-root, hostPath: {path: /}}
"""


@pytest.mark.parametrize("placeholder", ["FILLED BY THE OPERATOR", "FILLED_BY_THE_OPERATOR"])
def test_a_template_is_not_judged_and_the_same_object_in_a_namespace_is(placeholder: str) -> None:
    assert run_check_on("GPU-SEC-002", TEMPLATE.replace("NAMESPACE", placeholder)).results == ()
    judged = verdicts(run_check_on("GPU-SEC-002", TEMPLATE.replace("NAMESPACE", "filled-by-ml")))
    assert judged and all(outcome is Outcome.FAIL for _, outcome, _ in judged)
