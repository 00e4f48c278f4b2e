from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gpu_audit.k8s.gpu_hosts import is_gpu_node
from gpu_audit.k8s.pods import pod_templates, pods_on_node
from gpu_audit.k8s.quantities import (
    QuantityError,
    parse_quantity,
)
from gpu_audit.k8s.scheduling import (
    Taint,
    node_affinity_matches,
    schedules_on,
    tolerates,
    untolerated_taints,
)
from gpu_audit.k8s.selectors import (
    label_selector_matches,
    select,
)
from gpu_audit.model import ObjRef, Resource, SourceLocation
from gpu_audit.snapshot import Snapshot


def res(kind: str, name: str, ns: str = "", api: str = "v1", **body: Any) -> Resource:
    raw = {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, **body.pop("metadata", {})},
        **body,
    }
    if ns:
        raw["metadata"]["namespace"] = ns
    return Resource(ObjRef(kind, ns, name), api, raw, SourceLocation("test.yaml"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1),
        ("1", 1),
        ("1000m", 1),
        ("0.5", Decimal("0.5")),
        ("500m", Decimal("0.5")),
        ("1Gi", 2**30),
        ("2k", 2000),
        ("1e3", 1000),
        (2.0, 2),
        ("+3", 3),
    ],
)
def test_parse_quantity(value: object, expected: Decimal | int) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "value",
    # 1e28 and 2^63 are past any int64 quantity (the fuzzer found 1e28 % 1 raising in checks)
    ["abc", "", "1.2.3", "1Gb", None, True, [1], {"a": 1}, 1e28, 2**63, "9Ei", "1e400"],
)
def test_parse_quantity_rejects(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            Taint("nvidia.com/gpu", "", "NoSchedule"),
            True,
        ),
        (
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            Taint("nvidia.com/gpu", "true", "NoExecute"),
            True,
        ),
        ({"operator": "Exists"}, Taint("anything", "x", "NoSchedule"), True),
        (
            {"key": "nvidia.com/gpu", "value": "true"},
            Taint("nvidia.com/gpu", "true", "NoSchedule"),
            True,
        ),
        (
            {"key": "nvidia.com/gpu", "value": "false"},
            Taint("nvidia.com/gpu", "true", "NoSchedule"),
            False,
        ),
        (
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
            Taint("nvidia.com/gpu", "", "NoSchedule"),
            False,
        ),
        ({"key": "other", "operator": "Exists"}, Taint("nvidia.com/gpu", "", "NoSchedule"), False),
    ],
)
def test_tolerates(toleration: dict[str, str], taint: Taint, expected: bool) -> None:
    assert tolerates([toleration], taint) is expected


def gpu_node(
    name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None
) -> Resource:
    return res("Node", name, metadata={"labels": labels}, spec={"taints": taints or []})


def test_node_affinity_and_selector() -> None:
    node = gpu_node(
        "n1", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["NVIDIA-H100-80GB-HBM3"],
                            }
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}
                        ]
                    },
                ]
            }
        }
    }
    assert node_affinity_matches({"affinity": affinity}, node)  # terms are ORed
    assert not node_affinity_matches({"nodeSelector": {"nvidia.com/gpu.count": "4"}}, node)
    assert node_affinity_matches(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                                ]
                            }
                        ]
                    }
                }
            }
        },
        node,
    )


