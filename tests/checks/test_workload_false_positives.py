"""False positives and gaps found when the workload CRDs were scanned on the upstream projects'
own examples (KubeRay samples, NIM operator samples, Kubeflow Trainer runtimes, Kubeflow
Notebooks). Each test holds the look-alike next to the case that is still a finding, so that a
fix that silences a check altogether fails here."""

from __future__ import annotations

import io
from typing import Any

import yaml

from gpu_audit.api import classify, templates_of, workload_gpus
from gpu_audit.model import CheckStatus, Outcome, Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import (
    Doc,
    checks,
    container,
    deployment,
    pod_spec,
    run_check_on,
    verdicts,
)

RAY_API = "ray.io/v1"


def service_account(name: str, namespace: str, **fields: Any) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
        **fields,
    }


def _snapshot(objects: list[Doc]) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(objects)))


# --------------------------------------------------------------------------- GPU-SEC-004


def test_sec004_is_not_assessed_without_service_accounts() -> None:
    """Whether a pod mounts a token is its ServiceAccount's to say when the pod sets nothing:
    without ServiceAccounts in the input the check says so instead of guessing."""
    gpu = deployment("llm", pod_spec(container()))
    run = run_check_on("GPU-SEC-004", [gpu])
    assert run.status is CheckStatus.NOT_EVALUATED
    assert "ServiceAccount" in run.reason
    # With the namespace's default account in the input it is judged: the token is mounted.
    run = run_check_on("GPU-SEC-004", [gpu, service_account("default", "ml")])
    assert verdicts(run) == [("Deployment ml/llm", Outcome.FAIL, Severity.LOW)]


def test_sec004_pod_whose_account_is_absent_is_not_judged() -> None:
    opted_out = deployment("opted-out", pod_spec(container(), automountServiceAccountToken=False))
    absent = deployment("other", pod_spec(container(), serviceAccountName="not-here"))
    run = run_check_on("GPU-SEC-004", [opted_out, absent, service_account("default", "ml")])
    assert verdicts(run) == [("Deployment ml/opted-out", Outcome.PASS, None)]


def test_sec004_skips_notebooks_and_nim_services_but_not_their_look_alike() -> None:
    notebook = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": {"name": "nb", "namespace": "kubeflow-user"},
        "spec": {"template": {"spec": pod_spec(container(), serviceAccountName="default-editor")}},
    }
    nim = {
        "apiVersion": "apps.nvidia.com/v1alpha1",
        "kind": "NIMService",
        "metadata": {"name": "llama", "namespace": "kubeflow-user"},
        "spec": {
            "image": {"repository": "nvcr.io/nim/meta/llama-3.2-1b-instruct", "tag": "1.12.0"},
            "authSecret": "ngc-api-secret",
            "resources": {"limits": {"nvidia.com/gpu": 1}},
        },
    }
    # The same GPU pod as a plain Deployment on the same account is still a finding.
    plain = deployment(
        "jupyter",
        pod_spec(container(), serviceAccountName="default-editor"),
        namespace="kubeflow-user",
    )
    accounts = [
        service_account("default-editor", "kubeflow-user"),
        service_account("llama", "kubeflow-user"),
    ]
    run = run_check_on("GPU-SEC-004", [notebook, nim, plain, *accounts])
    assert verdicts(run) == [("Deployment kubeflow-user/jupyter", Outcome.FAIL, Severity.LOW)]


def test_sec004_declares_what_the_live_collector_must_list() -> None:
    needed = checks()["GPU-SEC-004"].required_types
    assert {"ServiceAccount", "RoleBinding", "ClusterRoleBinding", "Role", "ClusterRole"} <= needed


# --------------------------------------------------------------------------- SRV-CLASSIFY


def _ray_job(submitter: bool) -> Doc:
    ray = container("rayproject/ray:2.52.0", name="ray-head", gpus=None)
    spec: Doc = {
        "entrypoint": "python /home/ray/samples/sample_code.py",
        "rayClusterSpec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod_spec(ray)}},
        },
    }
    if submitter:
        spec["submitterPodTemplate"] = {
            "spec": pod_spec(
                container("rayproject/ray:2.52.0", name="my-submitter", gpus=None),
                restartPolicy="Never",
            )
        }
    return {
        "apiVersion": RAY_API,
        "kind": "RayJob",
        "metadata": {"name": "job", "namespace": "ray"},
        "spec": spec,
    }


def test_ray_job_submitter_is_not_a_model_server() -> None:
    snapshot = _snapshot([_ray_job(submitter=True)])
    (rayjob,) = snapshot.of("RayJob.ray.io")
    servers = {
        t.replica_type: [classify(c) is not None for c in t.containers()]
        for t in templates_of(rayjob, snapshot)
    }
    assert servers == {"head": [True], "submitter": [False]}


