import json
from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    check,
    classify,
    failed,
    passed,
    pod_templates,
)
from gpu_audit.checks.quota._common import SYSTEM_NAMESPACES, tenant_gpu_templates

SERVING_KINDS = frozenset(
    {
        "Deployment",
        "StatefulSet",
        "ReplicaSet",
        "ReplicationController",
        "InferenceService.serving.kserve.io",
    }
)
BATCH_KINDS = frozenset(
    {"Job", "CronJob", "PyTorchJob.kubeflow.org", "MPIJob.kubeflow.org", "Job.batch.volcano.sh"}
)
# Built in to every cluster (pod-priority-preemption docs); meant for cluster components only.
SYSTEM_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
HIGH_DEFAULT = 1000000


@dataclass(frozen=True, slots=True)
class Priority:
    """What a template's pods get: the class (or "" for none) and its value, None when the
    class is not in the input."""

    name: str
    value: int | None
    preempts: bool
    missing: bool = False


@check(
    id="GPU-QUOTA-002",
    title="GPU serving outranks GPU batch work in priority, and preemption is deliberate",
    category=Category.QUOTA,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        Without priorities a research sweep and a production inference Deployment compete
        first-come first-served for GPUs: serving replicas cannot start during a scale-out and
        the scheduler cannot preempt batch work for them. The opposite mistake, batch jobs in a
        class that may preempt serving, or a high globalDefault class, lets any job evict
        serving pods; system-*-critical classes on tenant pods outrank the cluster itself.
    """,
    detection="""
        GPU pod templates outside the control plane and GPU stack namespaces. A template's
        priority is its priorityClassName (a Volcano Job's spec.priorityClassName as fallback),
        else the globalDefault class, else 0; preemptionPolicy comes from the pod, else the
        class (PreemptLowerPriority by default). Serving is a model server (vLLM, Triton, TGI,
        TEI, TF Serving, TorchServe, a KServe predictor... by image or command line, SRV-CLASSIFY)
        run by a Deployment, StatefulSet, ReplicaSet or KServe InferenceService; other
        Deployments (notebooks, dev boxes) are not compared. Serving fails when its priority is not above the lowest batch (Job, CronJob,
        PyTorchJob, MPIJob, Volcano Job) GPU priority; batch fails when it outranks some
        serving GPU workload and may preempt. system-cluster-critical / system-node-critical
        on tenant GPU pods and a priorityClassName that no PriorityClass in the input defines
        fail high; a globalDefault class of 1000000 or more fails low. Templates whose job
        carries a Kueue priority-class label are compared by Kueue, not here; classes not in
        the input are not compared.
    """,
    severity_evidence="""
        Medium when a batch GPU class outranks a model server's, or when serving sits at the
        same priority as batch while preemption is in use (a tenant pod's class with
        PreemptLowerPriority above another priority tenant pods use, so others preempt and
        serving cannot). Serving level with batch in a cluster that ranks nothing (no
        PriorityClass, or classes that preempt nobody) is low: first come first served is a
        choice, not "serving cannot preempt batch". A system class or a class missing from the
        input is high (it preempts the cluster's own components; the pods are rejected).
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
    """,
    fix_kind=FixKind.MANIFEST,
    remediation_generic="""
        # a GPU workload without a deliberate class (a system class, a missing class, serving not
        # above batch, batch above serving): a tenant class, serving shown (batch: gpu-research,
        # value 1000, preemptionPolicy Never, "GPU batch workloads")
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata:
          name: gpu-production
        value: 100000
        preemptionPolicy: PreemptLowerPriority
        description: GPU serving workloads
        ---
        # and in the pod template (spec.template.spec):
        spec:
          template:
            spec:
              priorityClassName: gpu-production
        # when that class exists with another value or preemptionPolicy (both immutable), recreate
        # it in a quiet moment: kubectl replace --force -f - with the manifest above
        # a high globalDefault class:
        #   kubectl patch priorityclass <name> --type=merge -p '{"globalDefault":false}'
    """,
    references=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/",
        "https://kubernetes.io/docs/concepts/policy/resource-quotas/#limit-priority-class-consumption-by-default",
        "https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/",
    ),
)
def gpu_workloads_use_deliberate_priority_classes(snapshot: Snapshot) -> Iterator[Result]:
    templates = [t for ts in tenant_gpu_templates(snapshot).values() for t in ts]
    if not templates:
        return
    classes = {c.ref.name: c for c in snapshot.of("PriorityClass")}
    default = next((c for c in classes.values() if c.raw.get("globalDefault") is True), None)
    priorities = [(t, _priority(snapshot, t, classes, default)) for t in templates]
    compared = [
        (t, p)
        for t, p in priorities
        if p.value is not None and not _kueue_ranked(t) and p.name not in SYSTEM_CLASSES
    ]
    batch = [p.value for t, p in compared if _kind(t) in BATCH_KINDS and p.value is not None]
    serving = [p.value for t, p in compared if _serves(t) and p.value is not None]
    context = _Context(
        min(batch, default=None),
        min(serving, default=None),
        _preemption_in_use(snapshot, classes, default),
    )
    for template, priority in priorities:
        yield _judge(template, priority, context, classes)
    if default is not None and _value(default) >= HIGH_DEFAULT:
        yield failed(
            default,
            f"is the globalDefault with value {_value(default)}: every pod without a class, "
            "any team's batch job included, gets high priority and may preempt",
            path="globalDefault",
            severity=Severity.LOW,
            fix={
                "problem": "high globalDefault",
                "snippet": f"kubectl patch priorityclass {default.ref.name} --type=merge "
                "-p '{\"globalDefault\":false}'",
            },
        )


@dataclass(frozen=True, slots=True)
class _Context:
    """What a template is compared with: the lowest batch and serving GPU priorities, and the
    preemption the tenants' classes show ("" when none)."""

    batch_min: int | None
    serving_min: int | None
    preemption: str


def _serves(template: PodTemplate) -> bool:
    """A model server run by a serving controller; a notebook Deployment is not serving."""
    return _kind(template) in SERVING_KINDS and any(
        classify(c) is not None for c in template.containers(include_init=False)
    )


def _preemption_in_use(
    snapshot: Snapshot, classes: dict[str, Resource], default: Resource | None
) -> str:
    """A tenant pod template whose class may preempt another priority that tenant pods use,
    described; "" when the tenants' classes preempt nobody."""
    used = []
    for template in pod_templates(snapshot):
        if template.owner.ref.namespace in SYSTEM_NAMESPACES:
            continue
        priority = _priority(snapshot, template, classes, default)
        if priority.value is not None:
            used.append(priority)
    lowest = min((p.value for p in used if p.value is not None), default=None)
    for priority in sorted(used, key=lambda p: -(p.value or 0)):
        if priority.preempts and lowest is not None and (priority.value or 0) > lowest:
            name = priority.name or "no class"
            return f"PriorityClass {name} ({priority.value}) preempts pods at {lowest}"
    return ""


def _kind(template: PodTemplate) -> str:
    return template.owner.ref.kind


def _kueue_ranked(template: PodTemplate) -> bool:
    return KUEUE_PRIORITY in template.owner.labels or KUEUE_PRIORITY in template.labels


def _value(priority_class: Resource) -> int:
    value = priority_class.raw.get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _priority(
    snapshot: Snapshot,
    template: PodTemplate,
    classes: dict[str, Resource],
    default: Resource | None,
) -> Priority:
    name = str(template.spec.get("priorityClassName") or "")
    if not name and _kind(template) == "Job.batch.volcano.sh":
        name = str(template.owner.spec.get("priorityClassName") or "")
    pod_policy = template.spec.get("preemptionPolicy")
    if not name and default is None:
        return Priority("", 0, pod_policy != "Never")
    if name in SYSTEM_CLASSES:
        return Priority(name, SYSTEM_CLASSES[name], pod_policy != "Never")
    found = classes.get(name) if name else default
    if found is None:
        return Priority(name, None, True, missing=snapshot.has("PriorityClass"))
    policy = pod_policy or found.raw.get("preemptionPolicy") or "PreemptLowerPriority"
    return Priority(found.ref.name, _value(found), policy != "Never")


def _judge(
    template: PodTemplate,
    priority: Priority,
    context: _Context,
    classes: dict[str, Resource],
) -> Result:
    label = f"priority {priority.value} ({priority.name or 'no class'})"
    if priority.name in SYSTEM_CLASSES:
        return failed(
            template,
            f"uses {priority.name}, reserved for cluster components: it outranks (and can "
            "preempt) the control plane and the GPU stack",
            path=f"{template.path}.priorityClassName",
            severity=Severity.HIGH,
            fix=_class_fix(template, "a tenant class instead of a system class", classes),
        )
    if priority.missing:
        return failed(
            template,
            f"names PriorityClass {priority.name}, which the input does not define: the "
            "Priority admission plugin rejects its pods",
            path=f"{template.path}.priorityClassName",
            severity=Severity.HIGH,
            fix=_class_fix(template, f"PriorityClass {priority.name} does not exist", classes),
        )
    if _kueue_ranked(template):
        return passed(template, "is ranked by a Kueue WorkloadPriorityClass at admission")
    if priority.value is None:
        return passed(template, f"names PriorityClass {priority.name}, not in the input")
    kind = _kind(template)
    batch_min, serving_min = context.batch_min, context.serving_min
    if _serves(template) and batch_min is not None and priority.value <= batch_min:
        if priority.value < batch_min:
            severity = Severity.MEDIUM
            message = (
                f"serves with {label}, below every GPU batch priority (lowest {batch_min}): "
                "batch GPU work is scheduled first and serving cannot preempt it to scale out"
            )
        elif context.preemption:
            severity = Severity.MEDIUM
            message = (
                f"serves with {label}, level with GPU batch work, while preemption is in use "
                f"({context.preemption}): serving cannot preempt batch GPU work to scale out"
            )
        else:
            severity = Severity.LOW
            message = (
                f"serves with {label}, level with GPU batch work, and no class in use preempts "
                "another: GPUs go first come first served (a serving class above batch would "
                "let scale-outs preempt batch)"
            )
        return failed(
            template,
            message,
            path=f"{template.path}.priorityClassName",
            severity=severity,
            fix=_class_fix(template, "serving cannot preempt batch GPU work", classes),
        )
    if (
        kind in BATCH_KINDS
        and serving_min is not None
        and priority.value > serving_min
        and priority.preempts
    ):
        return failed(
            template,
            f"runs batch GPU work at {label}, above a GPU model server ({serving_min}), "
            "and may preempt it",
            path=f"{template.path}.priorityClassName",
            severity=Severity.MEDIUM,
            fix=_class_fix(template, "batch GPU work can preempt serving", classes),
        )
    if kind in SERVING_KINDS and not _serves(template):
        return passed(template, f"runs at {label}; not a model server, so not ranked as serving")
    return passed(template, f"runs at {label}")


def _class_fix(template: PodTemplate, problem: str, classes: dict[str, Resource]) -> dict[str, str]:
    if _kind(template) in SERVING_KINDS:
        name, value, policy, what = "gpu-production", 100000, "PreemptLowerPriority", "serving"
    else:
        name, value, policy, what = "gpu-research", 1000, "Never", "batch"
    manifest = (
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n"
        f"metadata:\n  name: {name}\nvalue: {value}\npreemptionPolicy: {policy}\n"
        f"description: GPU {what} workloads\n"
    )
    existing = classes.get(name)
    if existing is None or (
        _value(existing) == value
        and (existing.raw.get("preemptionPolicy") or "PreemptLowerPriority") == policy
    ):
        keys = [] if "[" in template.path else template.path.split(".")
        patch = [f"{'  ' * depth}{key}:" for depth, key in enumerate(keys)]
        patch.append(f"{'  ' * len(keys)}priorityClassName: {name}")
        where = f"# and in the pod template ({template.path}):"
        return {"problem": problem, "snippet": "\n".join([f"{manifest}---", where, *patch])}
    # value and preemptionPolicy of a PriorityClass are immutable: recreate the class.
    lines = [
        f"# PriorityClass {name} exists with value {_value(existing)}, which cannot change in",
        "# place: recreate it. Running pods keep their priority until they are replaced, and",
        "# pods created while it is being replaced are rejected: do it in a quiet moment.",
        f"kubectl replace --force -f - <<'EOF'\n{manifest}EOF",
    ]
    if template.spec.get("priorityClassName") != name:
        lines.append(_use_class(template, name))
    return {"problem": problem, "snippet": "\n".join(lines)}


def _use_class(template: PodTemplate, name: str) -> str:
    """A command that points the template at the class, where its owner can take one."""
    owner = template.owner.ref
    if owner.kind in ("Job", "Pod") or "[" in template.path:
        return (
            f"# and set priorityClassName: {name} at {template.path} of {owner.kind} "
            f"{owner.namespace}/{owner.name} (recreate it: that field cannot change in place)"
        )
    body: object = {"priorityClassName": name}
    for key in reversed(template.path.split(".")):
        body = {key: body}
    kind, _, group = owner.kind.partition(".")
    resource = f"{kind.lower()}.{group}" if group else kind.lower()
    patch = json.dumps(body, separators=(",", ":"))
    return f"kubectl patch {resource}/{owner.name} -n {owner.namespace} --type=merge -p '{patch}'"
