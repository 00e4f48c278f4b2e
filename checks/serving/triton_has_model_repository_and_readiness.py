from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    TRITON,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Result,
    Severity,
    Snapshot,
    argv,
    as_list,
    as_mapping,
    check,
    classify,
    failed,
    image_registry_and_path,
    passed,
    pod_templates,
)

from ._common import (
    flag_value,
    owned_by_kserve,
)

_SHELLS = ("sh", "bash", "ash", "dash")
_CLOUD_REPOSITORIES = ("s3://", "gs://", "as://")
_METRICS_PORT = 8002
_HTTP_PORT = 8000  # tritonserver --http-port's default
_READY_PATH = "/v2/health/ready"
# The handlers of a probe (core/v1 ProbeHandler): exactly one may be set.
_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_MODEL_CLAIM = {"claimName": "model-repository", "readOnly": True}
_MODEL_MOUNT = {"name": "model-repo", "mountPath": "/models", "readOnly": True}
# NVIDIA's release images hold no models: a repository path no volume provides is missing.
_STOCK_IMAGE = ("nvcr.io", "nvidia/tritonserver")


@check(
    id="GPU-SRV-002",
    title="Triton servers have a model repository and a readiness probe on /v2/health/ready",
    category=Category.SERVING,
    severity=Severity.HIGH,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        Without --model-repository Triton exits at start-up ("--model-repository must be
        specified") and the pod crash-loops while holding a GPU. Without a readiness probe on
        /v2/health/ready the Service routes requests to a Triton that is still loading models
        (or failed to load one), producing 5xx bursts on every rollout and scale-out; a TCP
        probe or one on the metrics port proves nothing about the models.
    """,
    detection="""
        Containers classified as Triton (SRV-CLASSIFY) outside KServe (whose runtime passes the
        repository and whose queue-proxy handles readiness). Part A: the tritonserver command
        line has no --model-repository/--model-store (high); a local repository path that is
        on no mounted volume is reported as medium (models baked into the image are possible:
        verify). Cloud repositories (s3://, gs://, as://) pass; shell wrapper scripts are
        searched as text; containers that rely on the image's default command are skipped.
        Part B: no readiness probe; an HTTP probe on another path than /v2/health/ready or
        /v2/models/..., or a TCP probe; a probe on the metrics port 8002 (reported once, as
        the metrics port, whatever its path). gRPC and exec probes pass. Part C:
        --model-control-mode=poll, which Triton's model management guide does not recommend
        for production (changes to the repository are loaded as they are seen, partial ones
        included).
    """,
    severity_evidence="""
        High when Triton cannot start: no --model-repository, or a local repository path on no
        volume with NVIDIA's stock tritonserver image, which holds no models (Triton exits with
        "failed to stat file"); the same path in a custom image (models may be baked in) is
        low. No readiness probe is medium (Triton's chart documents minutes of model load),
        low when a startup probe already holds the first traffic back; a probe on the metrics
        port is medium (it never reflects the models); a wrong path or a TCP probe is low.
        POLL model control is low (a practice the vendor advises against, not a failure).
    """,
    remediation="""
        # $kind $namespace/$name, container $container: $problem
        # $change
        $fragment
    """,
    remediation_generic="""
        # no --model-repository, or one on no volume: where the models live (a PVC, or an
        # s3:// / gs:// --model-repository), and the container's args written whole (a patch
        # replaces the list)
        volumes:
          - name: model-repo
            persistentVolumeClaim: {claimName: <claim>, readOnly: true}
        containers:
          - name: <container>
            args: [<its args>, --model-repository=/models, --strict-readiness=true]
            volumeMounts:
              - {name: model-repo, mountPath: /models, readOnly: true}
        # no readiness probe, or one that does not reflect the models: an HTTP probe on
        # /v2/health/ready of the HTTP port (--http-port, 8000). A probe has one handler: the
        # handlers the probe has besides are set to null (removed), so that the API server
        # does not refuse two ("may not specify more than 1 handler type")
        #   containers:
        #     - name: <container>
        #       readinessProbe:
        #         httpGet: {path: /v2/health/ready, port: 8000}
        #         tcpSocket: null
        # POLL model control: the args written whole without --model-control-mode
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://github.com/triton-inference-server/server/blob/main/deploy/k8s-onprem/templates/deployment.yaml",
        "https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_repository.html",
        "https://github.com/triton-inference-server/server/issues/1931",
        "https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_management.md",
        "https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/",
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/apis/core/validation/validation.go",
    ),
    remediation_root="pod_spec",
)
def triton_has_model_repository_and_readiness(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        for container in template.containers(include_init=False):
            server = classify(container)
            if server is None or server.name != TRITON or owned_by_kserve(container):
                continue
            repository = _repository_problems(container)
            control = _control_mode_problems(container)
            problems = [*repository, *_readiness_problems(container), *control]
            args = _fixed_args(container, repository=bool(repository), poll=bool(control))
            if not problems:
                yield passed(
                    container, f"has a model repository and model readiness ({server.rule})"
                )
            for problem, severity, field in problems:
                yield failed(
                    container,
                    f"{problem} ({server.rule})",
                    path=f"{container.path}.{field}",
                    severity=severity,
                    fix={
                        "container": container.name,
                        "problem": problem,
                        **_fix(container, field, args, repository=problem in _texts(repository)),
                    },
                )


def _texts(problems: list[Problem]) -> set[str]:
    return {text for text, _, _ in problems}


def _fix(container: Container, field: str, args: str, *, repository: bool) -> dict[str, str]:
    """The fragment that fixes one problem, and only it: the repository (a volume to choose,
    the mount, the args), the readiness probe, or the model control mode (the args)."""
    item: dict[str, Any] = {"name": container.name}
    lines = []
    if repository:
        change = "where the models live: a PVC, or an s3:// / gs:// --model-repository"
        volume = {"name": "model-repo", "persistentVolumeClaim": _MODEL_CLAIM}
        lines.append(f"volumes: {json.dumps([volume])}")
        item["args"] = json.loads(args)
        item["volumeMounts"] = [_MODEL_MOUNT]
    elif field == "readinessProbe":
        change = "a readiness probe of Triton's models, on its HTTP port (one handler)"
        item["readinessProbe"] = _readiness_probe(container)
    else:
        change = "its args written whole (a patch replaces the list), without POLL"
        item["args"] = json.loads(args)
    lines.append(f"containers: {json.dumps([item])}")
    return {"change": change, "fragment": "\n".join(lines)}


def _readiness_probe(container: Container) -> dict[str, Any]:
    """An HTTP probe of /v2/health/ready on the HTTP port. A probe takes one handler (the API
    server refuses "may not specify more than 1 handler type"), and a patch merges the probe
    into the one the container has: its other handlers are set to null, which removes them.
    The rest of the probe it has (timing; an httpGet's scheme, host, headers) stays."""
    old = as_mapping(container.raw.get("readinessProbe"))
    port_flag = flag_value(argv(container), "--http-port") or ""
    port = int(port_flag) if port_flag.isdigit() else _HTTP_PORT
    probe: dict[str, Any] = {h: None for h in _HANDLERS if h != "httpGet" and h in old}
    probe["httpGet"] = {"path": _READY_PATH, "port": port}
    if not old:
        probe.update({"periodSeconds": 5, "failureThreshold": 3})
    return probe


Problem = tuple[str, Severity | None, str]
# Flags the fix sets, dropped from the container's args (`--flag=value` or `--flag value`).
_REPOSITORY_FLAGS = ("--model-repository", "--model-store")
_READINESS_FLAG = "--strict-readiness"
_CONTROL_MODE_FLAG = "--model-control-mode"


def _fixed_args(container: Container, *, repository: bool, poll: bool) -> str:
    """The container's args after the fix, as a JSON list. A patch replaces a container's
    args whole (Container.args has no patchMergeKey in k8s.io/api core/v1 types.go), so the
    fix writes all of them: the container's own, without the flags it sets (the repository
    only when it is a problem, POLL model control when reported) and with
    --model-repository=/models and --strict-readiness=true. `tritonserver` leads when the
    container gives no command; a shell script's args stay as they are."""
    command = [str(a) for a in as_list(container.raw.get("command"))]
    args = [str(a) for a in as_list(container.raw.get("args"))]
    if command and command[0].rsplit("/", 1)[-1] in _SHELLS:
        return json.dumps(args)
    if not command and not args:
        args = ["tritonserver"]
    dropped = {_READINESS_FLAG}
    dropped.update(_REPOSITORY_FLAGS if repository else (), [_CONTROL_MODE_FLAG] if poll else ())
    kept: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        name = arg.split("=", 1)[0]
        index += 1
        if name not in dropped:
            kept.append(arg)
        elif arg == name and index < len(args) and not args[index].startswith("-"):
            index += 1  # `--flag value`: the value goes with it
    if repository:
        kept.append("--model-repository=/models")
    return json.dumps([*kept, f"{_READINESS_FLAG}=true"])


def _repository_problems(container: Container) -> list[Problem]:
    args = argv(container)
    if not args:
        return []  # the image's default command is not knowable offline
    command = as_list(container.raw.get("command"))
    wrapped = bool(command) and str(command[0]).rsplit("/", 1)[-1] in _SHELLS
    repository = flag_value(args, "--model-repository") or flag_value(args, "--model-store")
    if repository is None:
        if wrapped:
            return []  # a wrapper script may build the flag at run time: cannot prove it missing
        return [("tritonserver is started without --model-repository", None, "args")]
    if repository.startswith(_CLOUD_REPOSITORIES):
        return []
    mounts = [
        str(m.get("mountPath", "")).rstrip("/")
        for m in map(as_mapping, as_list(container.raw.get("volumeMounts")))
    ]
    if not any(m and (repository == m or repository.startswith(m + "/")) for m in mounts):
        if image_registry_and_path(container.image) == _STOCK_IMAGE:
            return [
                (
                    f"--model-repository={repository} is on no mounted volume and the stock "
                    f"image {container.image} holds no models: Triton exits at start-up "
                    '("failed to stat file")',
                    Severity.HIGH,
                    "volumeMounts",
                )
            ]
        return [
            (
                f"--model-repository={repository} is on no mounted volume (models baked into "
                f"the custom image {container.image}? verify)",
                Severity.LOW,
                "volumeMounts",
            )
        ]
    return []


def _readiness_problems(container: Container) -> list[Problem]:
    probe = as_mapping(container.raw.get("readinessProbe"))
    if not probe:
        if as_mapping(container.raw.get("startupProbe")):
            return [
                (
                    "no readiness probe: the startup probe holds traffic back during the first "
                    "load, but a model that fails or is unloaded later keeps receiving requests",
                    Severity.LOW,
                    "readinessProbe",
                )
            ]
        return [
            (
                "no readiness probe: traffic reaches Triton before models load (Triton's chart "
                "allows 300 s for model load)",
                Severity.MEDIUM,
                "readinessProbe",
            )
        ]
    if _probe_port(probe, container) == _METRICS_PORT:
        # One probe, one finding: the port is the problem whatever the path says.
        return [
            ("readiness probe targets the metrics port 8002", Severity.MEDIUM, "readinessProbe")
        ]
    problems: list[Problem] = []
    http = as_mapping(probe.get("httpGet"))
    if http:
        path = str(http.get("path", "/"))
        if path != "/v2/health/ready" and not path.startswith("/v2/models/"):
            problems.append(
                (
                    f"readiness probe path {path} does not reflect model readiness",
                    Severity.LOW,
                    "readinessProbe",
                )
            )
    elif "tcpSocket" in probe:
        problems.append(
            (
                "TCP readiness only proves the port is open, not that models loaded",
                Severity.LOW,
                "readinessProbe",
            )
        )
    return problems


def _control_mode_problems(container: Container) -> list[Problem]:
    mode = (flag_value(argv(container), "--model-control-mode") or "").lower()
    if mode != "poll":
        return []
    return [
        (
            "--model-control-mode=poll: Triton does not recommend POLL in production; it "
            "loads repository changes as it sees them, partial ones included, and whoever can "
            "write the repository loads code (use none or explicit)",
            Severity.LOW,
            "args",
        )
    ]


def _probe_port(probe: Mapping[str, Any], container: Container) -> int | None:
    for handler in ("httpGet", "tcpSocket", "grpc"):
        port = as_mapping(probe.get(handler)).get("port")
        if isinstance(port, int):
            return port
        if isinstance(port, str):
            for declared in map(as_mapping, as_list(container.raw.get("ports"))):
                if declared.get("name") == port and isinstance(declared.get("containerPort"), int):
                    return int(declared["containerPort"])
    return None
