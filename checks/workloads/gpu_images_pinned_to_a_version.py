import re
from collections import defaultdict
from collections.abc import Iterator
from typing import NamedTuple

from gpu_audit.api import (
    WORKLOAD_TYPES,
    AdmissionRule,
    Category,
    Container,
    FixKind,
    ObjRef,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    image_repository,
    image_tag,
    is_gpu_stack_image,
    passed,
    pod_is_active,
    pod_templates,
    top_owner,
)
from gpu_audit.checks.workloads._common import CUDA_IMAGE, is_cuda_image

_FLOATING = frozenset(
    {"latest", "nightly", "main", "master", "dev", "develop", "stable", "edge", "rolling"}
)
# Template placeholders that a renderer (Helm, envsubst, kustomize, a CI job) replaces before
# the manifest reaches a cluster: $IMAGE, ${IMAGE}, $(IMAGE), {{ .Values.image }}, <image>.
_PLACEHOLDER = re.compile(r"\$[{(]?[A-Za-z_]|\{\{|\}\}|<[^<>]*>|%\{")
# A CUDA release named in the reference (repository or tag): cuda12.4, cuda-12.4.1, cu121,
# cu118. A major version alone (cuda12) still moves between minor releases.
_CUDA_PIN = re.compile(r"(?<![a-z0-9])(cuda[-_]?\d{2}\.\d+|cu\d{3,4})(?![0-9])")


