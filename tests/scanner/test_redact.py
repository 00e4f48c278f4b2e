"""gpu_audit.redact: what counts as a credential, what stays, and that it costs linear time."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_audit.redact import (
    REDACTED,
    _redact,
    credential_like,
    redact_argv,
    redact_text,
    redact_tree,
    sanitize,
    secret_flag,
    secret_name,
    snapshot_object,
)

R = REDACTED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Flags with =value, and --flag value inside a string (sh -c).
        ("--api-key=Zq8XvL2m", f"--api-key={R}"),
        ("--hf-token=abc123", f"--hf-token={R}"),
        ("--license-key=abc123", f"--license-key={R}"),
        ("serve --client-secret Zq8XvL2m --port 80", f"serve --client-secret {R} --port 80"),
        ("--db_password='a b c'", f"--db_password='{R}'"),
        # KEY=value and export in shell strings, .env and INI lines.
        ("export TOKEN=Zq8XvL2m && run", f"export TOKEN={R} && run"),
        ("API_KEY='x y' python s.py", f"API_KEY='{R}' python s.py"),
        ("[auth]\nclient_secret = abc\nlevel = 2", f"[auth]\nclient_secret = {R}\nlevel = 2"),
        # name: value (YAML, HTTP headers) and "name": "value" (JSON).
        ("db:\n  password: hunter 2\n  port: 5432", f"db:\n  password: {R}\n  port: 5432"),
        ('{"apiKey": "abc", "model": "m"}', f'{{"apiKey": "{R}", "model": "m"}}'),
        ('{"clientSecret":"abc"}', f'{{"clientSecret":"{R}"}}'),
        ("-H 'Authorization: Bearer abc.def' http://x", f"-H 'Authorization: {R}' http://x"),
        ("X-Api-Key: Zq8XvL2m", f"X-Api-Key: {R}"),
        ("Cookie: session=abc", f"Cookie: {R}"),
        # URL userinfo, with and without a scheme.
        ("https://user:pa55@host:443/x", f"https://{R}@host:443/x"),
        ("redis://:pa55@redis:6379", f"redis://{R}@redis:6379"),
        ("git clone https://ghp_tokenonly@github.com/o/r", f"git clone https://{R}@github.com/o/r"),
        ("user:pa55@trainer-0:29500", f"{R}@trainer-0:29500"),
        # HTTP authorization credentials.
        ("Bearer eyJabc.def-ghi", f"Bearer {R}"),
        ("Basic dXNlcjpwYXNz", f"Basic {R}"),
        # Token shapes, under any name.
        ("x hf_" + "a1B2" * 9 + " y", f"x {R} y"),
        ("sk-proj-" + "Ab1" * 10, R),
        ("ghp_" + "aB3" * 12, R),
        ("github_pat_" + "aB3" * 10, R),
        ("xoxb-123456789012-abcdefABCDEF", R),
        ("AKIAABCDEFGHIJKLMNOP", R),
        ("nvapi-" + "aB3_" * 6, R),
        ("glpat-" + "aB3" * 7, R),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_X", R),
        (
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIab\n-----END RSA PRIVATE KEY-----\nb",
            f"a\n{R}\nb",
        ),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\ntruncated", R),
        # "--flag", "value" in a JSON list.
        ('["--api-key", "abc123", "--model", "m"]', f'["--api-key", "{R}", "--model", "m"]'),
    ],
)
def test_credentials_are_redacted_and_their_names_kept(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        # Placeholders and switches.
        "--api-key $(API_KEY) --hf-token ${HF_TOKEN} --password=$PASSWORD",
        "token: {{ .Values.token }}",
        "api_key: <your-key>",
        "automountServiceAccountToken: false",
        "{serviceAccountName: default, automountServiceAccountToken: false}",
        "TS_DISABLE_TOKEN_AUTHORIZATION=true --disable-token-auth model.mar",
        "--max-tokens=4096 --tokenizer-mode auto --max-num-batched-tokens 8192",
        # Names that hold no credential, and references to Secrets.
        "secretKeyRef: {name: hf, key: token}",
        "secretName: hf-token",
        "AWS_ACCESS_KEY_ID_FILE=/var/run/key --api-key-file /etc/key",
        # Prose of the checks.
        "command line passes --api-key with an inline value (value not shown)",
        "Basic authentication and bearer tokens",
        # Images: a digest is no userinfo; a lower-case sk- name is no key.
        "nvcr.io/nvidia/pytorch:24.01-py3@sha256:0123abcd",
        "vllm:0.6@sha256:0123abcd",
        "sk-learn-model-serving-abcdefghij",
        "-----BEGIN CERTIFICATE-----\nMIIab\n-----END CERTIFICATE-----",
    ],
)
def test_what_is_no_credential_stays(text: str) -> None:
    assert redact_text(text) == text


def test_argv_redacts_the_item_after_a_bare_credential_flag() -> None:
    argv = ["serve", "--api-key", "abc", "--hf-token=xyz", "--disable-token-auth", "m.mar"]
    argv += ["--password", "$(PASSWORD)", "--token", "--port", "80"]
    assert redact_argv(argv) == [
        "serve",
        "--api-key",
        R,
        f"--hf-token={R}",
        "--disable-token-auth",
        "m.mar",
        "--password",
        "$(PASSWORD)",
        "--token",
        "--port",
        "80",
    ]


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("hfToken", True),
        ("example.com/api-token", True),
        ("redis-password", True),
        ("Authorization", True),
        ("X-Api-Key", True),
        ("clientSecret", True),
        ("DB_PASS", True),
        ("secretName", False),
        ("secretKeyRef", False),
        ("AWS_ACCESS_KEY_ID", False),
        ("topologyKey", False),
        ("key", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("max_tokens", False),
        ("bearerTokenFile", False),
    ],
)
def test_names_that_say_credential(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


@pytest.mark.parametrize(
    ("flag", "secret"),
    [
        ("--api-key", True),
        ("--license-key", True),
        ("--hf_token", True),
        ("--wandb-key", True),
        ("--disable-token-auth", False),
        ("--tokenizer", False),
        ("--ssl-keyfile", False),
        ("--max-tokens", False),
    ],
)
def test_flags_that_take_a_credential(flag: str, secret: bool) -> None:
    assert secret_flag(flag) is secret


def test_credential_like_sees_the_redaction_marker_inside_a_value() -> None:
    # The loader turned postgres://app:pw@db into this: the value still held a credential.
    assert credential_like("DATABASE_URL", f"postgres://{R}@db:5432/app")
    assert not credential_like("DATABASE_URL", "postgres://db:5432/app")
    assert not credential_like("HF_TOKEN", "$(TOKEN)")


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "labels": {"app": "llm", "api-key": "Zq8XvL2m", "cache": "hf_" + "aB3" * 11},
            "annotations": {
                "example.com/token": "Zq8XvL2m",
                "kubectl.kubernetes.io/last-applied-configuration": '{"a": 1}',
            },
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "vllm/vllm-openai:v0.6.3",
                    "args": ["--api-key", "abc123", "--model", "m", "--tensor-parallel-size=2"],
                    "command": ["sh", "-c", "export HF_TOKEN=abc && exec serve"],
                    "env": [
                        {"name": "HF_TOKEN", "value": "abc"},
                        {"name": "HF_TOKEN_PLACEHOLDER", "value": "${HF_TOKEN}"},
                        {"name": "NCCL_DEBUG", "value": "INFO"},
                        {"name": "MASTER_ADDR", "value": "https://u:pw@trainer-0.trainer"},
                    ],
                    "livenessProbe": {
                        "httpGet": {
                            "path": "/health",
                            "httpHeaders": [{"name": "Authorization", "value": "Bearer abc"}],
                        }
                    },
                }
            ]
        },
    }


def test_sanitize_redacts_every_kind_of_field_and_keeps_what_checks_read() -> None:
    pod = sanitize(_pod())
    container = pod["spec"]["containers"][0]
    assert pod["metadata"]["labels"] == {"app": "llm", "api-key": R, "cache": R}
    assert pod["metadata"]["annotations"] == {
        "example.com/token": R,
        "kubectl.kubernetes.io/last-applied-configuration": R,
    }
    assert "managedFields" not in pod["metadata"]
    assert container["args"] == ["--api-key", R, "--model", "m", "--tensor-parallel-size=2"]
    assert container["command"] == ["sh", "-c", f"export HF_TOKEN={R} && exec serve"]
    assert container["env"] == [
        {"name": "HF_TOKEN", "value": R},
        {"name": "HF_TOKEN_PLACEHOLDER", "value": "${HF_TOKEN}"},
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "MASTER_ADDR", "value": f"https://{R}@trainer-0.trainer"},
    ]
    headers = container["livenessProbe"]["httpGet"]["httpHeaders"]
    assert headers == [{"name": "Authorization", "value": R}]
    assert sanitize(copy.deepcopy(pod)) == pod  # idempotent


def test_sanitize_redacts_lists_under_credential_keys_and_configmap_contents() -> None:
    monitor = sanitize(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "spec": {"endpoints": [{"params": {"token": ["abc", "$(T)"], "module": ["x"]}}]},
        }
    )
    assert monitor["spec"]["endpoints"][0]["params"] == {"token": [R, "$(T)"], "module": ["x"]}
    config_map = sanitize(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "data": {"config.yaml": "db:\n  password: pw1\n  port: 1\n", "api_key": "pw2"},
            "binaryData": {"blob": "cHcz"},
        }
    )
    assert config_map["data"] == {"config.yaml": f"db:\n  password: {R}\n  port: 1\n", "api_key": R}
    assert config_map["binaryData"] == {"blob": R}


def test_snapshot_object_drops_the_annotations_no_check_reads_at_any_depth() -> None:
    deployment = sanitize(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "d",
                "annotations": {"example.com/notes": "x", "meta.helm.sh/release-name": "r"},
            },
            "spec": {
                "template": {
                    "metadata": {
                        "annotations": {
                            "example.com/notes": "y",
                            "topology.kubernetes.io/zone": "us-east-1a",
                            "example.com/zone": "r1",
                            "gpu-audit.io/exempt": "GPU-SEC-001",
                        }
                    },
                    "spec": {"containers": [{"name": "c"}]},
                }
            },
        }
    )
    before = copy.deepcopy(deployment)
    kept = snapshot_object(deployment)
    assert kept["metadata"]["annotations"] == {"meta.helm.sh/release-name": "r"}
    assert kept["spec"]["template"]["metadata"]["annotations"] == {
        "topology.kubernetes.io/zone": "us-east-1a",
        "example.com/zone": "r1",
        "gpu-audit.io/exempt": "GPU-SEC-001",
    }
    assert kept["spec"]["template"]["spec"] is deployment["spec"]["template"]["spec"]
    assert deployment == before  # the scanned object is not edited
    plain = sanitize({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    assert snapshot_object(plain) == plain


def test_redact_tree_redacts_every_string_of_a_document() -> None:
    tree = {"pods": [{"message": "pull from https://u:pw@r.example.com", "count": 3}], "n": None}
    assert redact_tree(tree) == {
        "pods": [{"message": f"pull from https://{R}@r.example.com", "count": 3}],
        "n": None,
    }


_FRAGMENTS = st.sampled_from(
    [
        "--api-key",
        "=",
        ": ",
        " ",
        "\n",
        '"',
        "'",
        ",",
        "@",
        "://",
        "https",
        "user",
        ":",
        "pw",
        "token",
        "Bearer ",
        "Basic ",
        "hf_" + "a1" * 16,
        "sk-" + "Ab" * 11,
        "eyJ" + "a" * 10 + ".",
        "-----BEGIN PRIVATE KEY-----",
        "sha256:",
        "{",
        "}",
        "$(X)",
        "\x00",
        "İ",
        "\u017fecret",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_FRAGMENTS | st.text(max_size=4), max_size=14).map("".join))
def test_the_cheap_prefilter_never_clears_a_text_the_regex_would_change(text: str) -> None:
    assert redact_text(text) == _redact(text)


@pytest.mark.parametrize(
    "unit", ["a", "a:", "token", "--api-key ", "https://a", "a@", "Bearer ", "hf_", "x=y "]
)
def test_redaction_time_is_linear_in_the_text(unit: str) -> None:
    text = unit * (1_000_000 // len(unit))
    started = time.monotonic()
    redact_text(text)
    sanitize({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": text}})
    assert time.monotonic() - started < 5.0  # quadratic would take hours


def test_a_text_longer_than_any_api_value_is_redacted_whole_when_it_may_hold_one() -> None:
    long = "a" * (1 << 20)
    assert redact_text(long + "x") == long + "x"
    assert redact_text(long + " password: pw") == R
    assert redact_text(long + " TOKEN=$(T)") == R  # not parsed: any credential word will do
