"""Pod templates of every workload kind, their containers, owners and effective requests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Any

from gpu_audit.k8s.gpu_resources import is_gpu_resource
from gpu_audit.k8s.knative import KNATIVE_SERVICE, rendering_knative_service, revision_templates
from gpu_audit.k8s.kserve import (
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    SERVING_RUNTIME,
    component_templates,
    rendering_inference_service,
)
from gpu_audit.k8s.kubeflow_trainer import (
    RUNTIME_TYPES,
    TRAIN_JOB,
    referenced_runtime,
    runtime_templates,
    trainjob_templates,
)
from gpu_audit.k8s.nim import NIM_SERVICE, nim_templates
from gpu_audit.k8s.notebook import NOTEBOOK, notebook_templates
from gpu_audit.k8s.objects import as_list, as_mapping, str_map, template_spec
from gpu_audit.k8s.operator_templates import OperatorTemplate
from gpu_audit.k8s.quantities import QuantityError, add_quantities, parse_quantity, quantities
from gpu_audit.k8s.ray import RAY_CLUSTER, RAY_JOB, RAY_SERVICE, RAY_TYPES, ray_templates
from gpu_audit.k8s.spark import SPARK_APPLICATION, launching_application, role_templates
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

# --------------------------------------------------------------------------- pod templates

WORKLOAD_TYPES = (
    "Pod",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "ReplicationController",
    "Job",
    "CronJob",
    "PyTorchJob.kubeflow.org",
    "MPIJob.kubeflow.org",
    "Job.batch.volcano.sh",
    "JobSet.jobset.x-k8s.io",
    "LeaderWorkerSet.leaderworkerset.x-k8s.io",
    # KServe: an InferenceService's components (gpu_audit.k8s.kserve). The runtimes carry no
    # pod of their own; they are listed because the InferenceServices' templates merge them.
    INFERENCE_SERVICE,
    SERVING_RUNTIME,
    CLUSTER_SERVING_RUNTIME,
    # Pod specs an operator builds from the custom resource: KubeRay (gpu_audit.k8s.ray),
    # Kubeflow Notebooks (gpu_audit.k8s.notebook), NVIDIA NIM (gpu_audit.k8s.nim).
    *RAY_TYPES,
    NOTEBOOK,
    NIM_SERVICE,
    # Kubeflow Trainer: TrainJobs and the runtimes they are built from (gpu_audit.k8s.
    # kubeflow_trainer); Knative Services (gpu_audit.k8s.knative); Spark's driver and executors
    # (gpu_audit.k8s.spark).
    TRAIN_JOB,
    *RUNTIME_TYPES,
    KNATIVE_SERVICE,
    SPARK_APPLICATION,
)
JOBSET = "JobSet.jobset.x-k8s.io"
LEADER_WORKER_SET = "LeaderWorkerSet.leaderworkerset.x-k8s.io"

_OWNER_TYPES = {
    # ownerReference kind + apiVersion group -> resource type in the snapshot
    ("ReplicaSet", "apps"): "ReplicaSet",
    ("Deployment", "apps"): "Deployment",
    ("StatefulSet", "apps"): "StatefulSet",
    ("DaemonSet", "apps"): "DaemonSet",
    ("Job", "batch"): "Job",
    ("CronJob", "batch"): "CronJob",
    ("ReplicationController", ""): "ReplicationController",
    ("PyTorchJob", "kubeflow.org"): "PyTorchJob.kubeflow.org",
    ("MPIJob", "kubeflow.org"): "MPIJob.kubeflow.org",
    ("Job", "batch.volcano.sh"): "Job.batch.volcano.sh",
    # JobSet -> its Jobs (jobset_controller.go constructJob, SetControllerReference).
    ("JobSet", "jobset.x-k8s.io"): JOBSET,
    # LeaderWorkerSet -> the leader StatefulSet (leaderworkerset_controller.go); the leader Pod
    # -> its group's worker StatefulSet (pod_controller.go setControllerReferenceWithStatefulSet).
    ("LeaderWorkerSet", "leaderworkerset.x-k8s.io"): LEADER_WORKER_SET,
    ("Pod", ""): "Pod",
    # KServe's raw deployment mode: InferenceService -> its component Deployments
    # (reconcilers/deployment/deployment_reconciler.go, SetControllerReferences).
    ("InferenceService", "serving.kserve.io"): INFERENCE_SERVICE,
    # KubeRay: RayCluster -> its Pods (raycluster_controller.go createHeadPod/createWorkerPod);
    # RayJob -> its RayCluster and submitter Job (rayjob_controller.go); RayService -> its
    # RayClusters (rayservice_controller.go constructRayClusterForRayService).
    ("RayCluster", "ray.io"): RAY_CLUSTER,
    ("RayJob", "ray.io"): RAY_JOB,
    ("RayService", "ray.io"): RAY_SERVICE,
    # Notebook -> its StatefulSet (notebook_controller.go, SetControllerReference).
    ("Notebook", "kubeflow.org"): NOTEBOOK,
    # NIMService -> its Deployment, LeaderWorkerSet or InferenceService (the NIM operator's
    # renderAndSyncResource sets the NIMService as controller).
    ("NIMService", "apps.nvidia.com"): NIM_SERVICE,
    # TrainJob -> its JobSet (plugins/jobset/jobset.go Build, WithOwnerReferences controller).
    ("TrainJob", "trainer.kubeflow.org"): TRAIN_JOB,
    # SparkApplication -> its driver Pod (webhook addOwnerReference, util.GetOwnerReference).
    ("SparkApplication", "sparkoperator.k8s.io"): SPARK_APPLICATION,
}
# A Pod controls only the worker StatefulSet LWS creates for its group; other objects that
# name a Pod as controller (a Spark driver's executor Pods) keep their own pod specs.
_OWNED_BY_POD = frozenset({"StatefulSet"})


def controller_owner(snapshot: Snapshot, resource: Resource) -> Resource | None:
    """The controlling owner of `resource` if that owner is in the snapshot (found once per
    object: owner chains are walked by many checks)."""
    return snapshot.fact("controller_owner", resource, partial(_controller_owner, snapshot))


def _controller_owner(snapshot: Snapshot, resource: Resource) -> Resource | None:
    for ref in map(as_mapping, as_list(resource.metadata.get("ownerReferences"))):
        if ref.get("controller") is not True:
            continue
        group = (
            str(ref.get("apiVersion", "")).split("/", 1)[0]
            if "/" in str(ref.get("apiVersion", ""))
            else ""
        )
        type_ = _OWNER_TYPES.get((str(ref.get("kind", "")), group))
        if type_ == "Pod" and resource.ref.kind not in _OWNED_BY_POD:
            continue
        if type_:
            found = snapshot.get(type_, resource.ref.namespace, str(ref.get("name", "")))
            if found is not None:
                return found
    # A Deployment or Pod KServe rendered through Knative (owned by a Revision, which the
    # input does not hold) belongs to the InferenceService its label names.
    # The same for Knative Services (their revisions' Deployments), and a Spark executor Pod
    # (its controller is the driver Pod) belongs to the SparkApplication its labels name.
    return (
        rendering_inference_service(snapshot, resource)
        or rendering_knative_service(snapshot, resource)
        or launching_application(snapshot, resource)
    )


def top_owner(snapshot: Snapshot, resource: Resource) -> Resource:
    """The top-most controller of `resource` present in the snapshot (itself if none), found
    once per object: several checks ask it of every pod."""
    return snapshot.fact("top_owner", resource, partial(_top_owner, snapshot))


def _top_owner(snapshot: Snapshot, resource: Resource) -> Resource:
    seen = {resource.ref}
    current = resource
    while (owner := controller_owner(snapshot, current)) is not None and owner.ref not in seen:
        seen.add(owner.ref)
        current = owner
    return current


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """A pod spec inside an object: a Pod itself, or a controller's template.

    `owner` is the object a fix must change; `path` points at the pod spec in it.
    """

    owner: Resource
    spec: Mapping[str, Any]
    metadata: Mapping[str, Any]
    path: str
    replica_type: str = ""
    # Where a container's fields are written in the owner when not at `path`.containers[i]
    # (KServe's model container is written at spec.predictor.model): (container name, path).
    container_paths: tuple[tuple[str, str], ...] = ()
    # The container whose fields are written at `path` itself, beside the pod-level fields
    # (a NIMService's NIM container: spec.resources, spec.env).
    inline_container: str = ""
    # The template this one is the base's with the owner's changes applied (a TrainJob's, from
    # its runtime's): a result the base gets as well is reported on the base (engine).
    base: PodTemplate | None = None
    # Made on first use: every check reads the containers of every template.
    _containers: tuple[Container, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _requests_gpu: bool | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def labels(self) -> dict[str, str]:
        return str_map(self.metadata.get("labels"))

    @property
    def annotations(self) -> dict[str, str]:
        return str_map(self.metadata.get("annotations"))

    def containers(self, *, include_init: bool = True) -> tuple[Container, ...]:
        every = self._containers
        if every is None:
            every = self._read_containers()
            object.__setattr__(self, "_containers", every)
        return every if include_init else tuple(c for c in every if not c.init)

    def _read_containers(self) -> tuple[Container, ...]:
        out: list[Container] = []
        paths = dict(self.container_paths)
        for section in ("initContainers", "containers"):
            for index, raw in enumerate(as_list(self.spec.get(section))):
                if isinstance(raw, Mapping):
                    out.append(
                        Container(
                            self,
                            raw,
                            paths.get(str(raw.get("name", "")), f"{self.path}.{section}[{index}]"),
                            section == "initContainers",
                        )
                    )
        return tuple(out)

    def gpu_containers(self) -> tuple[Container, ...]:
        return tuple(c for c in self.containers() if c.gpu_resource_names())

    @property
    def requests_gpu(self) -> bool:
        # Read from the raw containers (checks ask it of every pod of the cluster).
        found = self._requests_gpu
        if found is None:
            found = any(
                _gpu_resource_names(raw)
                for section in ("initContainers", "containers")
                for raw in as_list(self.spec.get(section))
                if isinstance(raw, Mapping)
            )
            object.__setattr__(self, "_requests_gpu", found)
        return found


@dataclass(frozen=True, slots=True)
class Container:
    template: PodTemplate
    raw: Mapping[str, Any]
    path: str
    init: bool
    # The model server it runs, kept by gpu_audit.k8s.model_servers.classify (which this
    # module cannot import): the serving checks ask it of every container. In a 1-tuple, as
    # the answer may be None.
    server_class_cache: tuple[Any] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def name(self) -> str:
        return str(self.raw.get("name", ""))

    @property
    def image(self) -> str:
        return str(self.raw.get("image", ""))

    @property
    def is_sidecar(self) -> bool:
        """A native sidecar: an init container with restartPolicy Always."""
        return self.init and self.raw.get("restartPolicy") == "Always"

    @property
    def requests(self) -> Mapping[str, Any]:
        return as_mapping(as_mapping(self.raw.get("resources")).get("requests"))

    @property
    def limits(self) -> Mapping[str, Any]:
        return as_mapping(as_mapping(self.raw.get("resources")).get("limits"))

    @property
    def security_context(self) -> Mapping[str, Any]:
        return as_mapping(self.raw.get("securityContext"))

    @property
    def privileged(self) -> bool:
        """securityContext.privileged: every host device, past the runtime's device cgroup."""
        return self.security_context.get("privileged") is True

    def env(self) -> dict[str, Mapping[str, Any]]:
        return {
            str(e.get("name", "")): e
            for e in map(as_mapping, as_list(self.raw.get("env")))
            if e.get("name")
        }

    def gpu_resource_names(self) -> tuple[str, ...]:
        return _gpu_resource_names(self.raw)

    def gpu_quantity(self, resource: str) -> Decimal | None:
        """The effective amount of `resource`: the limit (requests default to it), else the
        request. None when absent or not a quantity."""
        value = self.limits.get(resource, self.requests.get(resource))
        if value is None:
            return None
        try:
            return parse_quantity(value)
        except QuantityError:
            return None

    def describe(self) -> str:
        kind = "init container" if self.init else "container"
        return f"{kind} {self.name}"


