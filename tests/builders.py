"""Kubernetes objects for tests, as the plain dicts a manifest would load into, and a helper
that runs one check on them.

Every builder returns a new dict, which a test may change (`doc["spec"][...] = ...`); the
dicts passed in (containers, pod specs) are used as they are, not copied. Namespaced
builders default to the namespace "ml".
A pod spec is built from containers: `pod_spec(container(gpus=2), hostIPC=True)`, and a
workload from a pod spec: `deployment("llm", pod_spec(container()), replicas=2)`.

    run = run_check_on("GPU-WL-003", [deployment("train", pod_spec(container()))])
    assert verdicts(run) == [("Deployment ml/train", Outcome.FAIL, Severity.MEDIUM)]
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.engine import CheckRun, run_check
from gpu_audit.model import Check, Outcome, Resource, Severity
from gpu_audit.registry import load_checks
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files

Doc = dict[str, Any]
Verdict = tuple[str, Outcome, Severity | None]

GPU = "nvidia.com/gpu"
GPU_PRESENT = {"nvidia.com/gpu.present": "true"}
# The label Node Feature Discovery puts on nodes with an NVIDIA PCI device.
NFD_PCI_LABEL = {"feature.node.kubernetes.io/pci-10de.present": "true"}
PYTORCH_IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
VLLM_IMAGE = "vllm/vllm-openai:v0.6.3"
DCGM_EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3"

# NVIDIA's own manifests, next to the repository (see tests/checks/test_upstream_manifests.py).
UPSTREAM = Path(__file__).resolve().parents[1] / ".." / "shared" / "upstream"


# --------------------------------------------------------------------------- running checks


@cache
def checks() -> Mapping[str, Check]:
    """The bundled checks by id (no plugins), loaded once per test session."""
    return load_checks(plugins=False)


def run_check_on(
    check_id: str,
    objects: Iterable[Doc] | str,
    *,
    files: Iterable[Path] = (),
    redact: bool = True,
) -> CheckRun:
    """Run one bundled check on `objects` (dicts, or YAML text of one or more documents)
    read through the file loader as `gpu-audit scan --from-file` reads them, after `files`
    (manifests on disk) when there are any.

    With redact=False the check sees the objects as given, without the loader's redaction of
    credentials: for tests that the check itself never repeats a credential it was shown.
    """
    text = objects if isinstance(objects, str) else yaml.safe_dump_all(list(objects))
    paths = [str(p) for p in files]
    if text.strip() or not paths:
        paths.append(STDIN)
    if redact:
        snapshot = load_files(paths, stdin=io.StringIO(text))
    elif paths == [STDIN]:
        snapshot = _unredacted(list(yaml.safe_load_all(text)))
    else:
        raise ValueError("redact=False takes objects only, not files")
    return run_check(checks()[check_id], snapshot)


def _unredacted(objects: list[Doc]) -> Snapshot:
    """The snapshot the loader makes of `objects`, with each object's raw data as given."""
    resources = []
    for obj in objects:
        (loaded,) = load_files([STDIN], stdin=io.StringIO(yaml.safe_dump(obj))).all()
        resources.append(Resource(loaded.ref, loaded.api_version, obj, loaded.source))
    return Snapshot(resources)


def verdicts(run: CheckRun) -> list[Verdict]:
    """Each result of a run as (object, outcome, severity of its finding or None), in the
    engine's order: `("Deployment ml/llm", Outcome.FAIL, Severity.HIGH)`."""
    severities = {id(f.result): f.severity for f in run.findings}
    return [(str(r.ref), r.outcome, severities.get(id(r))) for r in run.results]


def verdicts_of(check_id: str, objects: Iterable[Doc] | str) -> list[Verdict]:
    """`verdicts(run_check_on(check_id, objects))`."""
    return verdicts(run_check_on(check_id, objects))


