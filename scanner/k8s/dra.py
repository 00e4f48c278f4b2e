"""Dynamic Resource Allocation (resource.k8s.io): the devices drivers publish in
ResourceSlices, what ResourceClaims and ResourceClaimTemplates request, which devices a request
can get, what is allocated, and the pods' claims.

Both shapes of the API are read: resource.k8s.io/v1 and v1beta2 (`requests[].exactly`,
`requests[].firstAvailable[]`, devices with their attributes at the top) and v1beta1 (the
request's fields at the top, devices under `basic`). Selectors are evaluated by dra_cel.

Sources: https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/
and the resource.k8s.io/v1 types (k8s.io/api/resource/v1/types.go); the allocator's order
(class selectors, then the request's) is k8s.io/dynamic-resource-allocation structured
allocator isSelectable.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from gpu_audit.k8s.dra_cel import (
    CelError,
    DeviceInput,
    NotEvaluatedError,
    Selector,
    compile_selector,
    parse_semver,
)
from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.pods import PodTemplate, pod_templates
from gpu_audit.k8s.quantities import QuantityError, parse_quantity
from gpu_audit.k8s.scheduling import Taint, node_affinity_matches
from gpu_audit.model import ObjRef, Resource
from gpu_audit.snapshot import Snapshot

RESOURCE_SLICE = "ResourceSlice"
DEVICE_CLASS = "DeviceClass"
RESOURCE_CLAIM = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE = "ResourceClaimTemplate"
COMPUTE_DOMAIN = "ComputeDomain.resource.nvidia.com"
DRA_CLAIM_TYPES = (RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE)
# The NVIDIA DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu): GPUs, MIG slices and VFIO
# devices under one driver, IMEX channels and daemons of ComputeDomains under another; the
# DeviceClasses its chart creates for GPUs (templates/deviceclass-*.yaml).
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
NVIDIA_GPU_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"})
# The implicit extended resource of every DeviceClass (KEP-5004 DRA extended resource).
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
EXACT_COUNT = "ExactCount"
ALL_DEVICES = "All"


# --------------------------------------------------------------------------- devices


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. `node` is set for node-local devices; otherwise the
    device is reachable from every node (`all_nodes`) or those its `node_selector` selects."""

    slice: Resource
    driver: str
    pool: str
    name: str
    node: str
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    selector_input: DeviceInput | CelError  # an attribute the scheduler cannot read: error
    partitionable: bool  # consumes shared counters: counts do not add up (dynamic MIG)
    taints: tuple[Taint, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    def label(self) -> str:
        return f"{self.pool}/{self.name}"

    def attribute(self, qualified: str) -> Any:
        """An attribute's value by its name ("productName" of the driver's domain, or
        "gpu.nvidia.com/parentUUID"); None when absent or unreadable."""
        if isinstance(self.selector_input, CelError):
            return None
        domain, name = _split_name(qualified, self.driver)
        return self.selector_input.attributes.get(domain, {}).get(name)

    @property
    def kind(self) -> str:
        """The driver's `type` attribute (gpu, mig, vfio, channel...), "" when absent."""
        value = self.attribute("type")
        return value if isinstance(value, str) else ""

    def reachable_from(self, node: Resource) -> bool:
        if self.node:
            return self.node == node.ref.name
        if self.all_nodes:
            return True
        if self.node_selector is None:
            return False
        spec = {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": self.node_selector
                }
            }
        }
        return node_affinity_matches(spec, node)


def _attribute_value(raw: Mapping[str, Any]) -> Any:
    """DeviceAttribute -> the value CEL sees (compile.go getAttributeValue); CelError when
    the scheduler could not read it."""
    for key in ("ints", "bools", "strings"):
        if isinstance(raw.get(key), list):
            return list(raw[key])
    if isinstance(raw.get("versions"), list):
        parsed = [parse_semver(str(v)) for v in raw["versions"]]
        if any(p is None for p in parsed):
            return CelError("parse semantic version")
        return parsed
    if "int" in raw and isinstance(raw["int"], int) and not isinstance(raw["int"], bool):
        return raw["int"]
    if isinstance(raw.get("bool"), bool):
        return raw["bool"]
    if "string" in raw:
        return str(raw["string"])
    if "version" in raw:
        version = parse_semver(str(raw["version"]))
        return version if version is not None else CelError("parse semantic version")
    return CelError("unsupported attribute value")


