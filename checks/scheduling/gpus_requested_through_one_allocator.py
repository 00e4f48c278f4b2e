from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    DEVICE_CLASS,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    check,
    claim_class_names,
    container_claims,
    extended_resource_classes,
    failed,
    gpu_quantities,
    passed,
    pod_claim_object,
    pod_claims,
    pod_templates,
    selects_nvidia_gpus,
)


def _plugin_gpus(container: Container) -> list[str]:
    """NVIDIA GPU resources the container asks the device plugin for (a positive amount)."""
    return [
        name
        for name in container.gpu_resource_names()
        if name.startswith("nvidia.com/") and (container.gpu_quantity(name) or Decimal(0)) > 0
    ]


def _dra_gpu_claims(
    snapshot: Snapshot, template: PodTemplate, container: Container
) -> tuple[list[str], bool]:
    """The container's claims that hand out NVIDIA GPUs, and whether any claim is unknown
    (its template or claim, or its class, is not in the input)."""
    namespace = template.owner.ref.namespace
    by_name = {c.name: c for c in pod_claims(template.spec, template.path)}
    found, unknown = [], False
    for name, request in container_claims(container.raw):
        pod_claim = by_name.get(name)
        claim = pod_claim_object(snapshot, namespace, pod_claim) if pod_claim else None
        if claim is None:
            unknown = True
            continue
        verdicts = [selects_nvidia_gpus(snapshot, c) for c in claim_class_names(claim, request)]
        if any(verdicts):
            found.append(f"{name}/{request}" if request else name)
        elif None in verdicts:
            unknown = True
    return found, unknown


def _served_by_dra(snapshot: Snapshot, resources: list[str]) -> list[str]:
    """Resources a DeviceClass serves through DRA (extendedResourceName) that no Node of the
    input advertises: there the scheduler allocates them from ResourceSlices too."""
    if not snapshot.has("Node"):
        return []
    mapped = extended_resource_classes(snapshot)
    advertised = {
        name
        for node in snapshot.of("Node")
        for name, v in gpu_quantities(node, "allocatable").items()
        if v > 0
    }
    return [r for r in resources if r in mapped and r not in advertised]


@check(
    id="GPU-SCHED-010",
    title="GPU pods get their GPUs from DRA or from the device plugin, not both",
    category=Category.SCHEDULING,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES, (RESOURCE_CLAIM_TEMPLATE, RESOURCE_CLAIM, DEVICE_CLASS)),
    rationale="""
        A pod that asks for GPUs both through a DRA ResourceClaim (gpu.nvidia.com,
        mig.nvidia.com) and through an nvidia.com/gpu (or MIG, or shared) limit asks two
        allocators that do not see each other. Where the device plugin and the DRA driver
        both serve a node's GPUs, one physical GPU can be handed out twice (to this pod or to
        another); where only the DRA driver runs, the nvidia.com/gpu request is unschedulable
        unless a DeviceClass maps it (extendedResourceName), and then the pod gets twice the
        GPUs; where only the device plugin runs, the claim is never allocated. The NVIDIA DRA
        driver documents one or the other per node. A ComputeDomain IMEX channel claim next to
        nvidia.com/gpu is the documented way to combine them, and passes.
    """,
    detection="""
        Pod templates of every workload kind whose containers claim a DRA request that hands
        out NVIDIA GPUs (its DeviceClass selects driver gpu.nvidia.com by its selectors or by
        the devices it matches; a class absent from the input counts when it is one the NVIDIA
        DRA driver's chart creates: gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com) and
        also request a positive nvidia.com/* GPU resource, in the same container or another.
        Templates whose claims cannot be resolved from the input are not evaluated; templates
        with GPU claims and no device-plugin GPUs, or device-plugin GPUs and only non-GPU
        claims (IMEX channels), pass.
    """,
    severity_evidence="""
        High: where the two allocators meet, the pod waits or a GPU is handed out twice.
        Medium when a DeviceClass maps the extended resource (extendedResourceName) and no
        Node of the input advertises it: both requests come from DRA and the pod only gets
        twice the GPUs it meant to.
    """,
    remediation="""
        # $kind $namespace/$name: container $container asks for $resource and for the DRA
        # claim $claim. Keep one: drop the claim (resources.claims and spec.resourceClaims),
        # or drop $resource (this patch):
        containers:
        - name: $container
          resources:
            limits:
              $resource: null
            requests:
              $resource: null
    """,
    remediation_generic="""
        # keep one way of asking for GPUs: drop the DRA claim (resources.claims and
        # spec.resourceClaims), or drop the device-plugin resource:
        containers:
        - name: <container>
          resources:
            limits:
              nvidia.com/gpu: null
            requests:
              nvidia.com/gpu: null
    """,
    remediation_root="pod_spec",
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/deployments/helm/dra-driver-nvidia-gpu/templates/validation.yaml",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml",
        "https://github.com/kubernetes/enhancements/blob/master/keps/sig-scheduling/5004-dra-extended-resource/README.md",
        "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/site/content/docs/guides/compute-domain-workloads.md",
    ),
)
def gpus_requested_through_one_allocator(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if pod_claims(template.spec, template.path):
            yield from _template(snapshot, template)


def _template(snapshot: Snapshot, template: PodTemplate) -> Iterator[Result]:
    plugin: list[tuple[Container, list[str]]] = []
    claimed: list[tuple[Container, list[str]]] = []
    unknown = False
    for container in template.containers():
        resources = _plugin_gpus(container)
        if resources:
            plugin.append((container, resources))
        claims, not_known = _dra_gpu_claims(snapshot, template, container)
        unknown = unknown or not_known
        if claims:
            claimed.append((container, claims))
    if plugin and claimed:
        container, resources = plugin[0]
        claim_container, claims = claimed[0]
        where = "" if claim_container is container else f" ({claim_container.describe()})"
        doubled = _served_by_dra(snapshot, resources)
        consequence = (
            f"a DeviceClass serves {', '.join(doubled)} through DRA and no node advertises it: "
            "the pod gets GPUs twice over"
            if doubled == resources
            else "the device plugin serves the one and the DRA driver the other, and neither "
            "sees the other's allocations: one GPU can be handed out twice, or one of the "
            "requests never fits"
        )
        yield failed(
            container,
            f"asks for {', '.join(resources)} and for NVIDIA GPUs through DRA claim "
            f"{', '.join(claims)}{where}: {consequence}",
            severity=Severity.MEDIUM if doubled == resources else None,
            fix={"container": container.name, "resource": resources[0], "claim": claims[0]},
        )
    elif claimed:
        shown = ", ".join(c for _, claims in claimed for c in claims)
        yield passed(template, f"gets its GPUs through DRA only (claim {shown})")
    elif plugin and not unknown:
        yield passed(
            template, "gets its GPUs through the device plugin; its DRA claims are not GPUs"
        )
