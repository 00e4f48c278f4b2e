"""Edge cases of the serving and network/security checks that fixtures cannot pin down."""

from __future__ import annotations

from typing import Any

from gpu_audit.engine import run_check
from gpu_audit.model import ObjRef, Outcome, Resource, Severity, SourceLocation
from gpu_audit.registry import load_checks
from gpu_audit.snapshot import Snapshot

CHECKS = load_checks(plugins=False)


def _resource(kind: str, namespace: str, name: str, body: dict[str, Any]) -> Resource:
    raw = {"metadata": {"name": name, "namespace": namespace}, **body}
    return Resource(ObjRef(kind, namespace, name), "v1", raw, SourceLocation("test"))


def _torchserve(tag: str, args: list[str]) -> Resource:
    return _resource(
        "Pod",
        "serving",
        "ts",
        {
            "metadata": {"name": "ts", "namespace": "serving", "labels": {"app": "ts"}},
            "spec": {
                "containers": [{"name": "ts", "image": f"pytorch/torchserve:{tag}", "args": args}]
            },
        },
    )


def _public_service(target: object) -> Resource:
    return _resource(
        "Service",
        "serving",
        "ts",
        {
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": "ts"},
                "ports": [{"port": 8081, "targetPort": target}],
            }
        },
    )


def test_token_auth_lowers_management_exposure_to_high() -> None:
    snapshot = Snapshot([_torchserve("0.12.0-gpu", []), _public_service(8081)])
    run = run_check(CHECKS["GPU-SRV-003"], snapshot)
    assert [f.severity for f in run.findings] == [Severity.HIGH]


def test_disabled_token_auth_keeps_management_exposure_critical() -> None:
    snapshot = Snapshot(
        [_torchserve("0.12.0-gpu", ["torchserve", "--disable-token-auth"]), _public_service("8081")]
    )
    run = run_check(CHECKS["GPU-SRV-003"], snapshot)
    assert [f.severity for f in run.findings] == [Severity.CRITICAL]


def test_source_ranges_open_to_the_world_are_not_a_restriction() -> None:
    service = _public_service(8081)
    spec = dict(service.raw["spec"], loadBalancerSourceRanges=["10.0.0.0/8", "0.0.0.0/0"])
    service = _resource("Service", "serving", "ts", {"spec": spec})
    run = run_check(CHECKS["GPU-SRV-003"], Snapshot([_torchserve("0.8.2", []), service]))
    assert [f.severity for f in run.findings] == [Severity.CRITICAL]


def test_credential_values_never_appear_in_results() -> None:
    secret = "hf_" + "A1b2C3d4" * 5
    pod = _resource(
        "Pod",
        "ml",
        "p",
        {
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "vllm/vllm-openai:v0.6.3",
                        "args": [f"--hf-token={secret}"],
                        "env": [{"name": "SOME_VAR", "value": secret}],
                    }
                ]
            }
        },
    )
    run = run_check(CHECKS["GPU-SEC-001"], Snapshot([pod]))
    assert len(run.findings) == 2
    for finding in run.findings:
        assert secret not in finding.result.message
        assert secret not in finding.remediation
        assert all(secret not in v for v in finding.result.fix.values())


def test_egress_empty_list_without_policy_types_does_not_isolate() -> None:
    policy = _resource("NetworkPolicy", "ml", "np", {"spec": {"podSelector": {}, "egress": []}})
    pod = _resource(
        "Pod",
        "ml",
        "train",
        {
            "spec": {
                "containers": [
                    {
                        "name": "t",
                        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ]
            }
        },
    )
    run = run_check(CHECKS["GPU-NET-001"], Snapshot([policy, pod]))
    assert not run.results  # not egress-isolated: not applicable


def test_udp_port_range_covers_dns() -> None:
    policy = _resource(
        "NetworkPolicy",
        "ml",
        "np",
        {
            "spec": {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "ports": [
                            {"protocol": "UDP", "port": 1, "endPort": 1024},
                            {"protocol": "TCP", "port": 53},
                        ]
                    }
                ],
            }
        },
    )
    pod = _resource(
        "Pod",
        "ml",
        "train",
        {
            "spec": {
                "containers": [
                    {
                        "name": "t",
                        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ]
            }
        },
    )
    run = run_check(CHECKS["GPU-NET-001"], Snapshot([policy, pod]))
    assert [r.outcome for r in run.results] == [Outcome.PASS]