def test_pod_of_the_submitter_job_is_not_a_model_server() -> None:
    """Live: the submitter runs in a batch Job KubeRay labels as the RayJob's, without a Ray
    node type; a Ray head pod with the same image is still a server."""
    labels = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "job"}
    ray = container("rayproject/ray:2.52.0", name="ray", gpus=None)
    submitter = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "job-abcde", "namespace": "ray", "labels": labels},
        "spec": pod_spec(ray, restartPolicy="Never"),
    }
    head = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "job-raycluster-head",
            "namespace": "ray",
            "labels": {**labels, "ray.io/node-type": "head"},
        },
        "spec": pod_spec(ray),
    }
    snapshot = _snapshot([submitter, head])
    found = {
        pod.ref.name: classify(templates_of(pod)[0].containers()[0]) is not None
        for pod in snapshot.of("Pod")
    }
    assert found == {"job-abcde": False, "job-raycluster-head": True}


# --------------------------------------------------------------------------- GPU-SRV-005

# The NIM operator's multi-node sample (config/samples/nim/serving/advanced/multi-node/
# multi-node-nimservice.yaml at f63f74d7ad22), its startup probe shortened to 60 s so that the
# leader, which serves the traffic, is still a finding.
MULTI_NODE_NIM = """
apiVersion: apps.nvidia.com/v1alpha1
kind: NIMService
metadata: {name: deepseek-r1, namespace: nim-service}
spec:
  startupProbe:
    probe:
      httpGet: {path: /v1/health/ready, port: api}
      initialDelaySeconds: 30
      periodSeconds: 10
      failureThreshold: 3
  image: {repository: nvcr.io/nim/deepseek-ai/deepseek-r1, tag: "1.7.3"}
  authSecret: ngc-api-secret
  storage: {nimCache: {name: deepseek-r1-nimcache}}
  replicas: 1
  resources:
    limits: {nvidia.com/gpu: 8}
    requests: {nvidia.com/gpu: 8}
  expose: {service: {type: ClusterIP, port: 8000}}
  multiNode:
    parallelism: {pipeline: 2, tensor: 8}
    mpi: {mpiStartTimeout: 6000}
"""


def test_srv005_leaves_multi_node_nim_workers_to_the_operator() -> None:
    run = run_check_on("GPU-SRV-005", MULTI_NODE_NIM)
    judged = {(r.message.split(")")[0], r.outcome) for r in run.results}
    assert judged == {("NIMService nim-service/deepseek-r1 (nim leader", Outcome.FAIL)}


# --------------------------------------------------------------------------- Kueue integrations

LOCAL_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "LocalQueue",
    "metadata": {"name": "team-queue", "namespace": "ray"},
    "spec": {"clusterQueue": "cluster-queue"},
}


def _ray_cluster(kind: str, queue: str, workers: Doc) -> Doc:
    head = container("rayproject/ray:2.9.0", name="ray-head", gpus=None)
    cluster = {
        "rayVersion": "2.9.0",
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod_spec(head)}},
        "workerGroupSpecs": [workers],
    }
    spec: Doc = {"rayClusterSpec": cluster, "entrypoint": "python x.py"}
    if kind == "RayCluster":
        spec = cluster
    return {
        "apiVersion": RAY_API,
        "kind": kind,
        "metadata": {
            "name": kind.lower(),
            "namespace": "ray",
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": spec,
    }


def _gpu_workers(**fields: Any) -> Doc:
    worker = container("rayproject/ray:2.9.0-gpu", name="ray-worker", gpus=2)
    return {
        "groupName": "gpu",
        "rayStartParams": {},
        "template": {"spec": pod_spec(worker)},
        **fields,
    }


def test_kueue_counts_ray_worker_groups_as_kueue_does() -> None:
    """raycluster.BuildPodSets: a worker group is replicas (1 when unset) x numOfHosts pods."""
    snapshot = _snapshot(
        [
            _ray_cluster("RayJob", "team-queue", _gpu_workers(replicas=3, numOfHosts=2)),
            _ray_cluster("RayCluster", "team-queue", _gpu_workers()),
        ]
    )
    gpus = {r.ref.kind_name: workload_gpus(r) for r in snapshot.all() if r.ref.kind != "Namespace"}
    assert gpus == {"RayJob": {"nvidia.com/gpu": 12}, "RayCluster": {"nvidia.com/gpu": 2}}


def test_quota004_finds_ray_and_appwrapper_queue_labels_naming_no_local_queue() -> None:
    wrapped_job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pytorch-simple"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 2, "template": {"spec": pod_spec(container())}}
            }
        },
    }
    appwrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {
            "name": "wrapped",
            "namespace": "ray",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
        },
        "spec": {"components": [{"template": wrapped_job}]},
    }
    run = run_check_on(
        "GPU-QUOTA-004",
        [
            LOCAL_QUEUE,
            appwrapper,
            _ray_cluster("RayJob", "user-queue", _gpu_workers()),
            _ray_cluster("RayService", "team-queue", _gpu_workers()),
        ],
    )
    assert verdicts(run) == [
        ("AppWrapper ray/wrapped", Outcome.FAIL, Severity.HIGH),
        ("RayJob ray/rayjob", Outcome.FAIL, Severity.HIGH),
        ("RayService ray/rayservice", Outcome.PASS, None),
    ]
    assert workload_gpus(_snapshot([appwrapper]).of("AppWrapper.workload.codeflare.dev")[0]) == {
        "nvidia.com/gpu": 2
    }