def env_value(container: Container | Mapping[str, Any], name: str) -> str | None:
    """The literal value of a container's env variable `name` (a Container or a raw container
    mapping); None when it is unset or given by valueFrom (unknown offline).

    When the name is listed twice the last entry wins, as in the kubelet, which builds the
    environment in list order (the API server warns that the later entry "hides" the earlier
    one). A value that is not text (`value: 1` in a hand-written manifest) reads as its text.
    """
    raw = container.raw if isinstance(container, Container) else container
    entry: Mapping[str, Any] | None = None
    for found in map(as_mapping, as_list(raw.get("env"))):
        if found.get("name") and str(found.get("name")) == name:
            entry = found
    if entry is None or "value" not in entry:
        return None
    value = entry.get("value")
    return "" if value is None else str(value)


def pod_template_at(
    owner: Resource, node: object, path: str, replica_type: str = ""
) -> PodTemplate | None:
    """The PodTemplateSpec `node` found at `path` in `owner`, None when it has no spec."""
    tpl = as_mapping(node)
    spec = tpl.get("spec")
    if not isinstance(spec, Mapping):
        return None
    return PodTemplate(owner, spec, as_mapping(tpl.get("metadata")), f"{path}.spec", replica_type)


def templates_of(resource: Resource, snapshot: Snapshot | None = None) -> tuple[PodTemplate, ...]:
    """The pod specs an object carries, whatever its kind. `snapshot` gives what a template
    is derived from beyond the object (the ServingRuntime an InferenceService's model runs
    on, the Deployment KServe rendered for it)."""
    kind = resource.ref.kind
    if kind == INFERENCE_SERVICE:
        return tuple(
            PodTemplate(resource, c.spec, c.metadata, c.path, c.role, c.container_paths)
            for c in component_templates(resource, snapshot)
        )
    if kind == TRAIN_JOB:
        return _trainjob_templates(resource, snapshot)
    if kind == KNATIVE_SERVICE:
        revisions = revision_templates(resource, snapshot)
        return tuple(_operator_template(resource, t) for t in revisions)
    # The other kinds' templates are the object's alone: made once, so that what a template
    # learns on first use (its containers, whether it requests GPUs) is kept.
    found: tuple[PodTemplate, ...] | None = resource.pod_templates_cache
    if found is None:
        found = _own_templates(resource)
        object.__setattr__(resource, "pod_templates_cache", found)
    return found


