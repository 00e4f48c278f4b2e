"""The one redaction layer: what looks like a credential never leaves the scanner.

Every path cluster data takes out of gpu-audit goes through this module:

- `sanitize` edits each object as it is loaded (files, stdin, snapshot files and the live API
  call it), so no later stage holds the credential: a Secret keeps only its key names,
  `managedFields` are dropped, and every string of every field is redacted as below.
- `snapshot_object` is what a snapshot file (`collect`) keeps of an object: sanitized, and
  without the annotations no check reads (`READ_ANNOTATIONS`).
- `redact_text` is the last pass over what the scanner writes: each finding's message and
  rendered remediation (`engine`), the `inventory` and `why-pending` output (`redact_tree`)
  and the source details of a live scan.

What counts as a credential, wherever it sits (env values, args and commands, probes, labels,
annotations, ConfigMap file contents, custom resources):

- a value under a credential-looking name: a mapping key or an `{name, value}` pair (env,
  httpHeaders) such as HF_TOKEN, apiKey, password, Authorization; in text, `NAME=value`
  (`export TOKEN=...` in `sh -c`, .env files), `name: value` (YAML, HTTP headers) and
  `"name": "value"` (JSON);
- the value of a flag whose name holds token, key, password, secret, credential or auth:
  `--api-key=VALUE`, `--hf-token VALUE` in a string, `["--password", "VALUE"]` in a list;
- the password options of tools that do not name them so, as their manuals define them (a
  string or a command list): curl's `-u`/`--user` and `-U`/`--proxy-user USER:PASSWORD`, the
  MySQL and MariaDB clients' `-pPASSWORD` (never `-p NAME`: that prompts, and NAME is the
  database), sshpass `-p`, redis-cli `-a`, and `-p` of `docker`/`podman`/`nerdctl`/`helm
  registry` `login`;
- SQL and Redis passwords in text (ConfigMap init scripts, redis.conf): `PASSWORD '...'`
  (PostgreSQL CREATE/ALTER ROLE), `IDENTIFIED BY '...'` (MySQL CREATE USER), `requirepass`
  and `masterauth VALUE`;
- the userinfo of a URL (`https://user:pass@host`, also `user:pass@host`);
- the credential of an HTTP `Bearer` or `Basic` authorization;
- well-known token shapes (hf_, sk-, ghp_, github_pat_, xox?-, AKIA/ASIA, nvapi-, glpat-,
  JWTs) and PEM private key blocks.

Only the value is replaced with REDACTED: the name, the flag and the fact that a value was
there stay, which is all a check needs (GPU-SEC-001 reports `<redacted>` as the literal it
stands for). Placeholders are not credentials and stay: booleans, numbers, `$VAR`, `${VAR}`,
`$(VAR)`, `{{ ... }}` and `<value>`. The checks' own prose ("--api-key with an inline
value") keeps a plain word after a flag; cluster data does not (`--password hunter`).

Labels are all kept, redacted like every other string: any selector (Services,
NetworkPolicies, affinities, Karpenter requirements...) may read any label.

The cost is linear in the text: substring searches decide which texts may hold a credential,
and only those are parsed. A text longer than any value an API server stores (1 MiB) is not
parsed at all: it is REDACTED whole when it holds "@", a token prefix or a credential word.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterator, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

from gpu_audit.bounded import remember

if TYPE_CHECKING:
    from gpu_audit.sharing import SharedParts

REDACTED = "<redacted>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# Annotations some check, the diagnostics or the exemptions read (grep `annotations` in
# checks/ and scanner/): the only ones a snapshot file keeps. A check that reads another adds it
# here; tests/test_secret_corpus.py scans every check fixture as it is and through a snapshot
# file, and fails when the verdicts differ. Keys, then prefixes, then suffixes (GPU-SCHED-003
# reads any annotation ending in /zone or availability-zone).
READ_ANNOTATIONS = frozenset(
    {
        "kubernetes.io/config.mirror",  # static pods (GPU-WL-007, GPU-NODE-005, cost checks)
        "kubernetes.io/limit-ranger",  # what the LimitRanger set (GPU-QUOTA-003)
        "pv.kubernetes.io/provisioned-by",  # dynamic PVs (GPU-STO-002)
        "storageclass.kubernetes.io/is-default-class",  # the default StorageClass
        "storageclass.beta.kubernetes.io/is-default-class",
        "node.kubernetes.io/instance-type",  # placement keys (GPU-SCHED-003)
        "beta.kubernetes.io/instance-type",
        "kubernetes.io/hostname",
        "eks.amazonaws.com/capacityType",
        "nvidia.com/gpu.product",
        "scheduling.k8s.io/group-name",  # Volcano gang membership (GPU-DIST-001, why-pending)
        "k3s.io/node-args",  # the container runtime a K3s/RKE2 node runs (GPU-WL-008)
        "rke2.io/node-args",
        "kueue.x-k8s.io/podset-required-topology",  # Kueue TAS, JobSet placement (GPU-FAB-004)
        "kueue.x-k8s.io/podset-preferred-topology",
        "alpha.jobset.sigs.k8s.io/exclusive-topology",
        "serving.knative.dev/progress-deadline",  # a revision's deadline (GPU-SRV-006)
    }
)
READ_ANNOTATION_PREFIXES = (
    "gpu-audit.io/",  # exemptions, GPU-HPA-004 and GPU-NET-002 waivers
    "meta.helm.sh/",  # Helm releases (GPU-SHARE-001, stack checks)
    "scheduling.volcano.sh/",
    "karpenter.sh/",  # do-not-disrupt (GPU-COST-003), capacity-type
    "topology.kubernetes.io/",
    "failure-domain.beta.kubernetes.io/",
    "cloud.google.com/",  # GKE accelerator, internal load balancers
    "networking.gke.io/",
    "service.beta.kubernetes.io/",  # cloud load balancer schemes (GPU-SRV-003)
    "serving.kserve.io/",  # server type (GPU-SRV-004)
    "internal.serving.kserve.io/",  # the storage-initializer source URI (model size)
)
READ_ANNOTATION_SUFFIXES = ("/zone", "availability-zone")

_SECRET_NAME = re.compile(
    r"(^|_)(API_?KEY|ACCESS_?KEY|SECRET(_ACCESS)?_?KEY|SECRET|TOKEN|PASSWORD|PASSWD|PASS|"
    r"REQUIREPASS|MASTERAUTH|"
    r"PRIVATE_?KEY|CREDENTIALS?|AUTH|AUTHORIZATION|COOKIE|DECRYPT(ION)?_?KEY|"
    r"ENCRYPTION_?KEY|HF_TOKEN|HUGGING_?FACE_HUB_TOKEN|NGC_API_KEY|WANDB_API_KEY|"
    r"OPENAI_API_KEY)($|_)"
)
# A flag names its value with any of these words (--license-key, --db-pass).
_SECRET_FLAG_WORD = re.compile(r"(^|_)(KEY|KEYS|APIKEY)($|_)")
_NOT_SECRET_NAME = re.compile(
    r"TOKENIZERS_PARALLELISM|MAX_.*TOKENS|_TOKENS$|NUM_.*TOKENS|"
    r"_(FILE|PATH|DIR|URL|URI|ENDPOINT|REGION|ID|MODE|TYPE|METHOD|ENABLED|HEADER|NAME|REF|"
    r"NAMESPACE|ENV|ENV_VAR|VAR)$|TOKEN_LIMIT|HF_HUB_ENABLE_HF_TRANSFER|^(ENABLE|DISABLE)_|_(ENABLE|DISABLE)_"
)
# A PEM block's BEGIN line is followed by its key (or the headers of an encrypted one). A BEGIN
# line that ends a quoted string is a shell word, not a block: a frame printed around "$KEY",
# a grep for the line.
_KEY_MATERIAL = r"(?![\"'`])"
# Well-known token shapes, each after a non-alphanumeric character, and the start of a PEM
# private key. An sk- key has an upper-case letter: sk-learn-server, a lower-case object name,
# is not one.
_SHAPE = (
    r"(?:(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|sk-(?=[A-Za-z0-9_-]*[A-Z])[A-Za-z0-9_-]{20,}|"
    r"gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|xox[abeprs]-[A-Za-z0-9-]{10,}|"
    r"(?:AKIA|ASIA)[0-9A-Z]{16}|nvapi-[A-Za-z0-9_-]{20,}|glpat-[A-Za-z0-9_-]{20,}|"
    r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*)|"
    rf"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----{_KEY_MATERIAL})"
)
_SHAPES = re.compile(_SHAPE)
_SHAPE_PREFIXES = (
    "hf_", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "_pat_", "xox", "AKIA", "ASIA",
    "nvapi-", "glpat-", "eyJ", "-----BEGIN ",
)  # fmt: skip
# Each pass of redact_text starts with a literal or a short set of first characters, so that
# the regex engine skips ahead in C: one regex of alternatives costs ~1 us per character.
_PEM = re.compile(
    rf"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----{_KEY_MATERIAL}.*?"
    r"(?:-----END (?P=label)-----|\Z)",
    re.DOTALL,
)
_TOKEN = re.compile(rf"{_SHAPE}[^\s\"'`<>,;]*")
_AUTH = re.compile(r"(?:[Bb]earer|[Bb]asic|BEARER|BASIC)[ \t]+(?P<value>[A-Za-z0-9._~+/-]{8,}=*)")
# Userinfo ends at "@" and starts after one of these (RFC 3986 delimiters, quotes, space).
_USERINFO_STOP = frozenset(" \t\n\r\f\v/?#@<>\"'`")
_BARE_USER = re.compile(r"[\w.%+-]+")
_DIGEST = re.compile(r"sha\d+:")
# Words that start a name worth a closer look: the names of credentials hold one.
_HINT_WORDS = ("tok", "key", "secr", "pass", "pwd", "auth", "cred", "cookie")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_NAME_TAIL = re.compile(r"[\w.-]*+")
_NAME = re.compile(r"(?:--?)?[A-Za-z_][\w.-]*")
_MAX_NAME = 256  # longer runs are no names
_MAX_USERINFO = 4096
_LONG = 1 << 20
_QUOTED = r"\"[^\"\n]*\"|'[^'\n]*'"
_STOP = "\\s\"'`;&|"
# What follows a name: =value (shell, .env, INI, --flag=value); : value (YAML, HTTP headers,
# JSON), to the end of the line; a space and a value (--flag value in sh -c); "," and a
# quoted value (["--flag", "value"] in JSON).
_AFTER_NAME = re.compile(
    rf"(?P<eq>[ \t]*=[ \t]*)(?P<eqv>{_QUOTED}|[^{_STOP}]*)"
    rf"|(?P<col>[\"']?[ \t]*:[ \t]+|[\"']:[ \t]*)(?P<colv>{_QUOTED}|[^{_STOP}{{\[][^\n\"'`;&|]*)"
    rf"|(?P<fl>[ \t]+)(?P<flv>{_QUOTED}|[^{_STOP}-][^{_STOP}]*)"
    rf"|(?P<jl>\",[ \t]*)(?P<jlv>\"[^\"\n-][^\"\n]*\")"
)
# _suspect's weaker form of a name and what follows it, over any characters but separators.
_AFTER_HINT = re.compile(r"[^\s\"'=:,]*+")
_SEPARATOR_HINT = re.compile(r"[\"']?(?:[ \t]*[=:]|[ \t]+[^\s-]|,)")
# Placeholders and switches, never credentials.
_KEPT = re.compile(
    r"(true|false|yes|no|on|off|none|null|enabled|disabled|\d+|\$\([A-Za-z0-9_]+\)|"
    r"\$[A-Za-z_][A-Za-z0-9_]*|\$\{[^{}]*\}|\{\{.*\}\}|<[^<>]*>)?",
    re.IGNORECASE | re.DOTALL,
)
_NOT_A_CREDENTIAL = re.compile(
    r"^(true|false|yes|no|on|off|none|null|enabled|disabled|\d+|\$\([A-Za-z0-9_]+\))$",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"([a-z0-9])([A-Z])|([A-Z]+)([A-Z][a-z])")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
_BARE_FLAG = re.compile(r"--?[A-Za-z][\w.-]*")
_WORD = re.compile(r"[A-Za-z][a-z]*")

# Tools whose password option is not named for it, from their manuals: curl -u/--user and
# -U/--proxy-user take USER:PASSWORD, split at the first colon
# (https://curl.se/docs/manpage.html#-u); the MySQL and MariaDB clients take -pPASSWORD, with no
# space: `mysql -p test` prompts, and test is the database
# (https://dev.mysql.com/doc/refman/8.0/en/command-line-options.html); sshpass -pPASSWORD
# (sshpass(1)); redis-cli -a PASSWORD (https://redis.io/docs/latest/develop/tools/cli/); and
# `docker login -p PASSWORD` (https://docs.docker.com/reference/cli/docker/login/), as podman,
# nerdctl and `helm registry login` copy it. The kind of each tool says which options it has.
_MYSQL_CLIENTS = (
    "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlcheck", "mysqlshow", "mysqlpump",
    "mysqlsh", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-check",
    "mariadb-show",
)  # fmt: skip
_TOOLS = {"curl": "user", "sshpass": "p", "redis-cli": "a"} | dict.fromkeys(_MYSQL_CLIENTS, "pw")
_LOGIN_TOOLS = frozenset({"docker", "podman", "nerdctl", "helm"})  # -p only after `login`
_TOOL_WORDS = ("curl", "mysql", "mariadb", "sshpass", "redis-cli", "login")
_TOOL_CALL = re.compile(
    r"(?<![\w.-])(?:[\w.-]*/)?(?:(?P<tool>curl|sshpass|redis-cli|mysql[a-z]*|mariadb[a-z-]*)|"
    r"(?:docker|podman|nerdctl|helm[ \t]+registry)[ \t]+login)(?![\w.-])[^\n;&|]*"
)
_VALUE = r"(?P<v>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`;&|-][^\s\"'`;&|]*)"
# Per kind: the option and its value (attached, or after spaces where the tool allows it),
# and the bare option whose value is the next item of a command list.
_TOOL_OPTIONS = {
    "user": re.compile(
        rf"(?<!\S)(?:-[A-Za-z]*[uU]|--user|--proxy-user)(?:[ \t]+|(?<=[uU])){_VALUE}"
    ),
    "pw": re.compile(rf"(?<!\S)-p{_VALUE}"),
    "p": re.compile(rf"(?<!\S)-p[ \t]*{_VALUE}"),
    "a": re.compile(rf"(?<!\S)-a[ \t]*{_VALUE}"),
}
_TOOL_FLAGS = {
    "user": re.compile(r"-[A-Za-z]*[uU]|--user|--proxy-user"),
    "p": re.compile("-p"),
    "a": re.compile("-a"),
}
# SQL and Redis: PostgreSQL's CREATE/ALTER ROLE ... PASSWORD 'literal'
# (https://www.postgresql.org/docs/current/sql-createrole.html), MySQL's CREATE USER ...
# IDENTIFIED BY 'literal' (https://dev.mysql.com/doc/refman/8.0/en/create-user.html), and the
# redis.conf directives `requirepass VALUE` and `masterauth VALUE` (also after CONFIG SET).
_STATEMENT = re.compile(
    r"(?<![\w-])(?i:password|identified[ \t]+by)[ \t]+(?P<v>'[^'\n]*'|\"[^\"\n]*\")|"
    r"(?<![\w-])(?i:requirepass|masterauth)[ \t]+(?P<r>[^\s\"'`;&|-][^\s\"'`;&|]*)"
)


def is_placeholder(value: str) -> bool:
    """A boolean, a number or a $(VAR) reference: never a credential."""
    return bool(_NOT_A_CREDENTIAL.match(value))


def _kept(value: str) -> bool:
    """Whether a value stays as it is: empty, a switch, a number or a placeholder ($VAR,
    ${VAR}, $(VAR), {{ ... }}, <value>, and REDACTED itself)."""
    return _KEPT.fullmatch(value.strip()) is not None


@functools.lru_cache(maxsize=8192)
def _normal(name: str) -> str:
    """HF_TOKEN, hfToken, hf-token, example.com/hf.token: all HF_TOKEN."""
    spaced = _CAMEL.sub(lambda m: f"{m[1]}_{m[2]}" if m[1] else f"{m[3]}_{m[4]}", name)
    return _SEPARATORS.sub("_", spaced).strip("_").upper()


@functools.lru_cache(maxsize=8192)
def secret_name(name: str) -> bool:
    """Whether a key, env variable or header name says that its value is a credential."""
    normal = _normal(name)
    return bool(_SECRET_NAME.search(normal)) and not _NOT_SECRET_NAME.search(normal)


@functools.lru_cache(maxsize=4096)
def secret_flag(flag: str) -> bool:
    """Whether a command-line flag (--api-key, --hf-token, --db-password) takes a credential."""
    normal = _normal(flag)
    return bool(
        _SECRET_NAME.search(normal) or _SECRET_FLAG_WORD.search(normal)
    ) and not _NOT_SECRET_NAME.search(normal)


def credential_like(name: str, value: str) -> bool:
    """Whether a literal name/value pair looks like a credential (one holding REDACTED does:
    the loader put it in place of one). Never returns or logs the value."""
    value = value.strip()
    if REDACTED in value:
        return True
    if not value or is_placeholder(value):
        return False
    if _SHAPES.search(value):
        return True
    return secret_name(name)


def _quoted(value: str) -> str:
    """REDACTED in the quotes `value` had."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{REDACTED}{value[0]}"
    return REDACTED