@check(
    id="GPU-WL-006",
    title="CUDA and ML images are pinned to an explicit version, never latest or untagged",
    category=Category.WORKLOADS,
    severity=Severity.LOW,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        A floating tag silently changes the CUDA runtime between pod restarts, so a
        rescheduled worker can fail with "CUDA driver version is insufficient for CUDA runtime
        version" on nodes with an older driver. NVIDIA no longer publishes a latest tag for
        nvidia/cuda and deletes end-of-life CUDA tags, so an unpinned nvidia/cuda reference
        fails at pull time.
    """,
    detection="""
        Containers that ask for GPUs or run a CUDA/ML image (nvidia/cuda, nvcr.io/nvidia/*,
        pytorch/pytorch, tensorflow GPU tags, vLLM, TGI, SGLang, ROCm). A digest passes; no tag
        or latest fails (high for nvidia/cuda, whose latest tag no longer resolves); floating
        tags (nightly, main, dev, stable, edge, latest-*) fail; version tags pass. A
        reference whose repository or tag already names the CUDA release (cuda12.4, cu121;
        NGC YY.MM tags are version tags) passes: the CUDA runtime cannot drift. Template
        placeholders ($IMAGE_URL, ${TAG}, {{ .Values.image }}, <image>) are not values and are
        not evaluated. Images of the GPU stack (operator, device plugin, DCGM...) are
        versioned by the operator and skipped. The CUDA-versus-driver comparison with GFD
        labels is not made.
    """,
    severity_evidence="""
        Critical for nvidia/cuda without a tag or on latest in a GPU pod (NVIDIA removed the
        latest tag: every pull fails with "manifest unknown", high in a pod without GPUs).
        Medium when the workload's pods in the input already run different image digests
        (status imageID) of the same floating reference: the drift has happened. Otherwise a
        floating or missing tag is low: nothing shows that the next build needs a newer
        driver than the nodes have.
    """,
    remediation="""
        # $kind $namespace/$name, container $container
        $section:
          - name: $container
            image: $repository:$example   # a version tag, ideally @sha256:<digest>
        # the digest a running pod resolved: kubectl get pods -n $namespace -o jsonpath='{..imageID}'
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://github.com/NVIDIA/nvidia-docker/issues/1454",
        "https://github.com/JuliaContainerization/SimpleContainerGenerator.jl/pull/95",
        "https://github.com/lightgbm-org/LightGBM/issues/6520",
        "https://kubernetes.io/docs/concepts/containers/images/#image-names",
    ),
    remediation_root="pod_spec",
    admission=AdmissionRule(
        scope="container",
        where=f"""
            has(c.image) && c.image != '' && !@stack_image(c.image)
            && !c.image.matches(r'{_PLACEHOLDER.pattern}')
            && (@gpu(c) || c.image.lowerAscii().matches(r'{CUDA_IMAGE.pattern}'))
        """,
        valid=f"""
            c.image.contains('@sha256:')
            || [c.image.trim().split('@')[0]].all(n,
                 [n.lastIndexOf(':') > n.lastIndexOf('/')
                  ? n.substring(n.lastIndexOf(':') + 1) : ''].all(tag,
                   !(tag == '' || tag in {sorted(_FLOATING)} || tag.startsWith('latest-')
                     || tag.endsWith('-latest') || tag.endsWith('-nightly'))
                   || (!((tag == '' ? n : n.substring(0, n.lastIndexOf(':')))
                          .lowerAscii().endsWith('nvidia/cuda') && tag in ['', 'latest'])
                       && c.image.lowerAscii().matches(
                          r'(^|[^a-z0-9])(cuda[-_]?[0-9]{{2}}[.][0-9]+|cu[0-9]{{3,4}})([^0-9]|$)'))))
        """,
        message="runs a CUDA or ML image without a version: no tag, latest or another floating "
        "tag (nvidia/cuda has no latest tag any more)",
        note="the medium severity of drift already seen in running pods is left to scans",
    ),
)
def gpu_images_pinned_to_a_version(snapshot: Snapshot) -> Iterator[Result]:
    judged: list[Result | _Floating] = []
    drifting: set[str] = set()
    for template in pod_templates(snapshot):
        for container in template.containers():
            image = container.image
            if not image or is_gpu_stack_image(image) or _PLACEHOLDER.search(image):
                continue
            if container.gpu_resource_names() or is_cuda_image(image):
                verdict = _judge(container)
                if isinstance(verdict, _Floating):
                    drifting.add(image)
                judged.append(verdict)
    # Only the references that float are looked up in the pods' statuses: most clusters
    # have few, and a pass over every pod for all of them cost a second at 150,000 pods.
    digests = _running_digests(snapshot, drifting) if drifting else {}
    for verdict in judged:
        if isinstance(verdict, _Floating):
            container = verdict.container
            key = (container.template.owner.ref, container.name, container.image)
            yield _floating_tag(verdict, digests.get(key, set()))
        else:
            yield verdict


class _Floating(NamedTuple):
    """A container on a floating tag, judged once the digests its workload's pods run are
    known (_floating_tag)."""

    container: Container
    repository: str
    what: str  # "no tag", "the floating tag 'nightly'"


def _running_digests(
    snapshot: Snapshot, images: set[str]
) -> dict[tuple[ObjRef, str, str], set[str]]:
    """The image digests (status imageID) the active pods of each workload run, by top-most
    owner, container name and image reference, for the references in `images`."""
    found: dict[tuple[ObjRef, str, str], set[str]] = defaultdict(set)
    for pod in snapshot.of("Pod"):
        if not pod_is_active(pod):
            continue
        wanted = {
            str(c.get("name", "")): image
            for key in ("containers", "initContainers")
            for c in map(as_mapping, as_list(pod.spec.get(key)))
            if (image := str(c.get("image", ""))) in images
        }
        if not wanted:
            continue
        owner = top_owner(snapshot, pod).ref
        for key in ("containerStatuses", "initContainerStatuses"):
            for status in map(as_mapping, as_list(pod.status.get(key))):
                name = str(status.get("name", ""))
                image_id = str(status.get("imageID") or "")
                if "@sha256:" in image_id and name in wanted:
                    digest = image_id.rsplit("@", 1)[1]
                    found[(owner, name, wanted[name])].add(digest)
    return found


def _judge(container: Container) -> Result | _Floating:
    """The result for a container, or its floating tag, whose severity depends on the digests
    its workload's pods run."""
    image = container.image
    path = f"{container.path}.image"
    if "@sha256:" in image:
        return passed(container, f"pins {image} by digest", path=path)
    tag = image_tag(image) or None
    repository = image_repository(image)
    floating = (
        tag is None
        or tag in _FLOATING
        or tag.startswith("latest-")
        or tag.endswith(("-latest", "-nightly"))
    )
    if not floating:
        return passed(container, f"pins {repository} to version tag {tag!r}", path=path)
    what = "no tag" if tag is None else f"the floating tag {tag!r}"
    if repository.endswith("nvidia/cuda") and tag in (None, "latest"):
        gpu_pod = container.template.requests_gpu
        return failed(
            container,
            f"uses {image} ({tag or 'no tag'}): NVIDIA removed the latest tag, so it no "
            "longer pulls" + (" and the GPU pod never starts" if gpu_pod else ""),
            path=path,
            severity=Severity.CRITICAL if gpu_pod else Severity.HIGH,
            fix=_fix(container, repository),
        )
    pinned = _CUDA_PIN.search(image.lower())
    if pinned:
        return passed(
            container,
            f"uses {what} of {repository}, but the reference pins CUDA ({pinned.group(1)}): "
            "the CUDA runtime cannot drift under the node's driver",
            path=path,
        )
    return _Floating(container, repository, what)


def _floating_tag(floating: _Floating, digests: set[str]) -> Result:
    container, repository, what = floating
    path = f"{container.path}.image"
    fix = _fix(container, repository)
    if len(digests) > 1:
        return failed(
            container,
            f"uses {what} of {repository} and its pods already run {len(digests)} different "
            "builds of it: replicas differ in CUDA runtime and framework version",
            path=path,
            severity=Severity.MEDIUM,
            fix=fix,
        )
    return failed(
        container,
        f"uses {what} of {repository}: the next pull may bring a different CUDA runtime "
        "(nothing in the input shows that it has drifted yet)",
        path=path,
        severity=Severity.LOW,
        fix=fix,
    )


def _fix(container: Container, repository: str) -> dict[str, str]:
    return {
        "section": "initContainers" if container.init else "containers",
        "container": container.name,
        "repository": repository,
        "example": _example(repository),
    }


def _example(repository: str) -> str:
    """A realistic version tag for the snippet (the user picks the real one)."""
    if repository.endswith("nvidia/cuda"):
        return "12.4.1-runtime-ubuntu22.04"
    if repository.startswith("nvcr.io/nvidia/"):
        return "24.08-py3"
    return "<version>"