def pod_requests_gpu(pod: Resource) -> bool:
    """Whether a Pod's containers request or limit a GPU resource."""
    templates = templates_of(pod)
    return bool(templates) and templates[0].requests_gpu


def pods_on_node(snapshot: Snapshot, node_name: str) -> tuple[Resource, ...]:
    """The Pods bound to the node (spec.nodeName), whatever their phase, in snapshot order.
    Checks that judge the GPU nodes by their pods read them here instead of each walking
    every pod of the cluster (most of which run on other nodes)."""
    return snapshot.derived("pods.on_node", _pods_by_node).get(node_name, ())


def _pods_by_node(snapshot: Snapshot) -> dict[str, tuple[Resource, ...]]:
    found: dict[str, list[Resource]] = {}
    for pod in snapshot.of("Pod"):
        node_name = pod.spec.get("nodeName")
        if node_name:
            found.setdefault(str(node_name), []).append(pod)
    return {name: tuple(pods) for name, pods in found.items()}


def _own_templates(resource: Resource) -> tuple[PodTemplate, ...]:
    kind = resource.ref.kind
    spec = resource.spec
    if kind in RUNTIME_TYPES:
        return tuple(_operator_template(resource, t) for t in runtime_templates(resource))
    if kind in (SERVING_RUNTIME, CLUSTER_SERVING_RUNTIME):
        return ()  # a runtime runs nothing itself; each InferenceService merges it
    if kind in _OPERATOR_TEMPLATES:
        return tuple(_operator_template(resource, t) for t in _OPERATOR_TEMPLATES[kind](resource))
    if kind == "Pod":
        return (PodTemplate(resource, spec, resource.metadata, "spec"),)
    if kind == "CronJob":
        job_spec = template_spec(spec, "jobTemplate")
        found = pod_template_at(
            resource, job_spec.get("template"), "spec.jobTemplate.spec.template"
        )
        return (found,) if found else ()
    if kind in ("PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org"):
        key = "pytorchReplicaSpecs" if kind.startswith("PyTorchJob") else "mpiReplicaSpecs"
        out = []
        for replica_type, replica in sorted(as_mapping(spec.get(key)).items()):
            found = pod_template_at(
                resource,
                as_mapping(replica).get("template"),
                f"spec.{key}.{replica_type}.template",
                str(replica_type),
            )
            if found:
                out.append(found)
        return tuple(out)
    if kind == JOBSET:
        return _jobset_templates(resource)
    if kind == LEADER_WORKER_SET:
        return _leader_worker_templates(resource)
    if kind == "Job.batch.volcano.sh":
        out = []
        for index, task in enumerate(map(as_mapping, as_list(spec.get("tasks")))):
            found = pod_template_at(
                resource,
                task.get("template"),
                f"spec.tasks[{index}].template",
                str(task.get("name", "")),
            )
            if found:
                out.append(found)
        return tuple(out)
    found = pod_template_at(resource, spec.get("template"), "spec.template")
    return (found,) if found else ()


