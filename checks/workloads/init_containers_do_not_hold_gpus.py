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
        # $kind $namespace/$name: $container should not ask for $resource
        initContainers:
          - name: $container
            resources:
              requests: {cpu: 500m, memory: 1Gi}   # no GPU here; the app container asks for it
        containers:
          - name: $app
            resources:
              limits: {$resource: $wanted}   # what the app containers use today
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers",
        "https://github.com/kubernetes/kubernetes/pull/56818",
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
    app_name = apps[0].name if apps else "main"
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
            fix=_fix(sidecar, app_name, resource, app_gpus),
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
                fix=_fix(init, app_name, resource, app_gpus),
            )
    if not problems:
        yield passed(
            template, f"{resource} is requested by the containers that use it for the pod's life"
        )


def _fix(container: Container, app: str, resource: str, wanted: Decimal) -> dict[str, str]:
    return {
        "container": container.name,
        "app": app,
        "resource": resource,
        "wanted": format_quantity(wanted),
    }
