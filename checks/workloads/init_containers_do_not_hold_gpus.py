import json
from collections.abc import Iterator
from decimal import Decimal

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    format_quantity,
    gpu_pod_templates,
    is_gpu_stack_image,
    passed,
)
from gpu_audit.checks.workloads._common import is_cuda_image


@check(
    id="GPU-WL-002",
    title="GPUs are not requested by init containers or sidecars that do not need them",
    category=Category.WORKLOADS,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        A pod's effective request is the larger of its app containers plus sidecars and its
        biggest init container, and the node keeps that reservation for the pod's whole life.
        An init container that asks for more GPUs than the app containers (a model download,
        an nvidia-smi probe) holds the extra GPUs idle until the pod ends; a native sidecar
        with a GPU adds to the app containers' GPUs for as long as the pod runs.
    """,
    detection="""
        Per GPU pod template and GPU resource: a regular init container asking for more than
        the app containers plus sidecars fails (high when the app containers ask for none);
        a native sidecar (init container with restartPolicy Always) asking for GPUs fails.
        Init containers asking for no more than the app containers pass: their devices are
        handed on to the app containers. Pods made only of GPU-stack images (the operator's
        CUDA validators) are skipped.
    """,
    severity_evidence="""
        The arithmetic of the spec is the evidence: GPUs an init container asks for beyond the
        app containers stay reserved and idle for the pod's life (medium), and all of them
        when the app containers ask for none (high: the workload holds GPUs it never gets to
        use). A native sidecar with GPUs is medium when its image is not a CUDA/ML image (a
        log shipper or proxy given a GPU by mistake), low when it is one: it may well use its
        GPU alongside the app.
    """,
    remediation="""
        # $kind $namespace/$name: $container $action
        $section:
          - name: $container
            resources: $resources
    """,
    remediation_generic="""
        # an init container asking for more GPUs than the app containers: ask for theirs (its
        # devices are handed on to them); the request too where the container sets one, and
        # in a Pod (the API server defaults a Pod's missing request to its limit)
        initContainers:
          - name: <container>
            resources:
              limits: {nvidia.com/gpu: <the app containers' GPUs>}
              requests: {nvidia.com/gpu: <the app containers' GPUs>}
        # a native sidecar, or an init container of a pod whose app containers ask for none:
        # no GPU at all (null removes the key; a GPU left as a limit or a request is still
        # allocated)
        #       limits: {nvidia.com/gpu: null}
        #       requests: {nvidia.com/gpu: null}
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers",
        "https://github.com/kubernetes/kubernetes/pull/56818",
        "https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#consuming-extended-resources",
        "https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/#notes-on-the-strategic-merge-patch",
    ),
    remediation_root="pod_spec",
)
def init_containers_do_not_hold_gpus(snapshot: Snapshot) -> Iterator[Result]:
    for template in gpu_pod_templates(snapshot):
        if all(is_gpu_stack_image(c.image) for c in template.containers()):
            continue
        resources = {n for c in template.containers() for n in c.gpu_resource_names()}
        for resource in sorted(resources):
            yield from _judge(template, resource)


def _amount(container: Container, resource: str) -> Decimal:
    return container.gpu_quantity(resource) or Decimal(0)


def _judge(template: PodTemplate, resource: str) -> Iterator[Result]:
    containers = template.containers()
    apps = [c for c in containers if not c.init]
    sidecars = [c for c in containers if c.is_sidecar]
    inits = [c for c in containers if c.init and not c.is_sidecar]
    app_gpus = sum((_amount(c, resource) for c in apps), Decimal(0))
    side_gpus = sum((_amount(c, resource) for c in sidecars), Decimal(0))
    problems = False
    for sidecar in (c for c in sidecars if _amount(c, resource) > 0):
        problems = True
        uses_cuda = is_cuda_image(sidecar.image)
        note = (
            f"; its image {sidecar.image} may use it, check that it must"
            if uses_cuda
            else f"; nothing in its image {sidecar.image} uses a GPU"
        )
        yield failed(
            sidecar,
            f"is a sidecar asking for {format_quantity(_amount(sidecar, resource))} {resource}, "
            f"held for the pod's whole life on top of the app containers'{note}",
            path=f"{sidecar.path}.resources",
            severity=Severity.LOW if uses_cuda else Severity.MEDIUM,
            fix=_fix(sidecar, resource, None),
        )
    for init in inits:
        excess = _amount(init, resource) - app_gpus - side_gpus
        if excess > 0:
            problems = True
            yield failed(
                init,
                f"asks for {format_quantity(_amount(init, resource))} {resource} but the app "
                f"containers use {format_quantity(app_gpus + side_gpus)}: "
                f"{format_quantity(excess)} stay reserved and idle for the pod's lifetime",
                path=f"{init.path}.resources",
                severity=Severity.HIGH if app_gpus == 0 else None,
                fix=_fix(init, resource, app_gpus or None),
            )
    if not problems:
        yield passed(
            template, f"{resource} is requested by the containers that use it for the pod's life"
        )


def _fix(container: Container, resource: str, wanted: Decimal | None) -> dict[str, str]:
    """The container's GPU limit, and its request, set to `wanted` or removed (None: null
    deletes a key in a strategic merge patch, a JSON patch `remove` for a custom resource).
    The request where the container sets one, and always in a Pod: the API server defaults a
    Pod's missing request to its limit (not a pod template's), and an extended resource's
    request must equal its limit, so a live Pod has both, and a GPU left in either is still
    allocated (or the change is refused)."""
    amount: int | str | None = None
    if wanted is not None:
        text = format_quantity(wanted)
        amount = int(text) if text.isdigit() else text
    resources = {"limits": {resource: amount}}
    if resource in container.requests or container.template.owner.ref.kind == "Pod":
        resources["requests"] = {resource: amount}
    action = (
        f"should ask for no {resource}"
        if wanted is None
        else f"should ask for the {amount} {resource} of the app containers (its devices are "
        "handed on to them)"
    )
    return {
        "section": "initContainers",
        "container": container.name,
        "action": action,
        "resources": json.dumps(resources, sort_keys=True),
    }