def _credential(value: str, words_are_prose: bool) -> bool:
    """Whether the value of a credential name is one, not a placeholder. With
    `words_are_prose`, a plain word is no value: "--api-key with an inline value" is a
    sentence, not a command line."""
    inner = value.strip()
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "\"'":
        inner = inner[1:-1]
    # `false}` ends a flow mapping: {automountServiceAccountToken: false}. A command
    # substitution, TOKEN="$(cat /run/secrets/t)", runs a command: its output is no literal.
    return (
        not inner.startswith(("$(", "`"))
        and not _kept(inner)
        and not _kept(inner.rstrip("}]),;"))
        and not (words_are_prose and _WORD.fullmatch(inner) is not None)
    )


def _password(value: str) -> bool:
    """Whether the value of a password option or directive is one. Unlike a value named by a
    credential word, a number is a password here: `requirepass 5241590000000000` (KubeRay's
    external Redis sample), `redis-cli -a 12345`."""
    return value.strip("\"'").isdigit() or _credential(value, words_are_prose=False)


def redact_text(text: str, *, prose: bool = True) -> str:
    """`text` with every credential it shows replaced by REDACTED (see the module's doc). With
    `prose` (the checks' messages), a plain word after a credential flag stays."""
    if len(text) > _LONG:
        # Longer than any value an API server stores: redacted whole when anything in it may
        # be a credential, rather than parsed at length.
        return REDACTED if _may_hold(text) else text
    return _redact(text, prose) if _suspect(text) else text


