import re
from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    image_repository,
    image_tag,
    is_gpu_stack_image,
    passed,
    pod_templates,
)

# CUDA/ML images whose CUDA runtime changes with the tag, whether or not the container asks
# for a GPU itself (CPU helpers in GPU pods pull the same images).
_GPU_IMAGE = re.compile(
    r"(nvidia/cuda|nvcr\.io/nvidia/|pytorch/pytorch|tensorflow/tensorflow:.*gpu|"
    r"vllm/vllm-openai|huggingface/text-generation-inference|ghcr\.io/huggingface/|"
    r"lmsysorg/sglang|rocm/)"
)
_FLOATING = frozenset(
    {"latest", "nightly", "main", "master", "dev", "develop", "stable", "edge", "rolling"}
)


@check(
    id="GPU-WL-006",
    title="CUDA and ML images are pinned to an explicit version, never latest or untagged",
    category=Category.WORKLOADS,
    severity=Severity.MEDIUM,
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
        tags (nightly, main, dev, stable, edge, latest-*) fail medium; version tags pass. Images
        of the GPU stack (operator, device plugin, DCGM...) are versioned by the operator and
        skipped. The CUDA-versus-driver comparison with GFD labels is not made.
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
        "https://github.com/JuliaContainerization/SimpleContainerGenerator.jl/pull/95",
        "https://github.com/lightgbm-org/LightGBM/issues/6520",
        "https://kubernetes.io/docs/concepts/containers/images/#image-names",
    ),
    remediation_root="pod_spec",
)
def gpu_images_pinned_to_a_version(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        for container in template.containers():
            image = container.image
            if not image or is_gpu_stack_image(image):
                continue
            if container.gpu_resource_names() or _GPU_IMAGE.search(image.lower()):
                yield _judge(container)


def _judge(container: Container) -> Result:
    image = container.image
    path = f"{container.path}.image"
    if "@sha256:" in image:
        return passed(container, f"pins {image} by digest", path=path)
    tag = image_tag(image) or None
    repository = image_repository(image)
    fix = {
        "section": "initContainers" if container.init else "containers",
        "container": container.name,
        "repository": repository,
        "example": _example(repository),
    }
    if tag is None or tag == "latest":
        cuda = repository.endswith("nvidia/cuda")
        reason = (
            "NVIDIA removed the latest tag, so it no longer pulls"
            if cuda
            else "the next pull may bring a different CUDA runtime"
        )
        return failed(
            container,
            f"uses {image} ({'no tag' if tag is None else 'latest'}): {reason}",
            path=path,
            severity=Severity.HIGH if cuda else None,
            fix=fix,
        )
    if tag in _FLOATING or tag.startswith("latest-") or tag.endswith(("-latest", "-nightly")):
        return failed(
            container, f"uses the floating tag {tag!r} of {repository}", path=path, fix=fix
        )
    return passed(container, f"pins {repository} to version tag {tag!r}", path=path)


def _example(repository: str) -> str:
    """A realistic version tag for the snippet (the user picks the real one)."""
    if repository.endswith("nvidia/cuda"):
        return "12.4.1-runtime-ubuntu22.04"
    if repository.startswith("nvcr.io/nvidia/"):
        return "24.08-py3"
    return "<version>"
