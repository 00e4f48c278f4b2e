from __future__ import annotations

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
        volumes:   # where the models live: a PVC, or an s3:// / gs:// --model-repository
          - name: model-repo
            persistentVolumeClaim: {claimName: model-repository, readOnly: true}
        $section:
          - name: $container
            args: ["tritonserver", "--model-repository=/models", "--strict-readiness=true"]
            volumeMounts:
              - {name: model-repo, mountPath: /models, readOnly: true}
            readinessProbe:
              httpGet: {path: /v2/health/ready, port: 8000}
              periodSeconds: 5
              failureThreshold: 3
            startupProbe:
              httpGet: {path: /v2/health/ready, port: 8000}
              periodSeconds: 10
              failureThreshold: 30        # 5 minutes for model load
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://github.com/triton-inference-server/server/blob/main/deploy/k8s-onprem/templates/deployment.yaml",
        "https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_repository.html",
        "https://github.com/triton-inference-server/server/issues/1931",
        "https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_management.md",
    ),
    remediation_root="pod_spec",
)
def triton_has_model_repository_and_readiness(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        for container in template.containers(include_init=False):
            server = classify(container)
            if server is None or server.name != TRITON or owned_by_kserve(container):
                continue
            problems = [
                *_repository_problems(container),
                *_readiness_problems(container),
                *_control_mode_problems(container),
            ]
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
                        "section": "initContainers" if container.init else "containers",
                        "container": container.name,
                        "problem": problem,
                    },
                )


Problem = tuple[str, Severity | None, str]


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
