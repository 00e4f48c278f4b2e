from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    KSERVE_ISVC_LABEL,
    NVIDIA_GPU,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    image_registry_and_path,
    image_tag,
    is_gpu_resource,
    passed,
    pod_templates,
    relate,
)

ISVC = "InferenceService.serving.kserve.io"
SERVING_RUNTIME = "ServingRuntime.serving.kserve.io"
CLUSTER_SERVING_RUNTIME = "ClusterServingRuntime.serving.kserve.io"
SERVER_TYPE_ANNOTATION = "serving.kserve.io/server-type"

FRAMEWORKS = (
    "sklearn",
    "xgboost",
    "lightgbm",
    "pmml",
    "paddle",
    "tensorflow",
    "pytorch",
    "onnx",
    "triton",
    "huggingface",
)
NO_GPU_FORMATS = ("sklearn", "pmml")
CPU_ORIENTED_FORMATS = ("xgboost", "lightgbm", "paddle")
# Runtimes whose GPU build KServe selects by appending "-gpu" to the image tag, but only when
# runtimeVersion is unset and the image is not pinned by digest.
GPU_SUFFIX_RUNTIMES = {
    "kserve-tensorflow-serving": "tensorflow",
    "kserve-torchserve": "pytorch",
    "kserve-huggingfaceserver": "huggingface",
}
_SUFFIX_FORMATS = set(GPU_SUFFIX_RUNTIMES.values())


@check(
    id="GPU-SRV-004",
    title="Workloads that request GPUs run a GPU-capable model-server build",
    category=Category.SERVING,
    severity=Severity.HIGH,
    requires=((ISVC, *WORKLOAD_TYPES),),
    rationale="""
        A GPU request reserves (and bills) the device but does not make inference use it. KServe
        switches the TFServing, TorchServe and Hugging Face runtimes to their -gpu image only
        when runtimeVersion is unset and the image is not digest-pinned; sklearn and PMML have
        no GPU path at all. Containers that hide the GPU (CUDA_VISIBLE_DEVICES=-1, --device cpu,
        a -cpu image) run on CPU while blocking a GPU for every other workload.
    """,
    detection="""
        KServe InferenceServices whose predictor (model, framework spec or containers)
        requests a GPU (whole, shared or MIG): sklearn/pmml formats fail; xgboost/lightgbm/
        paddle fail (verify GPU use); for the TFServing, TorchServe and Hugging Face runtimes
        (explicit, or auto-selected for tensorflow/pytorch/huggingface) without an image of
        the predictor's own: the predictor pods KServe rendered (labelled
        serving.kserve.io/inferenceservice, container kserve-container) run an image whose tag
        is not a -gpu build; else a runtimeVersion without -gpu, a runtime image pinned by
        digest, or a GPU request without an nvidia.com/gpu limit (KServe up to 0.15.2 appends
        -gpu only for that resource, kserve#4640, fixed by kserve#4642). The runtime's
        serving.kserve.io/server-type annotation is read before its name. Every GPU-requesting
        container, in InferenceServices and in pod templates: CUDA_VISIBLE_DEVICES empty or -1,
        --device cpu, or an image whose repository or tag says cpu. Not flagged: Triton, vLLM
        and custom CUDA images; CPU-only InferenceServices.
    """,
    severity_evidence="""
        High when the input shows the GPU going unused: a runtime without a GPU path (sklearn,
        pmml), a runtimeVersion that names the CPU build, the CPU image in the predictor pods
        KServe rendered, or a container that hides the GPU from CUDA. Low when the CPU build
        is only possible: a GPU runtime image pinned by digest, a MIG or other non-nvidia.com/gpu
        request with nothing rendered to look at, xgboost/lightgbm/paddle (verify).
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        $snippet
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # an InferenceService on the CPU build of its runtime: use the runtime's GPU build
        # (or remove runtimeVersion: KServe appends -gpu itself)
        spec:
          predictor:
            model:
              modelFormat: {name: <format>}
              runtimeVersion: <version>-gpu
        ---
        # a runtime without GPU support (sklearn, pmml): drop nvidia.com/gpu from the predictor
        # (or pick a GPU runtime); a merge patch keeps the limits it does not name, so also set
        # nvidia.com/gpu: null
        spec:
          predictor:
            model:
              resources:
                limits: {cpu: "2", memory: 4Gi}
        ---
        # a GPU container that hides its GPU (CUDA_VISIBLE_DEVICES=-1, --device cpu): remove that and
        # use the CUDA build of the image, or drop the GPU request if the model is meant to run on CPU:
        containers:
          - name: <container>
            resources:
              limits: {cpu: "4", memory: 16Gi}
    """,
    references=(
        "https://kserve.github.io/website/latest/modelserving/servingruntimes/",
        "https://github.com/kserve/kserve/blob/master/pkg/controller/v1beta1/inferenceservice/utils/utils.go",
        "https://github.com/kserve/kserve/issues/4640",
        "https://github.com/kserve/kserve/pull/4642",
        "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/",
    ),
    remediation_root="pod_spec",
)
def gpu_requests_use_gpu_capable_runtimes(snapshot: Snapshot) -> Iterator[Result]:
    for isvc in snapshot.of(ISVC):
        predictor = as_mapping(isvc.spec.get("predictor"))
        specs = _predictor_specs(predictor)
        if not any(_requests_gpu(spec) for _, spec in specs):
            continue
        rendered = _rendered(snapshot, isvc)
        problems = [
            *_runtime_problems(snapshot, isvc, predictor, rendered),
            *_cpu_configured(specs),
        ]
        if not problems:
            yield passed(isvc, "GPU request is served by a GPU-capable runtime")
        for problem, severity, fmt, version in problems:
            yield failed(
                isvc,
                problem,
                path="spec.predictor",
                severity=severity,
                fix={"problem": problem, "snippet": _runtime_snippet(fmt, version)},
                related=[relate(c, "symptom") for c in rendered],
            )
    for template in pod_templates(snapshot):
        for container in template.gpu_containers():
            found = list(_cpu_configured([("", container.raw)]))
            if not found:
                yield passed(container, "does not hide its GPU from CUDA")
            for problem, severity, _, _ in found:
                yield failed(
                    container,
                    problem,
                    path=container.path,
                    severity=severity,
                    fix={"problem": problem, "snippet": _container_snippet(container)},
                )