def _redact(text: str, prose: bool = True) -> str:
    text = _PEM.sub(REDACTED, text)
    text = _TOKEN.sub(REDACTED, text)
    text = _redact_userinfo(text)
    text = _AUTH.sub(_auth, text)
    text = _TOOL_CALL.sub(_tool_call, text)
    text = _STATEMENT.sub(_statement, text)
    return _redact_names(text, prose)


def _suspect(text: str) -> bool:
    """Whether `text` may hold something to redact: substring searches first, so that the
    passes of _redact run only on the few texts that might. Each test is a weaker form of a
    pass: a text it clears holds nothing _redact would change."""
    if "@" in text and next(_userinfo(text), None) is not None:
        return True
    for prefix in _SHAPE_PREFIXES:
        if prefix in text:
            if _SHAPES.search(text):
                return True
            break
    low = text.translate(_ASCII_LOWER)
    if ("bearer" in low or "basic" in low) and _AUTH.search(text):
        return True
    if any(word in low for word in _TOOL_WORDS) and _TOOL_CALL.search(text):
        return True
    if "identified" in low and _STATEMENT.search(text):
        return True
    for word in _HINT_WORDS:
        at = low.find(word)
        while at >= 0:
            # Every hint of one run of name characters is followed by the same separator.
            end = _run_end(_AFTER_HINT, low, at + len(word))
            if _SEPARATOR_HINT.match(low, end):
                return True
            at = low.find(word, end)
    return False


