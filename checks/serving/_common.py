"""What only the serving checks share: command-line flags, probe budgets, KServe/Knative
ownership, the model-size evidence of probe severities and the model-server images
SRV-CLASSIFY does not know yet. Model-server classification (SRV-CLASSIFY), image tags and
literal env values come from `gpu_audit.api`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_audit.api import (
    KSERVE_ISVC_LABEL,
    Container,
)


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag=value` or `--flag value`, searching inside shell scripts too."""
    for index, arg in enumerate(args):
        for token_index, token in enumerate(tokens := arg.split()):
            if token.startswith(flag + "="):
                return token[len(flag) + 1 :]
            if token == flag:
                if token_index + 1 < len(tokens):
                    return tokens[token_index + 1]
                if index + 1 < len(args):
                    return args[index + 1]
                return ""
    return None


def has_flag(args: list[str], flag: str) -> bool:
    return flag_value(args, flag) is not None


def probe_budget(probe: Mapping[str, Any]) -> int:
    """Seconds before a probe gives up on a container that never answers, with the API's
    defaults (no initial delay, period 10 s, failure threshold 3)."""
    return _int_field(probe, "initialDelaySeconds", 0) + _int_field(
        probe, "failureThreshold", 3
    ) * _int_field(probe, "periodSeconds", 10)


def _int_field(probe: Mapping[str, Any], key: str, default: int) -> int:
    value = probe.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def owned_by_kserve(container: Container) -> bool:
    """KServe runtimes inject the model repository flag and manage readiness themselves."""
    return KSERVE_ISVC_LABEL in container.template.labels or container.name == "kserve-container"


def knative_managed(container: Container) -> bool:
    return any(k.startswith("serving.knative.dev/") for k in container.template.labels)
