"""Network and security checks (GPU-SEC-001, GPU-NET-001) on cases the fixtures do not cover."""

from __future__ import annotations

from gpu_audit.model import Outcome, Severity
from tests.builders import (
    PYTORCH_IMAGE,
    container,
    network_policy,
    pod,
    pod_spec,
    run_check_on,
    verdicts,
    verdicts_of,
)

# --------------------------------------------------------------------------- GPU-SEC-001


def test_credential_values_never_appear_in_results() -> None:
    secret = "hf_" + "A1b2C3d4" * 5
    leaky = container(
        "vllm/vllm-openai:v0.6.3",
        name="c",
        gpus=None,
        args=[f"--hf-token={secret}"],
        env=[{"name": "SOME_VAR", "value": secret}],
    )
    # Unredacted: the check itself must not repeat the credential it was shown.
    run = run_check_on("GPU-SEC-001", [pod("p", pod_spec(leaky))], redact=False)
    assert verdicts(run) == [
        ("Pod ml/p", Outcome.FAIL, Severity.HIGH),
        ("Pod ml/p", Outcome.FAIL, Severity.HIGH),
    ]
    for finding in run.findings:
        assert secret not in finding.result.message
        assert secret not in finding.remediation
        assert all(secret not in v for v in finding.result.fix.values())


def test_template_placeholder_credentials_are_low() -> None:
    # lws docs/examples/vllm: `value: $HUGGING_FACE_HUB_TOKEN`, meant to be filled in. Nothing
    # leaks yet (low); the loader's redaction marker still stands for a real literal (high).
    env = [
        {"name": "HUGGING_FACE_HUB_TOKEN", "value": "$HUGGING_FACE_HUB_TOKEN"},
        {"name": "NGC_API_KEY", "value": "<redacted>"},
    ]
    server = container("vllm/vllm-openai:v0.8.5", name="c", gpus=None, env=env)
    run = run_check_on("GPU-SEC-001", [pod("p", pod_spec(server))], redact=False)
    assert sorted(f.severity.value for f in run.findings) == ["high", "low"]


# --------------------------------------------------------------------------- GPU-NET-001

TRAINER = pod("train", pod_spec(container(PYTORCH_IMAGE, name="t")))


def test_egress_empty_list_without_policy_types_does_not_isolate() -> None:
    policy = network_policy("np", podSelector={}, egress=[])
    # not egress-isolated: not applicable
    assert run_check_on("GPU-NET-001", [policy, TRAINER]).results == ()


def test_udp_port_range_covers_dns() -> None:
    ports = [{"protocol": "UDP", "port": 1, "endPort": 1024}, {"protocol": "TCP", "port": 53}]
    policy = network_policy("np", podSelector={}, policyTypes=["Egress"], egress=[{"ports": ports}])
    # The verdict is on the policy (the object a finding would ask to change).
    assert verdicts_of("GPU-NET-001", [policy, TRAINER]) == [
        ("NetworkPolicy ml/np", Outcome.PASS, None)
    ]