_OPERATOR_TEMPLATES = {
    **dict.fromkeys(RAY_TYPES, ray_templates),
    NOTEBOOK: notebook_templates,
    NIM_SERVICE: nim_templates,
    SPARK_APPLICATION: role_templates,
}


def _operator_template(owner: Resource, template: OperatorTemplate) -> PodTemplate:
    return PodTemplate(
        owner,
        template.spec,
        template.metadata,
        template.path,
        template.role,
        template.container_paths,
        template.inline_container,
    )


def _trainjob_templates(trainjob: Resource, snapshot: Snapshot | None) -> tuple[PodTemplate, ...]:
    """A TrainJob's templates, derived from its runtime's (gpu_audit.k8s.kubeflow_trainer).
    Without the runtime in the input, the JobSet the trainer rendered for it is what runs:
    its templates are read as the JobSet's; without either there is nothing to read."""
    if snapshot is None:
        return ()
    runtime = referenced_runtime(snapshot, trainjob)
    if runtime is None:
        rendered = snapshot.get(JOBSET, trainjob.ref.namespace, trainjob.ref.name)
        owner = controller_owner(snapshot, rendered) if rendered is not None else None
        if rendered is None or owner is None or owner.ref != trainjob.ref:
            return ()
        return _jobset_templates(rendered)
    return tuple(
        PodTemplate(
            trainjob,
            derived.spec,
            derived.metadata,
            derived.path,
            derived.role,
            derived.container_paths,
            base=_operator_template(runtime, base),
        )
        for derived, base in trainjob_templates(trainjob, runtime)
    )


