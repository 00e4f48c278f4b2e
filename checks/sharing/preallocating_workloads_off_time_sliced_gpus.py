from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import (
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    Category,
    Container,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_nodes,
    gpu_pod_templates,
    passed,
    schedules_on,
    str_map,
)
from gpu_audit.checks.sharing._common import (
    PRODUCT_LABEL,
    REPLICAS_LABEL,
    SHARED_SUFFIX,
    STRATEGY_LABEL,
    capacity_of,
)


@dataclass(frozen=True, slots=True)
class Engine:
    """A serving/training engine that reserves a fraction of GPU memory at start-up."""

    name: str
    fraction: float
    setting: str  # what sets the fraction


def _words(container: Container) -> list[str]:
    raw = container.raw
    return [str(x) for x in as_list(raw.get("command")) + as_list(raw.get("args"))]


def _flag(words: Sequence[str], flag: str) -> str | None:
    """The value of `--flag value` or `--flag=value` ("" when absent)."""
    for index, word in enumerate(words):
        for part in word.split():
            if part.startswith(f"{flag}="):
                return part.split("=", 1)[1]
        if word == flag and index + 1 < len(words):
            return words[index + 1]
    return None


def _fraction(value: str | None, default: float) -> float:
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default


def _env(container: Container, name: str) -> str | None:
    entry = container.env().get(name)
    return str(entry.get("value")) if entry is not None and "value" in entry else None


def _engine(container: Container) -> Engine | None:
    """vLLM (0.9 of the device by default), TGI (--cuda-memory-fraction, 1.0), JAX (0.75
    unless XLA_PYTHON_CLIENT_PREALLOCATE=false) and TensorFlow (everything unless
    TF_FORCE_GPU_ALLOW_GROWTH=true) pre-allocate GPU memory when they start."""
    image = container.image.lower()
    words = _words(container)
    line = " ".join(words)
    if "vllm" in image or "vllm serve" in line or "vllm.entrypoints" in line:
        value = _flag(words, "--gpu-memory-utilization")
        return Engine("vLLM", _fraction(value, 0.9), "--gpu-memory-utilization")
    if "text-generation-inference" in image:
        value = _flag(words, "--cuda-memory-fraction") or _env(container, "CUDA_MEMORY_FRACTION")
        return Engine("TGI", _fraction(value, 1.0), "--cuda-memory-fraction")
    if "jax" in image and (_env(container, "XLA_PYTHON_CLIENT_PREALLOCATE") or "").lower() != (
        "false"
    ):
        value = _env(container, "XLA_PYTHON_CLIENT_MEM_FRACTION")
        return Engine("JAX", _fraction(value, 0.75), "XLA_PYTHON_CLIENT_MEM_FRACTION")
    if "tensorflow" in image and (_env(container, "TF_FORCE_GPU_ALLOW_GROWTH") or "") != "true":
        return Engine("TensorFlow", 1.0, "TF_FORCE_GPU_ALLOW_GROWTH")
    return None


def time_sliced_replicas(node: Resource) -> int:
    """How many time-sliced replicas share each GPU advertised as nvidia.com/gpu (1 when the
    node's nvidia.com/gpu is not time-sliced: no sharing, MPS, or renamed to .shared)."""
    labels = node.labels
    if labels.get(STRATEGY_LABEL) == "mps":
        return 1  # MPS caps memory per client
    replicas = labels.get(REPLICAS_LABEL, "")
    count = int(replicas) if replicas.isdigit() else 1
    renamed = bool(capacity_of(node, NVIDIA_GPU_SHARED)) or capacity_of(node, NVIDIA_GPU) == 0
    shared = labels.get(STRATEGY_LABEL) == "time-slicing" or labels.get(PRODUCT_LABEL, "").endswith(
        SHARED_SUFFIX
    )
    return count if shared and count > 1 and not renamed else 1


def _term_opts_in(expression: Mapping[str, Any]) -> bool:
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in as_list(expression.get("values"))]
    if operator == "In" and key == STRATEGY_LABEL:
        return values == ["time-slicing"]
    if operator == "In" and key == PRODUCT_LABEL:
        return bool(values) and all(v.endswith(SHARED_SUFFIX) for v in values)
    if key == REPLICAS_LABEL and operator in ("In", "Gt"):
        return bool(values) and all(v.isdigit() and int(v) >= 1 for v in values)
    return False


