"""Pod templates of every workload kind, their containers, owners and effective requests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.k8s.gpu_resources import is_gpu_resource
from gpu_audit.k8s.objects import as_list, as_mapping, str_map, template_spec
from gpu_audit.k8s.quantities import QuantityError, add_quantities, parse_quantity, quantities
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
)

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
}


def controller_owner(snapshot: Snapshot, resource: Resource) -> Resource | None:
    """The controlling owner of `resource` if that owner is in the snapshot."""
    for ref in map(as_mapping, as_list(resource.metadata.get("ownerReferences"))):
        if ref.get("controller") is not True:
            continue
        group = (
            str(ref.get("apiVersion", "")).split("/", 1)[0]
            if "/" in str(ref.get("apiVersion", ""))
            else ""
        )
        type_ = _OWNER_TYPES.get((str(ref.get("kind", "")), group))
        if type_:
            return snapshot.get(type_, resource.ref.namespace, str(ref.get("name", "")))
    return None


def top_owner(snapshot: Snapshot, resource: Resource) -> Resource:
    """The top-most controller of `resource` present in the snapshot (itself if none)."""
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

    @property
    def labels(self) -> dict[str, str]:
        return str_map(self.metadata.get("labels"))

    @property
    def annotations(self) -> dict[str, str]:
        return str_map(self.metadata.get("annotations"))

    def containers(self, *, include_init: bool = True) -> tuple[Container, ...]:
        out: list[Container] = []
        sections = ("initContainers", "containers") if include_init else ("containers",)
        for section in sections:
            for index, raw in enumerate(as_list(self.spec.get(section))):
                if isinstance(raw, Mapping):
                    out.append(
                        Container(
                            self,
                            raw,
                            f"{self.path}.{section}[{index}]",
                            section == "initContainers",
                        )
                    )
        return tuple(out)

    def gpu_containers(self) -> tuple[Container, ...]:
        return tuple(c for c in self.containers() if c.gpu_resource_names())

    @property
    def requests_gpu(self) -> bool:
        return any(c.gpu_resource_names() for c in self.containers())


@dataclass(frozen=True, slots=True)
class Container:
    template: PodTemplate
    raw: Mapping[str, Any]
    path: str
    init: bool

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

    def env(self) -> dict[str, Mapping[str, Any]]:
        return {
            str(e.get("name", "")): e
            for e in map(as_mapping, as_list(self.raw.get("env")))
            if e.get("name")
        }

    def gpu_resource_names(self) -> tuple[str, ...]:
        names = {str(k) for k in self.requests} | {str(k) for k in self.limits}
        return tuple(sorted(n for n in names if is_gpu_resource(n)))

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


def templates_of(resource: Resource) -> tuple[PodTemplate, ...]:
    """The pod specs an object carries, whatever its kind."""
    kind = resource.ref.kind
    spec = resource.spec
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
        yield from templates_of(resource)


def gpu_pod_templates(snapshot: Snapshot) -> Iterator[PodTemplate]:
    return (t for t in pod_templates(snapshot) if t.requests_gpu)


def container_requests(container: Container) -> dict[str, Decimal]:
    """A container's requests; a limit without a request defaults the request to the limit."""
    return quantities({**container.limits, **container.requests})


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
