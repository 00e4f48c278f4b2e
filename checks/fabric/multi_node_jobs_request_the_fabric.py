from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    EFA,
    FABRIC_JOB_TYPES,
    HUGEPAGES_2MI,
    Category,
    Container,
    FixKind,
    PodTemplate,
    RelatedRef,
    Result,
    Severity,
    Snapshot,
    check,
    fabric_family,
    failed,
    format_quantity,
    gke_interfaces,
    passed,
    per_gpu_share,
    pod_fabric,
    relate,
)
from gpu_audit.checks.fabric._common import OnFabric, on_fabric

# The hugepages AWS's EFA NCCL tests request per worker (aws-ia/terraform-aws-eks-blueprints,
# patterns/nvidia-gpu-efa; EKS user guide node-efa.md).
EFA_HUGEPAGES = "5120Mi"


@check(
    id="GPU-FAB-001",
    title="Multi-node GPU jobs on fabric nodes request the node's EFA / RDMA devices",
    category=Category.FABRIC,
    severity=Severity.MEDIUM,
    requires=(FABRIC_JOB_TYPES, "Node"),
    rationale="""
        A pod gets the node's EFA interfaces, RDMA HCAs or GKE RDMA NICs only by requesting
        the device plugin's resource. A multi-node NCCL job whose pods request none still runs:
        NCCL finds no fabric and falls back to TCP sockets on the primary interface, and an
        8-GPU H100 job trains several times slower while every dashboard is green. Requesting
        fewer devices than the node has for the pod's GPUs (1 of the 32 EFA interfaces of a
        p5.48xlarge) leaves most of the fabric's bandwidth unused. The EFA libfabric provider
        also wants the 2 MiB huge pages the EFA driver pre-allocates.
    """,
    detection="""
        GPU pod templates of multi-node jobs (PyTorchJob, MPIJob, TFJob, Volcano, Indexed Job,
        StatefulSet, JobSet, LeaderWorkerSet, Ray worker groups, TrainJob) with two or more GPU
        pods in all and, for kinds that are not distributed training by construction, NCCL,
        MPI, torchrun, DeepSpeed or a multi-node model server in the spec. Judged only when
        every node the job's GPU pods are bound to, or (none bound) every GPU node its
        selectors, affinity and taints admit with GPUs enough for a pod, advertises a fabric
        resource: `vpc.amazonaws.com/efa`, `rdma/*`, or GKE's `networking.gke.io.networks/*`.
        Fails when the pod requests none of the nodes' fabric resources (a GKE pod that names
        its networks in `networking.gke.io/interfaces` counts as attached), when it requests
        fewer EFA devices or GKE networks than the node has for its GPUs (devices x pod GPUs /
        node GPUs), and when it requests EFA without `hugepages-2Mi`.
    """,
    severity_evidence="""
        Medium when the pods run, or can only be placed, on fabric nodes and request none of
        the fabric (NCCL falls back to sockets), or hold a whole node's GPUs with fewer fabric
        devices than the node has. Low when a pod holds part of a node and requests less than
        its share, and for EFA without huge pages (libfabric uses them for performance). Jobs
        that may also land on nodes without a fabric, single-node jobs and CPU pods are not
        judged.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $fragment
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # request the node's fabric for the pod's GPUs in the GPU container (requests = limits):
        containers:
          - name: <container>
            resources:
              requests:
                vpc.amazonaws.com/efa: <efa-per-node x pod-gpus / node-gpus>   # p5.48xlarge: 32 for 8 GPUs
                hugepages-2Mi: 5120Mi        # EFA only; a container with huge pages also sets cpu or memory
              limits:
                vpc.amazonaws.com/efa: <same>
                hugepages-2Mi: 5120Mi
        # RDMA (Network Operator): rdma/<resource>: 1 (a shared device gives the pod the HCAs),
        # with the IPC_LOCK capability; GKE: one networking.gke.io.networks/<network> per NIC and
        # the networks named in the pod template's networking.gke.io/interfaces annotation.
    """,
    references=(
        "https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html",
        "https://github.com/awsdocs/amazon-eks-user-guide/blob/007269473a9d87119c4dd4b489dfefa6e713bcf3/doc_source/node-efa.md",
        "https://github.com/aws-ia/terraform-aws-eks-blueprints/tree/main/patterns/nvidia-gpu-efa",
        "https://github.com/ofiwg/libfabric/blob/main/prov/efa/docs/overview.md",
        "https://docs.nvidia.com/networking/display/kubernetes2410/customizations/cr-full-example.html",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-rdma",
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
    ),
    remediation_root="pod_spec",
)
def multi_node_jobs_request_the_fabric(snapshot: Snapshot) -> Iterator[Result]:
    for target in on_fabric(snapshot):
        yield _verdict(target)