# --------------------------------------------------------------------------- GPU-WL-003

# kubeflow/trainer manifests/base/runtimes/torch_distributed.yaml at 8c0f5059bd51, shortened.
TORCH_DISTRIBUTED = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-distributed
  labels: {trainer.kubeflow.org/framework: torch}
spec:
  mlPolicy:
    numNodes: 1
    torch: {numProcPerNode: auto}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
                      command: [/bin/bash, -c, "echo 'Training complete'"]
"""


def _trainjob(name: str, nodes: int, gpus: int, resource: str = "nvidia.com/gpu") -> str:
    return f"""
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {name}, namespace: ml}}
spec:
  runtimeRef: {{name: torch-distributed}}
  trainer:
    numNodes: {nodes}
    command: [torchrun, train.py]
    resourcesPerNode:
      limits: {{{resource}: {gpus}}}
"""


def test_wl003_counts_trainjob_gpus_per_node_and_its_nodes_as_pods() -> None:
    """resourcesPerNode is each node's (one pod per node): 4 nodes x 1 GPU is a multi-pod
    NCCL job with one rank per pod (low: its ranks meet over the network, not in /dev/shm),
    not a pod holding 4 GPUs (high); 1 node x 2 GPUs is a 2-GPU pod (high); 1 node x 1 GPU
    shows no user of /dev/shm (low)."""
    text = (
        TORCH_DISTRIBUTED
        + _trainjob("four-nodes", 4, 1)
        + _trainjob("two-gpus", 1, 2)
        + _trainjob("single", 1, 1)
    )
    run = run_check_on("GPU-WL-003", text)
    assert verdicts(run) == [
        ("TrainJob ml/four-nodes", Outcome.FAIL, Severity.LOW),
        ("TrainJob ml/single", Outcome.FAIL, Severity.LOW),
        ("TrainJob ml/two-gpus", Outcome.FAIL, Severity.HIGH),
    ]
    four = next(r for r in run.results if r.ref.name == "four-nodes")
    assert "4 GPU pods of one NCCL job" in four.message


# --------------------------------------------------------------------------- nvidia.com/pgpu


def _kata_trainer(resource: str) -> Doc:
    """The GPU Operator's multi-GPU passthrough example (8 pgpu + 4 NVSwitches for one Kata VM)
    running torchrun, or the same pod asking the device plugin for container GPUs."""
    main = container(
        "nvcr.io/nvidia/pytorch:24.08-py3",
        name="train",
        gpus=8,
        resource=resource,
        command=["torchrun", "--nproc_per_node=8", "train.py"],
    )
    if resource == "nvidia.com/pgpu":
        main["resources"]["limits"]["nvidia.com/nvswitch"] = 4
    return deployment(
        resource.split("/")[1], pod_spec(main, runtimeClassName="kata-qemu-nvidia-gpu")
    )


def test_passthrough_gpus_are_not_container_gpus() -> None:
    """nvidia.com/pgpu hands a vfio-pci GPU to the pod's Kata VM: the container GPU rules
    (/dev/shm for 8 NCCL processes here) judge the device-plugin pod only."""
    run = run_check_on(
        "GPU-WL-003", [_kata_trainer("nvidia.com/pgpu"), _kata_trainer("nvidia.com/gpu")]
    )
    assert verdicts(run) == [("Deployment ml/gpu", Outcome.FAIL, Severity.HIGH)]


def test_dist001_trainjob_with_passthrough_gpus_is_no_gpu_job() -> None:
    kata = _trainjob("kata", 2, 8, "nvidia.com/pgpu")
    text = TORCH_DISTRIBUTED + kata + _trainjob("cuda", 2, 8)
    run = run_check_on("GPU-DIST-001", text)
    assert [v[0] for v in verdicts(run)] == ["TrainJob ml/cuda"]


# --------------------------------------------------------------------------- GPU-SCHED-005


def _claim_template(name: str, device_class: str) -> Doc:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "dev", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def _pending_pod(name: str, claim_template: str, message: str) -> Doc:
    main = container(name="main", gpus=None, resources={"claims": [{"name": "dev"}]})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": pod_spec(
            main, resourceClaims=[{"name": "dev", "resourceClaimTemplateName": claim_template}]
        ),
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }


def test_sched005_judges_dra_gpu_pods_by_their_claims_not_as_device_plugin_requests() -> None:
    """A pod whose GPUs come only through a ResourceClaim is a GPU pod: stuck on "cannot
    allocate all claims" it is reported, pointing at the DRA check, at medium (a shortage of
    free devices and a claim no device matches look the same to the scheduler). A pod whose
    claim asks for a device that is no GPU is not a GPU pod."""
    message = "0/2 nodes are available: 2 cannot allocate all claims."
    run = run_check_on(
        "GPU-SCHED-005",
        [
            _claim_template("one-gpu", "gpu.nvidia.com"),
            _claim_template("one-nic", "nic.example.com"),
            _pending_pod("gpu-trainer", "one-gpu", message),
            _pending_pod("nic-user", "one-nic", message),
        ],
    )
    assert verdicts(run) == [("Pod ml/gpu-trainer", Outcome.FAIL, Severity.MEDIUM)]
    (finding,) = run.findings
    assert "GPU-SCHED-009" in finding.remediation
    assert "DRA ResourceClaims" in finding.result.message


# --------------------------------------------------------------------------- GPU-DIST-001


def _lws(name: str, size: int, **pod: Any) -> Doc:
    vllm = container(
        "vllm/vllm-openai:v0.8.5",
        name="vllm",
        gpus=8,
        command=["sh", "-c", "ray start --head && vllm serve meta-llama/Llama-3.1-405B"],
    )
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": size,
                "workerTemplate": {"spec": pod_spec(vllm, **pod)},
            },
        },
    }


LWS_CONFIG = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "lws-manager-config", "namespace": "lws-system"},
    "data": {
        "controller_manager_config.yaml": yaml.safe_dump(
            {
                "apiVersion": "config.lws.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "gangSchedulingManagement": {"schedulerProvider": "volcano"},
            }
        )
    },
}


def test_dist001_judges_each_leader_worker_set_group_as_a_gang() -> None:
    """A group is a leader and size-1 workers serving one model: placed pod by pod, leaders
    run while workers wait (lws KEP-407). One pod per group is no gang; Volcano-handed pods
    count as gang-scheduled only with the controller's provider, known or implied."""
    objects = [_lws("vllm", 2), _lws("single", 1), _lws("volcano", 2, schedulerName="volcano")]
    run = run_check_on("GPU-DIST-001", objects)
    assert verdicts(run) == [
        ("LeaderWorkerSet ml/vllm", Outcome.FAIL, Severity.LOW),
        ("LeaderWorkerSet ml/volcano", Outcome.PASS, None),
    ]
    # With the controller's configuration in the input, it decides: without a provider no
    # PodGroup is created; with Volcano, only pods handed to Volcano are gang-scheduled.
    without = {
        **LWS_CONFIG,
        "data": {
            "controller_manager_config.yaml": "apiVersion: config.lws.x-k8s.io/v1alpha1\nkind: Configuration\n"
        },
    }
    run = run_check_on("GPU-DIST-001", [*objects, without])
    assert [v[1] for v in verdicts(run)] == [Outcome.FAIL, Outcome.FAIL]
    run = run_check_on("GPU-DIST-001", [*objects, LWS_CONFIG])
    assert [v[1] for v in verdicts(run)] == [Outcome.FAIL, Outcome.PASS]


