from __future__ import annotations

import re
from collections.abc import Iterator

from gpu_audit.api import (
    REDACTED,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Result,
    Severity,
    Snapshot,
    argv,
    as_mapping,
    check,
    credential_like,
    failed,
    is_placeholder,
    passed,
    pod_templates,
    redact_text,
    str_map,
)

_DECRYPTION_KEY = re.compile(r"DECRYPT|ENCRYPTION_?KEY|MODEL_?KEY", re.IGNORECASE)
_SECRET_FLAG = re.compile(r"^--(api-key|hf-token|token|password|api-token)(=|$)")
# Template placeholders a manifest ships instead of the real value ($HF_TOKEN, ${TOKEN},
# {{ .Values.token }}, <your-token>, REPLACE_WITH_TOKEN): not a leaked credential, but applying
# the manifest as it is documented means writing the real token into the spec.
# The loader's redaction marker (<redacted>) stands for a real literal and is not one of them.
_TEMPLATE_PLACEHOLDER = re.compile(
    r"^(?!<redacted>$)(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|<[^<>]+>|"
    r"(REPLACE|INSERT|YOUR)[-_ A-Z]*)$",
    re.IGNORECASE,
)


# The loader hands checks their input redacted (scanner/redact.py): a credential, and whatever
# might be one, is replaced by REDACTED. The redaction errs towards hiding (what leaves the
# scanner must hold no credential); this check must report only real ones, so in a text (a
# ConfigMap file, an env value) it judges each REDACTED by what surrounds it. Raw input (tests,
# plugins) is redacted the same way first, so that both give the same verdict.
#
# A key FILE option: openssl's -key, -CAkey, -inkey, -signkey ("-key filename|uri",
# https://docs.openssl.org/master/man1/openssl-req/), curl's --key and --proxy-key ("Private key
# file name", https://curl.se/docs/manpage.html#--key), kubectl's --client-key, and --tls-key,
# --ssl-key of servers. `openssl req -new -key /etc/ray/tls/tls.key` in KubeRay's
# ray-cluster.tls.yaml generates a certificate and holds no credential. Only `openssl ca` takes a
# password after -key (https://docs.openssl.org/master/man1/openssl-ca/).
_FLAG_BEFORE = re.compile(r"(?:^|[\s\"'\[,(])(?P<flag>--?[A-Za-z][\w.-]*)(?:=|[ \t]+)[\"']?$")
_KEY_FILE_FLAG = re.compile(r"--?(?:CA|in|sign)?key|--(?:client|proxy|tls|ssl)-key", re.IGNORECASE)
_OPENSSL_CA = re.compile(r"\bopenssl[ \t]+ca\b")
# `name = <value>`, `name: <value>`, `"name": <value>`, `name=<value>` (keyword arguments).
_NAME_BEFORE = re.compile(r"[A-Za-z_][\w.\[\]\"']*[ \t]*(?::=|==|[:=])[ \t]*$")
_FORMATTED = re.compile(r"[ \t]*(?:\.format\(|%[ \t])")
# Program source: a literal there is always quoted, so an unquoted value after a name is an
# expression (`token = os.environ.get("HF_TOKEN")`, `def login(password: str)`), not a
# credential. Shell: `TOKEN=$(cat /run/secrets/t)` runs a command, its output is no literal.
_CODE_SUFFIXES = (".py", ".js", ".mjs", ".ts", ".go", ".rb", ".java", ".scala", ".lua", ".r")
_SHELL_SUFFIXES = (".sh", ".bash")
_SHEBANG = re.compile(r"#![^\n]*?\b(?P<interpreter>python|node|ruby|sh|bash)\d*\b")


def _language(key: str, text: str) -> str:
    """What a ConfigMap file holds, from its key's suffix or its #! line: code, shell or
    config (YAML, INI, .env, JSON, plain values)."""
    lowered = key.lower()
    if lowered.endswith(_CODE_SUFFIXES):
        return "code"
    if lowered.endswith(_SHELL_SUFFIXES):
        return "shell"
    shebang = _SHEBANG.match(text)
    if shebang:
        return "shell" if shebang["interpreter"] in ("sh", "bash") else "code"
    return "config"


