"""The GPU impact of a finding: how many GPUs the object to change holds or requests, how many
GPU-hours a day it runs them, on which GPU product, and (with a price table) what that costs.

Computed once per finding after the checks ran, from the snapshot and the finding's object and
related objects only (no check knows of it). The numbers, as README "GPU impact" documents:

- `gpus`: the devices the object holds or requests, summed over its pods. The active pods of
  the object in the snapshot (a dump or a live scan) when it has some, else its pod templates
  times their replica counts (a Deployment with 4 replicas of 2 GPUs: 8). A node: its
  allocatable GPUs. Units become GPU fractions with what the node labels show: a MIG slice
  `<g>g.<memory>` is g of the GPU's compute slices (7 on A100/H100/H200/B200, 4 on A30 and the
  RTX PRO 6000, 2 on the RTX PRO 5000: NVIDIA MIG user guide, "Supported GPUs" and "Supported
  MIG Profiles", https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html,
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html), and a
  time-sliced or MPS replica 1/`nvidia.com/gpu.replicas` of a GPU (GPU Feature Discovery
  labels, https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/lm/resource.go;
  https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html).
- `gpu_hours_per_day`: 24 x the GPUs of the pods that hold them (bound, not finished); for an
  object read without status (a manifest) 24 x its GPUs, an upper bound, unless it is
  suspended, scaled to 0 or finished. A node: 24 x its allocatable GPUs.
- `product`: `nvidia.com/gpu.product` (GPU Feature Discovery) of the nodes the pods run on, or
  else of the GPU nodes their placement rules select, without the `-SHARED` and `-MIG-<profile>`
  suffixes GFD adds (mig-strategy.go productLabel), so that one price covers a product.
- `cost_per_day`: gpu_hours_per_day x the product's $/GPU-hour from `--gpu-prices`; null
  without a price table or when a product that runs has no price.

Objects that hold no GPU themselves (a Namespace, an HPA, a Service, a ClusterPolicy, a
device-plugin DaemonSet) take the impact of the objects the finding lists as its symptoms,
else of what they reach: a Namespace its GPU workloads, an HPA its scale target, a Service
the workloads of the pods it selects, a ClusterPolicy every GPU node, a DaemonSet the GPU
nodes its pods run on.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from pathlib import Path
from typing import Any

import yaml

from gpu_audit.errors import InputError
from gpu_audit.k8s.gpu_hosts import gpu_nodes, gpu_quantities
from gpu_audit.k8s.gpu_resources import AMD_GPU, NVIDIA_GPU, NVIDIA_MIG_PREFIX, is_gpu_resource
from gpu_audit.k8s.node_shapes import gpu_nodes_admitting
from gpu_audit.k8s.objects import as_mapping, str_map, template_spec
from gpu_audit.k8s.pods import (
    WORKLOAD_TYPES,
    PodTemplate,
    effective_pod_request,
    gpu_pod_templates,
    templates_of,
    top_owner,
)
from gpu_audit.k8s.quantities import QuantityError, parse_quantity
from gpu_audit.k8s.scheduling import daemonset_schedules_on, schedules_on_key
from gpu_audit.k8s.selectors import map_selector_matches, select
from gpu_audit.k8s.training_jobs import (
    count_field,
    finished_as,
    pod_is_active,
    replica_groups,
)
from gpu_audit.model import ObjRef, RelatedRef, RelatedRole, Resource
from gpu_audit.redact import redact_text
from gpu_audit.snapshot import Snapshot

HOURS_PER_DAY = Decimal(24)
ZERO = Decimal(0)
PRODUCT_LABEL = "nvidia.com/gpu.product"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
COUNT_LABEL = "nvidia.com/gpu.count"
SHARED_SUFFIX = "-SHARED"
MIG_INFIX = "-MIG-"
# Compute slices of a MIG-capable GPU (MIG user guide, Supported GPUs: "Max Number of
# Instances"), by a part of the GFD product name; every other MIG GPU has 7.
MIG_SLICES = (("A30", 4), ("RTX-PRO-6000", 4), ("RTX-PRO-5000", 2))
DEFAULT_MIG_SLICES = 7
_MIG_PROFILE = re.compile(r"^(\d+)g\.")  # 1g.10gb, 3g.40gb, 1g.10gb+me
_SCALED_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"})
_VICTIM_ROLES = (RelatedRole.SYMPTOM, RelatedRole.SELECTED_BY)


@dataclass(frozen=True, slots=True)
class Share:
    """GPUs of one product that one object (or pod) holds or requests, and runs a day."""

    source: ObjRef
    product: str | None
    gpus: Decimal
    hours: Decimal


@dataclass(frozen=True, slots=True)
class Impact:
    shares: tuple[Share, ...] = ()

    @property
    def gpus(self) -> Decimal:
        return sum((s.gpus for s in self.shares), Decimal(0))

    @property
    def hours(self) -> Decimal:
        return sum((s.hours for s in self.shares), Decimal(0))

    def by_product(self) -> list[tuple[str | None, Decimal, Decimal]]:
        """(product, gpus, GPU-hours a day), products sorted, unknown product last."""
        gpus: dict[str | None, Decimal] = defaultdict(Decimal)
        hours: dict[str | None, Decimal] = defaultdict(Decimal)
        for share in self.shares:
            gpus[share.product] += share.gpus
            hours[share.product] += share.hours
        order = sorted(gpus, key=lambda p: (p is None, p or ""))
        return [(p, gpus[p], hours[p]) for p in order if gpus[p] or hours[p]]

    def as_dict(self, prices: Mapping[str, Decimal] | None = None) -> dict[str, Any]:
        parts = self.by_product()
        products = sorted({p for p, _, _ in parts if p is not None})
        document = {
            "gpus": _number(self.gpus, 3),
            "gpu_hours_per_day": _number(self.hours, 2),
            "product": products[0] if len(products) == 1 else None,
            "by_product": [
                {"product": p, "gpus": _number(g, 3), "gpu_hours_per_day": _number(h, 2)}
                for p, g, h in parts
            ],
        }
        return {**document, "cost_per_day": cost_per_day(document, prices)}


def _number(value: Decimal, places: int) -> float | int:
    rounded = _rounded(value, places)
    return int(rounded) if rounded == rounded.to_integral_value() else float(rounded)


# Rounding to a few places in the default 28-digit context raises InvalidOperation on counts
# of more digits (a JSON replica count may have 300; found by the fuzzer): round them in a
# context that holds any number of digits.
_WIDE = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _rounded(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), context=_WIDE)


def cost_per_day(
    impact: Mapping[str, Any], prices: Mapping[str, Decimal] | None
) -> float | int | None:
    """$ a day of a finding's `impact` document at these $/GPU-hour prices: null without
    prices, or when GPU-hours of a product without a price (or of no known product) count."""
    if prices is None:
        return None
    total = Decimal(0)
    for part in impact.get("by_product") or ():
        hours = Decimal(str(part["gpu_hours_per_day"]))
        if not hours:
            continue
        price = prices.get(part["product"]) if part["product"] is not None else None
        if price is None:
            return None
        total += hours * price
    rounded = _rounded(total, 2)
    # Beyond a float's range (absurd counts, but valid JSON must come out): the whole number.
    return float(rounded) if rounded.adjusted() < 300 else int(rounded)


# --------------------------------------------------------------------------- GPU units


def product_of(labels: Mapping[str, str]) -> str | None:
    """The GPU product of a node's GFD label, without the sharing and MIG suffixes."""
    product = labels.get(PRODUCT_LABEL)
    if not product:
        return None
    product = product.split(MIG_INFIX, 1)[0].removesuffix(SHARED_SUFFIX)
    return redact_text(product) or None  # a label value, written out as the report's


