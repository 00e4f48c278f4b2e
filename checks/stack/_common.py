"""What only the STACK checks share: how to remove or patch an object, and the clock-free evidence that a pod is broken. The ClusterPolicy, its operands
and the device-plugin DaemonSets come from `gpu_audit.api`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import (
    Resource,
    as_list,
    as_mapping,
)


def helm_release(resource: Resource) -> str:
    """The Helm release that manages the object ("" when it is not Helm-managed)."""
    release = resource.annotations.get("meta.helm.sh/release-name", "")
    if release:
        return release
    if resource.labels.get("app.kubernetes.io/managed-by") == "Helm":
        return resource.labels.get("app.kubernetes.io/instance", "")
    return ""


def removal_command(resource: Resource) -> str:
    """How to remove a standalone object: uninstall its Helm release, else delete it."""
    namespace = resource.ref.namespace
    release = helm_release(resource)
    if release:
        return f"helm uninstall {release} -n {namespace}"
    return f"kubectl -n {namespace} delete {resource.ref.kind_name.lower()} {resource.ref.name}"


def policy_patch_command(policy_name: str, component: str, enabled: bool) -> str:
    value = "true" if enabled else "false"
    body = f'{{"spec":{{"{component}":{{"enabled":{value}}}}}}}'
    return f"kubectl patch clusterpolicies.nvidia.com/{policy_name} --type merge -p '{body}'"


# --------------------------------------------------------------------------- pod evidence

# Waiting reasons that do not clear by themselves: evidence without a clock.
STUCK_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
RESTARTS_AS_EVIDENCE = 3


@dataclass(frozen=True, slots=True)
class PodFailure:
    container: str  # the container to read logs from
    message: str


def _status_failure(kind: str, status: Mapping[str, Any]) -> PodFailure | None:
    """Why one container status is broken (None when it is fine or still progressing)."""
    container = str(status.get("name", ""))
    name = f"{kind} {container}"
    state = as_mapping(status.get("state"))
    waiting = as_mapping(state.get("waiting"))
    terminated = as_mapping(state.get("terminated")) or as_mapping(
        as_mapping(status.get("lastState")).get("terminated")
    )
    restarts = status.get("restartCount")
    detail = f" ({terminated.get('reason') or 'Error'}, exit code {terminated.get('exitCode')})"
    if str(waiting.get("reason", "")) in STUCK_REASONS:
        last = detail if terminated.get("exitCode") not in (None, 0) else ""
        return PodFailure(container, f"{name} is in {waiting.get('reason')}{last}")
    if isinstance(restarts, int) and restarts >= RESTARTS_AS_EVIDENCE and not status.get("ready"):
        return PodFailure(
            container, f"{name} restarted {restarts} times{detail if terminated else ''}"
        )
    if as_mapping(state.get("terminated")).get("exitCode") not in (None, 0):
        return PodFailure(container, f"{name} exited{detail}")
    return None


def pod_failure(pod: Resource) -> PodFailure | None:
    """The first clock-free sign that a pod is broken, in start order (None when none): init
    containers run one by one, so the first unfinished one is the layer to look at."""
    status = pod.status
    for init in map(as_mapping, as_list(status.get("initContainerStatuses"))):
        found = _status_failure("init container", init)
        if found:
            return found
        if as_mapping(as_mapping(init.get("state")).get("terminated")).get("exitCode") != 0:
            return None  # still running or waiting on an earlier layer: not evidence
    for main in map(as_mapping, as_list(status.get("containerStatuses"))):
        found = _status_failure("container", main)
        if found:
            return found
    for condition in map(as_mapping, as_list(status.get("conditions"))):
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return PodFailure("", f"is unschedulable: {condition.get('message', '')}")
    if status.get("phase") == "Failed":
        reason = status.get("reason") or status.get("message") or "phase Failed"
        return PodFailure("", f"failed: {reason}")
    return None
