"""Volcano Jobs (batch.volcano.sh/v1alpha1) are read like the other workload CRDs: one template
per task, named by the task; findings on the Volcano Job; the Pods its controller creates
(pkg/controllers/job/job_controller_util.go, createJobPod: named <job>-<task>-<index>, with the
Job as controller, NewControllerRef(job, helpers.JobKind)) are judged through it."""

from __future__ import annotations

import io

import pytest
import yaml

from gpu_audit.k8s.pods import pod_templates, templates_of
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import Doc, container, deployment, pod, pod_spec, run_check_on
from tests.checks.test_workload_crds import PROBLEMS

API = "batch.volcano.sh/v1alpha1"


def volcano_job(name: str, *tasks: tuple[str, Doc], replicas: int = 2) -> Doc:
    return {
        "apiVersion": API,
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": replicas * len(tasks),
            "tasks": [
                {"name": task, "replicas": replicas, "template": {"spec": spec}}
                for task, spec in tasks
            ],
        },
    }


IDLE = pod_spec(container("busybox:1.36", name="idle", gpus=None))


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_the_same_pod_spec_problem_is_the_same_finding_on_the_volcano_job(problem: str) -> None:
    check_id, spec = PROBLEMS[problem]
    baseline = run_check_on(check_id, [deployment("w", spec)]).findings
    assert baseline, f"{check_id} finds nothing in a Deployment"
    run = run_check_on(check_id, [volcano_job("w", ("ps", IDLE), ("worker", spec))])
    got = [(f.result.ref.kind, f.result.ref.name, f.severity) for f in run.findings]
    assert got == [("Job.batch.volcano.sh", "w", f.severity) for f in baseline]
    # The finding names the task and points into it.
    assert all("(worker)" in f.result.message for f in run.findings)
    assert all(f.result.path.startswith("spec.tasks[1].template.spec") for f in run.findings)


def test_tasks_are_templates_named_by_the_task_and_their_pods_are_the_jobs() -> None:
    spec = PROBLEMS["no-dev-shm-multi-gpu-nccl"][1]
    job = volcano_job("ddp", ("master", spec), ("worker", spec))
    pods = []
    for task in ("master", "worker"):
        created = pod(f"ddp-{task}-0", spec, labels={"volcano.sh/task-spec": task})
        created["metadata"]["ownerReferences"] = [
            {"apiVersion": API, "kind": "Job", "name": "ddp", "uid": "u", "controller": True}
        ]
        pods.append(created)
    snapshot = load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all([job, *pods])))
    (volcano,) = snapshot.of("Job.batch.volcano.sh")
    assert [(t.replica_type, t.path) for t in templates_of(volcano)] == [
        ("master", "spec.tasks[0].template.spec"),
        ("worker", "spec.tasks[1].template.spec"),
    ]
    assert {str(t.owner.ref) for t in pod_templates(snapshot)} == {"Job ml/ddp"}
    assert {t.owner.ref.kind for t in pod_templates(snapshot)} == {"Job.batch.volcano.sh"}
    # A batch/v1 Job's controller reference does not make a Pod the Volcano Job's.
    batch = pod("ddp-worker-1", spec)
    batch["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "ddp", "uid": "b", "controller": True}
    ]
    snapshot = load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all([job, batch])))
    assert sorted(str(t.owner.ref) for t in pod_templates(snapshot)) == [
        "Job ml/ddp",
        "Job ml/ddp",
        "Pod ml/ddp-worker-1",
    ]