# --------------------------------------------------------------------------- GPU-DIST-004


def _jobset(name: str, deadline: int | None = None, owner: str = "") -> Doc:
    job_spec: Doc = {
        "parallelism": 2,
        "completions": 2,
        "template": {"spec": pod_spec(container(), restartPolicy="Never")},
    }
    if deadline:
        job_spec["activeDeadlineSeconds"] = deadline
    metadata: Doc = {"name": name, "namespace": "ml"}
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "name": owner,
                "uid": "1",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job_spec}}]
        },
    }


def test_dist004_bounds_jobset_runtime_on_its_replicated_jobs() -> None:
    """A JobSet has no deadline of its own: its GPU Jobs need one. The JobSet a TrainJob in
    the input renders is left to the TrainJob's runtime."""
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "rendered", "namespace": "ml"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    run = run_check_on(
        "GPU-DIST-004",
        [
            _jobset("open-ended"),
            _jobset("bounded", 86400),
            _jobset("rendered", owner="rendered"),
            trainjob,
        ],
    )
    assert verdicts(run) == [
        ("JobSet ml/bounded", Outcome.PASS, None),
        ("JobSet ml/open-ended", Outcome.FAIL, Severity.LOW),
    ]
    (finding,) = run.findings
    assert finding.result.path == "spec.replicatedJobs[0].template.spec.activeDeadlineSeconds"