def _split_name(name: str, driver: str) -> tuple[str, str]:
    domain, _, rest = name.rpartition("/")
    return (domain, rest) if domain else (driver, name)


def _selector_input(driver: str, device: Mapping[str, Any]) -> DeviceInput | CelError:
    attributes: dict[str, dict[str, Any]] = defaultdict(dict)
    for name, raw in as_mapping(device.get("attributes")).items():
        value = _attribute_value(as_mapping(raw))
        if isinstance(value, CelError):
            return CelError(f"attribute {name}: {value.message}")
        domain, short = _split_name(str(name), driver)
        attributes[domain][short] = value
    capacity: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for name, raw in as_mapping(device.get("capacity")).items():
        value = as_mapping(raw).get("value") if isinstance(raw, Mapping) else raw
        try:
            amount = parse_quantity(value)
        except QuantityError:
            return CelError(f"capacity {name}: not a quantity")
        domain, short = _split_name(str(name), driver)
        capacity[domain][short] = amount
    return DeviceInput(
        driver,
        dict(attributes),
        dict(capacity),
        device.get("allowMultipleAllocations") is True,
    )


def _slice_devices(slice_: Resource) -> Iterable[Device]:
    spec = slice_.spec
    driver = str(spec.get("driver", ""))
    pool = str(as_mapping(spec.get("pool")).get("name", ""))
    for raw in map(as_mapping, as_list(spec.get("devices"))):
        basic = as_mapping(raw.get("basic"))  # resource.k8s.io/v1beta1
        device = basic or raw
        per_device = spec.get("perDeviceNodeSelection") is True
        where = device if per_device else spec
        selector = where.get("nodeSelector")
        yield Device(
            slice=slice_,
            driver=driver,
            pool=pool,
            name=str(raw.get("name", "")),
            node=str(where.get("nodeName") or ""),
            all_nodes=where.get("allNodes") is True,
            node_selector=selector if isinstance(selector, Mapping) else None,
            selector_input=_selector_input(driver, device),
            partitionable=bool(as_list(device.get("consumesCounters"))),
            taints=tuple(
                Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
                for t in map(as_mapping, as_list(device.get("taints")))
            ),
        )


def published_devices(snapshot: Snapshot) -> tuple[Device, ...]:
    """Every device of every ResourceSlice, in slice order."""
    return snapshot.derived(
        ("dra", "devices"),
        lambda s: tuple(d for sl in s.of(RESOURCE_SLICE) for d in _slice_devices(sl)),
    )


def node_devices(snapshot: Snapshot, driver: str | None = None) -> Mapping[str, tuple[Device, ...]]:
    """Node-local devices by node name, of one driver or all."""

    def build(s: Snapshot) -> Mapping[str, tuple[Device, ...]]:
        found: dict[str, list[Device]] = defaultdict(list)
        for device in published_devices(s):
            if device.node and (driver is None or device.driver == driver):
                found[device.node].append(device)
        return {name: tuple(devices) for name, devices in found.items()}

    return snapshot.derived(("dra", "node-devices", driver), build)


def device_index(snapshot: Snapshot) -> Mapping[tuple[str, str, str], Device]:
    return snapshot.derived(
        ("dra", "device-index"), lambda s: {d.key: d for d in published_devices(s)}
    )


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One way to satisfy a request: an `exactly` request, or one of its `firstAvailable`
    subrequests (named "request/subrequest")."""

    name: str
    class_name: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    admin_access: bool
    path: str
    tolerations: tuple[Mapping[str, Any], ...] = ()

    def describe(self) -> str:
        amount = "all matching devices" if self.mode == ALL_DEVICES else f"{self.count} device(s)"
        return f"request {self.name} ({amount} of DeviceClass {self.class_name or '(none)'})"


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A request of a claim: satisfied by the first of its alternatives that can be."""

    name: str
    alternatives: tuple[DeviceRequest, ...]


def claim_spec(claim: Resource) -> Mapping[str, Any]:
    """The ResourceClaimSpec of a ResourceClaim, or of the claims a template creates."""
    if claim.ref.kind == RESOURCE_CLAIM_TEMPLATE:
        return as_mapping(claim.spec.get("spec"))
    return claim.spec