def _positive_int(value: object) -> int:
    try:
        number = int(str(value))
    except ValueError:
        return 0
    return max(number, 0)


def mig_fraction(profile: str, product: str) -> Decimal:
    """The share of a GPU one MIG slice of `profile` (1g.10gb) is on `product`."""
    match = _MIG_PROFILE.match(profile)
    slices = next((n for part, n in MIG_SLICES if part in product), DEFAULT_MIG_SLICES)
    compute = int(match.group(1)) if match else 1
    return min(Decimal(compute) / Decimal(slices), Decimal(1))


def unit_fraction(resource: str, labels: Mapping[str, str]) -> Decimal:
    """The share of a physical GPU one unit of `resource` is on a node with these labels."""
    product = labels.get(PRODUCT_LABEL, "")
    if resource == AMD_GPU:
        return Decimal(1)
    if resource.startswith(NVIDIA_MIG_PREFIX):
        profile = resource.removeprefix(NVIDIA_MIG_PREFIX)
        replicas = _positive_int(labels.get(f"{resource}.replicas", 1))
        return mig_fraction(profile, product) / max(replicas, 1)
    whole = Decimal(1)
    if resource == NVIDIA_GPU and MIG_INFIX in product:  # mig.strategy single
        whole = mig_fraction(product.split(MIG_INFIX, 1)[1], product)
    return whole / max(_positive_int(labels.get(REPLICAS_LABEL, 1)), 1)


