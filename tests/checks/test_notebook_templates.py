"""Kubeflow Notebooks are pod templates like any workload (gpu_audit.k8s.notebook): the same
pod-spec problem in a StatefulSet and in a Notebook gives the same check at the same severity,
on the Notebook (the object to change), never on the StatefulSet or Pod its controller creates;
what the controller adds (a port, NB_PREFIX, fsGroup) is in the template."""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml

from gpu_audit.k8s.pods import pod_templates, templates_of
from gpu_audit.model import Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import Doc, container, pod, pod_spec, run_check_on
from tests.json_patch import remediated

NOTEBOOK_IMAGE = "kubeflownotebookswg/jupyter-pytorch-cuda-full:v1.9.0"
TOKEN = "hf_" + "Zq8Wx2Lm" * 5  # a Hugging Face token shape, not a real one


def notebook(name: str, spec: Doc, api_version: str = "kubeflow.org/v1", **labels: str) -> Doc:
    metadata: Doc = {"name": name, "namespace": "team-a"}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": api_version,
        "kind": "Notebook",
        "metadata": metadata,
        "spec": {"template": {"spec": spec}},
    }


def statefulset(name: str, spec: Doc, **metadata: Any) -> Doc:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "team-a", **metadata},
        "spec": {
            "selector": {"matchLabels": {"statefulset": name}},
            "serviceName": "",
            "template": {"metadata": {"labels": {"statefulset": name}}, "spec": spec},
        },
    }


def snapshot_of(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


PROBLEMS: dict[str, tuple[str, Doc]] = {
    "gpu-request-without-limit": (
        "GPU-WL-001",
        pod_spec(
            {
                "name": "nb",
                "image": NOTEBOOK_IMAGE,
                "resources": {"requests": {"nvidia.com/gpu": 1}},
            }
        ),
    ),
    "literal-token-in-env": (
        "GPU-SEC-001",
        pod_spec(container(NOTEBOOK_IMAGE, name="nb", env=[{"name": "HF_TOKEN", "value": TOKEN}])),
    ),
    "privileged": (
        "GPU-WL-005",
        pod_spec(container(NOTEBOOK_IMAGE, name="nb", securityContext={"privileged": True})),
    ),
    # Two GPUs in a notebook on the runtime's 64 MiB /dev/shm.
    "no-dev-shm-two-gpus": ("GPU-WL-003", pod_spec(container(NOTEBOOK_IMAGE, name="nb", gpus=2))),
}


def findings(check_id: str, obj: Doc) -> list[tuple[str, str, Severity, str]]:
    run = run_check_on(check_id, [obj])
    return [
        (f.result.ref.kind_name, f.result.ref.name, f.severity, f.result.path) for f in run.findings
    ]


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
@pytest.mark.parametrize("version", ["kubeflow.org/v1", "kubeflow.org/v1beta1"])
def test_the_same_pod_spec_problem_is_the_same_finding_on_the_notebook(
    problem: str, version: str
) -> None:
    check_id, spec = PROBLEMS[problem]
    baseline = findings(check_id, statefulset("nb", spec))
    assert baseline, f"{check_id} finds nothing in a StatefulSet"
    # The same severity, on the Notebook, at the same place under the Notebook's template.
    assert findings(check_id, notebook("nb", spec, version)) == [
        ("Notebook", "nb", severity, path) for _, _, severity, path in baseline
    ]


def test_the_controller_defaults_are_in_the_template() -> None:
    spec = pod_spec(container(NOTEBOOK_IMAGE, name="nb", gpus=1))
    (resource,) = snapshot_of(notebook("nb", spec, team="nlp")).all()
    (template,) = templates_of(resource)
    assert (template.replica_type, template.path) == ("notebook", "spec.template.spec")
    assert template.labels == {"statefulset": "nb", "notebook-name": "nb", "team": "nlp"}
    (main,) = template.containers()
    assert main.path == "spec.template.spec.containers[0]"
    assert main.raw["workingDir"] == "/home/jovyan"
    assert main.raw["ports"] == [
        {"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}
    ]
    assert main.env()["NB_PREFIX"]["value"] == "/notebook/team-a/nb"
    assert template.spec["securityContext"] == {"fsGroup": 100}
    # What the user set stays.
    own = pod_spec(
        container(
            NOTEBOOK_IMAGE,
            name="nb",
            ports=[{"containerPort": 9999}],
            env=[{"name": "NB_PREFIX", "value": "/x"}],
        ),
        securityContext={"runAsUser": 1000},
    )
    (resource,) = snapshot_of(notebook("nb", own)).all()
    (template,) = templates_of(resource)
    (main,) = template.containers()
    assert main.raw["ports"] == [{"containerPort": 9999}]
    assert main.env()["NB_PREFIX"]["value"] == "/x"
    assert template.spec["securityContext"] == {"runAsUser": 1000}


def test_the_statefulset_and_pod_the_controller_creates_are_judged_through_the_notebook() -> None:
    spec = PROBLEMS["gpu-request-without-limit"][1]
    nb = notebook("nb", spec)
    owner = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "Notebook",
            "name": "nb",
            "uid": "u1",
            "controller": True,
        }
    ]
    sts = statefulset("nb", spec, ownerReferences=owner)
    running = pod("nb-0", spec, namespace="team-a")
    running["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "nb",
            "uid": "u2",
            "controller": True,
        }
    ]
    snapshot = snapshot_of(nb, sts, running)
    assert [str(t.owner.ref) for t in pod_templates(snapshot)] == ["Notebook team-a/nb"]
    (finding,) = run_check_on("GPU-WL-001", [nb, sts, running]).findings
    assert str(finding.result.ref) == "Notebook team-a/nb"
    fixed = remediated(finding.remediation, nb)["spec"]["template"]["spec"]["containers"][0]
    assert fixed["name"] == "nb"
    assert fixed["resources"]["limits"] == fixed["resources"]["requests"]
