"""Model serving checks (GPU-SRV-003) on cases the fixtures do not cover."""

from __future__ import annotations

from typing import Any

from gpu_audit.model import Outcome, Severity
from tests.builders import Doc, container, pod, pod_spec, service, verdicts_of


def _torchserve(tag: str, args: list[str]) -> Doc:
    """A TorchServe pod `ts` (app=ts) of namespace serving."""
    server = container(f"pytorch/torchserve:{tag}", name="ts", gpus=None, args=args)
    return pod("ts", pod_spec(server), namespace="serving", labels={"app": "ts"})


def _public_service(target: object, **spec: Any) -> Doc:
    """A LoadBalancer Service `ts` that publishes port 8081 of the TorchServe pod."""
    ports = [{"port": 8081, "targetPort": target}]
    return service(
        "ts", "serving", type="LoadBalancer", selector={"app": "ts"}, ports=ports, **spec
    )


def test_token_auth_lowers_management_exposure_to_high() -> None:
    objects = [_torchserve("0.12.0-gpu", []), _public_service(8081)]
    assert verdicts_of("GPU-SRV-003", objects) == [
        ("Service serving/ts", Outcome.FAIL, Severity.HIGH)
    ]


def test_disabled_token_auth_keeps_management_exposure_critical() -> None:
    objects = [
        _torchserve("0.12.0-gpu", ["torchserve", "--disable-token-auth"]),
        _public_service("8081"),
    ]
    assert verdicts_of("GPU-SRV-003", objects) == [
        ("Service serving/ts", Outcome.FAIL, Severity.CRITICAL)
    ]


def test_source_ranges_open_to_the_world_are_not_a_restriction() -> None:
    world = _public_service(8081, loadBalancerSourceRanges=["10.0.0.0/8", "0.0.0.0/0"])
    objects = [_torchserve("0.8.2", []), world]
    assert verdicts_of("GPU-SRV-003", objects) == [
        ("Service serving/ts", Outcome.FAIL, Severity.CRITICAL)
    ]
