"""Planted secrets never leave the scanner: not in the snapshot `collect` writes, nor in any
report format. Literal credentials are reported by the name of what holds them only."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.reports import RENDERERS
from gpu_audit.sources.files import load_files
from gpu_audit.sources.snapshot_file import dumps_snapshot

SECRET_DATA = "PLANTED-secret-data-value-01"
PLANTED = {
    "secret data": SECRET_DATA,
    "secret stringData": "PLANTED-secret-string-data-02",
    "secret last-applied": "PLANTED-secret-last-applied-03",
    "AWS_SECRET_ACCESS_KEY": "PLANTEDwJalrXUtnFEMIK7MDENGbPxRfiCY04",
    "HF_TOKEN": "hf_PLANTEDplantedPLANTEDplanted05xyz",
    "token-shaped value under an innocent name": "sk-PLANTED0123456789abcdefghij06",
    "init container NGC_API_KEY": "nvapi-PLANTED0123456789abcdefgh07",
    "ConfigMap api_key": "PLANTED-configmap-api-key-08",
    "Deployment last-applied": "hf_PLANTEDlastAppliedCopyOfTheToken09",
}
WORKLOAD_ENV = [
    {"name": "AWS_SECRET_ACCESS_KEY", "value": PLANTED["AWS_SECRET_ACCESS_KEY"]},
    {"name": "HF_TOKEN", "value": PLANTED["HF_TOKEN"]},
    {"name": "MODEL_CONFIG", "value": PLANTED["token-shaped value under an innocent name"]},
    {"name": "NCCL_DEBUG", "value": "INFO"},
]
OBJECTS = [
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "hf",
            "namespace": "ml",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                    {"stringData": {"token": PLANTED["secret last-applied"]}}
                )
            },
        },
        "data": {"token": base64.b64encode(SECRET_DATA.encode()).decode()},
        "stringData": {"password": PLANTED["secret stringData"]},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "llm",
            "namespace": "ml",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                    {"env": [{"name": "HF_TOKEN", "value": PLANTED["Deployment last-applied"]}]}
                )
            },
        },
        "spec": {
            "selector": {"matchLabels": {"app": "llm"}},
            "template": {
                "metadata": {"labels": {"app": "llm"}},
                "spec": {
                    "initContainers": [
                        {
                            "name": "fetch",
                            "image": "nvcr.io/nvidia/ngc-cli:3",
                            "env": [
                                {
                                    "name": "NGC_API_KEY",
                                    "value": PLANTED["init container NGC_API_KEY"],
                                }
                            ],
                        }
                    ],
                    "containers": [
                        {
                            "name": "serve",
                            "image": "vllm/vllm-openai:v0.6.0",
                            "env": WORKLOAD_ENV,
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    },
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "llm-config", "namespace": "ml"},
        "data": {"api_key": PLANTED["ConfigMap api_key"], "max_tokens": "4096"},
    },
]


def leaked(text: str) -> list[str]:
    """Which planted values (or their base64) appear in `text`."""
    return sorted(
        what
        for what, value in PLANTED.items()
        if value in text or base64.b64encode(value.encode()).decode() in text
    )


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    path = tmp_path / "planted.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": OBJECTS}))
    # The test itself is sound: the input holds every planted value.
    assert leaked(path.read_text()) == sorted(PLANTED)
    return path


def test_the_snapshot_holds_no_planted_secret(planted: Path) -> None:
    snapshot = load_files([str(planted)])
    assert leaked(dumps_snapshot(snapshot)) == []
    # What the checks need is still there: key names, and values that are no credentials.
    assert snapshot.get("Secret", "ml", "hf") is not None
    text = dumps_snapshot(snapshot)
    assert '"token"' in text and '"NCCL_DEBUG"' in text and '"INFO"' in text
    assert '"4096"' in text


def test_no_report_format_holds_a_planted_secret(planted: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    formats = [arg for name in sorted(RENDERERS) for arg in ("-o", name)]
    result = CliRunner().invoke(
        main, ["scan", "--from-file", str(planted), *formats, "--output-dir", str(out)]
    )
    assert result.exit_code in (0, 1), result.output
    written = sorted(out.iterdir())
    assert len(written) == len(RENDERERS)
    for path in written:
        assert leaked(path.read_text()) == [], path.name
    assert leaked(result.output) == []
    table = CliRunner().invoke(main, ["scan", "--from-file", str(planted), "-o", "table"])
    assert leaked(table.output) == []


def test_literal_credentials_are_reported_by_name_only(planted: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        main, ["scan", "--from-file", str(planted), "-o", "json", "--output-file", str(report)]
    )
    assert result.exit_code in (0, 1), result.output
    messages = [
        f["message"] for f in json.loads(report.read_text())["findings"]
        if f["check_id"] == "GPU-SEC-001"
    ]  # fmt: skip
    joined = "\n".join(messages)
    for name in ("AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "MODEL_CONFIG", "NGC_API_KEY", "api_key"):
        assert name in joined, joined
    assert "NCCL_DEBUG" not in joined and "max_tokens" not in joined
