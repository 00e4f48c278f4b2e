"""KubeRay RayClusters, RayJobs and RayServices are pod templates like any workload
(gpu_audit.k8s.ray): the same pod-spec problem in a Deployment and in a Ray head or worker
group gives the same check at the same severity, on the Ray resource (the object to change),
and what KubeRay adds to the pods itself (a memory-backed /dev/shm, probes, labels) is not
blamed on the user."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpu_audit.k8s.pods import PodTemplate, pod_templates, templates_of
from gpu_audit.model import Outcome, Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import (
    Doc,
    container,
    deployment,
    job,
    pod,
    pod_spec,
    run_check_on,
    verdicts,
)
from tests.json_patch import remediated

RAY_API = "ray.io/v1"
RAY_IMAGE = "rayproject/ray:2.46.0-gpu"
HEAD = pod_spec(container("rayproject/ray:2.46.0", name="ray-head", gpus=None))


def cluster_spec(
    worker: Doc,
    head: Doc = HEAD,
    *,
    group: str = "gpu-workers",
    head_params: dict[str, str] | None = None,
    worker_params: dict[str, str] | None = None,
    version: str = "2.46.0",
) -> Doc:
    return {
        "rayVersion": version,
        "headGroupSpec": {"rayStartParams": head_params or {}, "template": {"spec": head}},
        "workerGroupSpecs": [
            {
                "groupName": group,
                "replicas": 2,
                "rayStartParams": worker_params or {},
                "template": {"spec": worker},
            }
        ],
    }


def ray(kind: str, name: str, spec: Doc, namespace: str = "ml") -> Doc:
    return {
        "apiVersion": RAY_API,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def raycluster(name: str, worker: Doc, head: Doc = HEAD, **options: Any) -> Doc:
    return ray("RayCluster", name, cluster_spec(worker, head, **options))


def rayjob(name: str, worker: Doc, head: Doc = HEAD, **spec: Any) -> Doc:
    body = {"entrypoint": "python train.py", "rayClusterSpec": cluster_spec(worker, head), **spec}
    return ray("RayJob", name, body)


def rayservice(name: str, worker: Doc, head: Doc = HEAD) -> Doc:
    return ray("RayService", name, {"rayClusterConfig": cluster_spec(worker, head)})


def snapshot_of(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


def templates(obj: Doc) -> tuple[PodTemplate, ...]:
    (resource,) = snapshot_of(obj).all()
    return templates_of(resource)


IDLE = pod_spec(container("busybox:1.36", name="idle", gpus=None))
# The same pod spec as a Deployment and in each place of each Ray kind.
WRAPPERS: dict[str, tuple[str, Callable[[Doc], Doc]]] = {
    "deployment": ("Deployment", lambda spec: deployment("w", spec)),
    "raycluster-worker": ("RayCluster", lambda spec: raycluster("w", spec)),
    "raycluster-head": ("RayCluster", lambda spec: raycluster("w", IDLE, head=spec)),
    "rayjob-worker": ("RayJob", lambda spec: rayjob("w", spec)),
    "rayservice-worker": ("RayService", lambda spec: rayservice("w", spec)),
}
TOKEN = "hf_" + "Zq8Wx2Lm" * 5  # a Hugging Face token shape, not a real one
DISK_SHM = {"name": "shm", "emptyDir": {}}
PROBLEMS: dict[str, tuple[str, Doc]] = {
    # A GPU request without a limit: the API server refuses every pod KubeRay creates.
    "gpu-request-without-limit": (
        "GPU-WL-001",
        pod_spec(
            {"name": "ray", "image": RAY_IMAGE, "resources": {"requests": {"nvidia.com/gpu": 1}}}
        ),
    ),
    # A literal Hugging Face token on the command line.
    "literal-token-in-args": (
        "GPU-SEC-001",
        pod_spec(container(RAY_IMAGE, name="ray", args=["serve", f"--hf-token={TOKEN}"])),
    ),
    # Privileged: every GPU of the node.
    "privileged": (
        "GPU-WL-005",
        pod_spec(container(RAY_IMAGE, name="ray", securityContext={"privileged": True})),
    ),
    # Eight GPUs on a disk-backed /dev/shm the user mounted (KubeRay then adds none).
    "disk-backed-dev-shm": (
        "GPU-WL-003",
        pod_spec(
            container(name="ray", gpus=8, volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}]),
            volumes=[DISK_SHM],
        ),
    ),
}


def findings(check_id: str, obj: Doc) -> list[tuple[str, str, Severity]]:
    run = run_check_on(check_id, [obj])
    return [(f.result.ref.kind_name, f.result.ref.name, f.severity) for f in run.findings]


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_the_same_pod_spec_problem_is_the_same_finding_on_the_ray_resource(problem: str) -> None:
    check_id, spec = PROBLEMS[problem]
    baseline = findings(check_id, deployment("w", spec))
    assert baseline, f"{check_id} finds nothing in a Deployment"
    for wrapper, (kind, build) in WRAPPERS.items():
        assert findings(check_id, build(spec)) == [(kind, "w", s) for _, _, s in baseline], wrapper


def test_templates_are_named_by_their_role_and_located_in_the_resource() -> None:
    gpu = pod_spec(container(RAY_IMAGE, name="ray-worker", gpus=1))
    assert [(t.replica_type, t.path) for t in templates(raycluster("rc", gpu))] == [
        ("head", "spec.headGroupSpec.template.spec"),
        ("workerGroup gpu-workers", "spec.workerGroupSpecs[0].template.spec"),
    ]
    submitter = {"spec": pod_spec(container("rayproject/ray:2.46.0", name="submit", gpus=None))}
    assert [
        (t.replica_type, t.path)
        for t in templates(rayjob("j", gpu, submitterPodTemplate=submitter))
    ] == [
        ("head", "spec.rayClusterSpec.headGroupSpec.template.spec"),
        ("workerGroup gpu-workers", "spec.rayClusterSpec.workerGroupSpecs[0].template.spec"),
        ("submitter", "spec.submitterPodTemplate.spec"),
    ]
    # A RayJob that runs on an existing cluster (clusterSelector) has no pods of its own.
    selector = ray("RayJob", "j", {"entrypoint": "x", "clusterSelector": {"ray.io/cluster": "c"}})
    assert templates(selector) == ()
    assert [t.path for t in templates(rayservice("s", gpu))] == [
        "spec.rayClusterConfig.headGroupSpec.template.spec",
        "spec.rayClusterConfig.workerGroupSpecs[0].template.spec",
    ]
    privileged = raycluster("rc", PROBLEMS["privileged"][1])
    (finding,) = run_check_on("GPU-WL-005", [privileged]).findings
    assert "RayCluster ml/rc (workerGroup gpu-workers) container ray" in finding.result.message
    assert finding.result.path == (
        "spec.workerGroupSpecs[0].template.spec.containers[0].securityContext.privileged"
    )
    # KubeRay's labels, which the group's labels cannot override for node type and group.
    worker_labels = {"ray.io/node-type": "head", "team": "nlp"}
    labelled = raycluster("rc", gpu)
    labelled["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {"labels": worker_labels}
    (_, worker) = templates(labelled)
    assert worker.labels["ray.io/node-type"] == "worker"
    assert worker.labels["ray.io/group"] == "gpu-workers"
    assert worker.labels["ray.io/cluster"] == "rc"
    assert worker.labels["team"] == "nlp"


# --------------------------------------------------------------------------- what KubeRay adds


EIGHT_GPUS = pod_spec(
    container(
        RAY_IMAGE,
        name="ray-worker",
        gpus=8,
        resources={"limits": {"nvidia.com/gpu": 8, "memory": "200Gi"}},
    )
)


def test_kuberay_mounts_dev_shm_so_a_ray_gpu_group_is_not_blamed_for_it() -> None:
    assert verdicts(run_check_on("GPU-WL-003", [deployment("w", EIGHT_GPUS)])) == [
        ("Deployment ml/w", Outcome.FAIL, Severity.HIGH)
    ]
    for obj in (raycluster("w", EIGHT_GPUS), rayjob("w", EIGHT_GPUS), rayservice("w", EIGHT_GPUS)):
        (verdict,) = verdicts(run_check_on("GPU-WL-003", [obj]))
        assert verdict[1:] == (Outcome.PASS, None), obj["kind"]
    # addEmptyDir: sized to the container's memory limit, else its memory request.
    (_, worker) = templates(raycluster("w", EIGHT_GPUS))
    assert worker.spec["volumes"] == [
        {"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "200Gi"}}
    ]
    assert worker.spec["containers"][0]["volumeMounts"] == [
        {"name": "shared-mem", "mountPath": "/dev/shm"}
    ]
    requested = pod_spec(
        container(RAY_IMAGE, name="r", gpus=None, resources={"requests": {"memory": "9Gi"}})
    )
    (head, _) = templates(raycluster("w", EIGHT_GPUS, head=requested))
    assert head.spec["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "9Gi"}
    # A volume of the pod named shared-mem is mounted, not replaced.
    own = pod_spec(
        container(RAY_IMAGE, name="r", gpus=8), volumes=[DISK_SHM | {"name": "shared-mem"}]
    )
    (_, worker) = templates(raycluster("w", own))
    assert worker.spec["volumes"] == [{"name": "shared-mem", "emptyDir": {}}]
    (finding,) = run_check_on("GPU-WL-003", [raycluster("w", own)]).findings
    assert "disk-backed emptyDir shared-mem" in finding.result.message
    # With an explicit plasma-directory KubeRay mounts nothing at /dev/shm.
    plasma = raycluster("w", EIGHT_GPUS, worker_params={"plasma-directory": "/tmp"})
    assert verdicts(run_check_on("GPU-WL-003", [plasma])) == [
        ("RayCluster ml/w", Outcome.FAIL, Severity.HIGH)
    ]


def test_kuberay_probes_are_not_reported_missing() -> None:
    bare = pod_spec(container(RAY_IMAGE, name="ray-worker", gpus=1))
    # A Ray container without probes in a Deployment: nothing gates its traffic.
    assert verdicts(run_check_on("GPU-SRV-005", [deployment("w", bare)])) == [
        ("Deployment ml/w", Outcome.FAIL, Severity.LOW)
    ]
    # KubeRay's readiness probe, and a liveness budget of 30 + 120 x 5 s.
    assert verdicts(run_check_on("GPU-SRV-005", [raycluster("w", bare)])) == [
        ("RayCluster ml/w", Outcome.PASS, None)
    ]
    (_, worker) = templates(raycluster("w", bare))
    probe = worker.spec["containers"][0]["readinessProbe"]
    assert probe["exec"]["command"][2] == (
        "wget --tries 1 -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success"
    )
    assert (
        probe["failureThreshold"],
        worker.spec["containers"][0]["livenessProbe"]["timeoutSeconds"],
    ) == (10, 2)
    # Ray >= 2.53.0: one HTTP health endpoint, on the dashboard agent's port.
    (head, worker) = templates(
        raycluster(
            "w", bare, version="2.53.0", worker_params={"dashboard-agent-listen-port": "9999"}
        )
    )
    assert worker.spec["containers"][0]["livenessProbe"]["httpGet"] == {
        "path": "/api/healthz",
        "port": 9999,
    }
    assert head.spec["containers"][0]["readinessProbe"]["timeoutSeconds"] == 5
    # A RayService's workers also check the Serve proxy, and leave the endpoints at once.
    (_, worker) = templates(rayservice("s", bare))
    readiness = worker.spec["containers"][0]["readinessProbe"]
    assert readiness["failureThreshold"] == 1
    assert "http://localhost:8000/-/healthz" in readiness["exec"]["command"][2]
    # A probe the user wrote is kept as written.
    own = pod_spec(
        container(RAY_IMAGE, name="ray-worker", gpus=1, readinessProbe={"tcpSocket": {"port": 1}})
    )
    (_, worker) = templates(raycluster("w", own))
    assert worker.spec["containers"][0]["readinessProbe"] == {"tcpSocket": {"port": 1}}


def test_what_kuberay_creates_is_judged_through_the_ray_resource() -> None:
    spec = pod_spec(container(RAY_IMAGE, name="ray-worker", gpus=8))
    train = rayjob("train", spec)
    cluster = ray("RayCluster", "train-x7k2p", train["spec"]["rayClusterSpec"])
    cluster["metadata"]["ownerReferences"] = [
        {"apiVersion": RAY_API, "kind": "RayJob", "name": "train", "uid": "u1", "controller": True}
    ]
    worker = pod("train-x7k2p-gpu-workers-abcde", spec)
    worker["metadata"]["ownerReferences"] = [
        {
            "apiVersion": RAY_API,
            "kind": "RayCluster",
            "name": "train-x7k2p",
            "uid": "u2",
            "controller": True,
        }
    ]
    submitter = job("train-submit", pod_spec(container(gpus=None)))
    submitter["metadata"]["ownerReferences"] = [
        {"apiVersion": RAY_API, "kind": "RayJob", "name": "train", "uid": "u1", "controller": True}
    ]
    served = rayservice("serve", spec)
    serving = ray("RayCluster", "serve-abc", served["spec"]["rayClusterConfig"])
    serving["metadata"]["ownerReferences"] = [
        {
            "apiVersion": RAY_API,
            "kind": "RayService",
            "name": "serve",
            "uid": "u3",
            "controller": True,
        }
    ]
    snapshot = snapshot_of(train, cluster, worker, submitter, served, serving)
    assert sorted({str(t.owner.ref) for t in pod_templates(snapshot)}) == [
        "RayJob ml/train",
        "RayService ml/serve",
    ]


def test_a_head_fix_is_a_patch_of_the_ray_resource() -> None:
    spec = PROBLEMS["disk-backed-dev-shm"][1]
    job = rayjob("j", IDLE, head=spec)
    (finding,) = run_check_on("GPU-WL-003", [job]).findings
    fixed = remediated(finding.remediation, job)
    head = fixed["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["volumes"] == [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    ]
    # A worker group sits in a list: patched by index, guarded by a test of its group name.
    cluster = raycluster("w", spec)
    (finding,) = run_check_on("GPU-WL-003", [cluster]).findings
    assert finding.result.pod_spec_path == "spec.workerGroupSpecs[0].template.spec"
    group = remediated(finding.remediation, cluster)["spec"]["workerGroupSpecs"][0]
    assert group["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert '"path": "/spec/workerGroupSpecs/0/groupName"' in finding.remediation
