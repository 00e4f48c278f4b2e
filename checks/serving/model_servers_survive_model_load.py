from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpu_audit.api import (
    TRITON,
    VLLM,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    ModelSize,
    PodTemplate,
    Result,
    ServerClass,
    Severity,
    Snapshot,
    as_mapping,
    check,
    classify,
    failed,
    gpu_pod_templates,
    model_size,
    passed,
)

from ._common import (
    knative_managed,
    owned_by_kserve,
    probe_budget,
)

_LIVENESS_BUDGET = 300  # seconds; large models take minutes to download and load
_STARTUP_BUDGET = 120
# Load times the servers' own Kubernetes documentation gives (seconds, source).
_DOCUMENTED_LOAD: dict[str, tuple[int, str]] = {
    VLLM: (120, "vLLM's Kubernetes guide: a couple of minutes to download the model"),
    TRITON: (300, "Triton's k8s-onprem chart allows 300 s for model load"),
}


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
        Ollama, NIM, KServe runtimes; Hugging Face TGI containers) in GPU pod templates.
        Budget = initialDelaySeconds + failureThreshold x periodSeconds with the API defaults
        (0, 3, 10). Reported: liveness without a startup probe and a budget under 300 s; a
        startup probe under 120 s, or under the load time the evidence gives; no readiness
        probe and no startup probe (a startup probe keeps the container un-Ready until it
        succeeds, so it gates traffic during the load). Not flagged: readiness in
        Knative-managed pods (queue-proxy), of Triton outside KServe (GPU-SRV-002's), of
        LeaderWorkerSet workers (clients reach only the leader) and of pods that run to
        completion (restartPolicy Never or OnFailure: a Job's model download); the workers of a multi-node
        NIMService (the operator's Service selects only the leader and the operator sets the
        workers' probes); servers without liveness probes (no kill risk), CPU-only pods.
    """,
    severity_evidence="""
        Medium when the input shows that loading takes longer than the probe allows: a model
        name with a parameter count giving >= 6 GB of weights (about 3B parameters at 16
        bits; then 300 s is the least budget), or a server whose Kubernetes documentation
        gives a load time (vLLM 120 s, Triton 300 s) above the budget; without either, low.
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
        "https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/",
        "https://github.com/triton-inference-server/server/blob/main/deploy/k8s-onprem/templates/deployment.yaml",
        "https://github.com/vllm-project/vllm/blob/main/docs/deployment/k8s.md",
        "https://github.com/NVIDIA/k8s-nim-operator/blob/main/manifests/lws.yaml",
    ),
    remediation_root="pod_spec",
)
def model_servers_survive_model_load(snapshot: Snapshot) -> Iterator[Result]:
    for template in gpu_pod_templates(snapshot):
        if _nim_worker(template):
            continue
        size = model_size(template)
        for container in template.containers(include_init=False):
            server = classify(container)
            if server is None:
                continue
            problems = list(_problems(container, server, _Load.of(server, size)))
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


@dataclass(frozen=True, slots=True)
class _Load:
    """What the input says about how long the model load takes."""

    size: ModelSize | None
    documented: tuple[int, str] | None

    @classmethod
    def of(cls, server: ServerClass, size: ModelSize | None) -> _Load:
        return cls(size, _DOCUMENTED_LOAD.get(server.name))

    @property
    def seconds(self) -> int:
        """The least load time the evidence supports, 0 without evidence."""
        large = _LIVENESS_BUDGET if self.size is not None and self.size.large else 0
        return max(large, self.documented[0] if self.documented else 0)

    def why(self) -> str:
        reasons = []
        if self.size is not None and self.size.large:
            reasons.append(f"the model {self.size.describe()} takes minutes to download and load")
        if self.documented:
            reasons.append(f"{self.documented[1]}")
        return "; ".join(reasons)


def _problems(
    container: Container, server: ServerClass, load: _Load
) -> Iterator[tuple[str, Severity]]:
    liveness = as_mapping(container.raw.get("livenessProbe"))
    startup = as_mapping(container.raw.get("startupProbe"))
    if liveness and not startup and (budget := probe_budget(liveness)) < _LIVENESS_BUDGET:
        problem = (
            f"liveness probe kills the container after ~{budget}s and there is no startup probe"
        )
        yield _judged(problem, budget < load.seconds, load)
    if startup:
        budget = probe_budget(startup)
        if budget < load.seconds:
            yield _judged(f"startup probe gives up after ~{budget}s", True, load)
        elif budget < _STARTUP_BUDGET:
            yield _judged(f"startup probe gives up after ~{budget}s", False, load)
    template = container.template
    readiness_elsewhere = (
        knative_managed(container)
        or (server.name == TRITON and not owned_by_kserve(container))
        # LeaderWorkerSet workers join the leader's engine; clients reach only the leader.
        or (template.owner.ref.kind_name == "LeaderWorkerSet" and template.replica_type == "worker")
        # A pod that runs to completion (a Job's must: restartPolicy Never or OnFailure,
        # https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-template), such
        # as a NIM `download-to-cache` Job, serves no traffic for readiness to gate.
        or template.spec.get("restartPolicy") in ("Never", "OnFailure")
    )
    if not container.raw.get("readinessProbe") and not startup and not readiness_elsewhere:
        problem = (
            "no readiness or startup probe: the pod is Ready, and gets traffic, while the "
            "model loads"
        )
        yield _judged(problem, load.seconds > 0, load)


def _nim_worker(template: PodTemplate) -> bool:
    """A worker of a multi-node NIMService: the NIM operator's Service selects only the leader
    (nim-llm-role=leader, GetSelectorLabels in api/apps/v1alpha1/nimservice_types.go), the
    model loads through the leader, and the worker's probes are the operator's own
    (manifests/lws.yaml: none, or `ray status` for a Ray worker), with no NIMService field to
    change them."""
    return template.owner.ref.kind_name == "NIMService" and template.replica_type == "nim worker"


def _judged(problem: str, evidenced: bool, load: _Load) -> tuple[str, Severity]:
    if evidenced:
        return f"{problem}; {load.why()}", Severity.MEDIUM
    if load.seconds:
        return f"{problem}; what the input shows ({load.why()}) fits in it", Severity.LOW
    return (
        f"{problem}; nothing in the input shows a long model load (no large model name, no "
        "documented load time), so it may be enough",
        Severity.LOW,
    )


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
