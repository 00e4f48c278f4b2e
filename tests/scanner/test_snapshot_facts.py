"""Facts and indexes the snapshot computes once: Snapshot.fact, and the lookups built on it
(controller owners, pods by controller, GPU pod templates) agree with a walk of every object."""

from __future__ import annotations

import io

import yaml

from gpu_audit.k8s.pods import controller_owner, gpu_pod_templates, pod_templates
from gpu_audit.k8s.training_jobs import owned_pods
from gpu_audit.model import ObjRef, Resource
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import Doc, container, deployment, pod, pod_spec


def _snapshot(*docs: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(docs))))


def test_a_fact_is_computed_once_per_object_not_per_name() -> None:
    snapshot = _snapshot(pod("p"))
    (real,) = snapshot.all()
    # E.g. a pod made from a template: the same name, another object.
    twin = Resource(real.ref, real.api_version, dict(real.raw), real.source)
    calls: list[Resource] = []

    def compute(resource: Resource) -> int:
        calls.append(resource)
        return len(calls)

    assert snapshot.fact("k", real, compute) == 1
    assert snapshot.fact("k", real, compute) == 1
    assert snapshot.fact("k", twin, compute) == 2
    assert snapshot.fact("other", real, compute) == 3
    assert calls == [real, twin, real]


def _owner_ref(kind: str, name: str, api: str = "batch/v1", controller: object = True) -> Doc:
    return {"apiVersion": api, "kind": kind, "name": name, "controller": controller, "uid": "u"}


def test_owned_pods_index_matches_every_controller_reference() -> None:
    job_doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml"},
    }
    pods = [
        pod("a", ownerReferences=[_owner_ref("Job", "j")]),
        # A second controller reference (invalid, but read as the loop read it: any matches).
        pod(
            "b", ownerReferences=[_owner_ref("ReplicaSet", "r", "apps/v1"), _owner_ref("Job", "j")]
        ),
        pod("c", ownerReferences=[_owner_ref("Job", "j", controller="true")]),  # not a bool
        pod("d", ownerReferences=[_owner_ref("Job", "j", api="example.com/v1")]),  # other group
        pod("e", namespace="other", ownerReferences=[_owner_ref("Job", "j")]),
        pod("f", ownerReferences=[{**_owner_ref("Job", "j"), "name": 5}]),
    ]
    snapshot = _snapshot(job_doc, *pods)
    job = snapshot.get("Job", "ml", "j")
    assert job is not None
    assert [p.ref.name for p in owned_pods(snapshot, job)] == ["a", "b"]


def test_gpu_pod_templates_and_owners_agree_with_a_walk() -> None:
    owned = pod("gpu-1", ownerReferences=[_owner_ref("Deployment", "gpu", "apps/v1")])
    docs = [
        deployment("gpu", pod_spec(container())),
        deployment("cpu", pod_spec(container(gpus=None))),
        pod("init-gpu", pod_spec(container(gpus=None), initContainers=[container(name="i")])),
        owned,
    ]
    snapshot = _snapshot(*docs)
    templates = list(pod_templates(snapshot))
    walked = [t for t in templates if any(c.gpu_resource_names() for c in t.containers())]
    assert list(gpu_pod_templates(snapshot)) == walked
    # The owned pod is attributed to its Deployment; the init container's GPU counts.
    assert [t.owner.ref.name for t in walked] == ["init-gpu", "gpu"]  # Pods before Deployments
    member = snapshot.get("Pod", "ml", "gpu-1")
    assert member is not None
    found = controller_owner(snapshot, member)
    assert found is not None and found.ref == ObjRef("Deployment", "ml", "gpu")