def fixture_clusters() -> Iterator[tuple[str, Path]]:
    """Every fixture cluster, named: the scenarios, the sample, hostile and diagnostics
    clusters, and each pass and fail fixture of each check."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    for cluster in sorted(fixtures.glob("scenarios/*/cluster")):
        yield cluster.parent.name, cluster
    for name in ("sample", "hostile"):
        yield name, fixtures / "clusters" / name
    for cluster in sorted((fixtures / "clusters" / "diagnostics").iterdir()):
        yield f"diagnostics-{cluster.name}", cluster
    for fixture in sorted(fixtures.glob("checks/*/*.yaml")):
        if fixture.name.startswith(("pass-", "fail-")):
            yield f"{fixture.parent.name}-{fixture.stem}", fixture


def upstream_manifest(*parts: str) -> Path:
    """A file of NVIDIA's manifests under ../shared/upstream; skips the test without it."""
    path = UPSTREAM.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"{path} is not available")
    return path


# --------------------------------------------------------------------------- containers, pods


def container(
    image: str = PYTORCH_IMAGE,
    *,
    name: str = "main",
    gpus: int | str | None = 1,
    resource: str = GPU,
    **fields: Any,
) -> Doc:
    """A container limited to `gpus` of `resource` (no resources at all when gpus is None);
    `fields` are further container fields (args, command, env, volumeMounts, ...)."""
    doc: Doc = {"name": name, "image": image}
    if gpus is not None:
        doc["resources"] = {"limits": {resource: gpus}}
    return doc | fields


def pod_spec(*containers: Doc, **fields: Any) -> Doc:
    """A pod spec of `containers` (one `container()` when none is given) and `fields`
    (volumes, affinity, nodeSelector, ...)."""
    return {"containers": list(containers) or [container()], **fields}


def _metadata(name: str, namespace: str | None, labels: Mapping[str, str] | None) -> Doc:
    metadata: Doc = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = dict(labels)
    return metadata


def pod(
    name: str,
    spec: Doc | None = None,
    *,
    namespace: str = "ml",
    labels: Mapping[str, str] | None = None,
    node_name: str | None = None,
    phase: str | None = None,
    status: Doc | None = None,
    **metadata: Any,
) -> Doc:
    """A Pod running `spec` (default `pod_spec()`), bound to `node_name` and in `phase`
    (Pending, Running, ...) when given; `metadata` are further metadata fields (annotations,
    ownerReferences, deletionTimestamp, ...)."""
    spec = dict(spec if spec is not None else pod_spec())
    if node_name is not None:
        spec["nodeName"] = node_name
    doc: Doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(name, namespace, labels) | metadata,
        "spec": spec,
    }
    if phase is not None:
        status = {"phase": phase, **(status or {})}
    if status is not None:
        doc["status"] = status
    return doc


def _template(spec: Doc | None, labels: Mapping[str, str] | None) -> Doc:
    template: Doc = {"spec": spec if spec is not None else pod_spec()}
    if labels is not None:
        template = {"metadata": {"labels": dict(labels)}, **template}
    return template


def _controller(
    api_version: str,
    kind: str,
    name: str,
    spec: Doc | None,
    namespace: str,
    labels: Mapping[str, str] | None,
    fields: Doc,
) -> Doc:
    labels = labels if labels is not None else {"app": name}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": _template(spec, labels),
            **fields,
        },
    }


def deployment(
    name: str,
    spec: Doc | None = None,
    *,
    namespace: str = "ml",
    labels: Mapping[str, str] | None = None,
    **fields: Any,
) -> Doc:
    """A Deployment of pods running `spec`, selecting them by `labels` (default app=<name>);
    `fields` are further Deployment spec fields (replicas, strategy, ...)."""
    return _controller("apps/v1", "Deployment", name, spec, namespace, labels, fields)


def daemonset(
    name: str,
    spec: Doc | None = None,
    *,
    namespace: str = "ml",
    labels: Mapping[str, str] | None = None,
    **fields: Any,
) -> Doc:
    """A DaemonSet of pods running `spec`, selecting them by `labels` (default app=<name>)."""
    return _controller("apps/v1", "DaemonSet", name, spec, namespace, labels, fields)