def claim_spec_path(claim: Resource) -> str:
    return "spec.spec" if claim.ref.kind == RESOURCE_CLAIM_TEMPLATE else "spec"


def _device_request(raw: Mapping[str, Any], name: str, path: str) -> DeviceRequest:
    selectors = tuple(
        str(as_mapping(as_mapping(s).get("cel")).get("expression", ""))
        for s in as_list(raw.get("selectors"))
    )
    mode = str(raw.get("allocationMode") or EXACT_COUNT)
    count = raw.get("count")
    return DeviceRequest(
        name=name,
        class_name=str(raw.get("deviceClassName") or ""),
        selectors=selectors,
        mode=mode,
        count=count if isinstance(count, int) and not isinstance(count, bool) else 1,
        admin_access=raw.get("adminAccess") is True,
        path=path,
        tolerations=tuple(map(as_mapping, as_list(raw.get("tolerations")))),
    )


def claim_requests(claim: Resource) -> tuple[ClaimRequest, ...]:
    base = f"{claim_spec_path(claim)}.devices.requests"
    out = []
    for index, raw in enumerate(
        map(as_mapping, as_list(as_mapping(claim_spec(claim).get("devices")).get("requests")))
    ):
        name = str(raw.get("name", ""))
        path = f"{base}[{index}]"
        alternatives: tuple[DeviceRequest, ...]
        if isinstance(raw.get("exactly"), Mapping):
            alternatives = (_device_request(raw["exactly"], name, f"{path}.exactly"),)
        elif as_list(raw.get("firstAvailable")):
            alternatives = tuple(
                _device_request(
                    as_mapping(sub),
                    f"{name}/{as_mapping(sub).get('name', '')}",
                    f"{path}.firstAvailable[{i}]",
                )
                for i, sub in enumerate(as_list(raw.get("firstAvailable")))
            )
        else:  # resource.k8s.io/v1beta1: the request's fields at the top
            alternatives = (_device_request(raw, name, path),)
        out.append(ClaimRequest(name, alternatives))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class MatchAttributeConstraint:
    """`constraints[].matchAttribute`: every device of the listed requests (all when empty)
    has the same value of this fully qualified attribute."""

    requests: tuple[str, ...]
    attribute: str


def claim_constraints(claim: Resource) -> tuple[tuple[MatchAttributeConstraint, ...], str]:
    """The matchAttribute constraints, and what is not evaluated ("" when nothing)."""
    found, skipped = [], []
    for raw in map(
        as_mapping, as_list(as_mapping(claim_spec(claim).get("devices")).get("constraints"))
    ):
        requests = tuple(str(r) for r in as_list(raw.get("requests")))
        if raw.get("matchAttribute"):
            found.append(MatchAttributeConstraint(requests, str(raw["matchAttribute"])))
        else:
            skipped.append(", ".join(k for k in raw if k != "requests") or "an empty constraint")
    return tuple(found), "; ".join(f"constraint {s} not evaluated" for s in skipped)


# --------------------------------------------------------------------------- matching


@lru_cache(maxsize=4096)
def _compiled(expression: str) -> Selector | str:
    try:
        return compile_selector(expression)
    except NotEvaluatedError as exc:
        return str(exc)


@dataclass(frozen=True, slots=True)
class SelectorSet:
    """The class's selectors then the request's, compiled; `not_evaluated` says why the set
    cannot be evaluated ("" when it can)."""

    selectors: tuple[Selector, ...]
    not_evaluated: str

    def verdict(self, device: Device) -> bool | str:
        """True/False, or the CEL runtime error the allocator would abort with. Raises
        NotEvaluatedError when evaluating needs more than the subset."""
        if isinstance(device.selector_input, CelError):
            return device.selector_input.message
        for selector in self.selectors:
            result = selector.matches(device.selector_input)
            if isinstance(result, CelError):
                return result.message
            if not result:
                return False
        return True


def selector_set(device_class: Resource | None, request: DeviceRequest | None) -> SelectorSet:
    expressions = [
        str(as_mapping(as_mapping(s).get("cel")).get("expression", ""))
        for s in as_list(device_class.spec.get("selectors") if device_class else None)
    ]
    if request is not None:
        expressions.extend(request.selectors)
    compiled = []
    for expression in expressions:
        found = _compiled(expression)
        if isinstance(found, str):
            short = expression if len(expression) <= 80 else expression[:77] + "..."
            return SelectorSet((), f"selector {short!r} uses {found}")
        compiled.append(found)
    return SelectorSet(tuple(compiled), "")


