"""The names of GPU resources: whole GPUs, shared replicas, MIG slices (NVIDIA and AMD)."""

from __future__ import annotations

# --------------------------------------------------------------------------- GPU resources

NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_GPU_SHARED = "nvidia.com/gpu.shared"
NVIDIA_MIG_PREFIX = "nvidia.com/mig-"
AMD_GPU = "amd.com/gpu"


def is_gpu_resource(name: str) -> bool:
    """Whole GPUs, renamed/shared GPU replicas and MIG slices, NVIDIA or AMD."""
    return name in (NVIDIA_GPU, AMD_GPU) or name.startswith(
        ("nvidia.com/gpu.", "nvidia.com/gpu-", NVIDIA_MIG_PREFIX)
    )


def is_extended_resource(name: str) -> bool:
    """Resources with a domain prefix outside kubernetes.io: integers, requests == limits."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))
