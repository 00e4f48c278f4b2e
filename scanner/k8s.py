"""Kubernetes semantics the checks share: quantities, selectors, taints, affinity, pod templates.

Everything here is a pure function of raw camelCase objects, written once so that checks agree
with each other and with the scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

# --------------------------------------------------------------------------- quantities


class QuantityError(ValueError):
    """A value that is not a Kubernetes resource quantity."""


_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE]?)|([eE][+-]?\d+))$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


# No Kubernetes object holds a quantity of 2^63 or more (an int64 of the smallest unit);
# bigger numbers would also overflow the arithmetic the checks do (1e28 % 1).
_QUANTITY_LIMIT = Decimal(2) ** 63


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity the way the API server does: 1, "1", "1000m" and "1e0" are equal."""
    parsed = _parse_quantity(value)
    if not parsed.is_finite() or abs(parsed) >= _QUANTITY_LIMIT:
        raise QuantityError(f"{value!r} is out of range for a quantity")
    return parsed


def _parse_quantity(value: object) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity")
    number, binary, decimal_suffix, exponent = match.groups()
    try:
        base = Decimal(number)
        if binary:
            return base * _BINARY[binary]
        if exponent:
            return base * (Decimal(10) ** int(exponent[1:]))
        return base * _DECIMAL[decimal_suffix or ""]
    except (InvalidOperation, OverflowError) as exc:  # pragma: no cover - regex bounds input
        raise QuantityError(f"{value!r} is not a quantity") from exc


def format_quantity(value: Decimal) -> str:
    normalized = value.normalize()
    return format(normalized, "f") if normalized == normalized.to_integral() else str(normalized)


# --------------------------------------------------------------------------- GPU resources

NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_GPU_SHARED = "nvidia.com/gpu.shared"
NVIDIA_MIG_PREFIX = "nvidia.com/mig-"
AMD_GPU = "amd.com/gpu"


def is_gpu_resource(name: str) -> bool:
    """Whole GPUs, renamed/shared GPU replicas and MIG slices, NVIDIA or AMD."""
    return name in (NVIDIA_GPU, AMD_GPU) or name.startswith(
        ("nvidia.com/gpu.", "nvidia.com/gpu-", NVIDIA_MIG_PREFIX)
    )


def is_extended_resource(name: str) -> bool:
    """Resources with a domain prefix outside kubernetes.io: integers, requests == limits."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


# --------------------------------------------------------------------------- label selectors


def as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def str_map(value: object) -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in as_mapping(value).items()}


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    operator = str(expr.get("operator", ""))
    values = [str(v) for v in as_list(expr.get("values"))]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def label_selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels AND matchExpressions. `{}` matches everything."""
    sel = as_mapping(selector)
    for key, value in str_map(sel.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    return all(
        _expression_matches(as_mapping(expr), labels)
        for expr in as_list(sel.get("matchExpressions"))
    )


def map_selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """A plain map selector (Service.spec.selector, nodeSelector)."""
    return all(labels.get(k) == v for k, v in str_map(selector).items())


def select(
    snapshot: Snapshot, type_: str, namespace: str | None, selector: object
) -> tuple[Resource, ...]:
    """Objects of `type_` (in `namespace`, or everywhere when None) whose labels match a
    LabelSelector. Uses the label index for the first matchLabels pair."""
    sel = as_mapping(selector)
    match_labels = str_map(sel.get("matchLabels"))
    if match_labels:
        key = min(match_labels)
        candidates: Sequence[Resource] = snapshot.with_label(type_, key, match_labels[key])
        if namespace is not None:
            candidates = [r for r in candidates if r.ref.namespace == namespace]
    elif namespace is not None:
        candidates = snapshot.in_namespace(type_, namespace)
    else:
        candidates = snapshot.of(type_)
    return tuple(r for r in candidates if label_selector_matches(sel, r.labels))


# --------------------------------------------------------------------------- taints and nodes

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


def node_taints(node: Resource) -> tuple[Taint, ...]:
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in map(as_mapping, as_list(node.spec.get("taints")))
    )


def tolerates(tolerations: Sequence[Any], taint: Taint) -> bool:
    """The scheduler's ToleratesTaint: empty key + Exists matches every taint, an empty
    effect matches every effect, operator defaults to Equal."""
    for raw in tolerations:
        tol = as_mapping(raw)
        effect = str(tol.get("effect") or "")
        if effect and effect != taint.effect:
            continue
        key = str(tol.get("key") or "")
        operator = str(tol.get("operator") or "Equal")
        if operator == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and str(tol.get("value") or "") == taint.value:
            return True
    return False