def _may_hold(text: str) -> bool:
    """Whether a long text holds any of what _suspect looks for, by substring searches only."""
    if "@" in text or any(prefix in text for prefix in _SHAPE_PREFIXES):
        return True
    words = (*_HINT_WORDS, *_TOOL_WORDS, "bearer", "basic", "identified")
    for at in range(0, len(text), _LONG):  # lower-cased a part at a time
        low = text[at : at + _LONG + 8].translate(_ASCII_LOWER)
        if any(word in low for word in words):
            return True
    return False


def _run_end(run: re.Pattern[str], text: str, at: int) -> int:
    """Where the run of `run`'s characters that starts at `at` ends."""
    match = run.match(text, at)
    return match.end() if match else at


def _auth(match: re.Match[str]) -> str:
    text, start, value = match.string, match.start(), match["value"]
    after_word = start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_-")
    if after_word or (value.isalpha() and value.islower()):  # "basic settings": a word
        return match[0]
    return match[0][: match.start("value") - start] + REDACTED


def _tool_call(match: re.Match[str]) -> str:
    """A tool's command line with the values of its password options redacted."""
    tool = match["tool"]
    kind = "p" if tool is None else _TOOLS.get(tool)
    return match[0] if kind is None else _TOOL_OPTIONS[kind].sub(_TOOL_VALUES[kind], match[0])