Problem = tuple[str, Severity | None, str, str]  # message, severity, format, suggested version


def _container_snippet(container: Container) -> str:
    """A pod-spec fragment (the check's remediation_root) for one container."""
    section = "initContainers" if container.init else "containers"
    return (
        "# remove CUDA_VISIBLE_DEVICES=-1 / --device cpu and use the CUDA build of the image,\n"
        "# or drop the GPU request if the model is meant to run on CPU:\n"
        f"{section}:\n"
        f"  - name: {container.name}\n"
        "    resources:\n"
        '      limits: {cpu: "4", memory: 16Gi}'
    )


def _runtime_snippet(fmt: str, version: str) -> str:
    if fmt in NO_GPU_FORMATS or not version:
        return (
            "# drop nvidia.com/gpu from the predictor (or pick a GPU runtime):\n"
            "spec:\n  predictor:\n    model:\n      resources:\n"
            '        limits: {cpu: "2", memory: 4Gi}'
        )
    return (
        "# use the runtime's GPU build (or remove runtimeVersion: KServe appends -gpu itself)\n"
        f"spec:\n  predictor:\n    model:\n      modelFormat: {{name: {fmt}}}\n"
        f"      runtimeVersion: {version}"
    )


def _predictor_specs(predictor: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every container-like spec of a predictor: model, framework keys, custom containers."""
    specs = [
        (key, as_mapping(predictor[key]))
        for key in ("model", *FRAMEWORKS)
        if isinstance(predictor.get(key), Mapping)
    ]
    containers = map(as_mapping, as_list(predictor.get("containers")))
    specs.extend((f"containers[{i}]", c) for i, c in enumerate(containers))
    return specs


def _requests_gpu(spec: Mapping[str, Any]) -> bool:
    return bool(_gpu_names(spec))


def _gpu_names(spec: Mapping[str, Any]) -> list[str]:
    resources = as_mapping(spec.get("resources"))
    names = {str(k) for k in as_mapping(resources.get("limits"))}
    names |= {str(k) for k in as_mapping(resources.get("requests"))}
    return sorted(n for n in names if is_gpu_resource(n) or n.endswith("/gpu"))


def _rendered(snapshot: Snapshot, isvc: Resource) -> list[Container]:
    """The predictor containers KServe rendered for the InferenceService, when the input holds
    its Deployments or Pods (transformers and explainers are other components)."""
    return [
        container
        for template in pod_templates(snapshot)
        if template.owner.ref.namespace == isvc.ref.namespace
        and template.labels.get(KSERVE_ISVC_LABEL) == isvc.ref.name
        and template.labels.get("component", "predictor") == "predictor"
        for container in template.containers(include_init=False)
        if container.name == "kserve-container"
    ]


def _gpu_build(image: str) -> bool:
    return "gpu" in image_tag(image).lower()


def _runtime_problems(
    snapshot: Snapshot, isvc: Resource, predictor: Mapping[str, Any], rendered: list[Container]
) -> list[Problem]:
    model = as_mapping(predictor.get("model"))
    framework = next((f for f in FRAMEWORKS if f in predictor), "")
    fmt = str(as_mapping(model.get("modelFormat")).get("name") or framework).lower()
    spec = model or as_mapping(predictor.get(framework))
    runtime_name = str(model.get("runtime") or "")
    runtime = _runtime(snapshot, isvc.ref.namespace, runtime_name)
    server = _server_type(runtime, runtime_name, fmt)
    version = str(spec.get("runtimeVersion") or "")
    if fmt in NO_GPU_FORMATS:
        return [(f"{fmt} runtime has no GPU support; drop the GPU request", None, fmt, "")]
    if fmt in CPU_ORIENTED_FORMATS:
        return [
            (
                f"{fmt} runtime image is CPU-oriented; verify it uses the GPU",
                Severity.LOW,
                fmt,
                "",
            )
        ]
    if server not in _SUFFIX_FORMATS or spec.get("image"):
        return []  # not a runtime KServe switches to -gpu, or an image of the predictor's own
    limits = {str(k) for k in as_mapping(as_mapping(spec.get("resources")).get("limits"))}
    gpus = ", ".join(_gpu_names(spec))
    not_counted = (
        ""
        if NVIDIA_GPU in limits
        else f"; the request is {gpus}, and KServe up to 0.15.2 appends -gpu only for an "
        f"{NVIDIA_GPU} limit"
    )
    # A rendered image says which build runs when its tag names it (a bare digest does not).
    images = sorted({c.image for c in rendered if image_tag(c.image)})
    if images:
        cpu = [i for i in images if not _gpu_build(i)]
        if not cpu:
            return []
        tag = image_tag(cpu[0]) or "<version>"
        return [
            (
                f"KServe runs {', '.join(cpu)}, the CPU build of the {server} runtime, on the "
                f"GPU it reserved{not_counted}",
                None,
                fmt,
                version if version.endswith("-gpu") else f"{tag}-gpu",
            )
        ]
    if version and not version.endswith("-gpu"):
        return [
            (
                f"GPU requested but runtimeVersion {version} is the CPU build of the {server} "
                "runtime",
                None,
                fmt,
                f"{version}-gpu",
            )
        ]
    image = _runtime_image(runtime)
    if not version and "@sha256:" in image and not _gpu_build(image):
        return [
            (
                f"runtime image {image} is pinned by digest, so KServe does not switch it to "
                "the -gpu build (verify that the digest is the GPU build)",
                Severity.LOW,
                fmt,
                "<version>-gpu",
            )
        ]
    if not version and not_counted:
        return [
            (
                f"GPU requested without runtimeVersion{not_counted}: an older KServe runs the "
                "CPU build (verify the predictor's image, or pin runtimeVersion <version>-gpu)",
                Severity.LOW,
                fmt,
                "<version>-gpu",
            )
        ]
    return []


def _runtime(snapshot: Snapshot, namespace: str, name: str) -> Resource | None:
    if not name:
        return None
    return snapshot.get(SERVING_RUNTIME, namespace, name) or snapshot.get(
        CLUSTER_SERVING_RUNTIME, "", name
    )


def _server_type(runtime: Resource | None, runtime_name: str, fmt: str) -> str:
    """tensorflow/pytorch/huggingface when KServe's -gpu tag logic applies, else ""."""
    if runtime is not None:
        annotated = runtime.annotations.get(SERVER_TYPE_ANNOTATION, "").lower()
        if annotated:
            return next((f for f in _SUFFIX_FORMATS if f in annotated), "")
    if runtime_name:
        return GPU_SUFFIX_RUNTIMES.get(runtime_name, "")
    return fmt if fmt in _SUFFIX_FORMATS else ""  # auto-selected default runtime


def _runtime_image(runtime: Resource | None) -> str:
    if runtime is None:
        return ""
    containers = [as_mapping(c) for c in as_list(runtime.spec.get("containers"))]
    return str(containers[0].get("image", "")) if containers else ""


def _cpu_configured(specs: list[tuple[str, Mapping[str, Any]]]) -> Iterator[Problem]:
    for where_, spec in specs:
        where = f"{where_}: " if where_ else ""
        env = {str(as_mapping(e).get("name")): as_mapping(e) for e in as_list(spec.get("env"))}
        cuda = env.get("CUDA_VISIBLE_DEVICES")
        if (
            cuda is not None
            and "value" in cuda
            and str(cuda.get("value") or "").strip() in ("", "-1")
        ):
            yield (f"{where}CUDA_VISIBLE_DEVICES hides the GPU from CUDA", None, "", "")
        args = [str(a) for a in as_list(spec.get("command")) + as_list(spec.get("args"))]
        words = " ".join(args).split()
        pairs = itertools.pairwise(words)
        if "--device=cpu" in words or any(a == "--device" and b == "cpu" for a, b in pairs):
            yield (f"{where}started with --device cpu", None, "", "")
        image = str(spec.get("image") or "")
        if image and _cpu_image(image):
            yield (f"{where}image {image} is a CPU build", None, "", "")


def _cpu_image(image: str) -> bool:
    repo = image_registry_and_path(image)[1]
    tag = image_tag(image).lower()
    return repo.endswith("-cpu") or "cpu" in tag.replace("-", " ").replace("_", " ").split()