def untolerated_taints(pod_spec: Mapping[str, Any], node: Resource) -> tuple[Taint, ...]:
    tolerations = as_list(pod_spec.get("tolerations"))
    return tuple(
        t
        for t in node_taints(node)
        if t.effect in SCHEDULING_EFFECTS and not tolerates(tolerations, t)
    )


def _node_selector_term_matches(term: Mapping[str, Any], node: Resource) -> bool:
    expressions = as_list(term.get("matchExpressions"))
    fields = as_list(term.get("matchFields"))
    if not expressions and not fields:
        return False  # an empty term matches no objects
    labels = node.labels
    if not all(_expression_matches(as_mapping(e), labels) for e in expressions):
        return False
    name_labels = {"metadata.name": node.ref.name}
    return all(_expression_matches(as_mapping(f), name_labels) for f in fields)


def node_affinity_matches(pod_spec: Mapping[str, Any], node: Resource) -> bool:
    """nodeSelector AND requiredDuringSchedulingIgnoredDuringExecution (terms ORed)."""
    if not map_selector_matches(pod_spec.get("nodeSelector"), node.labels):
        return False
    required = as_mapping(
        as_mapping(as_mapping(pod_spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    if not required:
        return True
    terms = [as_mapping(t) for t in as_list(required.get("nodeSelectorTerms"))]
    return any(_node_selector_term_matches(t, node) for t in terms)


def node_is_schedulable(node: Resource) -> bool:
    return node.spec.get("unschedulable") is not True


def node_is_ready(node: Resource) -> bool | None:
    """True/False from the Ready condition; None when the object carries no status."""
    for cond in map(as_mapping, as_list(node.status.get("conditions"))):
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return None


GPU_NODE_LABELS = (
    "nvidia.com/gpu.present",
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)


def is_gpu_node(node: Resource) -> bool:
    """A node that has, or should have, NVIDIA GPUs: GFD/NFD labels or GPU capacity.

    Works without capacity on purpose: nodes whose device plugin never registered still count.
    """
    labels = node.labels
    if any(labels.get(key) == "true" for key in GPU_NODE_LABELS):
        return True
    if any(k.startswith(("nvidia.com/gpu.", "nvidia.com/mig.")) for k in labels):
        return True
    for section in ("capacity", "allocatable"):
        for name, value in as_mapping(node.status.get(section)).items():
            if is_gpu_resource(str(name)) and str(name) != AMD_GPU:
                try:
                    if parse_quantity(value) > 0:
                        return True
                except QuantityError:
                    continue
    return False


def gpu_nodes(snapshot: Snapshot) -> tuple[Resource, ...]:
    return tuple(n for n in snapshot.of("Node") if is_gpu_node(n))


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


def _template_at(
    owner: Resource, node: object, path: str, replica_type: str = ""
) -> PodTemplate | None:
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
        job_spec = as_mapping(as_mapping(spec.get("jobTemplate")).get("spec"))
        found = _template_at(resource, job_spec.get("template"), "spec.jobTemplate.spec.template")
        return (found,) if found else ()
    if kind in ("PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org"):
        key = "pytorchReplicaSpecs" if kind.startswith("PyTorchJob") else "mpiReplicaSpecs"
        out = []
        for replica_type, replica in sorted(as_mapping(spec.get(key)).items()):
            found = _template_at(
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
            found = _template_at(
                resource,
                task.get("template"),
                f"spec.tasks[{index}].template",
                str(task.get("name", "")),
            )
            if found:
                out.append(found)
        return tuple(out)
    found = _template_at(resource, spec.get("template"), "spec.template")
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


def quantities(raw: object) -> dict[str, Decimal]:
    """A ResourceList (requests, allocatable, overhead) as numbers; non-quantities are skipped."""
    out: dict[str, Decimal] = {}
    for name, value in as_mapping(raw).items():
        try:
            out[str(name)] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def container_requests(container: Container) -> dict[str, Decimal]:
    """A container's requests; a limit without a request defaults the request to the limit."""
    return quantities({**container.limits, **container.requests})


def add_quantities(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


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


def schedules_on(pod_spec: Mapping[str, Any], node: Resource) -> bool:
    """Whether the node passes the pod's placement rules (selectors, affinity, taints),
    ignoring resource fit."""
    return node_affinity_matches(pod_spec, node) and not untolerated_taints(pod_spec, node)