def _node_product(snapshot: Snapshot, node: Resource) -> str:
    """product_of the node's labels, "" for none, once per node (a label may be long)."""
    return snapshot.fact("impact_product", node, lambda n: product_of(n.labels) or "")


def _gpu_request(template: PodTemplate) -> dict[str, Decimal]:
    return {n: v for n, v in effective_pod_request(template).items() if is_gpu_resource(n)}


def _advertises(node: Resource, resource: str) -> bool:
    if resource == AMD_GPU:
        return True
    return gpu_quantities(node, "allocatable").get(resource, Decimal(0)) > 0


def _gpu_nodes(snapshot: Snapshot) -> tuple[Resource, ...]:
    return snapshot.derived("impact_gpu_nodes", gpu_nodes)


def _advertisers(snapshot: Snapshot, resource: str) -> frozenset[int]:
    """The ids of the GPU nodes that advertise `resource`, once per resource."""
    return snapshot.derived(
        ("impact_advertisers", resource),
        lambda s: frozenset(id(n) for n in _gpu_nodes(s) if _advertises(n, resource)),
    )


def _best_unit(
    snapshot: Snapshot, template: PodTemplate, resource: str
) -> tuple[Decimal, str] | None:
    """The largest GPU fraction one unit of `resource` is (then the first product by name)
    among the GPU nodes that advertise it and that a pod of the template may run on
    (selectors, affinity, taints; not free capacity); None when there is none. Templates
    alike in placement share one pass, over the node shapes (gpu_nodes_admitting)."""

    def compute(s: Snapshot) -> tuple[Decimal, str] | None:
        advertisers = _advertisers(s, resource)
        options = [
            (unit_fraction(resource, n.labels), _node_product(s, n))
            for n in gpu_nodes_admitting(s, template.spec)
            if id(n) in advertisers
        ]
        return min(options, key=lambda o: (-o[0], o[1]), default=None)

    key = ("impact_best_unit", resource, schedules_on_key(template.spec))
    return snapshot.derived(key, compute)


def _pod_shares(
    snapshot: Snapshot, template: PodTemplate, node: Resource | None, pods: Decimal, hours: bool
) -> list[Share]:
    """`pods` pods of `template`, on `node` when known, else on the GPU nodes it selects; each
    GPU unit as a fraction of a GPU, the largest the candidate nodes give."""
    shares = []
    for resource, amount in sorted(_gpu_request(template).items()):
        best = (
            (unit_fraction(resource, node.labels), _node_product(snapshot, node))
            if node is not None
            else _best_unit(snapshot, template, resource)
        )
        if best is not None:
            fraction, product = best
        else:  # no node known: whole units, the product its nodeSelector names
            fraction = unit_fraction(resource, {})
            selected = as_mapping(template.spec.get("nodeSelector")).get(PRODUCT_LABEL)
            product = product_of({PRODUCT_LABEL: str(selected or "")}) or ""
        gpus = amount * fraction * pods
        shares.append(
            Share(
                template.owner.ref, product or None, gpus, gpus * HOURS_PER_DAY if hours else ZERO
            )
        )
    return shares


# --------------------------------------------------------------------------- objects


def _pods_by_owner(snapshot: Snapshot) -> dict[ObjRef, tuple[Resource, ...]]:
    found: dict[ObjRef, list[Resource]] = defaultdict(list)
    for pod in snapshot.of("Pod"):
        found[top_owner(snapshot, pod).ref].append(pod)
    return {ref: tuple(pods) for ref, pods in found.items()}