def test_schedules_on_respects_taints() -> None:
    node = gpu_node(
        "n1",
        {},
        [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"},
        ],
    )
    assert untolerated_taints({}, node) == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert schedules_on({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, node)
    assert not schedules_on({}, node)


def test_label_selectors_and_index() -> None:
    svc = res(
        "Service", "dcgm", "gpu-operator", metadata={"labels": {"app": "nvidia-dcgm-exporter"}}
    )
    other = res("Service", "x", "other", metadata={"labels": {"app": "nvidia-dcgm-exporter"}})
    snap = Snapshot([svc, other])
    assert select(
        snap, "Service", "gpu-operator", {"matchLabels": {"app": "nvidia-dcgm-exporter"}}
    ) == (svc,)
    assert select(
        snap, "Service", None, {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    ) == (svc, other)
    assert not label_selector_matches(
        {
            "matchExpressions": [
                {"key": "app", "operator": "NotIn", "values": ["nvidia-dcgm-exporter"]}
            ]
        },
        svc.labels,
    )
    assert label_selector_matches({}, {})


def test_gpu_node_detection_without_capacity() -> None:
    assert is_gpu_node(gpu_node("a", {"feature.node.kubernetes.io/pci-10de.present": "true"}))
    assert is_gpu_node(res("Node", "b", status={"capacity": {"nvidia.com/gpu": "8"}}))
    assert not is_gpu_node(
        res("Node", "c", status={"capacity": {"nvidia.com/gpu": "0", "cpu": "8"}})
    )
    assert not is_gpu_node(gpu_node("d", {"kubernetes.io/os": "linux"}))


def _owned(
    kind: str, name: str, owner_kind: str, owner: str, api: str = "apps/v1", **body: Any
) -> Resource:
    refs = [{"apiVersion": api, "kind": owner_kind, "name": owner, "controller": True, "uid": "u"}]
    return res(
        kind,
        name,
        "ml",
        api="apps/v1" if kind != "Pod" else "v1",
        metadata={"ownerReferences": refs},
        **body,
    )


POD_SPEC = {
    "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
}


def test_pod_templates_report_the_topmost_controller_present() -> None:
    deploy = res("Deployment", "web", "ml", api="apps/v1", spec={"template": {"spec": POD_SPEC}})
    rs = _owned("ReplicaSet", "web-abc", "Deployment", "web", spec={"template": {"spec": POD_SPEC}})
    pod = _owned("Pod", "web-abc-1", "ReplicaSet", "web-abc", spec=POD_SPEC)
    orphan = _owned("Pod", "lost-1", "ReplicaSet", "gone", spec=POD_SPEC)
    templates = list(pod_templates(Snapshot([deploy, rs, pod, orphan])))
    assert sorted((t.owner.ref.kind, t.owner.ref.name, t.path) for t in templates) == [
        ("Deployment", "web", "spec.template.spec"),
        ("Pod", "lost-1", "spec"),
    ]


def test_pod_templates_of_cronjobs_and_training_jobs() -> None:
    cron = res(
        "CronJob",
        "nightly",
        "ml",
        api="batch/v1",
        spec={"jobTemplate": {"spec": {"template": {"spec": POD_SPEC}}}},
    )
    ptj = res(
        "PyTorchJob.kubeflow.org",
        "ddp",
        "ml",
        api="kubeflow.org/v1",
        spec={
            "pytorchReplicaSpecs": {
                "Worker": {"template": {"spec": POD_SPEC}},
                "Master": {"template": {"spec": POD_SPEC}},
            }
        },
    )
    found = [
        (t.owner.ref.name, t.path, t.replica_type) for t in pod_templates(Snapshot([cron, ptj]))
    ]
    assert found == [
        ("nightly", "spec.jobTemplate.spec.template.spec", ""),
        ("ddp", "spec.pytorchReplicaSpecs.Master.template.spec", "Master"),
        ("ddp", "spec.pytorchReplicaSpecs.Worker.template.spec", "Worker"),
    ]
    container = next(iter(pod_templates(Snapshot([cron])))).containers()[0]
    assert container.gpu_resource_names() == ("nvidia.com/gpu",)
    assert container.gpu_quantity("nvidia.com/gpu") == 1


def test_pods_on_node_are_the_pods_bound_to_it_in_snapshot_order() -> None:
    """Whatever their phase (each check filters its own), not the unbound ones; a nodeName
    that is not a string (a field the loader warns about) binds by its text, as
    diagnostics.fit.node_name_of reads it."""
    pods = [
        res("Pod", "a", "ml", spec={"nodeName": "gpu-1"}, status={"phase": "Running"}),
        res("Pod", "b", "ml", spec={}, status={"phase": "Pending"}),
        res("Pod", "c", "ml", spec={"nodeName": "gpu-2"}, status={"phase": "Running"}),
        res("Pod", "d", "ml", spec={"nodeName": "gpu-1"}, status={"phase": "Succeeded"}),
        res("Pod", "e", "ml", spec={"nodeName": 7}, status={"phase": "Running"}),
        res("Pod", "f", "ml", spec={"nodeName": ""}, status={"phase": "Pending"}),
    ]
    snapshot = Snapshot([res("Node", "gpu-1"), *pods])
    assert [p.ref.name for p in pods_on_node(snapshot, "gpu-1")] == ["a", "d"]
    assert [p.ref.name for p in pods_on_node(snapshot, "gpu-2")] == ["c"]
    assert [p.ref.name for p in pods_on_node(snapshot, "7")] == ["e"]
    assert pods_on_node(snapshot, "") == () and pods_on_node(snapshot, "cpu-1") == ()