def _password_value(match: re.Match[str]) -> str:
    """An option's value redacted, unless it is a placeholder."""
    value = match["v"]
    if not _password(value):
        return match[0]
    return match[0][: match.start("v") - match.start()] + _quoted(value)


def _user_password(match: re.Match[str]) -> str:
    """USER:PASSWORD with the password redacted; USER alone (curl prompts) stays."""
    value = match["v"]
    quote = value[0] if value[0] in "\"'" else ""
    user, colon, password = value.strip(quote).partition(":")
    if not colon or _kept(password):
        return match[0]
    prefix = match[0][: match.start("v") - match.start()]
    return f"{prefix}{quote}{user}:{REDACTED}{quote}"


_TOOL_VALUES = {"user": _user_password} | dict.fromkeys(("pw", "p", "a"), _password_value)


def _statement(match: re.Match[str]) -> str:
    """A SQL password literal or a Redis password directive's value redacted."""
    group = "v" if match["v"] is not None else "r"
    value = match[group]
    if not _password(value):
        return match[0]
    return match[0][: match.start(group) - match.start()] + _quoted(value)


# A URL's userinfo that is one plain word holds no password: s3://anonymous@bucket (S3's
# anonymous access, KubeRay's batch-inference sample), ssh://git@github.com. A token used as
# the user name has digits or capitals, or a token shape (_TOKEN runs first).
_USER_NAME = re.compile(r"[a-z][a-z.-]{0,31}")


