"""gpu_audit.redact: what counts as a credential, and what stays."""

from __future__ import annotations

import copy
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
        # Password options as each tool's manual defines them: curl's USER:PASSWORD (split at
        # the first colon; bundled and attached short options), the MySQL clients' -pPASSWORD,
        # sshpass -p, redis-cli -a, docker/helm registry login -p.
        ("curl -fsS -u loader:pa55 https://x", f"curl -fsS -u loader:{R} https://x"),
        ("curl -sSuloader:pa55 https://x", f"curl -sSuloader:{R} https://x"),
        ("curl --user 'a:p w' -U p:x9 https://x", f"curl --user 'a:{R}' -U p:{R} https://x"),
        ("mkdir -p /m && mysql -uroot -ppa55 app", f"mkdir -p /m && mysql -uroot -p{R} app"),
        ("mysqldump -p'a b' app", f"mysqldump -p'{R}' app"),
        ("sshpass -p pa55 scp a b", f"sshpass -p {R} scp a b"),
        ("redis-cli -h r -a pa55 ping", f"redis-cli -h r -a {R} ping"),
        ("docker login -u bot -p pa55 reg.io", f"docker login -u bot -p {R} reg.io"),
        ("helm registry login reg.io -p pa55", f"helm registry login reg.io -p {R}"),
        # SQL (PostgreSQL roles, MySQL users) and redis.conf.
        ("CREATE ROLE app LOGIN PASSWORD 'pa55';", f"CREATE ROLE app LOGIN PASSWORD '{R}';"),
        ("CREATE USER 'r'@'%' IDENTIFIED BY 'pa55';", f"CREATE USER 'r'@'%' IDENTIFIED BY '{R}';"),
        ("port 1\nrequirepass pa55\nmasterauth pa56", f"port 1\nrequirepass {R}\nmasterauth {R}"),
        ("redis-server --requirepass pa55", f"redis-server --requirepass {R}"),
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
        # What the same options mean elsewhere: curl prompts for a password it is not given,
        # `mysql -p app` prompts (app is the database), -p and -u of other tools are ports,
        # directories and users, and placeholders stay.
        "curl -u loader https://x",
        "curl -u $(USER):$(PASSWORD) https://x",
        "mysql -u root -p app",
        "mkdir -p /models && docker run -p 8080:80 -u 1000:1000 img",
        "redis-cli -a $REDIS_PASSWORD ping",
        "ALTER ROLE app PASSWORD NULL",
    ],
)
def test_what_is_no_credential_stays(text: str) -> None:
    assert redact_text(text) == text


def test_cluster_data_has_no_prose_a_plain_word_after_a_flag_is_a_value() -> None:
    """The checks' prose keeps a word after a flag; the same in a container's command
    (`redact_text(prose=False)`, as `sanitize` reads it) is a password."""
    prose = "command line passes --api-key with an inline value (value not shown)"
    assert redact_text(prose) == prose
    assert redact_text("serve --password hunter", prose=False) == f"serve --password {R}"
    assert sanitize({"kind": "Pod", "spec": {"args": ["serve --password hunter"]}}) == {
        "kind": "Pod",
        "spec": {"args": [f"serve --password {R}"]},
    }


def test_argv_redacts_the_password_options_of_tools() -> None:
    assert redact_argv(["/usr/bin/curl", "-u", "a:pa55", "--proxy-user", "p:x9", "https://x"]) == [
        "/usr/bin/curl", "-u", f"a:{R}", "--proxy-user", f"p:{R}", "https://x",
    ]  # fmt: skip
    assert redact_argv(["mysqldump", "-uroot", "-ppa55", "app"]) == [
        "mysqldump", "-uroot", f"-p{R}", "app",
    ]  # fmt: skip
    assert redact_argv(["mysql", "-p", "app"]) == ["mysql", "-p", "app"]  # prompts
    assert redact_argv(["redis-cli", "-a", "pa55", "ping"]) == ["redis-cli", "-a", R, "ping"]
    assert redact_argv(["docker", "login", "-p", "pa55"]) == ["docker", "login", "-p", R]
    assert redact_argv(["docker", "run", "-p", "80:80"]) == ["docker", "run", "-p", "80:80"]
    assert redact_argv(["curl", "-u", "$(U):$(P)"]) == ["curl", "-u", "$(U):$(P)"]


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
    expected = {
        "pods": [{"message": f"pull from https://{R}@r.example.com", "count": 3}],
        "n": None,
    }
    assert redact_tree(tree) == expected
    # Texts are remembered across calls (the why-pending section repeats them per pod): the
    # second document gets the redacted text too, in a key, a list and a tuple alike.
    again = {
        "pull from https://u:pw@r.example.com": ("pull from https://u:pw@r.example.com", 1.5),
        "k": [["pull from https://u:pw@r.example.com"], True],
    }
    assert redact_tree(again) == {
        f"pull from https://{R}@r.example.com": [f"pull from https://{R}@r.example.com", 1.5],
        "k": [[f"pull from https://{R}@r.example.com"], True],
    }
    assert redact_tree(tree) == expected


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
        "curl ",
        "-u ",
        "mysql ",
        " -p",
        "redis-cli -a ",
        "docker login ",
        "identified by ",
        "requirepass ",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_FRAGMENTS | st.text(max_size=4), max_size=14).map("".join))
def test_the_cheap_prefilter_never_clears_a_text_the_regex_would_change(text: str) -> None:
    assert redact_text(text) == _redact(text)


@pytest.mark.parametrize(
    "unit", ["a", "a:", "token", "--api-key ", "https://a", "a@", "Bearer ", "hf_", "x=y "]
)
def test_a_megabyte_dense_with_credential_hints_is_searched_to_the_end(unit: str) -> None:
    # Quadratic searching would take hours here (the suite's time would show it); the time
    # per character is measured by tests/fuzz/measure_redaction_cost.py, not asserted.
    text = unit * (1_000_000 // len(unit))
    redacted = redact_text(text)
    assert redact_text(redacted) == redacted  # nothing left that a second pass would find
    sanitize({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": text}})


def test_a_text_longer_than_any_api_value_is_redacted_whole_when_it_may_hold_one() -> None:
    long = "a" * (1 << 20)
    assert redact_text(long + "x") == long + "x"
    assert redact_text(long + " password: pw") == R
    assert redact_text(long + " TOKEN=$(T)") == R  # not parsed: any credential word will do