def _owned_pods(snapshot: Snapshot, resource: Resource) -> tuple[Resource, ...]:
    return snapshot.derived("impact_pods_by_owner", _pods_by_owner).get(resource.ref, ())


def _pod_impact(snapshot: Snapshot, pod: Resource) -> list[Share]:
    """A pod that is not finished requests its GPUs; bound, it holds and runs them."""
    if not pod_is_active(pod):
        return []
    node_name = str(pod.spec.get("nodeName") or "")
    node = snapshot.get("Node", "", node_name) if node_name else None
    return [
        share
        for template in templates_of(pod, snapshot)
        for share in _pod_shares(snapshot, template, node, Decimal(1), bool(node_name))
    ]


def _replicas(resource: Resource, template: PodTemplate) -> int:
    kind, spec = resource.ref.kind, resource.spec
    if kind in _SCALED_KINDS:
        return count_field(spec.get("replicas"), 1)
    if kind == "CronJob":
        return count_field(template_spec(spec, "jobTemplate").get("parallelism"), 1)
    for group in replica_groups(resource):
        if group.template.path == template.path:
            return group.replicas
    return 1


def _idle(resource: Resource) -> bool:
    """Suspended, or finished as its status says: it runs nothing."""
    spec = resource.spec
    suspended = spec.get("suspend") is True or (
        as_mapping(spec.get("runPolicy")).get("suspend") is True
    )
    return suspended or bool(finished_as(resource))


def _workload_impact(snapshot: Snapshot, resource: Resource) -> list[Share]:
    if resource.ref.kind == "Pod":
        return _pod_impact(snapshot, resource)
    pods = [p for p in _owned_pods(snapshot, resource) if pod_is_active(p)]
    if pods:
        return [s for pod in pods for s in _pod_impact(snapshot, pod)]
    # From the spec: what it requests when it runs. Read from a cluster (it has a status and
    # the pods were listed), no pod of it runs now; a manifest runs all day at most.
    runs = not (resource.status and snapshot.has("Pod")) and not _idle(resource)
    if resource.ref.kind == "DaemonSet":
        templates = templates_of(resource, snapshot)
        return [
            share
            for template in templates
            for node in _gpu_nodes(snapshot)
            if daemonset_schedules_on(template.spec, node)
            for share in _pod_shares(snapshot, template, node, Decimal(1), runs)
        ]
    return [
        share
        for template in templates_of(resource, snapshot)
        for share in _pod_shares(
            snapshot, template, None, Decimal(_replicas(resource, template)), runs
        )
    ]


def _node_impact(snapshot: Snapshot, node: Resource) -> list[Share]:
    labels = node.labels
    gpus = sum(
        (v * unit_fraction(n, labels) for n, v in gpu_quantities(node, "allocatable").items()),
        Decimal(0),
    )
    if not gpus and MIG_INFIX not in labels.get(PRODUCT_LABEL, ""):
        gpus = Decimal(_positive_int(labels.get(COUNT_LABEL, 0)))  # a node without status
    if not gpus:
        return []
    return [Share(node.ref, _node_product(snapshot, node) or None, gpus, gpus * HOURS_PER_DAY)]


def _own(snapshot: Snapshot, resource: Resource) -> list[Share]:
    """What the object itself holds or requests: a node's GPUs, a workload's pods'."""
    if resource.ref.kind == "Node":
        return snapshot.fact("impact_node", resource, lambda n: _node_impact(snapshot, n))
    if resource.ref.kind in WORKLOAD_TYPES:
        return snapshot.fact("impact_own", resource, lambda r: _workload_impact(snapshot, r))
    return []


def _gpu_templates_by_namespace(snapshot: Snapshot) -> dict[str, tuple[PodTemplate, ...]]:
    found: dict[str, list[PodTemplate]] = defaultdict(list)
    for template in gpu_pod_templates(snapshot):
        found[template.owner.ref.namespace].append(template)
    return {namespace: tuple(templates) for namespace, templates in found.items()}


def _gpu_templates_in(snapshot: Snapshot, namespace: str) -> tuple[PodTemplate, ...]:
    """The GPU pod templates of the objects in `namespace`, in gpu_pod_templates order: an
    index built once, so that a finding on a Namespace or a Service walks its namespace only."""
    by_namespace = snapshot.derived("impact_gpu_templates_by_ns", _gpu_templates_by_namespace)
    return by_namespace.get(namespace, ())


