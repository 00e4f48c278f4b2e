"""GPU-SEC-001 on texts that look like credentials and are not, next to real literals.

The loader redacts generously (whatever might be a credential becomes REDACTED); the check judges
each REDACTED in a ConfigMap file or env value by what surrounds it. Every case runs on the
redacted input (as a scan sees it) and on the raw input (as a plugin or test may give it): both
must give the same verdict.
"""

from __future__ import annotations

import pytest

from gpu_audit.model import Outcome, Severity
from gpu_audit.redact import redact_text
from tests.builders import config_map, container, pod, pod_spec, run_check_on

# Made-up values shaped like real ones.
HF = "hf_" + "Ab3dEf6hIj" * 3 + "Kl"
SK = "sk-proj-" + "Ab3dEf6hIjKl" * 3
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + "Ab3dEf6hIjKlMnOp" * 4

LOOKALIKES = {
    # KubeRay ray-cluster.tls.yaml: openssl names key FILES after -key and -CAkey.
    "gencert.sh": "openssl req -new -key /etc/ray/tls/tls.key -out /etc/ray/tls/ca.csr\n"
    "openssl x509 -req -in ca.csr -CA ca.crt -CAkey /etc/ray/tls/ca.key -out tls.crt\n",
    "quoted-key-file.sh": 'openssl pkeyutl -sign -inkey "/etc/tls/k.pem" -in digest\n',
    "curl.sh": "curl --cert /tmp/c.crt --key /tmp/c.key https://head:8443\n",
    "kubectl.sh": "kubectl --client-key=/tmp/c.key get pods\n",
    "generated.sh": "SESSION_KEY=$(openssl rand -hex 32)\nAPI_TOKEN=$(cat /run/secrets/t)\n",
    "from-env.sh": 'export HF_TOKEN="$HF_TOKEN"\nserve --api-key "${API_KEY}"\n',
    # Python that names tokens without holding one (KServe docs/samples/gcp-iap, Kubeflow
    # Trainer test/e2e/testdata/status_update.py).
    "reads.py": 'token = open(os.environ["SERVER_TOKEN"]).read().strip()\n'
    'hub = HfApi(token=os.getenv("HF_TOKEN"))\n',
    "types.py": "def login(password: str, token: str | None = None) -> None:\n"
    "    self.token: Optional[str] = None\n",
    "dicts.py": 'payload = {"client_secret": client_secret, "refresh_token": refresh_token}\n',
    "headers.py": 'h = {"Authorization": "Bearer {}".format(id_token)}\n'
    'g = {"Authorization": f"Bearer {token}"}\n',
    "comment.py": "# fetch the auth token: user account flow\n",
    "empty.yaml": 'password: ""\ntoken: <your-token>\ntoken_file: /var/run/secrets/t\n',
}

LITERALS = {
    "serve.py": f'login(token="{HF}")\n',
    "app.env": f"MODEL=gpt-4o\nOPENAI_API_KEY={SK}\n",
    "aws.ini": "[default]\naws_access_key_id = AKIAABCDEFGHIJKLMNOP\n",
    "tls.key": f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n",
    "app.yaml": "database:\n  password: hunter2\n",
    "entry.sh": f"#!/bin/sh\nexport HF_TOKEN={HF}\nexec vllm serve m\n",
    "redis.conf": "port 6379\nrequirepass s3cr3t-redis-pass\n",
    "client.py": 'requests.get(url, headers={"Authorization": "Bearer abc123def456ghi789"})\n',
    "url.py": 'DB = "postgresql://app:s3cr3t-pass@db.ml.svc:5432/app"\n',
    "login.sh": "redis-cli -a s3cr3t-redis-pass ping\nmysql -uroot -ps3cr3t-pass db\n",
    "in-comment.py": f"# for the demo, use {HF}\n",
    "openssl-ca.sh": "openssl ca -key s3cr3t-pass -in req.pem -out cert.pem\n",
    "api-key.sh": "serve --api-key s3cr3t-api-key-value\n",
    "inline.sh": f"echo {HF} > /tmp/t\n",
}


def flagged(data: dict[str, str], *, redact: bool) -> dict[str, Severity]:
    """The data keys GPU-SEC-001 reports, with their severities."""
    run = run_check_on("GPU-SEC-001", [config_map("files", data=data)], redact=redact)
    return {f.result.path.removeprefix("data."): f.severity for f in run.findings}


