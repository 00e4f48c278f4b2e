"""Findings name the object to change, with the objects that show the symptom in `related`:
GPU-NODE-001, GPU-MON-001, GPU-SHARE-001, GPU-SHARE-006, GPU-QUOTA-001 and GPU-NET-001 on their
fixtures (which objects and severities each produces is in the fixtures' expected.yaml; here,
what each finding relates, and with which role)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_audit.api import failed, relate
from gpu_audit.model import ObjRef, RelatedRef, RelatedRole, Resource, SourceLocation
from tests.builders import run_check_on

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checks"

Related = list[tuple[str, str]]


def related_of(check_id: str, fixture: str) -> dict[str, Related]:
    """Each finding of the check on the fixture: its object -> [(related object, role)]."""
    run = run_check_on(check_id, [], files=[FIXTURES / check_id / fixture])
    return {
        str(f.result.ref): [(str(r.ref), r.role.value) for r in f.result.related]
        for f in run.findings
    }


@pytest.mark.parametrize(
    ("check_id", "fixture", "expected"),
    [
        (
            "GPU-NODE-001",
            "fail-plugin-does-not-tolerate-gpu-taint.yaml",
            {
                "DaemonSet kube-system/nvidia-device-plugin-daemonset": [
                    ("Node l40s-new-1", "symptom"),
                    ("Node l40s-new-2", "symptom"),
                ],
                "Node gke-pool-l4-1": [],
            },
        ),
        (
            "GPU-NODE-001",
            "fail-operand-does-not-tolerate-pool-taint.yaml",
            {
                "ClusterPolicy cluster-policy": [
                    ("Node h100-1", "symptom"),
                    ("Node h100-2", "symptom"),
                    ("DaemonSet gpu-operator/nvidia-device-plugin-daemonset", "cause"),
                ]
            },
        ),
        (
            "GPU-MON-001",
            "fail-no-exporter-expected-by-monitors.yaml",
            {
                "DaemonSet default/dcgm-exporter": [
                    ("HorizontalPodAutoscaler serving/llm", "symptom"),
                    ("Node gpu-1", "symptom"),
                    ("Node gpu-2", "symptom"),
                    ("ServiceMonitor monitoring/dcgm-exporter", "symptom"),
                ]
            },
        ),
        (
            "GPU-SHARE-001",
            "fail-nvdp-config-map-in-default-no-gpus.yaml",
            {
                "ConfigMap default/time-slicing": [
                    ("Node gpu-a", "symptom"),
                    ("Node gpu-b", "symptom"),
                    ("DaemonSet nvidia-device-plugin/nvdp-nvidia-device-plugin", "owner"),
                ]
            },
        ),
        (
            "GPU-SHARE-006",
            "fail-config-map-edited-plugin-not-restarted.yaml",
            {
                "DaemonSet gpu-operator/nvidia-device-plugin-daemonset": [
                    ("Node gpu-t4-0", "symptom"),
                    ("ConfigMap gpu-operator/time-slicing-config", "selected-by"),
                    ("ClusterPolicy cluster-policy", "owner"),
                    ("DaemonSet gpu-operator/gpu-feature-discovery", "cause"),
                ]
            },
        ),
        (
            "GPU-QUOTA-001",
            "fail-bare-key-single-namespace.yaml",
            {
                "ResourceQuota research/team-quota": [
                    ("Job research/sweep", "symptom"),
                    ("Namespace research", "symptom"),
                ],
                "ResourceQuota sandbox/sandbox-quota": [],
            },
        ),
        (
            "GPU-NET-001",
            "fail-namespace-default-deny-many-workloads.yaml",
            {
                "NetworkPolicy research/default-deny-egress": [
                    ("Deployment research/downloader", "selected-by"),
                    ("Deployment research/notebook", "selected-by"),
                    ("Job research/pretrain", "selected-by"),
                    ("NetworkPolicy research/allow-https", "cause"),
                ]
            },
        ),
    ],
)
def test_the_finding_is_on_the_cause_with_its_victims_related(
    check_id: str, fixture: str, expected: dict[str, Related]
) -> None:
    assert related_of(check_id, fixture) == expected


def test_one_cause_is_one_finding_that_counts_its_victims() -> None:
    run = run_check_on(
        "GPU-NET-001",
        [],
        files=[FIXTURES / "GPU-NET-001" / "fail-namespace-default-deny-many-workloads.yaml"],
    )
    (finding,) = run.findings
    assert "isolates egress of 3 GPU workloads" in finding.result.message
    assert finding.remediation.startswith("# NetworkPolicy research/default-deny-egress:")
    assert "patch networkpolicy default-deny-egress" in finding.remediation
    assert '"path": "/spec/egress"' in finding.remediation  # it has no egress rule yet


def test_quota_fix_moves_the_value_to_the_counted_key() -> None:
    run = run_check_on(
        "GPU-QUOTA-001",
        [],
        files=[FIXTURES / "GPU-QUOTA-001" / "fail-bare-key-single-namespace.yaml"],
    )
    fixes = {str(f.result.ref): f.remediation for f in run.findings}
    assert (
        '[{"op": "remove", "path": "/spec/hard/nvidia.com~1gpu"}, '
        '{"op": "add", "path": "/spec/hard/requests.nvidia.com~1gpu", "value": "4"}]'
    ) in fixes["ResourceQuota research/team-quota"]


def test_failed_keeps_each_related_object_once_sorted_and_never_itself() -> None:
    node = Resource(ObjRef("Node", "", "n1"), "v1", {"kind": "Node"}, SourceLocation(""))
    ds_ref = ObjRef("DaemonSet", "ns", "plugin")
    ds = Resource(ds_ref, "apps/v1", {"kind": "DaemonSet"}, SourceLocation(""))
    policy = ObjRef("ClusterPolicy.nvidia.com", "", "cluster-policy")
    result = failed(
        ds,
        "cannot be placed",
        related=[
            relate(policy, "owner"),
            relate(node, RelatedRole.SYMPTOM),
            relate(node, "symptom"),
            relate(ds, RelatedRole.CAUSE),  # the finding's own object: dropped
        ],
    )
    assert result.related == (
        RelatedRef(node.ref, RelatedRole.SYMPTOM),
        RelatedRef(policy, RelatedRole.OWNER),
    )
    with pytest.raises(ValueError, match="unknown related role"):
        relate(node, "victim")
