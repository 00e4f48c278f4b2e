"""The names of GPU resources: whole GPUs, shared replicas, MIG slices (NVIDIA and AMD).

These are container GPUs: a device plugin hands them to a container that runs on the node's
kernel, with the NVIDIA container runtime injecting the driver, so the pod-spec rules of CUDA
containers (/dev/shm for NCCL and PyTorch, requests equal to limits, the nvidia runtime class,
NVIDIA_VISIBLE_DEVICES) apply to them.

Not among them: GPUs passed through whole to a virtual machine. The GPU Operator's sandbox
device plugins advertise a GPU bound to vfio-pci as `nvidia.com/pgpu` for Kata Containers and
Confidential Containers (the Kata device plugin's default P_GPU_ALIAS; "nvidia.com/pgpu is the
default resource type for GPUs", with `nvidia.com/nvswitch` for NVSwitches:
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/confidential-containers-deploy.html),
or under the device's model name when P_GPU_ALIAS is empty (nvidia.com/GH100_H100L_94GB); the
KubeVirt device plugin names them after the device too
(https://github.com/NVIDIA/kubevirt-gpu-device-plugin). The workload runs in the guest VM with
its own kernel, driver and /dev/shm, so no container GPU rule applies to such a pod.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- GPU resources

NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_GPU_SHARED = "nvidia.com/gpu.shared"
NVIDIA_MIG_PREFIX = "nvidia.com/mig-"
AMD_GPU = "amd.com/gpu"


def is_gpu_resource(name: str) -> bool:
    """Whole GPUs, renamed/shared GPU replicas and MIG slices, NVIDIA or AMD: container GPUs
    (never nvidia.com/pgpu or another GPU passed through to a VM)."""
    return name in (NVIDIA_GPU, AMD_GPU) or name.startswith(
        ("nvidia.com/gpu.", "nvidia.com/gpu-", NVIDIA_MIG_PREFIX)
    )


def is_extended_resource(name: str) -> bool:
    """Resources with a domain prefix outside kubernetes.io: integers, requests == limits."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))
