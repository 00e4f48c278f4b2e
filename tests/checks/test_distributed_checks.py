"""Distributed training checks (GPU-DIST-001/003/005) on cases the fixtures do not cover."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    Doc,
    container,
    deployment,
    job,
    pod_spec,
    pytorchjob,
    run_check_on,
    service,
    verdicts,
    verdicts_of,
)

# --------------------------------------------------------------------------- GPU-DIST-001


def _training_operator(*args: str) -> Doc:
    manager = container(
        "kubeflow/training-operator:v1-855e096",
        name="manager",
        gpus=None,
        command=["/manager", *args],
    )
    return deployment("training-operator", pod_spec(manager), namespace="kubeflow")


def test_operator_gang_flag_gangs_every_job_and_checks_the_minimum() -> None:
    objects = [
        _training_operator("--gang-scheduler-name=volcano"),
        pytorchjob("plain", workers=3),
        pytorchjob("too-big", workers=1, runPolicy={"schedulingPolicy": {"minAvailable": 5}}),
        pytorchjob("partial", workers=3, runPolicy={"schedulingPolicy": {"minAvailable": 2}}),
    ]
    assert verdicts_of("GPU-DIST-001", objects) == [
        ("PyTorchJob ml/partial", Outcome.FAIL, Severity.MEDIUM),
        ("PyTorchJob ml/plain", Outcome.PASS, None),
        ("PyTorchJob ml/too-big", Outcome.FAIL, Severity.HIGH),
    ]


def test_native_workload_ref_is_gang_scheduling() -> None:
    def gang_job(name: str, workload: str) -> Doc:
        ref = {"name": workload, "podGroup": "all"}
        return pytorchjob(name, spec=pod_spec(container(gpus=8), workloadRef=ref))

    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"podGroups": [{"name": "all", "policy": {"gang": {"minCount": 2}}}]},
    }
    objects = [workload, gang_job("ok", "train"), gang_job("dangling", "missing")]
    assert verdicts_of("GPU-DIST-001", objects) == [
        ("PyTorchJob ml/dangling", Outcome.FAIL, Severity.HIGH),
        ("PyTorchJob ml/ok", Outcome.PASS, None),
    ]


# --------------------------------------------------------------------------- GPU-DIST-003


def _trainer(master: str, namespace: str = "ml", **spec: Any) -> Doc:
    """The Job `trainer` whose container has MASTER_ADDR=`master`; `spec` are pod spec fields."""
    env = [{"name": "MASTER_ADDR", "value": master}]
    return job("trainer", pod_spec(container(env=env), **spec), namespace=namespace)


def test_rendezvous_service_cases() -> None:
    external = [service("store", type="ExternalName"), _trainer("store")]
    assert verdicts_of("GPU-DIST-003", external) == [("Job ml/trainer", Outcome.PASS, None)]
    other_ns = run_check_on(
        "GPU-DIST-003",
        [
            service("store", "infra", selector={"batch.kubernetes.io/job-name": "trainer"}),
            _trainer("store.infra"),
        ],
    )
    assert verdicts(other_ns) == [("Job ml/trainer", Outcome.FAIL, Severity.HIGH)]
    assert "can only select pods of namespace infra" in other_ns.results[0].message
    unresolved = [service("x"), _trainer("$(UNKNOWN)-0.trainer")]
    assert run_check_on("GPU-DIST-003", unresolved).results == ()


@pytest.mark.parametrize(
    ("master", "outcome", "severity"),
    [
        ("trainer-999999999999.trainer", Outcome.PASS, None),  # within completions
        ("trainer-1000000000000.trainer", Outcome.FAIL, Severity.HIGH),  # one past the last index
        ("trainer-01.trainer", Outcome.FAIL, Severity.HIGH),  # pods are named without leading zeros
        (
            "trainer-" + "9" * 5000 + ".trainer",
            Outcome.FAIL,
            Severity.HIGH,
        ),  # no int() of 5,000 digits
    ],
)
def test_indexed_job_hostnames_are_parsed_not_enumerated(
    master: str, outcome: Outcome, severity: Severity | None
) -> None:
    """completions can be any number: a set of a trillion pod names would never finish (the
    fuzzer found this as an out-of-memory kill)."""
    trainer = _trainer(master, subdomain="trainer")
    trainer["spec"].update(completionMode="Indexed", completions=10**12, parallelism=2)
    headless = service(
        "trainer", clusterIP="None", selector={"batch.kubernetes.io/job-name": "trainer"}
    )
    assert verdicts_of("GPU-DIST-003", [headless, trainer]) == [
        ("Job ml/trainer", outcome, severity)
    ]


# --------------------------------------------------------------------------- GPU-DIST-005


def test_generic_ephemeral_and_read_only_claims_are_not_durable() -> None:
    mounts = [{"name": "scratch", "mountPath": "/ckpt"}, {"name": "data", "mountPath": "/data"}]
    volumes = [
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d", "readOnly": True}},
    ]
    env = [{"name": "MASTER_ADDR", "value": "localhost"}]
    spot = pod_spec(
        container(env=env, volumeMounts=mounts),
        nodeSelector={"eks.amazonaws.com/capacityType": "SPOT"},
        terminationGracePeriodSeconds=120,
        volumes=volumes,
    )
    # Medium: the spot opt-in is the evidence; high needs a pod already disrupted.
    assert verdicts_of("GPU-DIST-005", [job("trainer", spot)]) == [
        ("Job ml/trainer", Outcome.FAIL, Severity.MEDIUM)
    ]
