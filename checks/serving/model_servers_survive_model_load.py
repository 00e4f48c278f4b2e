from __future__ import annotations

from collections.abc import Iterator

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Result,
    ServerClass,
    Severity,
    Snapshot,
    as_mapping,
    check,
    classify,
    failed,
    gpu_pod_templates,
    passed,
)

from ._common import (
    knative_managed,
    probe_budget,
)

_LIVENESS_BUDGET = 300  # seconds; large models take minutes to download and load
_STARTUP_BUDGET = 120


@check(
    id="GPU-SRV-005",
    title="Slow-loading model servers have a startup probe and a readiness probe that cover model load",
    category=Category.SERVING,
    severity=Severity.MEDIUM,
    requires=(WORKLOAD_TYPES,),
    rationale="""
        LLM and vision servers spend minutes downloading weights and loading them into GPU
        memory. A liveness probe with the default budget (3 failures x 10 s) kills the
        container mid-load, so the pod crash-loops and reinitialises the GPU every time;
        without a readiness probe the Service sends requests before the model is loaded.
    """,
    detection="""
        Model-server containers (SRV-CLASSIFY: TorchServe, Triton, vLLM, TGI, Ray, SGLang,
        Ollama, NIM, KServe runtimes) in GPU pod templates. Budget = initialDelaySeconds +
        failureThreshold x periodSeconds with the API defaults (0, 3, 10). Liveness without a
        startup probe and a budget under 300 s: medium; a startup probe under 120 s: low; no
        readiness probe: medium, except in Knative-managed pods, where queue-proxy handles
        readiness. Not flagged: servers without liveness probes (no kill risk), CPU-only pods.
    """,
    remediation="""
        # $kind $namespace/$name, container $container ($server)
        $section:
          - name: $container
            startupProbe:
              httpGet: {path: $path, port: $port}
              periodSeconds: 10
              failureThreshold: 60        # up to 10 minutes to download and load weights
            livenessProbe:
              httpGet: {path: $live_path, port: $port}
              periodSeconds: 10
              failureThreshold: 3
            readinessProbe:
              httpGet: {path: $path, port: $port}
              periodSeconds: 5
    """,
    fix_kind=FixKind.PATCH,
    references=(
        "https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/",
        "https://github.com/triton-inference-server/server/blob/main/deploy/k8s-onprem/templates/deployment.yaml",
    ),
    remediation_root="pod_spec",
)
def model_servers_survive_model_load(snapshot: Snapshot) -> Iterator[Result]:
    for template in gpu_pod_templates(snapshot):
        for container in template.containers(include_init=False):
            server = classify(container)
            if server is None:
                continue
            problems = list(_problems(container))
            if not problems:
                yield passed(container, f"{server.describe()} probes cover model load")
            for problem, severity in problems:
                yield failed(
                    container,
                    f"{problem} ({server.describe()})",
                    path=container.path,
                    severity=severity,
                    fix=_fix(container, server),
                )


def _problems(container: Container) -> Iterator[tuple[str, Severity | None]]:
    liveness = as_mapping(container.raw.get("livenessProbe"))
    startup = as_mapping(container.raw.get("startupProbe"))
    if liveness and not startup and (budget := probe_budget(liveness)) < _LIVENESS_BUDGET:
        yield (
            f"liveness probe kills the container after ~{budget}s and there is no startup "
            "probe; model loads take minutes",
            None,
        )
    if startup and (budget := probe_budget(startup)) < _STARTUP_BUDGET:
        yield f"startup probe gives up after ~{budget}s, short for a model load", Severity.LOW
    if not container.raw.get("readinessProbe") and not knative_managed(container):
        yield "no readiness probe: traffic arrives before the model is loaded", None


# Health endpoints and default HTTP ports per server, for the suggested probes.
_HEALTH = {
    "triton": ("/v2/health/ready", "8000"),
    "torchserve": ("/ping", "8080"),
    "vllm": ("/health", "8000"),
    "tgi": ("/health", "80"),
    "sglang": ("/health", "30000"),
    "nim": ("/v1/health/ready", "8000"),
    "ollama": ("/", "11434"),
    "ray": ("/-/healthz", "8000"),
}


def _fix(container: Container, server: ServerClass) -> dict[str, str]:
    path, port = _HEALTH.get(server.name, ("/health", "8080"))
    live_path = "/v2/health/live" if server.name == "triton" else path
    return {
        "section": "initContainers" if container.init else "containers",
        "container": container.name,
        "server": server.name,
        "path": path,
        "live_path": live_path,
        "port": port,
    }