def _jobset_templates(jobset: Resource) -> tuple[PodTemplate, ...]:
    """One template per replicated job (a JobTemplateSpec), named by the replicated job.

    The path goes through the list by index (spec.replicatedJobs[0].template.spec.template),
    as every field path of a result does; a pod-spec remediation is a JSON patch at that index,
    guarded by a test of the replicated job's name (gpu_audit.k8s.cr_patches).
    """
    out = []
    for index, replicated in enumerate(map(as_mapping, as_list(jobset.spec.get("replicatedJobs")))):
        job_spec = template_spec(replicated, "template")
        found = pod_template_at(
            jobset,
            job_spec.get("template"),
            f"spec.replicatedJobs[{index}].template.spec.template",
            str(replicated.get("name", "")),
        )
        if found:
            out.append(found)
    return tuple(out)


def _leader_worker_templates(lws: Resource) -> tuple[PodTemplate, ...]:
    """The leader and worker templates of a LeaderWorkerSet. Without a leaderTemplate the
    leader is created from the workerTemplate: that one template is reported once, as the
    worker template (https://lws.sigs.k8s.io/docs/concepts/#multi-template-for-pods)."""
    group = as_mapping(lws.spec.get("leaderWorkerTemplate"))
    base = "spec.leaderWorkerTemplate"
    out = []
    for key, role in (("leaderTemplate", "leader"), ("workerTemplate", "worker")):
        found = pod_template_at(lws, group.get(key), f"{base}.{key}", role)
        if found:
            out.append(found)
    return tuple(out)