def _userinfo(text: str) -> Iterator[tuple[int, int]]:
    """Where the userinfo of each URL (scheme://userinfo@) or user:password@host sits."""
    at = text.find("@")
    while at >= 0:
        start = at
        limit = max(0, at - _MAX_USERINFO)
        while start > limit and text[start - 1] not in _USERINFO_STOP:
            start -= 1
        bounded = start == 0 or text[start - 1] in _USERINFO_STOP
        url = start >= 3 and text.startswith("://", start - 3)
        user_name = url and _USER_NAME.fullmatch(text, start, at) is not None
        if start < at and bounded and not user_name and (url or _bare_userinfo(text, start, at)):
            yield start, at
        at = text.find("@", at + 1)


def _bare_userinfo(text: str, start: int, at: int) -> bool:
    """user:password@host: not an image's name:tag@sha256:digest, nor a path or an address."""
    if text.find(":", start, at) < 0:
        return False
    user, _, password = text[start:at].partition(":")
    host = text[at + 1 : at + 2]
    return (
        bool(password and _BARE_USER.fullmatch(user))
        and (start == 0 or text[start - 1] not in "/@<")
        and (host.isalnum() or host == "[")
        and not _DIGEST.match(text, at + 1)
    )


def _redact_userinfo(text: str) -> str:
    pieces: list[str] = []
    done = 0
    for start, end in _userinfo(text):
        pieces += [text[done:start], REDACTED]
        done = end
    return "".join([*pieces, text[done:]]) if pieces else text


def _hints(low: str) -> list[int]:
    """Where the hint words are in a lower-cased text, in order."""
    found: list[int] = []
    for word in _HINT_WORDS:
        at = low.find(word)
        while at >= 0:
            found.append(at)
            at = low.find(word, at + 1)
    return sorted(found)


def _redact_names(text: str, prose: bool) -> str:
    """The values after names that say credential: NAME=value, name: value, --flag value.
    Names are runs of [\\w.-] that hold a hint word; the values of other names are left for
    the names they hold (the earlier passes saw the rest)."""
    pieces: list[str] = []
    done = resume = 0  # written up to; names before `resume` were seen or sit in a value
    for hint in _hints(text.translate(_ASCII_LOWER)):
        if hint < resume:
            continue
        start = hint
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
            start -= 1
            if hint - start > _MAX_NAME:
                break
        end = resume = _run_end(_NAME_TAIL, text, hint)
        name = text[start:end]
        if start < done or len(name) > _MAX_NAME or not _NAME.fullmatch(name):
            continue
        flag = name.startswith("-")
        if not (secret_flag(name) if flag else secret_name(name)):
            continue
        after = _AFTER_NAME.match(text, end)
        if after is None:
            continue
        group = str(after.lastgroup)
        quoted = start > 0 and text[start - 1] == '"'
        if (group == "flv" and not flag) or (group == "jlv" and not (flag and quoted)):
            continue
        resume = after.end()  # a placeholder holds no name either
        value = after[group]
        if _credential(value, words_are_prose=prose and group == "flv"):
            blank = value[len(value.rstrip()) :]
            pieces += [text[done : after.start(group)], _quoted(value.rstrip()), blank]
            done = resume
    return "".join([*pieces, text[done:]]) if pieces else text


def redact_argv(items: Sequence[str]) -> list[str]:
    """A command or args list redacted: each item as text, and the item after a bare
    credential flag (`["--api-key", "VALUE"]`) or a tool's password option
    (`["curl", "-u", "USER:PASSWORD"]`) as a whole."""
    argv = _Argv()
    out: list[str] = []
    for item in items:
        redacted = argv.redact(item)
        out.append(redacted if redacted is not None else redact_text(item))
    return out


def _bare_secret_flag(item: str) -> bool:
    return item.startswith("-") and bool(_BARE_FLAG.fullmatch(item)) and secret_flag(item)


