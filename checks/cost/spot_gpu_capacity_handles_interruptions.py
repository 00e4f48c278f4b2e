import json
from collections.abc import Iterator

from gpu_audit.api import (
    NODEPOOL,
    Category,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    containers,
    failed,
    gpu_hosts,
    label_selector_matches,
    nodepool_gpu_scope,
    nodepool_requirements,
    passed,
    pod_templates,
    runs_on_spot,
    template_spec,
)

CAPACITY_TYPE = "karpenter.sh/capacity-type"
# Env names the Karpenter controller reads the SQS queue from: current and pre-v0.32.
_QUEUE_ENV = ("INTERRUPTION_QUEUE", "AWS_INTERRUPTION_QUEUE_NAME")
_NTH_IMAGE = "aws-node-termination-handler"
_NTH_QUEUE_ENV = ("ENABLE_SQS_TERMINATION_DRAINING", "QUEUE_URL")
_SERVING_KINDS = ("Deployment", "StatefulSet")


@check(
    id="GPU-COST-004",
    title="Spot GPU capacity has interruption handling, and spot GPU serving survives a reclaim",
    category=Category.COST,
    severity=Severity.HIGH,
    requires=(("Node", NODEPOOL, *_SERVING_KINDS),),
    rationale="""
        EC2 gives two minutes' notice before it reclaims a spot instance, but only a handler
        that reads the notice cordons and drains the node in time. Without Karpenter's
        interruption queue (or aws-node-termination-handler), pods get no graceful shutdown
        to checkpoint or deregister and replacement capacity is requested only after they go
        Pending. A GPU inference service with one replica on spot, or without a
        PodDisruptionBudget, goes down at every reclaim.
    """,
    detection="""
        Interruption handling: when a Karpenter NodePool on AWS (EC2NodeClass) that can launch
        GPU instances allows spot (karpenter.sh/capacity-type In spot, Exists, or NotIn
        without spot; unset means on-demand only), or a GPU node is a Karpenter spot node on
        AWS, the Karpenter controller Deployment (when it is in the input) must have a
        non-empty INTERRUPTION_QUEUE (or legacy AWS_INTERRUPTION_QUEUE_NAME) env, or
        aws-node-termination-handler must run (queue mode preferred); otherwise it fails.
        EKS managed node groups, GKE and AKS spot nodes are drained by the provider and are
        not judged. Spot serving: GPU Deployments and StatefulSets pinned to spot fail with
        fewer than 2 replicas (an HPA's minReplicas counts) or, when PodDisruptionBudgets are
        in the input, with none selecting their pods. Training on spot is GPU-DIST-005's.
    """,
    severity_evidence="""
        No interruption handling: high when GPU nodes of Karpenter on AWS run on spot now (the
        input shows them), medium when a NodePool only allows spot GPU capacity. Spot GPU
        serving with fewer than 2 replicas: medium (every reclaim is an outage); with
        replicas but no PodDisruptionBudget: low (a drain may take them all at once, but a
        reclaim takes only one node).
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic=r"""
        # a GPU Deployment or StatefulSet on spot with one replica or no PodDisruptionBudget:
        spec:
          replicas: 2   # and spread them: topologySpreadConstraints on kubernetes.io/hostname
        ---
        apiVersion: policy/v1
        kind: PodDisruptionBudget
        metadata:
          name: <name>
          namespace: <namespace>
        spec:
          minAvailable: 1
          selector:
            matchLabels: {<label>: <value>}   # the pod template's labels
        # spot GPU capacity and a Karpenter controller without interruption handling:
        #   helm upgrade karpenter oci://public.ecr.aws/karpenter/karpenter -n <namespace> --reuse-values \
        #     --set settings.interruptionQueue=<cluster-name>   # the SQS queue fed by the EventBridge spot, rebalance and health rules (not settings.interruptionQueueName)
    """,
    references=(
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html",
        "https://github.com/aws/karpenter-provider-aws/pull/2546",
        "https://github.com/eksctl-io/eksctl/issues/7697",
        "https://karpenter.sh/docs/concepts/disruption/#interruption",
        "https://kubernetes.io/docs/concepts/workloads/pods/disruptions/",
    ),
)
def spot_gpu_capacity_handles_interruptions(snapshot: Snapshot) -> Iterator[Result]:
    result = _interruption_handling(snapshot)
    if result is not None:
        yield result
    yield from _spot_serving(snapshot)


def _interruption_handling(snapshot: Snapshot) -> Result | None:
    nodes = [n.ref.name for n in gpu_hosts(snapshot) if _aws_karpenter_spot_node(n)]
    spot = [p.ref.name for p in snapshot.of(NODEPOOL) if _aws_gpu_spot_pool(p)] + nodes
    controller = next((d for d in snapshot.of("Deployment") if _is_karpenter(d)), None)
    if not spot or controller is None:
        return None
    what = ", ".join(sorted(set(spot))[:3])
    queue = _env_value(controller, _QUEUE_ENV)
    if queue:
        return passed(controller, f"reads spot interruptions from SQS queue {queue}")
    handlers = [r for r in snapshot.of("DaemonSet", "Deployment") if _has_image(r, _NTH_IMAGE)]
    if handlers:
        mode = "queue" if any(_env_value(h, _NTH_QUEUE_ENV) for h in handlers) else "IMDS"
        return passed(controller, f"relies on aws-node-termination-handler ({mode} mode)")
    now = (
        f" (spot GPU nodes now: {', '.join(sorted(nodes)[:3])})"
        if nodes
        else " (no spot GPU node in the input yet)"
    )
    return failed(
        controller,
        f"has no INTERRUPTION_QUEUE while {what} can run GPUs on spot: reclaimed nodes are "
        f"terminated without cordon and drain, so GPU pods get no time to checkpoint{now}",
        severity=Severity.HIGH if nodes else Severity.MEDIUM,
        fix={
            "problem": "no spot interruption handling",
            "snippet": "helm upgrade karpenter oci://public.ecr.aws/karpenter/karpenter "
            f"-n {controller.ref.namespace} --reuse-values \\\n"
            "  --set settings.interruptionQueue=<cluster-name>   # the SQS queue fed by the "
            "EventBridge spot, rebalance and health rules (not settings.interruptionQueueName)",
        },
    )


def _aws_gpu_spot_pool(pool: Resource) -> bool:
    ref = as_mapping(template_spec(pool.spec).get("nodeClassRef"))
    aws = ref.get("group") == "karpenter.k8s.aws" or ref.get("kind") == "EC2NodeClass"
    return aws and nodepool_gpu_scope(pool) != "none" and _allows_spot(pool)


def _allows_spot(pool: Resource) -> bool:
    for req in nodepool_requirements(pool):
        if req.get("key") != CAPACITY_TYPE:
            continue
        values = {str(v) for v in as_list(req.get("values"))}
        operator = req.get("operator")
        return (
            (operator == "In" and "spot" in values)
            or operator == "Exists"
            or (operator == "NotIn" and "spot" not in values)
        )
    return False  # Karpenter launches on-demand only unless spot is allowed


def _aws_karpenter_spot_node(node: Resource) -> bool:
    aws = str(node.spec.get("providerID", "")).startswith("aws://") or any(
        k.startswith("karpenter.k8s.aws/") for k in node.labels
    )
    return aws and node.labels.get(CAPACITY_TYPE) == "spot"


def _has_image(resource: Resource, part: str) -> bool:
    return any(part in str(c.get("image", "")) for c in containers(resource))


def _is_karpenter(deployment: Resource) -> bool:
    return _has_image(deployment, "karpenter/controller") or (
        deployment.ref.name == "karpenter" and _has_image(deployment, "karpenter")
    )


def _env_value(resource: Resource, names: tuple[str, ...]) -> str:
    for container in containers(resource):
        for entry in map(as_mapping, as_list(container.get("env"))):
            if entry.get("name") not in names:
                continue
            if entry.get("valueFrom"):
                return "(from a reference)"
            value = str(entry.get("value") or "")
            if value and value.lower() != "false":
                return value
    return ""


def _spot_serving(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot, _SERVING_KINDS):
        if template.requests_gpu and runs_on_spot(template):
            yield _judge_serving(snapshot, template)


def _judge_serving(snapshot: Snapshot, template: PodTemplate) -> Result:
    owner = template.owner
    replicas = _min_replicas(snapshot, owner)
    problems = []
    if replicas < 2:
        problems.append(f"runs {replicas} replica on spot GPUs: every reclaim is an outage")
    pdb_known = snapshot.has("PodDisruptionBudget")
    if pdb_known and not any(
        label_selector_matches(as_mapping(p.spec.get("selector")), template.labels)
        and as_mapping(p.spec.get("selector"))
        for p in snapshot.in_namespace("PodDisruptionBudget", owner.ref.namespace)
    ):
        problems.append("no PodDisruptionBudget: a drain may evict every replica at once")
    if not problems:
        return passed(template, f"serves from spot GPUs with {replicas} replicas")
    return failed(
        template,
        "; ".join(problems),
        severity=Severity.MEDIUM if replicas < 2 else Severity.LOW,
        fix={"problem": problems[0], "snippet": _serving_snippet(template)},
    )


def _min_replicas(snapshot: Snapshot, owner: Resource) -> int:
    for hpa in snapshot.in_namespace("HorizontalPodAutoscaler", owner.ref.namespace):
        target = as_mapping(hpa.spec.get("scaleTargetRef"))
        if target.get("kind") == owner.ref.kind and target.get("name") == owner.ref.name:
            value = hpa.spec.get("minReplicas", 1)
            return value if isinstance(value, int) else 1
    value = owner.spec.get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _serving_snippet(template: PodTemplate) -> str:
    owner = template.owner
    labels = json.dumps(dict(sorted(template.labels.items())) or {"app": owner.ref.name})
    return (
        "spec:\n  replicas: 2   # and spread them: topologySpreadConstraints on kubernetes.io/hostname\n"
        "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\n"
        f"metadata:\n  name: {owner.ref.name}\n  namespace: {owner.ref.namespace}\n"
        f"spec:\n  minAvailable: 1\n  selector:\n    matchLabels: {labels}"
    )
