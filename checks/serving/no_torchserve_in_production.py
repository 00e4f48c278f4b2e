from __future__ import annotations

from collections.abc import Iterator

from gpu_audit.api import (
    TORCHSERVE,
    WORKLOAD_TYPES,
    Category,
    Container,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    argv,
    as_list,
    as_mapping,
    check,
    classify,
    env_value,
    failed,
    passed,
    pod_templates,
)

from ._common import (
    has_flag,
    truthy,
)

ISVC = "InferenceService.serving.kserve.io"
_TORCHSERVE_RUNTIME = "kserve-torchserve"


@check(
    id="GPU-SRV-001",
    title="Model serving does not run TorchServe, which no longer gets security fixes",
    category=Category.SERVING,
    severity=Severity.MEDIUM,
    requires=((*WORKLOAD_TYPES, ISVC),),
    rationale="""
        TorchServe is in Limited Maintenance: upstream states there are no planned updates,
        bug fixes or security patches, and the repository is archived. It executes arbitrary
        Python packaged in .mar files, so unpatched vulnerabilities in an exposed server are
        code execution on a GPU node. With token authorization disabled or the model
        register/delete API enabled, anyone who reaches it can load code.
    """,
    detection="""
        Containers classified as TorchServe by image (pytorch/torchserve, */torchserve-kfs) or
        command line (SRV-CLASSIFY; the matched rule is printed), and KServe InferenceServices
        whose predictor is `pytorch` or `model.modelFormat.name: pytorch` with the
        kserve-torchserve runtime (or no runtime, which auto-selects it). The command line is
        the container's, or the predictor's args for an InferenceService. TS_* env vars only
        take effect with enable_envvars_config=true in config.properties, so they are reported
        but do not raise the severity. Not flagged: pytorch/pytorch or nvcr.io/nvidia/pytorch
        images, torchrun, torch-model-archiver.
    """,
    severity_evidence="""
        Medium: the server in use gets no security fixes any more (a fact of this cluster, not
        a preference). High when its command line also disables token auth
        (--disable-token-auth) or enables the model register/delete API (--enable-model-api),
        so anyone who reaches it can load code.
    """,
    remediation="""
        # $kind $namespace/$name: $what runs TorchServe (unmaintained upstream).
        # Short term: keep it internal with default security (token auth on, model API off).
        # Long term: migrate, e.g. KServe with the Triton runtime serving TorchScript:
        apiVersion: serving.kserve.io/v1beta1
        kind: InferenceService
        metadata:
          name: $name
          namespace: $namespace
        spec:
          predictor:
            model:
              modelFormat: {name: pytorch}
              runtime: kserve-tritonserver
              storageUri: s3://models/$name/
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://github.com/pytorch/serve",
        "https://pytorch.org/serve/token_authorization_api.html",
        "https://docs.pytorch.org/serve/_sources/model_api_control.md.txt",
    ),
)
def no_torchserve_in_production(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if template.owner.ref.kind == ISVC:
            continue  # judged from the InferenceService itself, below (one finding per object)
        for container in template.containers():
            server = classify(container)
            if server is None:
                continue
            if server.name != TORCHSERVE:
                yield passed(container, f"serves with {server.describe()}, not TorchServe")
                continue
            yield _torchserve_finding(container, server.rule)
    for isvc in snapshot.of(ISVC):
        yield _inference_service(isvc)


_RELAXING_FLAGS = ("--disable-token-auth", "--enable-model-api")


def _relaxed(args: list[str]) -> list[str]:
    return [f for f in _RELAXING_FLAGS if has_flag(args, f)]


def _torchserve_finding(container: Container, rule: str) -> Result:
    relaxed = _relaxed(argv(container))
    inert = [
        name
        for name in ("TS_DISABLE_TOKEN_AUTHORIZATION", "TS_ENABLE_MODEL_API")
        if truthy(env_value(container, name))
    ]
    message = f"runs TorchServe, unmaintained upstream with no security patches ({rule})"
    if relaxed:
        message += f"; security relaxed by {', '.join(relaxed)}"
    if inert:
        message += f"; {', '.join(inert)} set (effective only with enable_envvars_config=true)"
    return failed(
        container,
        message,
        path=f"{container.path}.image",
        severity=Severity.HIGH if relaxed else None,
        fix={"what": container.describe()},
    )


def _inference_service(isvc: Resource) -> Result:
    predictor = as_mapping(isvc.spec.get("predictor"))
    model = as_mapping(predictor.get("model"))
    fmt = str(as_mapping(model.get("modelFormat")).get("name", "")).lower()
    runtime = str(model.get("runtime") or "")
    if "pytorch" in predictor:
        spec = as_mapping(predictor.get("pytorch"))
        return _isvc_finding(
            isvc,
            "spec.predictor.pytorch is served by the kserve-torchserve runtime (TorchServe)",
            "spec.predictor.pytorch",
            "spec.predictor.pytorch",
            [str(a) for a in as_list(spec.get("command")) + as_list(spec.get("args"))],
        )
    if fmt == "pytorch" and runtime in ("", _TORCHSERVE_RUNTIME):
        how = f"runtime {runtime}" if runtime else "the auto-selected kserve-torchserve runtime"
        return _isvc_finding(
            isvc,
            f"modelFormat pytorch is served by {how} (TorchServe)",
            "spec.predictor.model",
            "the pytorch predictor",
            [str(a) for a in as_list(model.get("command")) + as_list(model.get("args"))],
        )
    served_by = runtime or fmt or "custom containers"
    return passed(isvc, f"predictor is served by {served_by}, not TorchServe")


def _isvc_finding(isvc: Resource, message: str, path: str, what: str, args: list[str]) -> Result:
    relaxed = _relaxed(args)
    if relaxed:
        message += f"; security relaxed by {', '.join(relaxed)} in the predictor's args"
    return failed(
        isvc,
        message,
        path=path,
        severity=Severity.HIGH if relaxed else None,
        fix={"what": what},
    )
