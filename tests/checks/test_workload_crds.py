"""JobSet and LeaderWorkerSet: their pod templates go through the same walk as every other
workload (gpu_audit.k8s.pods), so a pod-spec problem gives the same finding, with the same
check and severity, in a Deployment or Job and in the custom resource; the finding names the
custom resource (the object to change), never the Jobs, StatefulSets or Pods it creates.

Also the DNS these controllers set up (GPU-DIST-003) and what Kueue sees of them."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpu_audit.api import pod_templates, templates_of
from gpu_audit.engine import run_check
from gpu_audit.model import Outcome, Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import (
    Doc,
    checks,
    container,
    deployment,
    job,
    pod,
    pod_spec,
    run_check_on,
    service,
    verdicts,
)
from tests.json_patch import remediated

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
LWS_API = "leaderworkerset.x-k8s.io/v1"


def jobset(
    name: str,
    *replicated: Doc,
    namespace: str = "ml",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Doc:
    """A JobSet of `replicated` jobs (built with `replicated_job`)."""
    metadata: Doc = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {"replicatedJobs": list(replicated), **spec},
    }


def replicated_job(
    name: str, spec: Doc, *, replicas: int = 1, parallelism: int = 1, **job_spec: Any
) -> Doc:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "template": {"spec": {"restartPolicy": "OnFailure", **spec}},
                **job_spec,
            }
        },
    }


def leader_worker_set(
    name: str,
    worker: Doc,
    leader: Doc | None = None,
    *,
    size: int = 2,
    replicas: int = 1,
    namespace: str = "ml",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Doc:
    group: Doc = {"size": size, "workerTemplate": {"spec": worker}}
    if leader is not None:
        group["leaderTemplate"] = {"spec": leader}
    metadata: Doc = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": metadata,
        "spec": {"replicas": replicas, "leaderWorkerTemplate": group, **spec},
    }


def snapshot_of(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


# A CPU-only container: the other template of a two-template object, judged by none of the
# checks below.
IDLE = pod_spec(container("busybox:1.36", name="idle", gpus=None))

# The same pod spec in every kind that carries pod templates. The LeaderWorkerSet is tried
# with the problem in its worker template (which also makes the leader when there is no
# leaderTemplate) and in its leaderTemplate.
WRAPPERS: dict[str, tuple[str, Callable[[Doc], Doc]]] = {
    "deployment": ("Deployment", lambda spec: deployment("w", spec)),
    "job": ("Job", lambda spec: job("w", spec)),
    "lws-worker": ("LeaderWorkerSet", lambda spec: leader_worker_set("w", spec)),
    "lws-leader": ("LeaderWorkerSet", lambda spec: leader_worker_set("w", IDLE, spec)),
    "jobset": ("JobSet", lambda spec: jobset("w", replicated_job("workers", spec))),
}

TOKEN = "hf_" + "Zq8Wx2Lm" * 5  # a Hugging Face token shape, not a real one
PROBLEMS: dict[str, tuple[str, Doc]] = {
    # A GPU request without a limit: the API server (or, for a custom resource, every pod
    # its controller creates) is refused.
    "gpu-request-without-limit": (
        "GPU-WL-001",
        pod_spec(
            {
                "name": "train",
                "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                "resources": {"requests": {"nvidia.com/gpu": 1}},
            }
        ),
    ),
    # Eight NCCL ranks in one pod on the 64 MiB default /dev/shm.
    "no-dev-shm-multi-gpu-nccl": (
        "GPU-WL-003",
        pod_spec(
            container(
                name="train",
                gpus=8,
                command=["torchrun", "--nproc_per_node=8", "train.py"],
                env=[{"name": "NCCL_DEBUG", "value": "INFO"}],
            )
        ),
    ),
    # A literal Hugging Face token on the command line.
    "literal-token-in-args": (
        "GPU-SEC-001",
        pod_spec(
            container(
                "vllm/vllm-openai:v0.8.5",
                name="server",
                args=["--model", "meta-llama/Llama-3.1-8B-Instruct", f"--hf-token={TOKEN}"],
            )
        ),
    ),
}


def findings(check_id: str, obj: Doc) -> list[tuple[str, str, Severity]]:
    run = run_check_on(check_id, [obj])
    return [(f.result.ref.kind_name, f.result.ref.name, f.severity) for f in run.findings]


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_the_same_pod_spec_problem_is_the_same_finding_on_the_custom_resource(
    problem: str,
) -> None:
    check_id, spec = PROBLEMS[problem]
    found = {wrapper: findings(check_id, build(spec)) for wrapper, (_, build) in WRAPPERS.items()}
    baseline = found["deployment"]
    assert baseline, f"{check_id} finds nothing in a Deployment"
    assert found["job"] == [("Job", "w", s) for _, _, s in baseline]
    for wrapper, (kind, _) in WRAPPERS.items():
        # One finding per finding of the Deployment, at the same severity, on the CR itself.
        assert found[wrapper] == [(kind, "w", s) for _, _, s in baseline], wrapper


def test_templates_are_named_by_their_role_and_located_in_the_object() -> None:
    shared = leader_worker_set("vllm", pod_spec(container(gpus=8)))
    two = leader_worker_set("vllm", pod_spec(container(gpus=8)), pod_spec(container(gpus=8)))
    train = jobset(
        "train",
        replicated_job("driver", pod_spec(container(gpus=None))),
        replicated_job("workers", pod_spec(container(gpus=8)), replicas=4),
    )
    snapshot = snapshot_of(shared)
    (lws,) = snapshot.of("LeaderWorkerSet.leaderworkerset.x-k8s.io")
    # Without a leaderTemplate the worker template also makes the leader: reported once.
    assert [(t.replica_type, t.path) for t in templates_of(lws)] == [
        ("worker", "spec.leaderWorkerTemplate.workerTemplate.spec")
    ]
    (lws,) = snapshot_of(two).of("LeaderWorkerSet.leaderworkerset.x-k8s.io")
    assert [(t.replica_type, t.path) for t in templates_of(lws)] == [
        ("leader", "spec.leaderWorkerTemplate.leaderTemplate.spec"),
        ("worker", "spec.leaderWorkerTemplate.workerTemplate.spec"),
    ]
    (js,) = snapshot_of(train).of("JobSet.jobset.x-k8s.io")
    assert [(t.replica_type, t.path) for t in templates_of(js)] == [
        ("driver", "spec.replicatedJobs[0].template.spec.template.spec"),
        ("workers", "spec.replicatedJobs[1].template.spec.template.spec"),
    ]


def owned(kind: str, api_version: str, owner: Doc) -> list[Doc]:
    """ownerReferences naming `owner` as the controller."""
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": owner["metadata"]["name"],
            "uid": f"uid-{owner['metadata']['name']}",
            "controller": True,
        }
    ]


def test_what_the_controllers_create_is_judged_through_the_custom_resource() -> None:
    spec = pod_spec(container(gpus=8))
    train = jobset("train", replicated_job("workers", spec, parallelism=2))
    child = job("train-workers-0", spec, completionMode="Indexed", parallelism=2)
    child["metadata"]["ownerReferences"] = owned("JobSet", JOBSET_API, train)
    worker_pod = pod("train-workers-0-0-abcde", spec)
    worker_pod["metadata"]["ownerReferences"] = owned("Job", "batch/v1", child)
    # LWS: the leader StatefulSet is the LWS's, each group's worker StatefulSet its leader Pod's.
    serve = leader_worker_set("vllm", spec)
    sts_spec: Doc = {
        "selector": {"matchLabels": {"a": "b"}},
        "serviceName": "vllm",
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": spec},
    }
    leader_sts: Doc = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "vllm",
            "namespace": "ml",
            "ownerReferences": owned("LeaderWorkerSet", LWS_API, serve),
        },
        "spec": sts_spec,
    }
    leader = pod("vllm-0", spec)
    leader["metadata"]["ownerReferences"] = owned("StatefulSet", "apps/v1", leader_sts)
    worker_sts: Doc = {
        **leader_sts,
        "metadata": {
            "name": "vllm-0",
            "namespace": "ml",
            "ownerReferences": owned("Pod", "v1", leader),
        },
    }
    worker = pod("vllm-0-1", spec)
    worker["metadata"]["ownerReferences"] = owned("StatefulSet", "apps/v1", worker_sts)
    # A Pod named as controller by another Pod (a Spark executor) keeps its own template.
    executor = pod("spark-exec-1", spec)
    executor["metadata"]["ownerReferences"] = owned("Pod", "v1", pod("spark-driver"))
    driver = pod("spark-driver", pod_spec(container(gpus=None)))
    snapshot = snapshot_of(
        train, child, worker_pod, serve, leader_sts, leader, worker_sts, worker, executor, driver
    )
    reported = sorted({str(t.owner.ref) for t in pod_templates(snapshot)})
    assert reported == [
        "JobSet ml/train",
        "LeaderWorkerSet ml/vllm",
        "Pod ml/spark-driver",
        "Pod ml/spark-exec-1",
    ]


def test_pod_spec_remediations_name_where_the_template_is() -> None:
    spec = PROBLEMS["no-dev-shm-multi-gpu-nccl"][1]
    lws = leader_worker_set("w", spec)
    (lws_fix,) = run_check_on("GPU-WL-003", [lws]).findings
    # A JSON patch of the LeaderWorkerSet (a custom resource takes no strategic merge patch),
    # at its worker template.
    fixed = remediated(lws_fix.remediation, lws)["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert fixed["spec"]["volumes"][-1]["emptyDir"]["medium"] == "Memory"
    assert fixed["spec"]["containers"][0]["image"] == spec["containers"][0]["image"]
    job = jobset("w", replicated_job("r", spec))
    (jobset_fix,) = run_check_on("GPU-WL-003", [job]).findings
    # Through spec.replicatedJobs[0]: by index, guarded by a test of the replicated job's name.
    assert jobset_fix.result.path.startswith("spec.replicatedJobs[0].template.spec.template.spec")
    assert '"path": "/spec/replicatedJobs/0/name", "value": "r"' in jobset_fix.remediation
    pod = remediated(jobset_fix.remediation, job)["spec"]["replicatedJobs"][0]["template"]
    assert pod["spec"]["template"]["spec"]["volumes"][-1]["emptyDir"]["medium"] == "Memory"
    assert "(r) container train" in jobset_fix.result.message


# --------------------------------------------------------------------------- GPU-DIST-003


def torchrun(master: str) -> Doc:
    return pod_spec(
        container(
            name="train",
            command=["torchrun", "--nnodes=2", "--master_addr=$(MASTER_ADDR)", "train.py"],
            env=[{"name": "MASTER_ADDR", "value": master}],
        )
    )


def dist003(*objects: Doc) -> list[tuple[str, Outcome, Severity | None]]:
    return verdicts(run_check_on("GPU-DIST-003", [*objects, service("unrelated", "ml")]))


def test_jobset_pod_hostnames_resolve_through_the_service_the_controller_creates() -> None:
    def train(master: str, **spec: Any) -> Doc:
        return jobset(
            "pytorch",
            replicated_job("workers", torchrun(master), replicas=2, parallelism=4),
            **spec,
        )

    ok = [("JobSet ml/pytorch", Outcome.PASS, None)]
    bad = [("JobSet ml/pytorch", Outcome.FAIL, Severity.HIGH)]
    # enableDNSHostnames defaults to true; the subdomain to the JobSet name.
    assert dist003(train("pytorch-workers-0-0.pytorch")) == ok
    assert dist003(train("pytorch-workers-1-3.pytorch.ml.svc.cluster.local")) == ok
    assert dist003(train("pytorch-workers-0-0.net", network={"subdomain": "net"})) == ok
    # jobset#603: the replicated job's name is not the subdomain.
    assert dist003(train("pytorch-workers-0-0.pytorch-workers")) == bad
    assert dist003(train("pytorch-workers-0-0.pytorch", network={"subdomain": "net"})) == bad
    # Job index 2 of 2 replicas, pod index 4 of 4 completions: no such pod.
    assert dist003(train("pytorch-workers-2-0.pytorch")) == bad
    assert dist003(train("pytorch-workers-0-4.pytorch")) == bad
    # Without DNS hostnames the controller creates no Service and sets no subdomain.
    assert (
        dist003(train("pytorch-workers-0-0.pytorch", network={"enableDNSHostnames": False})) == bad
    )


def test_jobset_workers_reach_the_driver_of_another_replicated_job() -> None:
    driver = replicated_job("driver", torchrun("ddp-driver-0-0.ddp"))
    workers = replicated_job("workers", torchrun("ddp-driver-0-0.ddp"), parallelism=4)
    assert dist003(jobset("ddp", driver, workers)) == [
        ("JobSet ml/ddp", Outcome.PASS, None),
        ("JobSet ml/ddp", Outcome.PASS, None),
    ]


def test_jobset_remediation_points_at_the_right_hostname() -> None:
    train = jobset("pytorch", replicated_job("workers", torchrun("pytorch-workers-0-0.pytorch-x")))
    (finding,) = run_check_on("GPU-DIST-003", [train, service("unrelated", "ml")]).findings
    assert "under pytorch: pytorch-<replicatedJob>-<jobIndex>-<podIndex>.pytorch" in (
        finding.result.message
    )
    assert "at pytorch-workers-0-0.pytorch" in finding.remediation
    docs = [d for d in yaml.safe_load_all(finding.remediation) if d]
    assert docs == [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "pytorch", "namespace": "ml"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"jobset.sigs.k8s.io/jobset-name": "pytorch"},
            },
        }
    ]


def test_leader_worker_set_hostnames_and_leader_address() -> None:
    def serve(master: str, **spec: Any) -> Doc:
        return leader_worker_set(
            "vllm", torchrun(master), torchrun(master), replicas=2, size=4, **spec
        )

    ok = [("LeaderWorkerSet ml/vllm", Outcome.PASS, None)] * 2
    bad = [("LeaderWorkerSet ml/vllm", Outcome.FAIL, Severity.HIGH)] * 2
    assert dist003(serve("vllm-1.vllm")) == ok  # the leader of group 1
    assert dist003(serve("vllm-0-3.vllm")) == ok  # worker 3 of group 0
    assert dist003(serve("vllm-0-4.vllm")) == bad  # size 4: workers 1..3
    assert dist003(serve("vllm-2.vllm")) == bad  # replicas 2: groups 0..1
    unique = {"networkConfig": {"subdomainPolicy": "UniquePerReplica"}}
    assert dist003(serve("vllm-1.vllm-1", **unique)) == ok
    assert dist003(serve("vllm-1.vllm", **unique)) == bad
    # The LWS webhook injects LWS_LEADER_ADDRESS; a reference to it is not judged.
    other = service("unrelated", "ml")
    run = run_check_on("GPU-DIST-003", [serve("$(LWS_LEADER_ADDRESS)"), other])
    assert run.results == () and not run.applicable
    # The fix of a made-up host is that reference.
    (finding, _) = run_check_on("GPU-DIST-003", [serve("vllm-leader.vllm"), other]).findings
    assert "$(LWS_LEADER_ADDRESS)" in finding.remediation


# --------------------------------------------------------------------------- Kueue


def test_kueue_sees_jobset_and_lws_gpu_requests() -> None:
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "ml"},
        "spec": {"clusterQueue": "cq"},
    }
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 8}]}],
                }
            ],
        },
    }
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    train = jobset(
        "train", replicated_job("w", pod_spec(container(gpus=2)), replicas=2), labels=labels
    )
    serve = leader_worker_set("serve", pod_spec(container(gpus=8)), size=2, labels=labels)
    run = run_check_on("GPU-QUOTA-006", [queue, cluster_queue, train, serve])
    (finding,) = run.findings
    assert finding.severity is Severity.HIGH
    assert {str(r.ref) for r in finding.result.related} >= {
        "JobSet ml/train",
        "LeaderWorkerSet ml/serve",
    }
    # The suggested quota: the largest request of one workload (no Nodes in the input): the
    # LeaderWorkerSet's group of 2 pods of 8 GPUs.
    assert '"nominalQuota": 16' in finding.remediation


def test_a_local_queue_without_any_cluster_queue_gets_one_created() -> None:
    """Live, an empty ClusterQueue list is evidence (offline a missing kind is not)."""
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "ml"},
        "spec": {"clusterQueue": "cq"},
    }
    train = job("train", pod_spec(container(gpus=4)), parallelism=2)
    train["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    loaded = snapshot_of(queue, train)
    snapshot = Snapshot(loaded.all(), available={*loaded.available, "ClusterQueue.kueue.x-k8s.io"})
    run = run_check(checks()["GPU-QUOTA-005"], snapshot)
    (finding,) = run.findings
    assert finding.severity is Severity.HIGH
    heredoc = finding.remediation.split("<<'EOF'\n", 1)[1].rsplit("\nEOF", 1)[0]
    flavor, cluster_queue = yaml.safe_load_all(heredoc)
    assert flavor == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default-flavor"},
    }
    (group,) = cluster_queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    quotas = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    assert quotas["nvidia.com/gpu"] == "8"  # 2 pods of 4 GPUs