def opts_in_to_sharing(spec: Mapping[str, Any]) -> bool:
    """Placement that asks for shared GPUs on purpose: a selector on the -SHARED product, on
    the replicas label, or on sharing-strategy time-slicing."""
    selector = str_map(spec.get("nodeSelector"))
    if selector.get(STRATEGY_LABEL) == "time-slicing" or REPLICAS_LABEL in selector:
        return True
    if selector.get(PRODUCT_LABEL, "").endswith(SHARED_SUFFIX):
        return True
    required = as_mapping(
        as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms = [as_mapping(t) for t in as_list(required.get("nodeSelectorTerms"))]
    return bool(terms) and all(
        any(_term_opts_in(as_mapping(e)) for e in as_list(t.get("matchExpressions"))) for t in terms
    )


def _landing_nodes(template: PodTemplate, nodes: Sequence[Resource]) -> list[Resource]:
    bound = template.spec.get("nodeName")
    if template.owner.ref.kind == "Pod" and bound:
        return [n for n in nodes if n.ref.name == bound]
    return [n for n in nodes if schedules_on(template.spec, n)]


@check(
    id="GPU-SHARE-007",
    title="Workloads that pre-allocate GPU memory do not land on time-sliced GPUs by accident",
    category=Category.SHARING,
    severity=Severity.MEDIUM,
    requires=("Node", ("Pod", "Deployment", "StatefulSet", "Job", "CronJob", "DaemonSet")),
    remediation_root="pod_spec",
    rationale="""
        Time-slicing gives no memory or fault isolation between replicas, and replicas: 2
        does not halve the memory each pod sees. With renameByDefault false (the default) the
        replicas are still called nvidia.com/gpu, so a pod that meant to get a whole GPU can
        be placed on a slice. Engines that reserve memory at start-up then fail: vLLM takes
        --gpu-memory-utilization (0.9) of the device and aborts when less is free, and JAX,
        TensorFlow and TGI grab most of it too, starving the other replicas.
    """,
    detection="""
        Time-sliced nodes: GFD nvidia.com/gpu.sharing-strategy=time-slicing (or a -SHARED
        product) with nvidia.com/gpu.replicas > 1, not renamed (no nvidia.com/gpu.shared
        capacity, nvidia.com/gpu not 0) and not MPS (MPS limits memory per client). For each
        template requesting nvidia.com/gpu whose containers run a pre-allocating engine (vLLM,
        TGI, JAX without XLA_PYTHON_CLIENT_PREALLOCATE=false, TensorFlow without
        TF_FORCE_GPU_ALLOW_GROWTH=true): it fails when its selectors, affinity and tolerations
        (or a Pod's nodeName) let it land on a time-sliced node whose share (1/replicas) is
        smaller than the fraction the engine reserves. Not flagged: templates that opt in
        (selector on the -SHARED product, the replicas label or strategy time-slicing),
        requests for nvidia.com/gpu.shared, MIG resources, and workloads that allocate on
        demand. Other GPU workloads are not judged: time-slicing them is a policy choice.
    """,
    severity_evidence="""
        Medium whenever it fails: the template's placement lets it land on a time-sliced node
        in the input whose share (1/replicas) is smaller than the memory fraction its engine
        reserves. Templates that opt in to shared GPUs, and engines that allocate on demand,
        are not judged.
    """,
    remediation="""
        # $subject: keep it off time-sliced GPUs (merge into existing nodeSelectorTerms), or
        # set renameByDefault: true in the time-slicing config so shared GPUs are nvidia.com/gpu.shared
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions:
                    - {key: nvidia.com/gpu.sharing-strategy, operator: NotIn, values: ["time-slicing"]}
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html",
        "https://github.com/NVIDIA/k8s-device-plugin#with-cuda-time-slicing",
        "https://github.com/vllm-project/vllm/issues/20305",
    ),
)
def preallocating_workloads_off_time_sliced_gpus(snapshot: Snapshot) -> Iterator[Result]:
    sliced = [(n, r) for n in gpu_nodes(snapshot) if (r := time_sliced_replicas(n)) > 1]
    for template in gpu_pod_templates(snapshot):
        engines = [
            (c, e)
            for c in template.containers()
            if (c.gpu_quantity(NVIDIA_GPU) or 0) >= 1 and (e := _engine(c)) is not None
        ]
        if not engines:
            continue
        if opts_in_to_sharing(template.spec):
            yield passed(template, "asks for time-sliced GPUs on purpose")
            continue
        landing = {n.ref.name for n in _landing_nodes(template, [n for n, _ in sliced])}
        too_small = [
            (n, r, c, e)
            for n, r in sliced
            if n.ref.name in landing
            for c, e in engines
            if e.fraction > 1 / r
        ]
        if not too_small:
            yield passed(template, "cannot land on a time-sliced GPU too small for its engine")
            continue
        _, replicas, container, engine = too_small[0]
        names = ", ".join(sorted({n.ref.name for n, _, _, _ in too_small}))
        yield failed(
            container,
            f"runs {engine.name}, which reserves {engine.fraction:g} of GPU memory "
            f"({engine.setting}), but can land on time-sliced GPUs where each replica is 1/"
            f"{replicas} of the device, with no memory isolation ({names})",
            path=f"{template.path}.affinity",
            fix={"subject": f"{template.owner.ref} container {container.name}"},
        )
