from collections.abc import Iterator

from gpu_audit.api import (
    FABRIC_JOB_TYPES,
    Category,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    node_selection,
    passed,
    relate,
)
from gpu_audit.checks.fabric._common import on_fabric

ZONE = "topology.kubernetes.io/zone"
# Labels that name a part of the cloud's network: EKS's instance-topology layers (EKS "Place
# distributed AI/ML workloads with network topology labels"), GKE's compact-placement topology
# (GKE "Schedule GKE workloads with Topology Aware Scheduling").
_NETWORK_LABELS = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/network-node-layer-4",
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
)
_TOGETHER_KEYS = (ZONE, "topology.kubernetes.io/region", *_NETWORK_LABELS)
# Kueue Topology-Aware Scheduling: the pod set is placed inside one domain of the level named.
_KUEUE_TAS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
)
# JobSet: each child Job gets a topology domain of its own (exclusive placement).
_JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"


@check(
    id="GPU-FAB-004",
    title="Multi-node fabric jobs are kept inside one zone or network block",
    category=Category.FABRIC,
    severity=Severity.MEDIUM,
    requires=(FABRIC_JOB_TYPES, "Node"),
    rationale="""
        A distributed job is as fast as its slowest collective: ranks spread over availability
        zones or distant parts of the data-center network add hops, latency and cross-zone
        bandwidth to every all-reduce. EFA and RDMA fabrics are built for ranks placed close
        together (a placement group, one network block); nothing in Kubernetes keeps a job's
        pods together unless the spec asks for it.
    """,
    detection="""
        Multi-node GPU templates on fabric nodes (as GPU-FAB-001 finds them) whose nodes (the
        ones their GPU pods are bound to, else the ones they can be placed on) span more than
        one `topology.kubernetes.io/zone`. Passes when something keeps the pods together: a
        nodeSelector or required node affinity on a zone, region or network-topology label
        (EKS `topology.k8s.aws/network-node-layer-*`, GKE `cloud.google.com/gce-topology-*`), a
        required pod affinity with such a topology key, a Kueue topology-aware-scheduling
        annotation (`kueue.x-k8s.io/podset-required-topology` / `podset-preferred-topology`),
        or JobSet exclusive placement on such a key.
    """,
    severity_evidence="""
        Medium when the job's bound GPU pods already sit in different zones. Low when they
        could be placed in several zones and nothing keeps them together (the scheduler may
        still pick one zone). Nodes without zone labels are not judged.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions:
                    - {key: topology.kubernetes.io/zone, operator: In, values: [$zone]}
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # keep the job's pods in one zone (or use Kueue TAS: the pod template annotation
        # kueue.x-k8s.io/podset-required-topology: <level label>); the affinity is replaced whole
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions:
                    - {key: topology.kubernetes.io/zone, operator: In, values: [<zone>]}
    """,
    references=(
        "https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html",
        "https://cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas",
        "https://kueue.sigs.k8s.io/docs/tasks/run/topology_aware_scheduling/",
        "https://kubernetes.io/docs/reference/labels-annotations-taints/#topologykubernetesiozone",
    ),
    remediation_root="pod_spec",
)
def fabric_jobs_kept_in_one_zone(snapshot: Snapshot) -> Iterator[Result]:
    for target in on_fabric(snapshot):
        template = target.item.template
        nodes = target.landing.nodes
        zones = sorted({n.labels[ZONE] for n in nodes if n.labels.get(ZONE)})
        if not zones or any(not n.labels.get(ZONE) for n in nodes):
            continue  # nodes without zone labels: nothing to judge
        together = _kept_together(template)
        if len(zones) == 1 or together:
            yield passed(
                template,
                f"stays in zone {zones[0]}"
                if len(zones) == 1
                else f"is kept together by {together}",
            )
            continue
        scheduled = target.landing.scheduled
        verb = "runs in" if scheduled else "can be placed in"
        problem = (
            f"{verb} {len(zones)} zones ({', '.join(zones)}) on fabric nodes and nothing keeps "
            "its pods in one zone or network block"
        )
        yield failed(
            template,
            problem,
            severity=Severity.MEDIUM if scheduled else Severity.LOW,
            fix={"problem": problem, "zone": zones[0]},
            related=[relate(n.ref, "selected-by") for n in nodes],
        )


def _kept_together(template: PodTemplate) -> str:
    spec = template.spec
    for key, _, _ in node_selection(spec):
        if key in _TOGETHER_KEYS:
            return f"node selection on {key}"
    pod_affinity = as_mapping(as_mapping(spec.get("affinity")).get("podAffinity"))
    for term in map(
        as_mapping, as_list(pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    ):
        if term.get("topologyKey") in _TOGETHER_KEYS:
            return f"pod affinity on {term.get('topologyKey')}"
    annotations = {**template.owner.annotations, **template.annotations}
    for key in _KUEUE_TAS:
        if annotations.get(key):
            return f"Kueue topology-aware scheduling ({key}: {annotations[key]})"
    if annotations.get(_JOBSET_EXCLUSIVE) in _TOGETHER_KEYS:
        return f"JobSet exclusive placement on {annotations[_JOBSET_EXCLUSIVE]}"
    return ""
