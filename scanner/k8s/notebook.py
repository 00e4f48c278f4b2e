"""Kubeflow Notebooks: the pod spec of a Notebook's StatefulSet, built the way the notebook
controller builds it.

Source: https://github.com/kubeflow/notebooks, branch notebooks-v1 at 177b09865626 (the commit
of the CRD in ../shared/crds), components/notebook-controller/controllers/notebook_controller.go,
generateStatefulSet: the pod spec is spec.template.spec as written (the template's metadata is
not used); the pod is labelled statefulset=<name> and notebook-name=<name> plus the Notebook's
own labels, and gets the Notebook's annotations except those whose key contains "kubectl" or
"notebook"; the first container gets workingDir /home/jovyan and the port 8888 `notebook-port`
when it sets neither, and NB_PREFIX=/notebook/<namespace>/<name> when it has no NB_PREFIX
(setPrefixEnvVar); a pod without a securityContext gets fsGroup 100 (unless the controller
runs with ADD_FSGROUP=false). The controller owns the StatefulSet (SetControllerReference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.operator_templates import OperatorTemplate
from gpu_audit.model import Resource

NOTEBOOK = "Notebook.kubeflow.org"
PREFIX_ENV = "NB_PREFIX"
DEFAULT_PORT = 8888  # DefaultContainerPort
DEFAULT_FS_GROUP = 100  # DefaultFSGroup


def notebook_templates(notebook: Resource) -> tuple[OperatorTemplate, ...]:
    """The Notebook's one pod spec, role "notebook", at spec.template.spec."""
    spec = as_mapping(notebook.spec.get("template")).get("spec")
    if not isinstance(spec, Mapping):
        return ()
    name, namespace = notebook.ref.name, notebook.ref.namespace
    metadata = {
        "labels": {"statefulset": name, "notebook-name": name, **notebook.labels},
        "annotations": {
            k: v
            for k, v in notebook.annotations.items()
            if "kubectl" not in k and "notebook" not in k
        },
    }
    return (
        OperatorTemplate(
            "notebook", "spec.template.spec", _pod_spec(spec, name, namespace), metadata
        ),
    )


def _pod_spec(spec: Mapping[str, Any], name: str, namespace: str) -> Mapping[str, Any]:
    out = dict(spec)
    if out.get("securityContext") is None:
        out["securityContext"] = {"fsGroup": DEFAULT_FS_GROUP}
    containers = [dict(as_mapping(c)) for c in as_list(spec.get("containers"))]
    if not containers:
        return out
    first = containers[0]
    if not first.get("workingDir"):
        first["workingDir"] = "/home/jovyan"
    if not as_list(first.get("ports")):
        first["ports"] = [
            {"containerPort": DEFAULT_PORT, "name": "notebook-port", "protocol": "TCP"}
        ]
    env = as_list(first.get("env"))
    if not any(as_mapping(e).get("name") == PREFIX_ENV for e in env):
        first["env"] = [*env, {"name": PREFIX_ENV, "value": f"/notebook/{namespace}/{name}"}]
    out["containers"] = [first, *containers[1:]]
    return out
