"""Kueue: the shared reading of queues, quotas, priorities and Workload status
(gpu_audit.k8s.kueue) and the checks built on it (GPU-QUOTA-004 to 010)."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import pytest
import yaml

from gpu_audit.k8s.kueue import (
    KUEUE_WORKLOAD,
    BlockerKind,
    cohort_name,
    cohort_root,
    enabled_frameworks,
    queued_workloads,
    workload_blocker,
    workload_owner,
    workload_priority,
    workload_requests,
)
from gpu_audit.model import Outcome, Resource, Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import (
    VLLM_IMAGE,
    Doc,
    config_map,
    container,
    job,
    pod,
    pod_spec,
    pytorchjob,
    verdicts_of,
)

V2 = "kueue.x-k8s.io/v1beta2"
QUEUE = "kueue.x-k8s.io/queue-name"


def snapshot_of(*docs: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(docs))))


def the(snapshot: Snapshot, type_: str) -> Resource:
    (found,) = snapshot.of(type_)
    return found


def queued(doc: Doc, queue: str) -> Doc:
    doc["metadata"].setdefault("labels", {})[QUEUE] = queue
    return doc


def cluster_queue(
    name: str,
    gpus: int | str = 8,
    *,
    cohort: str = "",
    flavor: str = "default-flavor",
    api_version: str = V2,
    usage: tuple[int, int] | None = None,
    **spec: Any,
) -> Doc:
    """A ClusterQueue with one flavor covering nvidia.com/gpu; `usage` = (total, borrowed)."""
    quota: Doc = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    quota.update(spec.pop("quota", {}))
    body: Doc = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": flavor, "resources": [quota]}],
            }
        ],
        **spec,
    }
    if cohort:
        body["cohortName" if api_version == V2 else "cohort"] = cohort
    doc: Doc = {
        "apiVersion": api_version,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": body,
    }
    if usage is not None:
        total, borrowed = usage
        doc["status"] = {
            "flavorsUsage": [
                {
                    "name": flavor,
                    "resources": [
                        {"name": "nvidia.com/gpu", "total": str(total), "borrowed": str(borrowed)}
                    ],
                }
            ]
        }
    return doc


def local_queue(name: str, target: str, namespace: str = "ml") -> Doc:
    return {
        "apiVersion": V2,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": target},
    }


def workload(
    name: str,
    *,
    owner: tuple[str, str, str] = ("batch/v1", "Job", "train"),
    queue: str = "team",
    gpus: int = 1,
    count: int = 1,
    conditions: list[Doc] | None = None,
    namespace: str = "ml",
    image: str = "nvcr.io/nvidia/pytorch:24.08-py3",
    **status: Any,
) -> Doc:
    api_version, kind, owner_name = owner
    resources: Doc = {"requests": {"cpu": "1"}}
    if gpus:
        resources = {
            "requests": {"nvidia.com/gpu": str(gpus)},
            "limits": {"nvidia.com/gpu": str(gpus)},
        }
    return {
        "apiVersion": V2,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": api_version, "kind": kind, "name": owner_name, "controller": True}
            ],
        },
        "spec": {
            "active": True,
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "image": image, "resources": resources}]
                        }
                    },
                }
            ],
        },
        "status": {"conditions": conditions or [], **status},
    }


def cond(type_: str, status: str, reason: str = "", message: str = "") -> Doc:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def pending(message: str, reason: str = "Pending") -> list[Doc]:
    return [cond("QuotaReserved", "False", reason, message)]


# --------------------------------------------------------------------------- the shared module


@pytest.mark.parametrize(
    ("reason", "message", "kind"),
    [
        (
            "Pending",
            "couldn't assign flavors to pod set main: insufficient unused quota for "
            "nvidia.com/gpu in flavor a100, 4 more needed",
            BlockerKind.WAITS_FOR_QUOTA,
        ),
        # one flavor waits for quota, another does not tolerate: it waits
        (
            "Pending",
            "couldn't assign flavors to pod set main: insufficient unused quota for "
            "nvidia.com/gpu in flavor a100, 4 more needed, untolerated taint {gpu h100 "
            "NoSchedule <nil>} in flavor h100",
            BlockerKind.WAITS_FOR_QUOTA,
        ),
        # one pod set waits, the other can never fit: never admitted
        (
            "Pending",
            "couldn't assign flavors to pod set driver: insufficient unused quota for cpu in "
            "flavor default, 1 more needed; couldn't assign flavors to pod set workers: "
            "insufficient quota for nvidia.com/gpu in flavor default, previously considered "
            "podsets requests (0) + current podset request (16) > maximum capacity (8)",
            BlockerKind.EXCEEDS_QUOTA,
        ),
        (
            "Pending",
            "couldn't assign flavors to pod set master: resource nvidia.com/gpu unavailable in "
            "ClusterQueue",
            BlockerKind.UNCOVERED_RESOURCE,
        ),
        (
            "Pending",
            "couldn't assign flavors to pod set main: flavor h100 not found",
            BlockerKind.FLAVOR_NOT_FOUND,
        ),
        (
            "Pending",
            "couldn't assign flavors to pod set main: flavor a doesn't match node affinity",
            BlockerKind.NO_MATCHING_FLAVOR,
        ),
        ("Inadmissible", "LocalQueue team doesn't exist", BlockerKind.LOCAL_QUEUE_MISSING),
        (
            "Inadmissible",
            "LocalQueue team is terminating or missing",
            BlockerKind.LOCAL_QUEUE_MISSING,
        ),
        ("Misconfigured", "ClusterQueue gpu doesn't exist", BlockerKind.CLUSTER_QUEUE_MISSING),
        ("Inadmissible", "ClusterQueue gpu is inactive", BlockerKind.QUEUE_INACTIVE),
        ("Inadmissible", "LocalQueue team is stopped", BlockerKind.QUEUE_STOPPED),
        (
            "Waiting",
            "waiting for all admitted workloads to be in PodsReady condition",
            BlockerKind.WAITS_FOR_PODS_READY,
        ),
        # granular reasons (UnadmittedWorkloadsObservability) without a flavor message
        ("ExceedsMaxQuota", "", BlockerKind.EXCEEDS_QUOTA),
        (
            "PendingEvaluation",
            "Workload is pending evaluation in the scheduling queue",
            BlockerKind.EVALUATING,
        ),
        ("Pending", "something Kueue may say one day", BlockerKind.OTHER),
    ],
)
def test_workload_blocker_reads_the_quota_reserved_condition(
    reason: str, message: str, kind: BlockerKind
) -> None:
    snapshot = snapshot_of(workload("w", conditions=pending(message, reason)))
    blocker = workload_blocker(the(snapshot, KUEUE_WORKLOAD))
    assert blocker is not None
    assert blocker.kind is kind


def test_workload_blocker_is_none_unless_pending() -> None:
    admitted = workload("a", conditions=[cond("QuotaReserved", "True", "QuotaReserved")])
    finished = workload("f", conditions=[*pending("x"), cond("Finished", "True", "Succeeded")])
    inactive = workload("i", conditions=pending("x"))
    inactive["spec"]["active"] = False
    for doc in (admitted, finished, inactive):
        assert workload_blocker(the(snapshot_of(doc), KUEUE_WORKLOAD)) is None


def test_cohort_of_v1beta1_and_v1beta2_and_the_root_of_a_cohort_tree() -> None:
    cohorts = [
        {
            "apiVersion": V2,
            "kind": "Cohort",
            "metadata": {"name": "team-a"},
            "spec": {"parentName": "org"},
        },
        {
            "apiVersion": V2,
            "kind": "Cohort",
            "metadata": {"name": "org"},
            "spec": {"parentName": "team-a"},
        },
        {
            "apiVersion": V2,
            "kind": "Cohort",
            "metadata": {"name": "leaf"},
            "spec": {"parentName": "team-a"},
        },
    ]
    snapshot = snapshot_of(
        cluster_queue("new", cohort="leaf"),
        cluster_queue("old", cohort="leaf", api_version="kueue.x-k8s.io/v1beta1"),
        *cohorts,
    )
    assert [cohort_name(q) for q in snapshot.of("ClusterQueue.kueue.x-k8s.io")] == ["leaf", "leaf"]
    # a cycle (team-a <-> org) ends the walk instead of looping
    assert cohort_root(snapshot, "leaf") in ("team-a", "org")
    assert cohort_root(snapshot, "unknown") == "unknown"
    no_parent = snapshot_of(
        {
            "apiVersion": V2,
            "kind": "Cohort",
            "metadata": {"name": "x"},
            "spec": {"parentName": "root"},
        }
    )
    assert cohort_root(no_parent, "x") == "root"


def test_workload_priority_as_kueue_resolves_it() -> None:
    classes = [
        {
            "apiVersion": V2,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "urgent"},
            "value": 5000,
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "prod"},
            "value": 100,
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "d1"},
            "value": 7,
            "globalDefault": True,
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "d2"},
            "value": 3,
            "globalDefault": True,
        },
    ]
    labelled = job("labelled", labels=None)
    labelled["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "urgent"}
    missing = job("missing")
    missing["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "nope"}
    pod_class = job("pod-class", pod_spec(container(), priorityClassName="prod"))
    plain = job("plain")
    snapshot = snapshot_of(*classes, labelled, missing, pod_class, plain, workload("w"))
    jobs = {j.ref.name: j for j in snapshot.of("Job")}
    assert workload_priority(snapshot, jobs["labelled"]) == 5000
    assert workload_priority(snapshot, jobs["missing"]) is None
    assert workload_priority(snapshot, jobs["pod-class"]) == 100
    assert workload_priority(snapshot, jobs["plain"]) == 3  # the lowest globalDefault
    with_spec = workload("w2")
    with_spec["spec"]["priority"] = 42
    assert (
        workload_priority(snapshot_of(with_spec), the(snapshot_of(with_spec), KUEUE_WORKLOAD)) == 42
    )
    assert workload_priority(snapshot_of(plain), the(snapshot_of(plain), "Job")) == 0


def test_queued_workloads_follow_kueue_integrations_and_pod_groups() -> None:
    config = config_map(
        "kueue-manager-config",
        "kueue-system",
        {
            "controller_manager_config.yaml": yaml.safe_dump(
                {
                    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                    "kind": "Configuration",
                    "integrations": {"frameworks": ["batch/job", "pod"]},
                }
            )
        },
    )
    owned = pod("train-x1", labels={QUEUE: "team"})
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "gone", "controller": True}
    ]
    plain = pod("notebook", labels={QUEUE: "team"})
    docs = [
        config,
        queued(job("train"), "team"),
        queued(pytorchjob("ignored"), "team"),  # kubeflow.org/pytorchjob is not enabled
        owned,  # a Job's pod is admitted through its Job, even when the Job is not here
        plain,
        local_queue("team", "gpu"),
    ]
    snapshot = snapshot_of(*docs)
    assert enabled_frameworks(snapshot) == frozenset({"batch/job", "pod"})
    found = {str(q.resource.ref): q.cluster_queue for q in queued_workloads(snapshot)}
    assert found == {"Job ml/train": "gpu", "Pod ml/notebook": "gpu"}


def test_workload_requests_count_the_pods_kueue_admits_together() -> None:
    parallel = job("sweep", pod_spec(container(gpus=2)), parallelism=3)
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}},
        },
    }
    snapshot = snapshot_of(parallel, trainjob, workload("w", gpus=2, count=5))
    assert workload_requests(the(snapshot, "Job"))["nvidia.com/gpu"] == Decimal(6)
    assert workload_requests(the(snapshot, "TrainJob.trainer.kubeflow.org")) == {
        "nvidia.com/gpu": Decimal(32)
    }
    assert workload_requests(the(snapshot, KUEUE_WORKLOAD))["nvidia.com/gpu"] == Decimal(10)


def test_workload_owner_is_named_even_when_the_job_is_not_in_the_input() -> None:
    snapshot = snapshot_of(
        workload("w", owner=("kubeflow.org/v1", "PyTorchJob", "llama")),
        workload("orphan", owner=("", "", "")),
    )
    by_name = {w.ref.name: w for w in snapshot.of(KUEUE_WORKLOAD)}
    assert str(workload_owner(snapshot, by_name["w"]).ref) == "PyTorchJob ml/llama"
    assert workload_owner(snapshot, by_name["w"]).ref.kind == "PyTorchJob.kubeflow.org"
    assert workload_owner(snapshot, by_name["orphan"]).ref == by_name["orphan"].ref


# --------------------------------------------------------------------------- GPU-QUOTA-008


def test_pending_workload_of_a_job_the_static_checks_judge_is_left_to_them() -> None:
    message = "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue"
    docs = [
        cluster_queue("gpu"),
        local_queue("team", "gpu"),
        queued(job("train"), "team"),
        workload("w", conditions=pending(message)),
    ]
    assert verdicts_of("GPU-QUOTA-008", docs) == []
    # without the Job, the Workload is the only evidence: reported on the ClusterQueue
    assert verdicts_of("GPU-QUOTA-008", [d for d in docs if d["kind"] != "Job"]) == [
        ("ClusterQueue gpu", Outcome.FAIL, Severity.HIGH)
    ]


def test_waiting_for_quota_is_raised_only_by_eviction_history() -> None:
    message = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor default-flavor, 2 more needed"
    )
    base = [cluster_queue("gpu", 4), local_queue("team", "gpu")]
    first = workload("w", conditions=pending(message))
    assert verdicts_of("GPU-QUOTA-008", [*base, first]) == [
        ("ClusterQueue gpu", Outcome.FAIL, Severity.INFO)
    ]
    again = workload("w", conditions=pending(message), requeueState={"count": 1})
    assert verdicts_of("GPU-QUOTA-008", [*base, again]) == [
        ("ClusterQueue gpu", Outcome.FAIL, Severity.MEDIUM)
    ]
    cpu = workload("w", gpus=0, conditions=pending(message), requeueState={"count": 1})
    assert verdicts_of("GPU-QUOTA-008", [*base, cpu]) == [
        ("ClusterQueue gpu", Outcome.FAIL, Severity.LOW)
    ]


def test_quota_remediation_raises_the_flavor_quota_by_what_is_missing() -> None:
    from tests.builders import run_check_on

    message = (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor default-flavor, previously considered podsets requests (0) + current podset "
        "request (12) > maximum capacity (8)"
    )
    run = run_check_on(
        "GPU-QUOTA-008",
        [
            cluster_queue("gpu", 8),
            local_queue("team", "gpu"),
            workload("w", gpus=12, conditions=pending(message)),
        ],
    )
    (finding,) = run.findings
    command = finding.result.fix["command"]
    assert (
        '"path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota", "value": 12'
        in command
    )


def test_missing_cluster_queue_is_the_local_queues_when_the_job_is_elsewhere() -> None:
    docs = [
        local_queue("team", "gone"),
        workload("w", conditions=pending("ClusterQueue gone doesn't exist", "Inadmissible")),
    ]
    assert verdicts_of("GPU-QUOTA-008", docs) == [
        ("LocalQueue ml/team", Outcome.FAIL, Severity.HIGH)
    ]


# --------------------------------------------------------------------------- GPU-QUOTA-009


def admitted(*more: Doc) -> list[Doc]:
    return [
        cond("QuotaReserved", "True", "QuotaReserved"),
        cond("Admitted", "True", "Admitted"),
        *more,
    ]


def test_pods_ready_is_judged_only_where_kueue_tracks_it() -> None:
    untracked = workload("w", conditions=admitted())
    assert verdicts_of("GPU-QUOTA-009", [untracked]) == []
    not_ready = workload(
        "w",
        conditions=admitted(cond("PodsReady", "False", "WaitForRecovery")),
        requeueState={"count": 3},
    )
    assert verdicts_of("GPU-QUOTA-009", [not_ready]) == [
        ("Job ml/train", Outcome.FAIL, Severity.HIGH)
    ]
    cpu = workload(
        "w",
        gpus=0,
        conditions=admitted(cond("PodsReady", "False", "WaitForStart")),
        requeueState={"count": 3},
    )
    assert verdicts_of("GPU-QUOTA-009", [cpu]) == [("Job ml/train", Outcome.FAIL, Severity.LOW)]


def test_unschedulable_pods_of_the_admitted_job_raise_it_to_medium() -> None:
    stuck = pod("train-x1", pod_spec(container()))
    stuck["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
    ]
    stuck["status"] = {
        "phase": "Pending",
        "conditions": [
            cond(
                "PodScheduled",
                "False",
                "Unschedulable",
                "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            )
        ],
    }
    docs = [
        job("train"),
        stuck,
        workload("w", conditions=admitted(cond("PodsReady", "False", "WaitForStart"))),
    ]
    assert verdicts_of("GPU-QUOTA-009", docs) == [("Job ml/train", Outcome.FAIL, Severity.MEDIUM)]


# --------------------------------------------------------------------------- GPU-QUOTA-010


def serving(queue: str, namespace: str = "inference", **labels: str) -> Doc:
    doc: Doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"llm-{queue}",
            "namespace": namespace,
            "labels": {QUEUE: queue, **labels},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "llm"}},
            "template": {
                "metadata": {"labels": {"app": "llm"}},
                "spec": pod_spec(container(VLLM_IMAGE)),
            },
        },
    }
    return doc


def batch(queue: str, namespace: str = "research", **labels: str) -> Doc:
    doc = queued(pytorchjob(f"train-{queue}", namespace=namespace), queue)
    doc["metadata"]["labels"].update(labels)
    return doc


def cohort_pair(serving_queue: Doc, batch_queue: Doc) -> list[Doc]:
    return [
        serving_queue,
        batch_queue,
        local_queue("serving", serving_queue["metadata"]["name"], "inference"),
        local_queue("batch", batch_queue["metadata"]["name"], "research"),
        serving("serving"),
        batch("batch"),
    ]


def test_reclaim_never_is_low_without_evidence_and_medium_when_lent_now() -> None:
    config_only = cohort_pair(cluster_queue("s", cohort="pool"), cluster_queue("b", cohort="pool"))
    assert verdicts_of("GPU-QUOTA-010", config_only) == [
        ("ClusterQueue s", Outcome.FAIL, Severity.LOW)
    ]
    lent = cohort_pair(
        cluster_queue("s", cohort="pool", usage=(2, 0)),
        cluster_queue("b", cohort="pool", usage=(14, 6)),
    )
    assert verdicts_of("GPU-QUOTA-010", lent) == [("ClusterQueue s", Outcome.FAIL, Severity.MEDIUM)]


def test_v1beta1_cohort_and_cohort_trees_group_the_queues() -> None:
    v1 = "kueue.x-k8s.io/v1beta1"
    same = cohort_pair(
        cluster_queue("s", cohort="pool", api_version=v1),
        cluster_queue("b", cohort="pool", api_version=v1),
    )
    assert verdicts_of("GPU-QUOTA-010", same)[0][1] is Outcome.FAIL
    tree = [
        *cohort_pair(
            cluster_queue("s", cohort="serving-teams"), cluster_queue("b", cohort="batch-teams")
        ),
        {
            "apiVersion": V2,
            "kind": "Cohort",
            "metadata": {"name": "serving-teams"},
            "spec": {"parentName": "org"},
        },
        {
            "apiVersion": V2,
            "kind": "Cohort",
            "metadata": {"name": "batch-teams"},
            "spec": {"parentName": "org"},
        },
    ]
    assert verdicts_of("GPU-QUOTA-010", tree)[0][1] is Outcome.FAIL
    apart = cohort_pair(cluster_queue("s", cohort="one"), cluster_queue("b", cohort="two"))
    assert verdicts_of("GPU-QUOTA-010", apart) == [("ClusterQueue s", Outcome.PASS, None)]


def test_limits_that_stop_the_borrowing_pass() -> None:
    no_borrowing = cohort_pair(
        cluster_queue("s", cohort="pool"),
        cluster_queue("b", cohort="pool", quota={"borrowingLimit": 0}),
    )
    assert verdicts_of("GPU-QUOTA-010", no_borrowing) == [("ClusterQueue s", Outcome.PASS, None)]
    alone = [cluster_queue("s"), local_queue("serving", "s", "inference"), serving("serving")]
    assert verdicts_of("GPU-QUOTA-010", alone) == [("ClusterQueue s", Outcome.PASS, None)]


def test_lower_priority_needs_known_priorities() -> None:
    lower = {"reclaimWithinCohort": "LowerPriority"}
    unknown = cohort_pair(
        cluster_queue("s", cohort="pool", preemption=lower),
        cluster_queue("b", cohort="pool", usage=(16, 8)),
    )
    unknown[-1] = batch("batch", **{"kueue.x-k8s.io/priority-class": "not-in-input"})
    assert verdicts_of("GPU-QUOTA-010", unknown) == [("ClusterQueue s", Outcome.FAIL, Severity.LOW)]
    # both at the default priority 0: LowerPriority preempts nobody
    level = cohort_pair(
        cluster_queue("s", cohort="pool", preemption=lower), cluster_queue("b", cohort="pool")
    )
    assert verdicts_of("GPU-QUOTA-010", level) == [("ClusterQueue s", Outcome.FAIL, Severity.LOW)]