class _Argv:
    """What the items of a command list read so far say about the next one."""

    __slots__ = ("after_flag", "kind", "login", "option")

    def __init__(self) -> None:
        self.after_flag = False  # a bare credential flag: the next item is its value
        self.kind: str | None = None  # the tool the list runs (_TOOLS)
        self.login = False  # a login tool: its -p counts after `login`
        self.option = ""  # the tool's bare password option: the next item is its value

    def redact(self, item: str) -> str | None:
        """`item` redacted for what came before it; None when only its own text tells."""
        result = None
        kind = self.kind
        if self.after_flag and item and not item.startswith("-") and not _kept(item):
            result = REDACTED
        elif kind is not None and item:
            # The option and its value, as the tool's regex reads them in a string.
            before = f"{self.option} " if self.option and not item.startswith("-") else ""
            redacted = _TOOL_OPTIONS[kind].sub(_TOOL_VALUES[kind], before + item)
            if redacted != before + item:
                result = redacted[len(before) :]
        self.after_flag = _bare_secret_flag(item)
        flag = _TOOL_FLAGS.get(kind) if kind is not None else None
        self.option = item if flag is not None and flag.fullmatch(item) else ""
        name = item.rpartition("/")[2]
        if name in _TOOLS:
            self.kind = _TOOLS[name]
        elif name in _LOGIN_TOOLS:
            self.login = True
        elif self.login and item == "login":
            self.kind = "p"
        return result

    def skip(self) -> None:
        """An item that is no string."""
        self.after_flag = False
        self.option = ""


def redact_tree(value: Any) -> Any:
    """A copy of a JSON-shaped value with every string (keys too) redacted as text."""
    return _tree(value, _TREE_TEXTS)


# The texts redact_tree has redacted, and what they became: the why-pending section repeats
# the same node names, labels and reasons for every pending pod (50,000 texts redacted at
# 50,000 pods, 1,300 calls). At most 64 Ki texts of at most 1 KiB are kept; cleared when full.
_TREE_TEXTS: dict[str, str] = {}
_TREE_TEXTS_SIZE = 1 << 16


def _tree(value: Any, done: dict[str, str]) -> Any:
    # The leaves of a mapping or list (most are texts, numbers and booleans) are read inline:
    # a call per leaf was half the time of redact_tree.
    if isinstance(value, str):
        return _text(value, done)
    if isinstance(value, dict):
        copy = {}
        for key, item in value.items():
            if key.__class__ is not str:
                key = str(key)
            name = redacted if (redacted := done.get(key)) is not None else _text(key, done)
            kind = item.__class__
            if kind is str:
                copy[name] = text if (text := done.get(item)) is not None else _text(item, done)
            elif kind is int or kind is bool or item is None:
                copy[name] = item
            else:
                copy[name] = _tree(item, done)
        return copy
    if isinstance(value, list | tuple):
        return [
            (text if (text := done.get(item)) is not None else _text(item, done))
            if item.__class__ is str
            else _tree(item, done)
            for item in value
        ]
    return value


def _text(text: str, done: dict[str, str]) -> str:
    redacted = done.get(text)
    if redacted is None:
        redacted = redact_text(text)
        if len(text) <= _CLEAN_LENGTH:
            remember(done, text, redacted, _TREE_TEXTS_SIZE)
    return redacted


def sanitize(obj: dict[str, Any], parts: SharedParts | None = None) -> dict[str, Any]:
    """Drop managedFields; keep only the key names of a Secret's data and a ConfigMap's
    binaryData; redact every credential of every field (see the module's doc).

    Mutates and returns `obj` (the loader owns the freshly parsed dict); idempotent. The
    last-applied annotation is redacted on every object: it holds a full copy of the object as
    applied. With `parts` (a live listing), the object's parts are first replaced by equal
    ones of earlier objects (gpu_audit.sharing), which were sanitized with them and are not
    walked again: what sanitize does to a part depends on the part alone (and, for a list, on
    whether the key it is under names a credential, which `parts` tells apart), since a text
    found clean in one object is clean in any (redact_text leaves any text _suspect clears).
    """
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            annotations[LAST_APPLIED] = REDACTED
    core = obj.get("apiVersion") == "v1"
    kind = obj.get("kind")
    sections = {"Secret": ("data", "stringData"), "ConfigMap": ("binaryData",)}.get(
        str(kind) if core else "", ()
    )
    for section in sections:
        values = obj.get(section)
        if isinstance(values, dict):
            obj[section] = dict.fromkeys(values, REDACTED)
        elif values is not None:
            obj[section] = REDACTED
    if parts is None:
        _scrub(obj, _NOTHING_SANITIZED)
    else:
        with parts.shared(obj) as done:
            _scrub(obj, done)
    return obj


_NOTHING_SANITIZED: frozenset[int] = frozenset()


def _scrub(obj: dict[str, Any], done: Set[int]) -> None:
    """Redact every credential of `obj`, but in the parts whose ids are `done`."""
    # Names, pairs and flags are judged on the way; the text of every string is looked at
    # once for the whole object, and only an object that may hold a credential in a text is
    # walked again to redact its strings. Most strings of a cluster repeat (images, keys,
    # label values, commands): one found clean once is not looked at again.
    texts: list[str] = []
    _scrub_mapping(obj, texts, done)
    if _suspect("\n".join(texts)):
        _scrub_mapping(obj, None, done)
    else:
        if len(_CLEAN) + len(texts) > _CLEAN_SIZE:
            _CLEAN.clear()
        _CLEAN.update(text for text in texts if len(text) <= _CLEAN_LENGTH)