def _gpu_resource_names(container: Mapping[str, Any]) -> tuple[str, ...]:
    """The GPU resources a raw container requests or limits."""
    resources = as_mapping(container.get("resources"))
    requests, limits = as_mapping(resources.get("requests")), as_mapping(resources.get("limits"))
    names = {str(k) for k in requests} | {str(k) for k in limits}
    return tuple(sorted(n for n in names if is_gpu_resource(n)))


def pod_templates(
    snapshot: Snapshot, types: Sequence[str] = WORKLOAD_TYPES
) -> Iterator[PodTemplate]:
    """Every pod spec, attributed to the top-most controller present in the snapshot.

    A Pod owned by a ReplicaSet owned by a Deployment in the snapshot is reported once, as the
    Deployment; the same Pod in a dump without its controllers is reported as itself.
    """
    key = ("pod_templates", tuple(types))
    return iter(snapshot.derived(key, lambda s: tuple(_pod_templates(s, types))))


def _pod_templates(snapshot: Snapshot, types: Sequence[str]) -> Iterator[PodTemplate]:
    for resource in snapshot.of(*types):
        if controller_owner(snapshot, resource) is not None:
            continue
        yield from templates_of(resource, snapshot)


def gpu_pod_templates(snapshot: Snapshot) -> Iterator[PodTemplate]:
    return iter(
        snapshot.derived(
            "gpu_pod_templates", lambda s: tuple(t for t in pod_templates(s) if t.requests_gpu)
        )
    )


def container_requests(container: Container) -> dict[str, Decimal]:
    """A container's requests; a limit without a request defaults the request to the limit."""
    return quantities({**container.limits, **container.requests})


def effective_request_key(spec: Mapping[str, Any]) -> str:
    """What effective_pod_request reads of a pod spec, as one comparable text: pod specs with
    one key request alike (repr: equal texts are equal values of JSON's types)."""
    return repr(
        [
            [
                (as_mapping(c).get("resources"), as_mapping(c).get("restartPolicy"))
                for c in as_list(spec.get(section))
            ]
            for section in ("initContainers", "containers")
        ]
        + [spec.get("overhead")]
    )


def effective_pod_request(template: PodTemplate) -> dict[str, Decimal]:
    """What the scheduler reserves: max(any init container + the sidecars started before it,
    all containers + all sidecars) per resource, plus spec.overhead
    (https://kubernetes.io/docs/concepts/resource-management/effective-pod-requests-limits/)."""
    running: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    for container in template.containers():
        requests = container_requests(container)
        if container.init and not container.is_sidecar:
            step = dict(running)
            add_quantities(step, requests)
            for name, value in step.items():
                peak[name] = max(peak.get(name, Decimal(0)), value)
        else:
            add_quantities(running, requests)
    total = {n: max(v, peak.get(n, Decimal(0))) for n, v in running.items()}
    for name, value in peak.items():
        total.setdefault(name, value)
    add_quantities(total, quantities(template.spec.get("overhead")))
    return {n: v for n, v in total.items() if v > 0}
