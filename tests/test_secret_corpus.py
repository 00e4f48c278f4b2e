"""The planted-credential corpus: no output of gpu-audit holds any of its credentials.

fixtures/secrets/corpus.yaml plants random credentials in every field of every kind the scanner
reads (container args, commands and env, probes, lifecycle hooks, labels, annotations,
ConfigMap files, Secrets, Events, Pod status, and custom resources: ClusterPolicy env,
InferenceService args, RayCluster start params, ServiceMonitor params...), in every form
gpu_audit.redact recognises. fixtures/secrets/planted.yaml lists them. Every report format,
`inventory`, `why-pending` and the snapshot file are grepped for each value and its base64;
tests/live/test_secret_corpus_live.py does the same for a live `collect`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.engine import render_remediation
from gpu_audit.model import Outcome
from gpu_audit.reports import RENDERERS
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import load_files
from gpu_audit.sources.snapshot_file import dumps_snapshot
from tests.builders import _unredacted, checks

ROOT = Path(__file__).resolve().parents[1]
SECRETS = ROOT / "fixtures" / "secrets"
CORPUS = SECRETS / "corpus.yaml"
PLANTED: dict[str, str] = yaml.safe_load((SECRETS / "planted.yaml").read_text(encoding="utf-8"))
CHECK_FIXTURES = ROOT / "fixtures" / "checks"


def forms(value: str) -> tuple[str, str]:
    return value, base64.b64encode(value.encode()).decode()


def leaked(text: str) -> list[str]:
    """The ids of the planted credentials that `text` holds (as they are, or base64)."""
    return sorted(key for key, value in PLANTED.items() if any(f in text for f in forms(value)))


def invoke(*args: str) -> str:
    """stdout and stderr of a gpu-audit command that must not fail."""
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in (0, 1), result.output
    return result.stdout + result.stderr


def test_the_corpus_plants_60_distinct_credentials_in_every_kind() -> None:
    text = CORPUS.read_text(encoding="utf-8")
    values = list(PLANTED.values())
    assert len(values) >= 60
    assert all(a == b or a not in b for a in values for b in values), "a value holds another"
    assert leaked(text) == sorted(PLANTED), "the corpus must hold every planted value"
    kinds = {doc["kind"] for doc in yaml.safe_load_all(text)}
    assert {
        "Pod",
        "Deployment",
        "DaemonSet",
        "StatefulSet",
        "Job",
        "CronJob",
        "ConfigMap",
        "Secret",
        "Event",
        "Node",
        "Namespace",
        "Service",
        "Ingress",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "ClusterPolicy",
        "InferenceService",
        "ServingRuntime",
        "PyTorchJob",
        "JobSet",
        "LeaderWorkerSet",
        "RayCluster",
        "NIMService",
        "ScaledObject",
        "ServiceMonitor",
        "NodePool",
    } <= kinds


def test_no_report_format_holds_a_planted_credential(tmp_path: Path) -> None:
    out = tmp_path / "out"
    formats = [arg for name in sorted(RENDERERS) for arg in ("-o", name)]
    printed = invoke("scan", "--from-file", str(CORPUS), *formats, "--output-dir", str(out))
    written = sorted(out.iterdir())
    assert len(written) == len(RENDERERS) == 6
    for path in written:
        assert leaked(path.read_text(encoding="utf-8")) == [], path.name
    assert leaked(printed) == []
    assert leaked(invoke("scan", "--from-file", str(CORPUS), "-o", "table")) == []
    # The corpus reaches the paths that quote the input: GPU-SEC-001 names each literal,
    # GPU-DIST-003 shows a container's command and env, GPU-SCHED-003 an annotation's value,
    # GPU-SCHED-005 the Pod's scheduling condition, exemptions their reason.
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    checks_with_findings = {f["check_id"] for f in report["findings"]}
    assert {"GPU-SEC-001", "GPU-DIST-003", "GPU-SCHED-003", "GPU-SCHED-005"} <= checks_with_findings
    launcher = next(f for f in report["findings"] if "container launcher" in f["message"])
    assert (
        '"--hf-token=<redacted>", "--api-key=<redacted>", "--wandb-key", "<redacted>"'
        in (launcher["remediation"])
    )
    (exemption,) = report["exemptions"]["annotations"]
    assert exemption["reason"] == "rotation tracked at https://<redacted>@tracker.example.com/SEC-1"
    assert report["exempted_findings"]


@pytest.mark.parametrize("command", ["inventory", "why-pending"])
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_the_diagnostics_hold_no_planted_credential(command: str, fmt: str) -> None:
    printed = invoke(command, "--from-file", str(CORPUS), "-o", fmt)
    assert leaked(printed) == []
    if command == "why-pending" and fmt == "json":
        (pending,) = json.loads(printed)["pending_pods"]
        # The FailedScheduling event (its message quotes a URL with a password) was read.
        assert pending["pod"]["name"] == "pending-gpu" and pending["scheduler_messages"]


def test_the_snapshot_file_holds_no_planted_credential(tmp_path: Path) -> None:
    snapshot = load_files([str(CORPUS)])
    text = dumps_snapshot(snapshot)
    assert leaked(text) == []
    # What the checks need stays: flag and variable names, and that a value was there.
    for kept in ('"--api-key=<redacted>"', '"--hf-token"', '"HF_TOKEN"', '"NCCL_DEBUG"'):
        assert kept in text
    # Annotations no check reads are not kept; those a check reads are, redacted.
    assert "example.com/notes" not in text and "example.com/deploy-token" not in text
    assert '"topology.kubernetes.io/zone": "<redacted>"' in text
    assert '"gpu-audit.io/exempt": "GPU-SEC-001"' in text
    # `collect` then `scan --from-file` of the snapshot gives the same findings.
    path = tmp_path / "snapshot.json"
    path.write_text(text, encoding="utf-8")
    assert leaked(invoke("scan", "--from-file", str(path), "-o", "json")) == []
    assert _verdicts(load_files([str(path)])) == _verdicts(snapshot)


def _fixtures() -> Iterator[Path]:
    yield from sorted(p for p in CHECK_FIXTURES.glob("*/*.yaml") if p.name != "expected.yaml")


def _verdicts(snapshot: Snapshot) -> list[tuple[str, str, str, str, str]]:
    return sorted(
        (check.id, str(result.ref), result.outcome.value, result.message, result.path)
        for check in checks().values()
        for result in check.run(snapshot)
    )


def test_a_snapshot_file_keeps_every_annotation_a_check_reads(tmp_path: Path) -> None:
    """Each check fixture, scanned as it is and as the snapshot `collect` would write of it:
    the same verdicts, so no check reads an annotation the snapshot drops."""
    differ = []
    for fixture in _fixtures():
        direct = load_files([str(fixture)])
        path = tmp_path / f"{fixture.parent.name}-{fixture.stem}.json"
        path.write_text(dumps_snapshot(direct), encoding="utf-8")
        if _verdicts(load_files([str(path)])) != _verdicts(direct):
            differ.append(f"{fixture.parent.name}/{fixture.name}")
    assert differ == []


# --------------------------------------------------------------------------- GPU-DIST-003


PASSWORD = "Rz7bQ2xLm9TfW4kP8vNc"
TOKEN = "hf_" + "Q7wErT9yUiOp2AsDfGhJkL3zXcVbNm5Qaz"
KEY = "sk-proj-" + "Zq8XvL2mN7pR4tK9wB3yHj6Gf1Dc"


def _rendezvous_job(env: list[dict[str, str]], command: list[str]) -> list[dict[str, Any]]:
    container = {"name": "rank", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "env": env}
    if command:
        container["command"] = command
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {
                "completionMode": "Indexed",
                "completions": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
            },
        },
        # A ClusterIP Service of the subdomain: the fix is a new headless Service, and the
        # container's endpoint pointed at it (its env entry, or its whole command).
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"selector": {"batch.kubernetes.io/job-name": "train"}, "ports": [{"port": 1}]},
        },
    ]


@pytest.mark.parametrize(
    ("env", "command"),
    [
        ([{"name": "MASTER_ADDR", "value": f"https://rdzv:{PASSWORD}@train-0.train:29500"}], []),
        ([{"name": "PET_RDZV_ENDPOINT", "value": f"rdzv:{PASSWORD}@train-0.train:29400"}], []),
        (
            [],
            [
                "torchrun",
                f"--rdzv-endpoint=https://rdzv:{PASSWORD}@train-0.train:29400",
                f"--hf-token={TOKEN}",
                f"--api-key={KEY}",
                "train.py",
            ],
        ),
        ([], ["sh", "-c", f"torchrun --rdzv_endpoint tcp://u:{PASSWORD}@train-0.train:1 x.py"]),
    ],
)
def test_dist003_never_repeats_a_credential_it_was_shown(
    env: list[dict[str, str]], command: list[str]
) -> None:
    """The check itself (before the engine's last redaction), on objects no loader redacted:
    the userinfo is no part of the host it names, and the command it copies into its fix is
    redacted."""
    check = checks()["GPU-DIST-003"]
    snapshot = _unredacted(_rendezvous_job(env, command))
    (result,) = check.run(snapshot)
    assert result.outcome is Outcome.FAIL
    remediation = render_remediation(check, result)
    shown = result.message + "\n" + remediation
    for secret in (PASSWORD, TOKEN, KEY, "rdzv:", "u:"):
        assert secret not in shown
    assert "train-0.train does not resolve" in result.message
    assert "train-0.train-headless" in remediation
    assert "<redacted>@train-0.train-headless" in remediation
    assert "# <redacted> stands for a credential the input passes here" in remediation