@dataclass(frozen=True, slots=True)
class RequestMatch:
    """The published devices a request alternative can get."""

    request: DeviceRequest
    devices: tuple[Device, ...]
    errors: tuple[tuple[Device, str], ...]
    checked: int
    not_evaluated: str

    def per_node_max(self) -> tuple[int, str]:
        """The most matching devices one node can reach, and that node ("" when none)."""
        shared = sum(1 for d in self.devices if not d.node)
        counts: dict[str, int] = defaultdict(int)
        for device in self.devices:
            if device.node:
                counts[device.node] += 1
        if not counts:
            return shared, ""
        node = max(sorted(counts), key=lambda n: counts[n])
        return counts[node] + shared, node


def match_request(
    snapshot: Snapshot, request: DeviceRequest, device_class: Resource | None
) -> RequestMatch:
    """The devices of every ResourceSlice that the class's and the request's selectors
    select, the CEL errors met on the way, or why it was not evaluated."""
    selectors = selector_set(device_class, request)
    if selectors.not_evaluated:
        return RequestMatch(request, (), (), 0, selectors.not_evaluated)
    devices, errors = [], []
    checked = 0
    try:
        for device in published_devices(snapshot):
            checked += 1
            verdict = selectors.verdict(device)
            if verdict is True:
                devices.append(device)
            elif isinstance(verdict, str):
                errors.append((device, verdict))
    except NotEvaluatedError as exc:
        return RequestMatch(request, (), (), checked, f"evaluating it needs {exc}")
    return RequestMatch(request, tuple(devices), tuple(errors), checked, "")


def device_class(snapshot: Snapshot, name: str) -> Resource | None:
    return snapshot.get(DEVICE_CLASS, "", name)


def class_drivers(device_class_: Resource) -> frozenset[str] | None:
    """The drivers a DeviceClass is limited to by its selectors (`device.driver == ...`),
    None when its selectors do not say (or cannot be read)."""
    found: frozenset[str] | None = None
    for raw in as_list(device_class_.spec.get("selectors")):
        compiled = _compiled(str(as_mapping(as_mapping(raw).get("cel")).get("expression", "")))
        if isinstance(compiled, str):
            continue
        drivers = compiled.required_drivers()
        if drivers is not None:
            found = drivers if found is None else found & drivers
    return found


def selects_nvidia_gpus(snapshot: Snapshot, class_name: str) -> bool | None:
    """Whether a DeviceClass hands out NVIDIA GPUs (driver gpu.nvidia.com: whole GPUs, MIG
    slices, VFIO): by its selectors' driver, else by the published devices it selects, else by
    the names the NVIDIA DRA driver's chart gives its classes. None: cannot tell."""
    found = device_class(snapshot, class_name)
    if found is None:
        return True if class_name in NVIDIA_GPU_CLASSES else None
    drivers = class_drivers(found)
    if drivers is not None:
        return NVIDIA_GPU_DRIVER in drivers
    if snapshot.has(RESOURCE_SLICE):
        selectors = selector_set(found, None)
        if not selectors.not_evaluated:
            try:
                return any(
                    selectors.verdict(d) is True
                    for d in published_devices(snapshot)
                    if d.driver == NVIDIA_GPU_DRIVER
                )
            except NotEvaluatedError:
                return None
    return None


def extended_resource_classes(snapshot: Snapshot) -> Mapping[str, Resource]:
    """Extended resource name -> the DeviceClass that serves it through DRA (KEP-5004):
    `spec.extendedResourceName` (the class created last wins, then the first name), and the
    implicit deviceclass.resource.kubernetes.io/<class> of every class."""

    def build(s: Snapshot) -> Mapping[str, Resource]:
        out: dict[str, Resource] = {}
        named: dict[str, list[Resource]] = defaultdict(list)
        for found in s.of(DEVICE_CLASS):
            out[IMPLICIT_EXTENDED_PREFIX + found.ref.name] = found
            name = found.spec.get("extendedResourceName")
            if isinstance(name, str) and name:
                named[name].append(found)
        for name, classes in named.items():
            out[name] = max(
                classes,
                key=lambda c: (
                    str(c.metadata.get("creationTimestamp") or ""),
                    _reverse(c.ref.name),
                ),
            )
        return out

    return snapshot.derived(("dra", "extended-resources"), build)


