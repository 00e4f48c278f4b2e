from __future__ import annotations

from collections.abc import Iterator, Mapping
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
    gpu_pod_templates,
    passed,
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
        HF_HOME, TRANSFORMERS_CACHE, TORCH_HOME or VLLM_CACHE_ROOT points to. Disk-backed
        without sizeLimit and without an ephemeral-storage limit on any container: medium.
        Memory-backed without sizeLimit: medium, low for /dev/shm (expected for NCCL and data
        loaders, only the bound matters). Not flagged: emptyDirs at other paths (/tmp, sockets),
        PVCs and generic ephemeral volumes.
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
    ),
    remediation_root="pod_spec",
)
def gpu_model_caches_bounded(snapshot: Snapshot) -> Iterator[Result]:
    for template in gpu_pod_templates(snapshot):
        cache_dirs = _cache_env_paths(template)
        has_ephemeral_limit = any("ephemeral-storage" in c.limits for c in template.containers())
        for index, volume in enumerate(map(as_mapping, as_list(template.spec.get("volumes")))):
            if not isinstance(volume.get("emptyDir"), Mapping):
                continue
            mounts = _mount_paths(template, str(volume.get("name", "")))
            cache_mounts = [m for m in mounts if _is_cache(m, cache_dirs)]
            if cache_mounts:
                yield _verdict(template, index, volume, cache_mounts[0], has_ephemeral_limit)


def _verdict(
    template: PodTemplate,
    index: int,
    volume: Mapping[str, Any],
    mount: str,
    has_ephemeral_limit: bool,
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
        what = "shared memory" if mount == SHM else "RAM-backed model cache"
        return failed(
            template,
            f"{what} emptyDir {name} at {mount} has no sizeLimit: sized to node memory and "
            "charged to the container's memory limit",
            path=path,
            severity=Severity.LOW if mount == SHM else None,
            fix=fix,
        )
    return failed(
        template,
        f"disk-backed model cache emptyDir {name} at {mount} has no sizeLimit and no "
        "container has an ephemeral-storage limit",
        path=path,
        fix=fix,
    )


def _cache_env_paths(template: PodTemplate) -> list[str]:
    paths = []
    for container in template.containers():
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