def _credential_name(name: str) -> bool:
    """Whether a name alone says that its value is a credential (HF_TOKEN, apiKey)."""
    return credential_like(name, "literal")


def _literal_credential(before: str, after: str, language: str) -> bool:
    """Whether the REDACTED between `before` and `after` (the rest of its line) stood for a
    literal credential rather than a look-alike."""
    flag = _FLAG_BEFORE.search(before)
    if flag and _KEY_FILE_FLAG.fullmatch(flag["flag"]) and not _OPENSSL_CA.search(before):
        return False  # a key file: -key /etc/ray/tls/tls.key
    quote = before[-1:]
    if quote in ("'", '"') and after.startswith(quote):
        # A string literal ("hf_...", PASSWORD 'secret', "Bearer ..."), unless code formats
        # it: "Bearer {}".format(id_token) in KServe's docs/samples/gcp-iap.
        return not (language == "code" and _FORMATTED.match(after, 1))
    if language == "code" and _NAME_BEFORE.search(before):
        return False  # name = expression
    # NAME=$(command ...): the rest of the command follows, its output is no literal.
    return not (language == "shell" and after.count(")") > after.count("(") + before.count("$("))


def _literal_in_text(key: str, value: str) -> bool:
    """Whether a ConfigMap file or an env value holds a literal credential in its text."""
    text = redact_text(value, prose=False)
    language = _language(key, text)
    for line in text.splitlines():
        at = line.find(REDACTED)
        while at >= 0:
            end = at + len(REDACTED)
            if _literal_credential(line[:at], line[end:], language):
                return True
            at = line.find(REDACTED, end)
    return False


def _credential_value(name: str, value: str) -> bool:
    """Whether a literal value, under this name, holds a credential: any literal under a
    credential name (the loader redacts it whole), else a credential in its text."""
    value = value.strip()
    if not value or is_placeholder(value):
        return False
    if _credential_name(name):
        return True
    return _literal_in_text(name, value)


