from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
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
        requests a GPU: sklearn/pmml formats fail (high); xgboost/lightgbm/paddle fail as
        medium (verify GPU use); for the TFServing, TorchServe and Hugging Face runtimes
        (explicit, or auto-selected for tensorflow/pytorch/huggingface) a runtimeVersion
        without -gpu, or a runtime image pinned by digest, fails. The runtime's
        serving.kserve.io/server-type annotation is read before its name. Every GPU-requesting
        container, in InferenceServices and in pod templates: CUDA_VISIBLE_DEVICES empty or -1,
        --device cpu, or an image whose repository or tag says cpu. Not flagged: Triton, vLLM
        and custom CUDA images; CPU-only InferenceServices.
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
        problems = [*_runtime_problems(snapshot, isvc, predictor), *_cpu_configured(specs)]
        if not problems:
            yield passed(isvc, "GPU request is served by a GPU-capable runtime")
        for problem, severity, fmt, version in problems:
            yield failed(
                isvc,
                problem,
                path="spec.predictor",
                severity=severity,
                fix={"problem": problem, "snippet": _runtime_snippet(fmt, version)},
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
    resources = as_mapping(spec.get("resources"))
    names = {str(k) for k in as_mapping(resources.get("limits"))}
    names |= {str(k) for k in as_mapping(resources.get("requests"))}
    return any(is_gpu_resource(n) or n.endswith("/gpu") for n in names)


def _runtime_problems(
    snapshot: Snapshot, isvc: Resource, predictor: Mapping[str, Any]
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
                Severity.MEDIUM,
                fmt,
                "",
            )
        ]
    if server not in _SUFFIX_FORMATS:
        return []
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
    if not version and "@sha256:" in image:
        return [
            (
                f"runtime image {image} is pinned by digest, so KServe does not switch it to "
                "the -gpu build",
                None,
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
