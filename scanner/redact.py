"""What must never leave the snapshot: Secret values, literal credentials, and fields no check
reads.

The snapshot is written to disk by `collect` and may be attached to a support ticket, so what
looks like a credential is replaced here, when an object is loaded, and no later stage ever
holds it. Checks that look for literal credentials see REDACTED in its place (see
`credential_like`).
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

_SECRET_NAME = re.compile(
    r"(^|_)(API_?KEY|ACCESS_?KEY|SECRET(_ACCESS)?_?KEY|SECRET|TOKEN|PASSWORD|PASSWD|"
    r"PRIVATE_?KEY|CREDENTIALS?|AUTH|DECRYPT(ION)?_?KEY|ENCRYPTION_?KEY|HF_TOKEN|"
    r"HUGGING_?FACE_HUB_TOKEN|NGC_API_KEY|WANDB_API_KEY|OPENAI_API_KEY)($|_)",
    re.IGNORECASE,
)
_NOT_SECRET_NAME = re.compile(
    r"TOKENIZERS_PARALLELISM|MAX_.*TOKENS|_TOKENS$|NUM_.*TOKENS|"
    r"_(FILE|PATH|DIR|URL|URI|ENDPOINT|REGION|ID|MODE|TYPE|METHOD|ENABLED|HEADER)$|"
    r"TOKEN_LIMIT|HF_HUB_ENABLE_HF_TRANSFER|^(ENABLE|DISABLE)_|_(ENABLE|DISABLE)_",
    re.IGNORECASE,
)
_SECRET_VALUES = tuple(
    re.compile(p)
    for p in (
        r"hf_[A-Za-z0-9]{30,}",
        r"sk-[A-Za-z0-9_-]{20,}",
        r"AKIA[0-9A-Z]{16}",
        r"nvapi-[A-Za-z0-9_-]{20,}",
        r"ghp_[A-Za-z0-9]{36}",
        r"xox[baprs]-[A-Za-z0-9-]{10,}",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    )
)
# Switches and placeholders, not credentials: TS_DISABLE_TOKEN_AUTHORIZATION=true.
_NOT_A_CREDENTIAL = re.compile(
    r"^(true|false|yes|no|on|off|none|null|enabled|disabled|\d+|\$\([A-Za-z0-9_]+\))$",
    re.IGNORECASE,
)


def is_placeholder(value: str) -> bool:
    """A boolean, a number or a $(VAR) reference: never a credential."""
    return bool(_NOT_A_CREDENTIAL.match(value))


def credential_like(name: str, value: str) -> bool:
    """Whether a literal name/value pair looks like a credential (REDACTED does: the loader
    put it in place of one). Never returns or logs the value."""
    value = value.strip()
    if value == REDACTED:
        return True
    if not value or is_placeholder(value):
        return False
    if any(p.search(value) for p in _SECRET_VALUES):
        return True
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


def sanitize(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop managedFields; keep only the key names of a Secret's data; replace credential-like
    literal env values (in any pod spec, of any kind) and ConfigMap values with REDACTED.

    Mutates and returns `obj` (the loader owns the freshly parsed dict). The last-applied
    annotation is redacted on every object: it holds a full copy of the object as applied.
    """
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            annotations[LAST_APPLIED] = REDACTED
    core = obj.get("apiVersion") == "v1"
    if core and obj.get("kind") == "Secret":
        for section in ("data", "stringData"):
            values = obj.get(section)
            if isinstance(values, dict):
                obj[section] = dict.fromkeys(values, REDACTED)
            elif values is not None:
                obj[section] = REDACTED
    if core and obj.get("kind") == "ConfigMap" and isinstance(obj.get("data"), dict):
        data = obj["data"]
        for key, value in data.items():
            if isinstance(value, str) and credential_like(str(key), value):
                data[key] = REDACTED
    _redact_env(obj)
    return obj


_CONTAINERS = (dict, list)


def _redact_env(value: Any) -> None:
    """Every `env: [{name, value}]` list anywhere in the object: pod specs sit at different
    paths in Pods, workloads and custom resources (Volcano tasks, KServe predictors...)."""
    # Only containers are visited: a call per scalar would be most of the loader's time.
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "env" and isinstance(item, list):
                for entry in item:
                    if (
                        isinstance(entry, dict)
                        and isinstance(entry.get("name"), str)
                        and isinstance(entry.get("value"), str)
                        and credential_like(entry["name"], entry["value"])
                    ):
                        entry["value"] = REDACTED
            if isinstance(item, _CONTAINERS):
                _redact_env(item)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, _CONTAINERS):
                _redact_env(item)