@check(
    id="GPU-SEC-001",
    title="Model and API credentials are not literal values in pod specs or ConfigMaps",
    category=Category.NETWORK_SECURITY,
    severity=Severity.HIGH,
    requires=((*WORKLOAD_TYPES, "ConfigMap"),),
    rationale="""
        A literal HF_TOKEN, NGC_API_KEY or cloud key in a Deployment is readable by anyone who
        can get Deployments, ReplicaSets or Pods, shows in kubectl describe, crash dumps and
        /proc/<pid>/environ, and lives on in Git and Helm values. ConfigMaps are not access
        controlled like Secrets. Model decryption keys do not belong in env at all, even from a
        Secret: every process in the container and every child inherits them.
    """,
    detection="""
        Every container of every pod template: env entries with a literal value whose name
        looks like a credential (API_KEY, TOKEN, PASSWORD, SECRET, HF_TOKEN, NGC_API_KEY...;
        not *_FILE/_PATH/_URL/_ID/_MODE, *_TOKENS, TOKENIZERS_PARALLELISM) or whose value has a
        known token shape (hf_, sk-, AKIA, nvapi-, ghp_, PEM private key); --api-key/--token/
        --hf-token/--password flags with an inline value; decryption/model keys injected
        through secretKeyRef. ConfigMap data keys judged the same way. Booleans, numbers,
        empty values and $(VAR) references to other env vars are not credentials. In a text
        (a ConfigMap file, an env value) each value the loader redacted is judged by what
        surrounds it: not a credential after a key FILE option (openssl -key/-CAkey, curl
        --key, kubectl --client-key), nor unquoted after a name in program source (.py, .js,
        .go...: an expression or a type annotation), nor a formatted string ("Bearer
        {}".format(t)), nor a shell variable set from a command ($(cat ...)). Only names are
        reported, never values.
    """,
    severity_evidence="""
        High for a literal value that is a credential: a known token shape (hf_, sk-, AKIA,
        nvapi-, ghp_, a PEM key) or any other literal under a credential name. Low when the
        literal is a template placeholder ($HF_TOKEN, {{ .Values.token }}, <your-token>,
        REPLACE_WITH_TOKEN): nothing leaks yet, but the manifest asks for the token in the spec.
        Low for a decryption key from a Secret in env (the Secret is used; a file is tighter).
    """,
    remediation="""
        # $kind $namespace/$name: $advice
        $snippet
    """,
    fix_kind=FixKind.PATCH,
    remediation_generic=r"""
        # a literal credential in env: take it from a Secret; create it first:
        #   kubectl -n <namespace> create secret generic <secret> --from-literal=value=...
        containers:
          - name: <container>
            env:
              - name: <ENV_NAME>
                value: null   # the literal goes
                valueFrom:
                  secretKeyRef: {name: <secret>, key: value}
        # a literal after --<flag> on the command line: the same env entry without `value: null`,
        # then pass it as --<flag>=$(<ENV_NAME>)
        ---
        # a model decryption key in env: a read-only file from its Secret instead
        volumes:
          - name: <secret>
            secret: {secretName: <secret>, defaultMode: 0400}
        containers:
          - name: <container>
            env:
              - {name: <ENV_NAME>, $patch: delete}
            volumeMounts:
              - {name: <secret>, mountPath: /var/run/secrets/<secret>, readOnly: true}
        # a credential-like ConfigMap key: copy it into a Secret without printing it, then drop it
        #   kubectl -n <namespace> create secret generic <secret> \
        #     --from-literal=value="$(kubectl -n <namespace> get configmap <name> -o jsonpath='{.data.<key>}')"
        #   kubectl -n <namespace> patch configmap <name> --type=json -p '[{"op": "remove", "path": "/data/<key>"}]'
    """,
    references=(
        "https://kubernetes.io/docs/concepts/security/secrets-good-practices/",
        "https://kubernetes.io/docs/concepts/configuration/secret/#using-secrets-as-environment-variables",
        "https://kubernetes.io/docs/concepts/configuration/secret/#using-secrets-as-files-from-a-pod",
    ),
    remediation_root="pod_spec",
)
def no_literal_credentials_in_pod_specs(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        findings = [f for c in template.containers() for f in _container_findings(c)]
        if findings:
            yield from findings
        elif any(c.env() or argv(c) for c in template.containers()):
            yield passed(template, "env and arguments carry no literal credentials")
    for config_map in snapshot.of("ConfigMap"):
        data = str_map(config_map.raw.get("data"))
        keys = sorted(k for k, v in data.items() if _credential_value(k, v))
        if keys:
            for key in keys:
                placeholder = bool(_TEMPLATE_PLACEHOLDER.match(data[key].strip()))
                yield failed(
                    config_map,
                    f"data key {key!r} holds a template placeholder for a credential"
                    if placeholder
                    else f"data key {key!r} holds a literal credential (value not shown)",
                    path=f"data.{key}",
                    severity=Severity.LOW if placeholder else None,
                    fix=_config_map_fix(config_map.ref.namespace, config_map.ref.name, key),
                )
        elif data:
            yield passed(config_map, "data holds no credential-like values")


def _container_findings(container: Container) -> Iterator[Result]:
    where = container.describe()
    for name, entry in container.env().items():
        value = entry.get("value")
        if isinstance(value, str) and _credential_value(name, value):
            if _TEMPLATE_PLACEHOLDER.match(value.strip()):
                message = (
                    f"env {name} is a template placeholder for a credential; filled in as "
                    "documented, the token is stored in the workload spec"
                )
                severity: Severity | None = Severity.LOW
            else:
                message, severity = f"env {name} is a literal credential (value not shown)", None
            yield failed(
                container,
                message,
                path=f"{container.path}.env[{name}]",
                severity=severity,
                fix=_env_fix(container, f"env {name} of {where}", name, name),
            )
        secret_ref = as_mapping(as_mapping(entry.get("valueFrom")).get("secretKeyRef"))
        if secret_ref and _DECRYPTION_KEY.search(name):
            yield failed(
                container,
                f"env {name} exposes a model decryption key to every process in the container",
                path=f"{container.path}.env[{name}]",
                severity=Severity.LOW,
                fix=_file_fix(container, name, str(secret_ref.get("name") or "")),
            )
    args = argv(container)
    for index, arg in enumerate(args):
        for token in arg.split():
            match = _SECRET_FLAG.match(token)
            if not match:
                continue
            inline = token[match.end() :] if match.group(2) == "=" else _next(args, index, token)
            if inline and not is_placeholder(inline):
                flag = f"--{match.group(1)}"
                yield failed(
                    container,
                    f"command line passes {flag} with an inline value (value not shown)",
                    path=f"{container.path}.args",
                    fix=_env_fix(container, f"the {flag} value of {where}", flag.lstrip("-"), ""),
                )


def _next(args: list[str], index: int, token: str) -> str:
    """The value after a bare flag: the next word in the same string, or the next argument."""
    words = args[index].split()
    position = words.index(token)
    if position + 1 < len(words):
        return words[position + 1]
    return args[index + 1] if index + 1 < len(args) else ""


def _secret_name(name: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-") or "credentials"


def _container_list(container: Container) -> str:
    return "initContainers" if container.init else "containers"


def _env_fix(container: Container, what: str, name: str, literal_env: str) -> dict[str, str]:
    """A pod-spec patch that takes the value from a Secret (value: null drops the literal)."""
    env_name = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
    secret = _secret_name(name)
    note = (
        "" if literal_env else f"   # then pass it as {name.join(['--', '=$(' + env_name + ')'])}"
    )
    value_line = ["      value: null   # the literal goes"] if literal_env else []
    lines = [
        f"{_container_list(container)}:",
        f"  - name: {container.name}",
        f"    env:{note}",
        f"      - name: {env_name}",
        *["  " + v for v in value_line],
        "        valueFrom:",
        f"          secretKeyRef: {{name: {secret}, key: value}}",
    ]
    advice = (
        f"move {what} into a Secret and reference it; create it first:\n"
        f"#   kubectl -n {container.template.owner.ref.namespace or 'default'} create secret "
        f"generic {secret} --from-literal=value=..."
    )
    return {"advice": advice, "snippet": "\n".join(lines)}


def _file_fix(container: Container, name: str, secret: str) -> dict[str, str]:
    """Decryption keys: a read-only file from the Secret instead of an env var."""
    secret = secret or _secret_name(name)
    lines = [
        "volumes:",
        f"  - name: {secret}",
        f"    secret: {{secretName: {secret}, defaultMode: 0400}}",
        f"{_container_list(container)}:",
        f"  - name: {container.name}",
        "    env:",
        f"      - {{name: {name}, $patch: delete}}",
        "    volumeMounts:",
        f"      - {{name: {secret}, mountPath: /var/run/secrets/{secret}, readOnly: true}}",
    ]
    advice = f"mount the decryption key {name} as a read-only file instead of an env var"
    return {"advice": advice, "snippet": "\n".join(lines)}


def _config_map_fix(namespace: str, config_map: str, key: str) -> dict[str, str]:
    """Copy the value into a Secret without printing it, then drop it from the ConfigMap."""
    ns = namespace or "default"
    secret = _secret_name(key)
    jsonpath = key.replace(".", "\\.")
    lines = [
        f"kubectl -n {ns} create secret generic {secret} \\",
        f'  --from-literal=value="$(kubectl -n {ns} get configmap {config_map} '
        f"-o jsonpath='{{.data.{jsonpath}}}')\"",
        f"kubectl -n {ns} patch configmap {config_map} --type=json "
        f'-p \'[{{"op": "remove", "path": "/data/{key}"}}]\'',
    ]
    advice = f"move ConfigMap key {key} into a Secret and reference the Secret instead"
    return {"advice": advice, "snippet": "\n".join(lines)}