def _reach(snapshot: Snapshot, resource: Resource) -> list[Share]:
    """What an object that holds no GPU acts on (module docstring)."""
    kind, ns = resource.ref.kind, resource.ref.namespace
    reached: Iterable[Resource] = ()
    if kind == "Namespace":
        in_ns = _gpu_templates_in(snapshot, resource.ref.name)
        reached = {t.owner.ref: t.owner for t in in_ns}.values()
    elif kind == "HorizontalPodAutoscaler":
        target = as_mapping(resource.spec.get("scaleTargetRef"))
        if target.get("kind") in _SCALED_KINDS:
            found = snapshot.get(str(target["kind"]), ns, str(target.get("name", "")))
            reached = [found] if found is not None else []
    elif kind == "Service" and (selector := str_map(resource.spec.get("selector"))):
        pods = select(snapshot, "Pod", ns, {"matchLabels": selector})
        owners = [top_owner(snapshot, p) for p in pods] + [
            t.owner
            for t in _gpu_templates_in(snapshot, ns)
            if map_selector_matches(selector, t.labels)
        ]
        reached = {o.ref: o for o in owners}.values()
    elif kind.startswith("ClusterPolicy."):
        reached = _gpu_nodes(snapshot)
    elif kind == "DaemonSet":  # the GPU nodes its pods run on, else those it selects
        names = {str(p.spec.get("nodeName") or "") for p in _owned_pods(snapshot, resource)}
        specs = [t.spec for t in templates_of(resource, snapshot)]
        reached = [
            n
            for n in _gpu_nodes(snapshot)
            if n.ref.name in names
            or (not names and any(daemonset_schedules_on(spec, n) for spec in specs))
        ]
    return [share for r in reached for share in _own(snapshot, r)]


def finding_impact(snapshot: Snapshot, ref: ObjRef, related: Iterable[RelatedRef]) -> Impact:
    """The impact of a finding on `ref` listing `related` (module docstring)."""
    resource = snapshot.get(ref.kind, ref.namespace, ref.name)
    if resource is None:
        return Impact()
    own = _own(snapshot, resource)
    if any(s.gpus for s in own):
        return Impact(tuple(own))
    victims = sorted({r.ref for r in related if r.role in _VICTIM_ROLES}, key=lambda r: r.sort_key)
    shares = [
        share
        for victim in victims
        if (found := snapshot.get(victim.kind, victim.namespace, victim.name)) is not None
        for share in _own(snapshot, found)
    ]
    return Impact(tuple(shares or _reach(snapshot, resource)))


# --------------------------------------------------------------------------- prices


def load_prices(path: str) -> dict[str, Decimal]:
    """A price table: a YAML or JSON mapping of GPU product (as `product` shows it) to US
    dollars per GPU-hour. Raises InputError naming the file and the bad entry."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([f"{path}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError:
        raise InputError([f"{path}: not UTF-8 text"]) from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError([f"{path}: not a valid price table: {str(exc).splitlines()[0]}"]) from None
    if not isinstance(data, Mapping) or not data:
        raise InputError([f"{path}: a price table maps GPU products to $/GPU-hour"])
    prices, problems = {}, []
    for product, price in data.items():
        try:
            value = parse_quantity(price) if not isinstance(price, str) else Decimal(price)
        except (QuantityError, ArithmeticError):
            value = Decimal(-1)
        if not isinstance(product, str) or not product or not value.is_finite() or value < 0:
            problems.append(f"{path}: {product!r}: the price must be a number >= 0 (got {price!r})")
            continue
        prices[product] = value
    if problems:
        raise InputError(problems)
    return prices


def priced(document: Mapping[str, Any], prices: Mapping[str, Decimal]) -> dict[str, Any]:
    """A saved report with each finding's cost_per_day at these prices (`render`)."""

    def reprice(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for item in items:
            impact = item.get("impact")
            if impact is None:
                out.append(dict(item))
                continue
            out.append({**item, "impact": {**impact, "cost_per_day": cost_per_day(impact, prices)}})
        return out

    return {
        **document,
        "findings": reprice(document.get("findings") or []),
        "exempted_findings": reprice(document.get("exempted_findings") or []),
    }