def _scrub_mapping(node: dict[Any, Any], texts: list[str] | None, done: Set[int]) -> None:
    """Redact the values of credential names in `node` and below (but in the mappings and
    lists whose ids are `done`); the other strings go to `texts`, or are redacted as text
    when `texts` is None."""
    # The loader's hottest loop (every string of every object): the caches are read inline.
    cache = _KEY_CACHE
    clean = _CLEAN
    for key, item in node.items():
        if type(item) is str:
            if not item:
                continue
            secret = cache.get(key)
            if secret is None:
                secret = _secret_key(key)
            if secret and not _kept(item):
                node[key] = REDACTED
            elif texts is not None:
                if item not in clean:
                    texts.append(item)
            else:
                node[key] = redact_text(item, prose=False)
        elif type(item) is dict:
            if id(item) not in done:
                _scrub_mapping(item, texts, done)
        elif type(item) is list and id(item) not in done:
            if _secret_key(key):  # ServiceMonitor params: {token: [VALUE]}
                item[:] = [REDACTED if isinstance(v, str) and not _kept(v) else v for v in item]
            _scrub_list(item, texts, done)
    # {name, value} pairs: env entries, probe httpHeaders, custom resources' env lists.
    name = node.get("name")
    if type(name) is str:
        value = node.get("value")
        if type(value) is str and value != REDACTED and _secret_key(name) and not _kept(value):
            node["value"] = REDACTED


def _scrub_list(items: list[Any], texts: list[str] | None, done: Set[int]) -> None:
    argv = None  # made at the first string: most lists hold mappings (containers, env)
    for index, item in enumerate(items):
        if type(item) is str:
            if argv is None:
                argv = _Argv()
            redacted = argv.redact(item)
            if redacted is not None:
                items[index] = redacted
            elif texts is not None:
                if item not in _CLEAN:
                    texts.append(item)
            elif item:
                items[index] = redact_text(item, prose=False)
            continue
        if argv is not None:
            argv.skip()
        if id(item) in done:
            continue
        if isinstance(item, dict):
            _scrub_mapping(item, texts, done)
        elif isinstance(item, list):
            _scrub_list(item, texts, done)


_KEY_CACHE: dict[str, bool] = {}
# Strings sanitize found clean (no credential in their text), cleared when full: at most
# 256 Ki strings of at most 1 KiB are kept alive by it.
_CLEAN: set[str] = set()
_CLEAN_SIZE = 1 << 18
_CLEAN_LENGTH = 1024


def list_under_credential(key: Any) -> bool:
    """Whether sanitize redacts a list under this key whole (`token: [VALUE]`)."""
    return _secret_key(key)


def _secret_key(name: Any) -> bool:
    """secret_name through a plain dict: looked up for every string of every object."""
    known = _KEY_CACHE.get(name)
    if known is None:
        if len(_KEY_CACHE) >= 65536:
            _KEY_CACHE.clear()
        known = _KEY_CACHE[name] = isinstance(name, str) and secret_name(name)
    return known


def read_annotation(key: str) -> bool:
    """Whether some check reads this annotation (so a snapshot file keeps it)."""
    return (
        key in READ_ANNOTATIONS
        or key.startswith(READ_ANNOTATION_PREFIXES)
        or key.endswith(READ_ANNOTATION_SUFFIXES)
    )


def snapshot_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a snapshot file keeps of an object: `sanitize`d (a loaded object already is: it
    stays the same), and without the annotations no check reads, at any depth (pod templates
    have their own). Only the mappings on the path to a trimmed annotations mapping are
    copied."""
    kept: dict[str, Any] = _kept_annotations(sanitize(dict(obj)))
    return kept


def _kept_annotations(node: Any) -> Any:
    if isinstance(node, dict):
        changed: dict[Any, Any] = {}
        for key, item in node.items():
            if key == "metadata" and isinstance(item, dict):
                kept = _metadata(item)
            elif isinstance(item, dict | list):
                kept = _kept_annotations(item)
            else:
                continue
            if kept is not item:
                changed[key] = kept
        return {**node, **changed} if changed else node
    if isinstance(node, list):
        items = [_kept_annotations(item) for item in node]
        return items if any(a is not b for a, b in zip(items, node, strict=True)) else node
    return node


def _metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return metadata
    kept = {k: v for k, v in annotations.items() if isinstance(k, str) and read_annotation(k)}
    if len(kept) == len(annotations):
        return metadata
    trimmed = {k: v for k, v in metadata.items() if k != "annotations"}
    if kept:
        trimmed["annotations"] = kept
    return trimmed