def _verdict(target: OnFabric) -> Result:
    template = target.item.template
    shape = target.shape
    gpus = target.item.gpus
    asked = pod_fabric(template)
    families = shape.families
    whole_node = gpus >= shape.gpus > 0
    related = [relate(n.ref, "selected-by") for n in target.landing.nodes]
    if not asked and not (gke_interfaces(template) and families == {"GKE multi-network"}):
        offered = ", ".join(f"{format_quantity(v)} {k}" for k, v in sorted(shape.resources.items()))
        return _fail(
            template,
            f"{target.where} that offer{'s' if len(target.landing.nodes) == 1 else ''} "
            f"{offered}, but its pods request none of it: NCCL "
            "falls back to TCP sockets between the nodes",
            Severity.MEDIUM,
            _wanted(target),
            related,
        )
    short = _shortfall(target, asked, annotated=bool(gke_interfaces(template)))
    if short:
        return _fail(
            template,
            f"{target.where}; {short}",
            Severity.MEDIUM if whole_node else Severity.LOW,
            _wanted(target),
            related,
        )
    if asked.get(EFA, Decimal(0)) > 0 and HUGEPAGES_2MI not in _pod_hugepages(template):
        return _fail(
            template,
            f"requests {format_quantity(asked[EFA])} {EFA} without {HUGEPAGES_2MI}: the EFA "
            "libfabric provider's bounce buffers get no huge pages",
            Severity.LOW,
            _wanted(target),
            related,
        )
    return passed(
        template,
        f"{target.where} and requests "
        + ", ".join(f"{format_quantity(v)} {k}" for k, v in sorted(asked.items())),
    )


def _shortfall(target: OnFabric, asked: dict[str, Decimal], *, annotated: bool) -> str:
    """What the pod lacks of its share; GKE attaches the networks an annotation names without
    resource requests in the template, so an annotated pod's networks are not counted."""
    shape, gpus = target.shape, target.item.gpus
    if EFA in shape.resources:
        want = per_gpu_share(shape, EFA, gpus)
        have = asked.get(EFA, Decimal(0))
        if have < want:
            return (
                f"its pods request {format_quantity(have)} of the {format_quantity(shape.resources[EFA])}"
                f" {EFA} devices a node has for its {shape.gpus} GPUs ({want} for {gpus} GPUs)"
            )
    networks = [r for r in shape.resources if fabric_family(r) == "GKE multi-network"]
    requested_networks = any(fabric_family(r) == "GKE multi-network" for r in asked)
    if networks and shape.gpus > 0 and (requested_networks or not annotated):
        want = len(networks) * min(gpus, shape.gpus) // shape.gpus
        attached = sum(1 for r in asked if fabric_family(r) == "GKE multi-network")
        if attached < want:
            return (
                f"its pods request {attached} of the {len(networks)} GKE fabric networks a node has"
                f" for its {shape.gpus} GPUs ({want} for {gpus} GPUs)"
            )
    return ""


def _pod_hugepages(template: PodTemplate) -> set[str]:
    names: set[str] = set()
    for container in template.containers():
        names.update(str(k) for k in {**container.limits, **container.requests})
    return {n for n in names if n.startswith("hugepages-")}


def _gpu_container(template: PodTemplate) -> Container | None:
    gpu = [c for c in template.gpu_containers() if not c.init or c.is_sidecar]
    return gpu[0] if gpu else None


def _wanted(target: OnFabric) -> dict[str, str]:
    """The resources the GPU container should request, as a YAML mapping."""
    shape, gpus = target.shape, target.item.gpus
    out: dict[str, str] = {}
    if EFA in shape.resources:
        out[EFA] = str(max(per_gpu_share(shape, EFA, gpus), 1))
    rdma = sorted(r for r in shape.resources if fabric_family(r) == "RDMA")
    if rdma:
        out[rdma[0]] = "1"
    networks = sorted(r for r in shape.resources if fabric_family(r) == "GKE multi-network")
    if networks and shape.gpus > 0:
        keep = max(len(networks) * min(gpus, shape.gpus) // shape.gpus, 1)
        out.update(dict.fromkeys(networks[:keep], "1"))
    return out


def _fail(
    template: PodTemplate,
    problem: str,
    severity: Severity,
    wanted: dict[str, str],
    related: list[RelatedRef],
) -> Result:
    container = _gpu_container(template)
    name = container.name if container else "<container>"
    resources = dict(wanted)
    notes = []
    if EFA in resources:
        sets_cpu_or_memory = container is not None and any(
            k in ("cpu", "memory") for k in {**container.limits, **container.requests}
        )
        if sets_cpu_or_memory:
            resources[HUGEPAGES_2MI] = EFA_HUGEPAGES
        else:
            notes.append(
                f"# also {HUGEPAGES_2MI}: {EFA_HUGEPAGES} once the container requests cpu or memory"
            )
    if any(fabric_family(r) == "RDMA" for r in resources):
        notes.append("# RDMA verbs also need the IPC_LOCK capability in the container")
    if any(fabric_family(r) == "GKE multi-network" for r in resources):
        notes.append(
            "# and name the networks in the pod template's networking.gke.io/interfaces annotation"
        )
    body = "".join(f"          {k}: {v}\n" for k, v in resources.items())
    fragment = "\n".join(notes) + ("\n" if notes else "")
    fragment += (
        f"containers:\n  - name: {name}\n    resources:\n"
        f"      requests:\n{body.replace('          ', '        ')}"
        f"      limits:\n{body.replace('          ', '        ')}"
    ).rstrip("\n")
    return failed(
        template,
        problem,
        severity=severity,
        fix={"problem": problem, "fragment": fragment},
        related=related,
    )