@pytest.mark.parametrize("redact", [True, False], ids=["redacted", "raw"])
def test_lookalikes_in_configmap_files_are_not_credentials(redact: bool) -> None:
    assert flagged(LOOKALIKES, redact=redact) == {}


@pytest.mark.parametrize("redact", [True, False], ids=["redacted", "raw"])
def test_literals_in_configmap_files_are_high(redact: bool) -> None:
    assert flagged(LITERALS, redact=redact) == dict.fromkeys(LITERALS, Severity.HIGH)


def test_each_literal_is_found_among_lookalikes() -> None:
    # Each literal, added to a file of look-alikes, turns that file into a finding.
    for name, text in LITERALS.items():
        data = dict(LOOKALIKES)
        suffix = name.rsplit(".", 1)[-1]
        data[f"mixed.{suffix}"] = "".join(LOOKALIKES.values()) + text
        assert list(flagged(data, redact=True)) == [f"mixed.{suffix}"], name


def test_env_values_are_judged_the_same_way() -> None:
    env = [
        {"name": "EXTRA_ARGS", "value": "--client-key /etc/tls/client.key --cert /etc/tls/c.crt"},
        {"name": "TLS_SETUP", "value": "openssl req -new -key /etc/tls/tls.key -out r.csr"},
        {"name": "DATABASE_URL", "value": "postgres://app:s3cr3t-pass@db.ml.svc:5432/app"},
        {"name": "SOME_VAR", "value": HF},
    ]
    server = container("vllm/vllm-openai:v0.8.5", name="c", gpus=None, env=env)
    run = run_check_on("GPU-SEC-001", [pod("p", pod_spec(server))])
    reported = sorted(f.result.path.rsplit("[", 1)[-1].rstrip("]") for f in run.findings)
    assert reported == ["DATABASE_URL", "SOME_VAR"]
    assert all(f.severity is Severity.HIGH for f in run.findings)


def test_configmap_of_lookalikes_passes() -> None:
    run = run_check_on("GPU-SEC-001", [config_map("files", data=LOOKALIKES)])
    assert [r.outcome for r in run.results] == [Outcome.PASS]


# Look-alikes that only scanner/redact.py can tell apart: were the loader to replace them whole,
# the REDACTED left would look like a real literal.
KEPT_BY_THE_LOADER = {
    # A PEM frame around a variable holds no key material.
    "pem-frame.sh": 'printf "%s\\n" "-----BEGIN PRIVATE KEY-----" "$KEY" "-----END PRIVATE KEY-----"\n',
    "pem-check.sh": 'grep -q "BEGIN RSA PRIVATE KEY" k.pem || grep -q "-----BEGIN PRIVATE KEY-----" k.pem\n',
    # A command substitution in quotes runs a command.
    "quoted-command.sh": 'TOKEN="$(cat /var/run/secrets/tokens/hf)"\n',
    # A name that says "the env var holding the password".
    "env-name.yaml": "password_env: DB_PASSWORD\n",
}


# A URL's user name without a password is kept by the loader (scanner/redact.py _USER_NAME).
USER_NAMES = {
    # KubeRay ray-job.batch-inference.yaml sample_code.py: S3's anonymous access, no password.
    "anonymous-user.py": 's3_uri = "s3://anonymous@air-example-data-2/imagenette2/val/"\n',
    "git-user.sh": "git clone ssh://git@github.com/ray-project/kuberay.git\n",
}


@pytest.mark.parametrize("key", sorted(USER_NAMES))
def test_url_user_names_without_a_password_are_not_credentials(key: str) -> None:
    assert flagged({key: USER_NAMES[key]}, redact=True) == {}


@pytest.mark.parametrize("key", sorted(KEPT_BY_THE_LOADER))
def test_lookalikes_the_loader_keeps(key: str) -> None:
    assert flagged({key: KEPT_BY_THE_LOADER[key]}, redact=True) == {}
    assert redact_text(KEPT_BY_THE_LOADER[key]) == KEPT_BY_THE_LOADER[key]


def test_numeric_redis_password_is_a_credential() -> None:
    # KubeRay ray-cluster.external-redis.yaml redis.conf: `requirepass 5241590000000000`.
    assert flagged({"redis.conf": "port 6379\nrequirepass 5241590000000000\n"}, redact=True)