def _reverse(name: str) -> tuple[int, ...]:
    """Orders names so that max() picks the lexicographically first."""
    return (*(-ord(c) for c in name), 0)


# --------------------------------------------------------------------------- claims and pods


@dataclass(frozen=True, slots=True)
class PodClaim:
    """An entry of a pod spec's resourceClaims."""

    name: str
    claim_name: str
    template_name: str
    path: str


def pod_claims(spec: Mapping[str, Any], spec_path: str) -> tuple[PodClaim, ...]:
    out = []
    for index, raw in enumerate(map(as_mapping, as_list(spec.get("resourceClaims")))):
        out.append(
            PodClaim(
                name=str(raw.get("name", "")),
                claim_name=str(raw.get("resourceClaimName") or ""),
                template_name=str(raw.get("resourceClaimTemplateName") or ""),
                path=f"{spec_path}.resourceClaims[{index}]",
            )
        )
    return tuple(out)


def container_claims(container: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The pod claims a container uses (`resources.claims[]`): (claim name, request name or
    "" for all of the claim's requests)."""
    return tuple(
        (str(as_mapping(c).get("name", "")), str(as_mapping(c).get("request") or ""))
        for c in as_list(as_mapping(container.get("resources")).get("claims"))
    )


def generated_claim_name(pod: Resource, pod_claim: str) -> str | None:
    """The ResourceClaim the controller created for a pod's template claim
    (status.resourceClaimStatuses), None when it has not (yet)."""
    for status in map(as_mapping, as_list(pod.status.get("resourceClaimStatuses"))):
        if status.get("name") == pod_claim:
            name = status.get("resourceClaimName")
            return str(name) if name else None
    return None


def is_generated_claim(claim: Resource) -> bool:
    """A ResourceClaim made for one pod (from a template, or for its DRA-backed extended
    resources): the template or the pod is what to change, not the claim."""
    return any(
        as_mapping(ref).get("kind") == "Pod" and as_mapping(ref).get("controller") is True
        for ref in as_list(claim.metadata.get("ownerReferences"))
    )


def is_allocated(claim: Resource) -> bool:
    return isinstance(claim.status.get("allocation"), Mapping)


def claims_to_allocate(snapshot: Snapshot) -> tuple[Resource, ...]:
    """The ResourceClaimTemplates and the ResourceClaims still to be allocated, but those
    generated for one pod (their template is what to change): what a claim's author wrote."""
    return tuple(
        claim
        for claim in snapshot.of(*DRA_CLAIM_TYPES)
        if claim.ref.kind == RESOURCE_CLAIM_TEMPLATE
        or not (is_generated_claim(claim) or is_allocated(claim))
    )


def reserved_for(claim: Resource) -> tuple[ObjRef, ...]:
    return tuple(
        ObjRef("Pod", claim.ref.namespace, str(r.get("name", "")))
        for r in map(as_mapping, as_list(claim.status.get("reservedFor")))
        if r.get("resource") == "pods" and not r.get("apiGroup")
    )


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    claim: Resource
    request: str
    driver: str
    pool: str
    device: str
    node: str  # "" when the device is not node-local or not in the input

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


def allocation_node_names(claim: Resource) -> tuple[str, ...]:
    """The nodes an allocation's nodeSelector names by metadata.name (the scheduler writes
    node-local allocations that way)."""
    selector = as_mapping(as_mapping(claim.status.get("allocation")).get("nodeSelector"))
    names: list[str] = []
    for term in map(as_mapping, as_list(selector.get("nodeSelectorTerms"))):
        for field in map(as_mapping, as_list(term.get("matchFields"))):
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                names.extend(str(v) for v in as_list(field.get("values")))
    return tuple(names)


def allocated_devices(snapshot: Snapshot) -> tuple[AllocatedDevice, ...]:
    """Every device every allocated ResourceClaim holds (status.allocation.devices.results),
    with its node: the slice's, else the allocation's single node."""

    def build(s: Snapshot) -> tuple[AllocatedDevice, ...]:
        index = device_index(s)
        out = []
        for claim in s.of(RESOURCE_CLAIM):
            allocation = as_mapping(claim.status.get("allocation"))
            nodes = allocation_node_names(claim)
            for result in map(
                as_mapping, as_list(as_mapping(allocation.get("devices")).get("results"))
            ):
                key = (
                    str(result.get("driver", "")),
                    str(result.get("pool", "")),
                    str(result.get("device", "")),
                )
                published = index.get(key)
                node = published.node if published else (nodes[0] if len(nodes) == 1 else "")
                out.append(AllocatedDevice(claim, str(result.get("request", "")), *key, node))
        return tuple(out)

    return snapshot.derived(("dra", "allocated"), build)


def compute_domain_templates(snapshot: Snapshot, namespace: str) -> frozenset[str]:
    """ResourceClaimTemplates the NVIDIA DRA driver's controller creates for the
    ComputeDomains of a namespace (spec.channel.resourceClaimTemplate.name)."""
    return frozenset(
        str(
            as_mapping(as_mapping(cd.spec.get("channel")).get("resourceClaimTemplate")).get(
                "name", ""
            )
        )
        for cd in snapshot.in_namespace(COMPUTE_DOMAIN, namespace)
    ) - {""}


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """A pod template that names a ResourceClaim or ResourceClaimTemplate."""

    template: PodTemplate
    pod_claim: PodClaim


def claim_uses(snapshot: Snapshot) -> Mapping[ObjRef, tuple[ClaimUse, ...]]:
    """ResourceClaim / ResourceClaimTemplate (by reference, whether or not it exists) -> the
    pod templates of the input that name it, each attributed to its top-most controller."""

    def build(s: Snapshot) -> Mapping[ObjRef, tuple[ClaimUse, ...]]:
        found: dict[ObjRef, list[ClaimUse]] = defaultdict(list)
        for template in pod_templates(s):
            namespace = template.owner.ref.namespace
            for pod_claim in pod_claims(template.spec, template.path):
                if pod_claim.template_name:
                    ref = ObjRef(RESOURCE_CLAIM_TEMPLATE, namespace, pod_claim.template_name)
                elif pod_claim.claim_name:
                    ref = ObjRef(RESOURCE_CLAIM, namespace, pod_claim.claim_name)
                else:
                    continue
                found[ref].append(ClaimUse(template, pod_claim))
        return {ref: tuple(uses) for ref, uses in found.items()}

    return snapshot.derived(("dra", "claim-uses"), build)


def pod_claim_object(snapshot: Snapshot, namespace: str, pod_claim: PodClaim) -> Resource | None:
    """The ResourceClaimTemplate or ResourceClaim a pod claim names, when in the input."""
    if pod_claim.template_name:
        return snapshot.get(RESOURCE_CLAIM_TEMPLATE, namespace, pod_claim.template_name)
    if pod_claim.claim_name:
        return snapshot.get(RESOURCE_CLAIM, namespace, pod_claim.claim_name)
    return None


def gets_gpus_through_dra(snapshot: Snapshot, template: PodTemplate) -> bool:
    """Whether a pod asks for NVIDIA GPUs through DRA: one of its resourceClaims names a
    ResourceClaim or ResourceClaimTemplate of the input whose requests name a DeviceClass that
    hands out NVIDIA GPUs (selects_nvidia_gpus). Those GPUs are allocated by the scheduler's
    DynamicResources plugin from ResourceSlices, not counted in the node's allocatable."""
    namespace = template.owner.ref.namespace
    for pod_claim in pod_claims(template.spec, template.path):
        claim = pod_claim_object(snapshot, namespace, pod_claim)
        if claim is not None and any(
            selects_nvidia_gpus(snapshot, name) for name in claim_class_names(claim)
        ):
            return True
    return False


def claim_class_names(claim: Resource, request: str = "") -> tuple[str, ...]:
    """The DeviceClasses a claim's requests (or only `request`) name, every alternative, in
    order, once."""
    names = (
        a.class_name
        for r in claim_requests(claim)
        if not request or r.name == request
        for a in r.alternatives
        if a.class_name
    )
    return tuple(dict.fromkeys(names))