def job(
    name: str,
    spec: Doc | None = None,
    *,
    namespace: str = "ml",
    labels: Mapping[str, str] | None = None,
    **fields: Any,
) -> Doc:
    """A batch/v1 Job of pods running `spec` (restartPolicy Never unless the spec says);
    `fields` are further Job spec fields (parallelism, completions, completionMode, ...)."""
    spec = {"restartPolicy": "Never", **(spec if spec is not None else pod_spec())}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": _template(spec, labels), **fields},
    }


def pytorchjob(
    name: str,
    workers: int = 1,
    spec: Doc | None = None,
    *,
    namespace: str = "ml",
    **fields: Any,
) -> Doc:
    """A Kubeflow PyTorchJob: one Master and `workers` Workers running `spec` (default one
    container of 8 GPUs); `fields` are further PyTorchJob spec fields (runPolicy, ...)."""
    template = {"spec": spec if spec is not None else pod_spec(container(gpus=8))}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": workers, "template": template},
            },
            **fields,
        },
    }


# --------------------------------------------------------------------------- nodes


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    ready: bool | None = None,
    taints: Iterable[Doc] | None = None,
    unschedulable: bool | None = None,
    **status: Any,
) -> Doc:
    """A Node with the kubelet's hostname label and `labels`; `status` are its status fields
    (capacity, allocatable, nodeInfo, ...) and `ready` adds a Ready condition."""
    doc: Doc = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
    }
    spec: Doc = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    if taints is not None:
        spec["taints"] = list(taints)
    if spec:
        doc["spec"] = spec
    if ready is not None:
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        status = {**status, "conditions": [*status.get("conditions", ()), condition]}
    if status:
        doc["status"] = status
    return doc


def gpu_node(
    name: str,
    gpus: int | str | None = None,
    labels: Mapping[str, str] | None = None,
    *,
    resource: str = GPU,
    **fields: Any,
) -> Doc:
    """A Node labelled nvidia.com/gpu.present=true (and `labels`) that, when `gpus` is given,
    has that many `resource` in both capacity and allocatable. `fields` as for `node`."""
    if gpus is not None:
        for key in ("capacity", "allocatable"):
            fields[key] = {**fields.get(key, {}), resource: gpus}
    return node(name, {**GPU_PRESENT, **(labels or {})}, **fields)


# --------------------------------------------------------------------------- other objects


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Doc:
    """A Namespace with `labels` (what namespaceSelectors match)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _metadata(name, None, labels)}


def service(
    name: str, namespace: str = "ml", *, labels: Mapping[str, str] | None = None, **spec: Any
) -> Doc:
    """A Service whose spec is `spec` (selector, ports, type, clusterIP, ...)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, namespace, labels),
        "spec": spec,
    }


def network_policy(name: str, namespace: str = "ml", **spec: Any) -> Doc:
    """A NetworkPolicy whose spec is `spec` (podSelector, policyTypes, ingress, egress)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(name, namespace, None),
        "spec": spec,
    }


def config_map(name: str, namespace: str = "ml", data: Mapping[str, str] | None = None) -> Doc:
    doc: Doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(name, namespace, None),
    }
    if data is not None:
        doc["data"] = dict(data)
    return doc


def cluster_policy(name: str = "cluster-policy", *, status: Doc | None = None, **spec: Any) -> Doc:
    """The GPU Operator's ClusterPolicy; `spec` are its spec sections (devicePlugin, gfd,
    mig, ...)."""
    doc: Doc = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }
    if status is not None:
        doc["status"] = status
    return doc


def nodepool(
    name: str,
    requirements: Iterable[Doc] = (),
    *,
    node_class: Doc | None = None,
    **spec: Any,
) -> Doc:
    """A Karpenter v1 NodePool of NVIDIA GPU instances: its template requires the instance
    GPU manufacturer nvidia, then `requirements`, and refers to `node_class` (default
    {name: gpu}); `spec` are further NodePool spec fields (limits, disruption, replicas)."""
    nvidia = {
        "key": "karpenter.k8s.aws/instance-gpu-manufacturer",
        "operator": "In",
        "values": ["nvidia"],
    }
    template = {
        "spec": {
            "nodeClassRef": node_class if node_class is not None else {"name": "gpu"},
            "requirements": [nvidia, *requirements],
        }
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }
