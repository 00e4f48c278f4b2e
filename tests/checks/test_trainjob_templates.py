"""Kubeflow Trainer v2: TrainJobs and (Cluster)TrainingRuntimes are pod templates like any
workload (gpu_audit.k8s.kubeflow_trainer).

A runtime's templates are judged on the runtime; a TrainJob's are the runtime's with the
TrainJob's fields applied as the trainer controller applies them. The same pod-spec problem
gives the same check at the same severity as in a Deployment: on the TrainJob when it comes
from the TrainJob's fields, on the runtime (once, with the TrainJob as a symptom) when the
runtime's own template has it."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpu_audit.k8s.pods import PodTemplate, pod_templates, templates_of
from gpu_audit.model import RelatedRole, Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import Doc, container, deployment, job, pod, pod_spec, run_check_on

API = "trainer.kubeflow.org/v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TOKEN = "hf_" + "Zq8Wx2Lm" * 5  # a Hugging Face token shape, not a real one
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
TORCHRUN = ["torchrun", "--nproc_per_node=8", "train.py"]


def replicated(name: str, spec: Doc, ancestor: str = "") -> Doc:
    template: Doc = {"spec": {"template": {"spec": spec}}}
    if ancestor:
        template["metadata"] = {"labels": {ANCESTOR: ancestor}}
    return {"name": name, "template": template}


def runtime(
    name: str = "torch",
    *jobs: Doc,
    namespaced: bool = False,
    ml_policy: Doc | None = None,
) -> Doc:
    """A runtime of `jobs` (default: one trainer `node` job of a CPU torch container)."""
    jobs = jobs or (
        replicated("node", pod_spec(container(IMAGE, name="node", gpus=None)), "trainer"),
    )
    metadata: Doc = {"name": name}
    if namespaced:
        metadata["namespace"] = "ml"
    return {
        "apiVersion": API,
        "kind": "TrainingRuntime" if namespaced else "ClusterTrainingRuntime",
        "metadata": metadata,
        "spec": {
            "mlPolicy": ml_policy if ml_policy is not None else {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": list(jobs)}},
        },
    }


def trainjob(name: str = "ft", runtime_name: str = "torch", **spec: Any) -> Doc:
    return {
        "apiVersion": API,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"runtimeRef": {"name": runtime_name}, **spec},
    }


def patch(job_name: str, pod: Doc, manager: str = "example.com/platform") -> Doc:
    """A runtimePatches entry patching `job_name`'s pod spec with `pod`."""
    entry = {"name": job_name, "template": {"spec": {"template": {"spec": pod}}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [entry]}}},
    }


def snapshot_of(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


def templates(*objects: Doc, kind: str = "TrainJob") -> tuple[PodTemplate, ...]:
    snapshot = snapshot_of(*objects)
    (found,) = [r for r in snapshot.all() if r.ref.kind_name == kind]
    return templates_of(found, snapshot)


def findings(check_id: str, objects: list[Doc]) -> list[tuple[str, str, Severity]]:
    run = run_check_on(check_id, objects)
    return sorted((f.result.ref.kind_name, f.result.ref.name, f.severity) for f in run.findings)


# --------------------------------------------------------------------------- side by side

NODE_8_GPUS = container(IMAGE, name="node", gpus=8, command=TORCHRUN)

# Each problem: the check, a Deployment's pod spec with it, a runtime whose trainer node has it,
# and the TrainJob fields that give it to a TrainJob of the CPU runtime.
PROBLEMS: dict[str, tuple[str, Doc, Doc, Doc]] = {
    # A GPU request without a limit: every pod is refused.
    "gpu-request-without-limit": (
        "GPU-WL-001",
        pod_spec(
            {"name": "node", "image": IMAGE, "resources": {"requests": {"nvidia.com/gpu": 1}}}
        ),
        pod_spec(
            {"name": "node", "image": IMAGE, "resources": {"requests": {"nvidia.com/gpu": 1}}}
        ),
        {"trainer": {"resourcesPerNode": {"requests": {"nvidia.com/gpu": 1}}}},
    ),
    # Eight NCCL ranks in one pod on the 64 MiB default /dev/shm.
    "no-dev-shm-multi-gpu-nccl": (
        "GPU-WL-003",
        pod_spec(NODE_8_GPUS),
        pod_spec(NODE_8_GPUS),
        {"trainer": {"command": TORCHRUN, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}},
    ),
    # A literal Hugging Face token on the command line.
    "literal-token-in-args": (
        "GPU-SEC-001",
        pod_spec(container(IMAGE, name="node", args=[f"--hf-token={TOKEN}"])),
        pod_spec(container(IMAGE, name="node", args=[f"--hf-token={TOKEN}"])),
        {
            "trainer": {
                "args": [f"--hf-token={TOKEN}"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
            }
        },
    ),
    # A privileged GPU container: every GPU of the node.
    "privileged": (
        "GPU-WL-005",
        pod_spec(container(IMAGE, name="node", securityContext={"privileged": True})),
        pod_spec(container(IMAGE, name="node", securityContext={"privileged": True})),
        {
            "trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}},
            "runtimePatches": [
                patch(
                    "node",
                    {"containers": [{"name": "node", "securityContext": {"privileged": True}}]},
                )
            ],
        },
    ),
}

WRAPPERS: dict[str, Callable[[Doc, Doc, Doc], tuple[list[Doc], tuple[str, str]]]] = {
    # The runtime alone: its templates are what every TrainJob gets.
    "runtime-alone": lambda _, bad, __: (
        [runtime("gpu", replicated("node", bad, "trainer"))],
        ("ClusterTrainingRuntime", "gpu"),
    ),
    # A TrainJob that changes only its image: the problem is the runtime's, reported there.
    "trainjob-of-bad-runtime": lambda _, bad, __: (
        [
            runtime("gpu", replicated("node", bad, "trainer")),
            trainjob("ft", "gpu", trainer={"image": "nvcr.io/nvidia/pytorch:24.09-py3"}),
        ],
        ("ClusterTrainingRuntime", "gpu"),
    ),
    # The TrainJob's own fields bring the problem to a CPU runtime: reported on the TrainJob.
    "trainjob-fields": lambda _, __, fields: (
        [runtime(), trainjob("ft", **fields)],
        ("TrainJob", "ft"),
    ),
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_the_same_pod_spec_problem_is_the_same_finding_on_the_object_it_comes_from(
    problem: str, wrapper: str
) -> None:
    check_id, plain, bad, fields = PROBLEMS[problem]
    baseline = findings(check_id, [deployment("w", plain)])
    assert baseline, f"{check_id} finds nothing in a Deployment"
    objects, (kind, name) = WRAPPERS[wrapper](plain, bad, fields)
    assert findings(check_id, objects) == [(kind, name, s) for _, _, s in baseline]


def test_a_runtime_problem_is_reported_once_with_its_trainjobs_as_symptoms() -> None:
    bad = runtime("gpu", replicated("node", pod_spec(NODE_8_GPUS), "trainer"))
    jobs = [trainjob(f"ft-{i}", "gpu", trainer={"args": [f"--seed={i}"]}) for i in range(3)]
    (finding,) = run_check_on("GPU-WL-003", [bad, *jobs]).findings
    assert str(finding.result.ref) == "ClusterTrainingRuntime gpu"
    assert finding.result.path == (
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0]"
    )
    assert [(str(r.ref), r.role) for r in finding.result.related] == [
        (f"TrainJob ml/ft-{i}", RelatedRole.SYMPTOM) for i in range(3)
    ]


def test_a_trainjob_that_fixes_the_runtime_problem_is_not_a_symptom_of_it() -> None:
    """A TrainJob that mounts a memory-backed /dev/shm through a runtime patch passes; the
    runtime still fails (every other TrainJob gets its template)."""
    bad = runtime("gpu", replicated("node", pod_spec(NODE_8_GPUS), "trainer"))
    shm = patch(
        "node",
        {
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            "containers": [
                {"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
            ],
        },
    )
    run = run_check_on("GPU-WL-003", [bad, trainjob("ft", "gpu", runtimePatches=[shm])])
    (finding,) = run.findings
    assert str(finding.result.ref) == "ClusterTrainingRuntime gpu"
    assert finding.result.related == ()
    passed = [r for r in run.results if r.outcome.value == "pass"]
    assert [str(r.ref) for r in passed] == ["TrainJob ml/ft"]
    # What the comparison used is not kept (it is not redacted).
    assert all(r.inherited is None for r in run.results)


def test_a_problem_of_the_trainjob_fields_is_located_in_the_trainjob() -> None:
    fields = PROBLEMS["literal-token-in-args"][3]
    (finding,) = run_check_on("GPU-SEC-001", [runtime(), trainjob("ft", **fields)]).findings
    assert finding.result.path.startswith("spec.trainer.args")
    assert "TrainJob ml/ft (node) container node" in finding.result.message
    floating = trainjob(
        "ft",
        trainer={
            "image": "nvcr.io/nvidia/pytorch:latest",
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
        },
    )
    (image,) = run_check_on("GPU-WL-006", [runtime(), floating]).findings
    assert (str(image.result.ref), image.result.path) == ("TrainJob ml/ft", "spec.trainer.image")


# --------------------------------------------------------------------------- derivation


def test_templates_are_named_by_replicated_job_and_located_in_their_object() -> None:
    dataset = replicated(
        "dataset-initializer",
        pod_spec(
            container(
                "ghcr.io/kubeflow/trainer/dataset-initializer",
                name="dataset-initializer",
                gpus=None,
            )
        ),
        "dataset-initializer",
    )
    node = replicated("node", pod_spec(container(IMAGE, name="node", gpus=None)), "trainer")
    rt = runtime("tune", dataset, node)
    assert [(t.replica_type, t.path) for t in templates(rt, kind="ClusterTrainingRuntime")] == [
        (
            "dataset-initializer",
            "spec.template.spec.replicatedJobs[0].template.spec.template.spec",
        ),
        ("node", "spec.template.spec.replicatedJobs[1].template.spec.template.spec"),
    ]
    tj = trainjob(
        "ft",
        "tune",
        initializer={"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}},
        runtimePatches=[patch("node", {"nodeSelector": {"pool": "a100"}})],
    )
    found = templates(rt, tj)
    new_patch = "spec.runtimePatches[1].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
    first_patch = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
    assert [(t.replica_type, t.path) for t in found] == [
        ("dataset-initializer", f"{new_patch}.template.spec.template.spec"),
        ("node", f"{first_patch}.template.spec.template.spec"),
    ]
    paths = {c.name: c.path for t in found for c in t.containers()}
    assert paths == {"dataset-initializer": "spec.initializer.dataset", "node": "spec.trainer"}
    assert all(
        t.base is not None and t.base.owner.ref.kind_name == "ClusterTrainingRuntime" for t in found
    )


def test_the_trainjob_is_applied_the_way_the_trainer_applies_it() -> None:
    node = container(
        IMAGE,
        name="node",
        gpus=None,
        command=["python", "old.py"],
        env=[{"name": "A", "value": "runtime"}, {"name": "B", "value": "runtime"}],
        resources={"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi"}},
    )
    sidecar = container("busybox:1.36", name="log", gpus=None)
    model = replicated(
        "model-initializer",
        pod_spec(
            container(
                "ghcr.io/kubeflow/trainer/model-initializer", name="model-initializer", gpus=None
            )
        ),
        "model-initializer",
    )
    rt = runtime(
        "torch",
        model,
        replicated(
            "node",
            pod_spec(
                node,
                sidecar,
                tolerations=[{"key": "a", "operator": "Exists"}],
                nodeSelector={"zone": "a"},
                volumes=[{"name": "data", "emptyDir": {}}],
            ),
            "trainer",
        ),
    )
    tj = trainjob(
        "ft",
        trainer={
            "image": "nvcr.io/nvidia/pytorch:24.09-py3",
            "command": TORCHRUN,
            "env": [{"name": "B", "value": "job"}, {"name": "C", "value": "job"}],
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8, "memory": "64Gi"}},
        },
        initializer={
            "model": {
                "storageUri": "hf://meta-llama/Llama-3.2-1B",
                "env": [{"name": "HF_HUB_OFFLINE", "value": "0"}],
                "secretRef": {"name": "hf"},
            }
        },
        runtimePatches=[
            patch(
                "node",
                {
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "nodeSelector": {"pool": "a100"},
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                    "containers": [
                        {"name": "log", "securityContext": {"runAsNonRoot": True}},
                        {
                            "name": "node",
                            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                        },
                    ],
                },
            )
        ],
    )
    by_role = {t.replica_type: t for t in templates(rt, tj)}
    spec = by_role["node"].spec
    # runtimePatches: a strategic merge (tolerations replaced, maps merged, lists by key).
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert spec["nodeSelector"] == {"zone": "a", "pool": "a100"}
    assert [v["name"] for v in spec["volumes"]] == ["data", "dshm"]
    trainer, log = spec["containers"]
    assert log["securityContext"] == {"runAsNonRoot": True}
    assert log["image"] == "busybox:1.36"
    # spec.trainer: image, command replaced; env upserted by name; resources merged per key.
    assert trainer["image"] == "nvcr.io/nvidia/pytorch:24.09-py3"
    assert trainer["command"] == TORCHRUN
    assert trainer["env"] == [
        {"name": "A", "value": "runtime"},
        {"name": "B", "value": "job"},
        {"name": "C", "value": "job"},
    ]
    assert trainer["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": 8},
    }
    assert trainer["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    # spec.initializer.model: STORAGE_URI, env, the secret as envFrom.
    (initializer,) = by_role["model-initializer"].spec["containers"]
    assert initializer["env"] == [
        {"name": "STORAGE_URI", "value": "hf://meta-llama/Llama-3.2-1B"},
        {"name": "HF_HUB_OFFLINE", "value": "0"},
    ]
    assert initializer["envFrom"] == [{"secretRef": {"name": "hf"}}]
    # The runtime itself is left as it is.
    (rt_node,) = [
        t for t in templates(rt, kind="ClusterTrainingRuntime") if t.replica_type == "node"
    ]
    assert rt_node.spec["containers"][0]["image"] == IMAGE


def test_resources_per_node_reach_the_node_job_of_an_mpi_launcher_run_as_node() -> None:
    """deepspeed-distributed: runLauncherAsNode puts resourcesPerNode and env on the `node`
    job's node container too, and image/command/args only on the trainer (launcher) job."""
    ssh = container("ghcr.io/kubeflow/trainer/deepspeed-runtime", name="node", gpus=None)
    rt = runtime(
        "deepspeed",
        replicated("node", pod_spec(ssh)),
        replicated("launcher", pod_spec(ssh), "trainer"),
        ml_policy={"numNodes": 1, "mpi": {"runLauncherAsNode": True, "numProcPerNode": 1}},
    )
    tj = trainjob(
        "ds",
        "deepspeed",
        trainer={
            "image": "example.com/ds:1",
            "env": [{"name": "X", "value": "1"}],
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}},
        },
    )
    by_role = {t.replica_type: t.spec["containers"][0] for t in templates(rt, tj)}
    for role in ("node", "launcher"):
        assert by_role[role]["resources"] == {"limits": {"nvidia.com/gpu": 2}}, role
        assert by_role[role]["env"] == [{"name": "X", "value": "1"}], role
    assert by_role["launcher"]["image"] == "example.com/ds:1"
    assert by_role["node"]["image"] == "ghcr.io/kubeflow/trainer/deepspeed-runtime"


