from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
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
    gpu_nodes,
    gpu_pod_templates,
    image_registry_and_path,
    model_size,
    passed,
    quantities,
)

CACHE_ENV = (
    "HF_HOME",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "HF_HUB_CACHE",
    "TORCH_HOME",
    "VLLM_CACHE_ROOT",
    "XDG_CACHE_HOME",
    "MODEL_DIR",
    "TRITON_CACHE_DIR",
)
CACHE_PATHS = (
    "/root/.cache",
    "/.cache",
    "/models",
    "/model",
    "/weights",
    "/hf",
    "/cache",
    "/data/models",
    "/mnt/models",
    "/dev/shm",
)
SHM = "/dev/shm"
GB = Decimal(10**9)
# Without a node or memory limit in the input to compare with, weights from this size on fill a
# typical GPU node's boot disk or a good share of its memory by themselves.
_UNBOUNDED_EVIDENCE_GB = 100


@check(
    id="GPU-STO-004",
    title="Model and weight caches on GPU pods use bounded volumes",
    category=Category.STORAGE,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        LLM weights are tens to hundreds of GB. An unbounded disk-backed emptyDir fills the
        node's ephemeral storage: the kubelet reports DiskPressure and evicts every pod on an
        expensive GPU node. A medium: Memory emptyDir without sizeLimit is sized to the node's
        allocatable memory and its files count against the container's memory limit, so a
        model download ends in an OOM kill mid-load.
    """,
    detection="""
        GPU pod templates: emptyDir volumes mounted at a cache-like path (/root/.cache, /models,
        /weights, /cache, /mnt/models, ...) or containing the directory an env var such as
        HF_HOME, TRANSFORMERS_CACHE, TORCH_HOME or VLLM_CACHE_ROOT points to (or the image
        sets: /data for TGI), KServe's storage-initializer volume at /mnt/models included. Reported: disk-backed without
        sizeLimit and without an ephemeral-storage limit on any container; memory-backed
        without sizeLimit. Not flagged: emptyDirs at other paths (/tmp, sockets), PVCs and
        generic ephemeral volumes.
    """,
    severity_evidence="""
        Medium when the model the pod names (a parameter count in its name: 2 bytes a
        parameter, less for FP8/INT4 names) fills half of what bounds the cache: the smallest
        GPU node's allocatable ephemeral storage for a disk-backed cache, the pod's memory
        limit (else the smallest GPU node's memory) for a memory-backed one; 100 GB when the
        input holds neither. Otherwise low, and /dev/shm is always low (expected for NCCL and
        data loaders, only the bound matters).
    """,
    remediation="""
        # $kind $namespace/$name, volume $volume mounted at $mount
        volumes:
          - name: $volume
            emptyDir:
              $medium_line
              sizeLimit: $suggested
        # better for large models: a generic ephemeral volume or a shared ReadOnlyMany model PVC
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic="""
        # <kind> <namespace>/<name>, volume <volume> mounted at <mount>
        volumes:
          - name: <volume>
            emptyDir:
              medium: Memory   # when it is memory-backed (/dev/shm); a disk-backed one keeps no medium
              sizeLimit: 16Gi  # memory-backed; disk-backed (node ephemeral storage): 200Gi
        # better for large models: a generic ephemeral volume or a shared ReadOnlyMany model PVC
    """,
    references=(
        "https://kubernetes.io/docs/concepts/storage/volumes/#emptydir",
        "https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/",
        "https://github.com/huggingface/text-generation-inference/blob/main/Dockerfile",
    ),
    remediation_root="pod_spec",
)
def gpu_model_caches_bounded(snapshot: Snapshot) -> Iterator[Result]:
    nodes = [quantities(n.status.get("allocatable")) for n in gpu_nodes(snapshot)]
    node_disk = min(
        (q["ephemeral-storage"] for q in nodes if "ephemeral-storage" in q), default=None
    )
    node_memory = min((q["memory"] for q in nodes if "memory" in q), default=None)
    for template in gpu_pod_templates(snapshot):
        cache_dirs = _cache_env_paths(template)
        has_ephemeral_limit = any("ephemeral-storage" in c.limits for c in template.containers())
        main = template.containers(include_init=False)
        limits = [q["memory"] for c in main if "memory" in (q := quantities(c.limits))]
        # The pod's memory is bounded only when every container has a limit.
        memory_limit = sum(limits, Decimal(0)) if main and len(limits) == len(main) else None
        bounds = {"disk": node_disk, "memory": memory_limit or node_memory}
        for index, volume in enumerate(map(as_mapping, as_list(template.spec.get("volumes")))):
            if not isinstance(volume.get("emptyDir"), Mapping):
                continue
            mounts = _mount_paths(template, str(volume.get("name", "")))
            cache_mounts = [m for m in mounts if _is_cache(m, cache_dirs)]
            if cache_mounts:
                yield _verdict(
                    template, index, volume, cache_mounts[0], has_ephemeral_limit, bounds
                )


def _weight_evidence(template: PodTemplate, bound: Decimal | None, what: str) -> tuple[bool, str]:
    """Whether the named model fills half of `bound` (bytes), and the sentence that says so."""
    weights = model_size(template)
    if weights is None:
        return False, "no model size in the spec to compare with"
    name, gb = weights.name, weights.weights_gb
    size = Decimal(str(gb)) * GB
    if bound is not None and bound > 0:
        share = size / bound
        text = f"the model {name} (~{gb:.0f} GB of weights) is {share:.0%} of {what}"
        return share >= Decimal("0.5"), text
    text = f"the model {name} has ~{gb:.0f} GB of weights"
    return gb >= _UNBOUNDED_EVIDENCE_GB, text


def _verdict(
    template: PodTemplate,
    index: int,
    volume: Mapping[str, Any],
    mount: str,
    has_ephemeral_limit: bool,
    bounds: Mapping[str, Decimal | None],
) -> Result:
    empty_dir = as_mapping(volume.get("emptyDir"))
    name = str(volume.get("name", ""))
    memory = empty_dir.get("medium") == "Memory"
    path = f"{template.path}.volumes[{index}].emptyDir"
    if empty_dir.get("sizeLimit"):
        return passed(
            template, f"emptyDir {name} at {mount} has sizeLimit {empty_dir['sizeLimit']}"
        )
    if not memory and has_ephemeral_limit:
        return passed(
            template, f"emptyDir {name} at {mount} is bounded by ephemeral-storage limits"
        )
    fix = {
        "volume": name,
        "mount": mount,
        "medium_line": "medium: Memory" if memory else "# disk-backed (node ephemeral storage)",
        "suggested": "16Gi" if memory else "200Gi",
    }
    if memory:
        if mount == SHM:
            return failed(
                template,
                f"shared memory emptyDir {name} at {mount} has no sizeLimit: sized to node "
                "memory and charged to the container's memory limit",
                path=path,
                severity=Severity.LOW,
                fix=fix,
            )
        evidenced, why = _weight_evidence(template, bounds["memory"], "the memory that bounds it")
        return failed(
            template,
            f"RAM-backed model cache emptyDir {name} at {mount} has no sizeLimit: sized to "
            f"node memory and charged to the container's memory limit; {why}",
            path=path,
            severity=Severity.MEDIUM if evidenced else Severity.LOW,
            fix=fix,
        )
    evidenced, why = _weight_evidence(
        template, bounds["disk"], "the smallest GPU node's allocatable ephemeral storage"
    )
    return failed(
        template,
        f"disk-backed model cache emptyDir {name} at {mount} has no sizeLimit and no "
        f"container has an ephemeral-storage limit; {why}",
        path=path,
        severity=Severity.MEDIUM if evidenced else Severity.LOW,
        fix=fix,
    )


# Images whose own environment points the model cache somewhere: TGI (and the Hugging Face
# containers that package it) sets HUGGINGFACE_HUB_CACHE=/data in its Dockerfile.
_IMAGE_CACHE_DIRS = (("text-generation-inference", "/data"), ("tgi-inference", "/data"))


def _cache_env_paths(template: PodTemplate) -> list[str]:
    paths = []
    for container in template.containers():
        repository = image_registry_and_path(container.image)[1]
        paths += [d for part, d in _IMAGE_CACHE_DIRS if part in repository]
        for key in CACHE_ENV:
            value = as_mapping(container.env().get(key)).get("value")
            if isinstance(value, str) and value.startswith("/"):
                paths.append(value.rstrip("/"))
    return paths


def _mount_paths(template: PodTemplate, volume: str) -> list[str]:
    return [
        str(m.get("mountPath", "")).rstrip("/")
        for c in template.containers()
        for m in map(as_mapping, as_list(c.raw.get("volumeMounts")))
        if m.get("name") == volume and m.get("mountPath")
    ]


def _is_cache(mount: str, cache_dirs: list[str]) -> bool:
    if any(mount == p or mount.startswith(p + "/") or mount.endswith(p) for p in CACHE_PATHS):
        return True
    return any(d == mount or d.startswith(mount + "/") for d in cache_dirs)
