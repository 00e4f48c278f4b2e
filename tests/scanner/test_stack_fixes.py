"""What GPU-MON-001 and GPU-NODE-001 share (gpu_audit.k8s.stack_fixes): the ClusterPolicy fix,
each check's words in both branches as the checks wrote them before they shared it (the
fixtures exercise only the taint branch), and the running GPU Operator that may be about to
deploy a missing agent (`operator_deployed`)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from gpu_audit.checks.monitoring import dcgm_exporter_on_every_gpu_node as mon001
from gpu_audit.checks.nodes import gpu_nodes_advertise_allocatable_gpus as node001
from gpu_audit.k8s.scheduling import Taint
from gpu_audit.model import Outcome, Resource, Severity
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import cluster_policy, container, deployment, pod_spec, verdicts_of

ROOT = Path(__file__).resolve().parents[2]

TAINT = Taint("pool", "a100", "NoSchedule")
PATCHED = (
    "kubectl patch clusterpolicy cluster-policy --type=merge -p "
    '\'{"spec": {"daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", '
    '"operator": "Exists"}, {"key": "pool", "operator": "Exists", '
    '"effect": "NoSchedule"}]}}}\''
)


def policy() -> Resource:
    doc = cluster_policy(
        daemonsets={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    )
    (loaded,) = load_files([STDIN], stdin=io.StringIO(yaml.safe_dump(doc))).all()
    return loaded


def test_a_taint_is_tolerated_through_the_policy_keeping_its_tolerations() -> None:
    for module in (mon001, node001):
        fix = module._policy_fix(policy(), [TAINT], "does not tolerate pool=a100:NoSchedule")
        assert fix == {
            "summary": "ClusterPolicy cluster-policy: let its operands tolerate the GPU nodes' "
            "taints (spec.daemonsets.tolerations)",
            "command": PATCHED,
        }
        patch = json.loads(fix["command"].split(" -p ", 1)[1].strip("'"))
        assert patch["spec"]["daemonsets"]["tolerations"][0] == {
            "key": "nvidia.com/gpu",
            "operator": "Exists",
        }


def test_without_a_taint_each_check_shows_the_labels_that_select_its_operand() -> None:
    why = "nodeSelector/affinity does not match the node labels"
    assert mon001._policy_fix(policy(), [], why) == {
        "summary": f"ClusterPolicy cluster-policy: its exporter {why}; check the nodes' "
        "nvidia.com/gpu.deploy.dcgm-exporter labels",
        "command": "kubectl get nodes -L nvidia.com/gpu.deploy.dcgm-exporter",
    }
    assert node001._policy_fix(policy(), [], why) == {
        "summary": f"ClusterPolicy cluster-policy: its device plugin {why}; check the nodes' "
        "nvidia.com/gpu.deploy.* labels and the operator's NFD labels",
        "command": "kubectl get nodes -L nvidia.com/gpu.deploy.device-plugin,"
        "feature.node.kubernetes.io/pci-10de.present",
    }


@pytest.mark.parametrize(
    ("check_id", "fixture", "without_operator"),
    [
        (
            "GPU-MON-001",
            "fail-no-exporter-nothing-expects-it.yaml",
            [("DaemonSet default/dcgm-exporter", Outcome.FAIL, Severity.LOW)],
        ),
        (
            "GPU-NODE-001",
            "fail-no-device-plugin-installed.yaml",
            [
                (
                    "DaemonSet nvidia-device-plugin/nvdp-nvidia-device-plugin",
                    Outcome.FAIL,
                    Severity.CRITICAL,
                )
            ],
        ),
    ],
)
def test_a_running_operator_is_not_told_to_install_the_agent(
    check_id: str, fixture: str, without_operator: list[tuple[str, Outcome, Severity]]
) -> None:
    path = ROOT / "fixtures" / "checks" / check_id / fixture
    objects = [d for d in yaml.safe_load_all(path.read_text()) if d]

    def running(image: str) -> dict[str, object]:
        spec = pod_spec(container(image, gpus=None))
        return deployment(image.rsplit("/", 1)[-1].split(":")[0], spec, namespace="gpu-operator")

    # Another Deployment changes nothing: the agent to install is the finding's object.
    assert verdicts_of(check_id, [*objects, running("nginx:1.27")]) == without_operator
    with_operator = verdicts_of(
        check_id, [*objects, running("nvcr.io/nvidia/gpu-operator:v25.10.0")]
    )
    assert [ref for ref, _, _ in with_operator if ref.startswith("DaemonSet")] == []