def test_the_runtime_is_found_by_kind_and_namespace() -> None:
    cluster = runtime("torch")
    local = runtime("torch", namespaced=True)
    local["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "trainer-node"
    by_default = templates(cluster, local, trainjob("ft"))
    assert [t.base.owner.ref.kind_name for t in by_default if t.base] == ["ClusterTrainingRuntime"]
    named = trainjob("ft")
    named["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    assert [t.replica_type for t in templates(cluster, local, named)] == ["trainer-node"]
    # Another namespace's TrainingRuntime is not this one's; without a runtime nothing is read.
    other = runtime("torch", namespaced=True)
    other["metadata"]["namespace"] = "other"
    assert templates(other, named) == ()


def owned(kind: str, api_version: str, owner: Doc) -> list[Doc]:
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": owner["metadata"]["name"],
            "uid": f"uid-{owner['metadata']['name']}",
            "controller": True,
        }
    ]


def rendered_jobset(tj: Doc, spec: Doc) -> Doc:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": tj["metadata"]["name"],
            "namespace": "ml",
            "ownerReferences": owned("TrainJob", API, tj),
        },
        "spec": {"replicatedJobs": [replicated("node", spec)]},
    }


def test_what_the_trainer_creates_is_judged_through_the_trainjob() -> None:
    spec = pod_spec(NODE_8_GPUS)
    rt = runtime("gpu", replicated("node", spec, "trainer"))
    tj = trainjob("ft", "gpu")
    jobset = rendered_jobset(tj, spec)
    child = job("ft-node-0", spec)
    child["metadata"]["ownerReferences"] = owned("JobSet", "jobset.x-k8s.io/v1alpha2", jobset)
    worker = pod("ft-node-0-0-abcde", spec)
    worker["metadata"]["ownerReferences"] = owned("Job", "batch/v1", child)
    snapshot = snapshot_of(rt, tj, jobset, child, worker)
    assert sorted({str(t.owner.ref) for t in pod_templates(snapshot)}) == [
        "ClusterTrainingRuntime gpu",
        "TrainJob ml/ft",
    ]
    run = run_check_on("GPU-WL-003", [rt, tj, jobset, child, worker])
    assert [str(f.result.ref) for f in run.findings] == ["ClusterTrainingRuntime gpu"]
    # Without the runtime in the input, the JobSet the trainer rendered is what runs.
    without_runtime = snapshot_of(tj, jobset, child, worker)
    assert [str(t.owner.ref) for t in pod_templates(without_runtime)] == ["JobSet ml/ft"]
    assert [str(f.result.ref) for f in run_check_on("GPU-WL-003", [tj, jobset]).findings] == [
        "JobSet ml/ft"
    ]
