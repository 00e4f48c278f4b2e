"""NVIDIA NIMServices are pod templates like any workload (gpu_audit.k8s.nim): the NIM
operator renders the NIMService's spec into a pod, and a pod-spec problem written in the
NIMService gives the same check at the same severity as in a Deployment, on the NIMService,
with a fix written where the NIMService holds the field (spec.resources, spec.env,
spec.tolerations). What the operator adds itself (a memory-backed /dev/shm, probes) is not
blamed on the user."""

from __future__ import annotations

import io
from typing import Any

import yaml

from gpu_audit.k8s.pods import PodTemplate, pod_templates, templates_of
from gpu_audit.model import Outcome, Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import (
    Doc,
    container,
    deployment,
    gpu_node,
    pod_spec,
    run_check_on,
    verdicts,
)
from tests.json_patch import remediated

NIM_API = "apps.nvidia.com/v1alpha1"
REPOSITORY = "nvcr.io/nim/meta/llama-3.1-8b-instruct"
IMAGE = f"{REPOSITORY}:1.8.4"
TOKEN = "hf_" + "Zq8Wx2Lm" * 5  # a Hugging Face token shape, not a real one
# Not keyed by the GPU resource, which the ExtendedResourceToleration plugin would tolerate.
TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def nim_service(name: str = "llm", namespace: str = "ml", **spec: Any) -> Doc:
    body: Doc = {
        "image": {"repository": REPOSITORY, "tag": "1.8.4"},
        "storage": {"pvc": {"create": True, "size": "50Gi"}},
        "expose": {"service": {"port": 8000}},
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        **spec,
    }
    return {
        "apiVersion": NIM_API,
        "kind": "NIMService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def snapshot_of(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


def templates(obj: Doc) -> tuple[PodTemplate, ...]:
    (resource,) = snapshot_of(obj).all()
    return templates_of(resource)


def findings(check_id: str, *objects: Doc) -> list[tuple[str, str, Severity, str]]:
    run = run_check_on(check_id, list(objects))
    return sorted(
        (f.result.ref.kind_name, f.result.ref.name, f.severity, f.result.path) for f in run.findings
    )


# The same problem written in a Deployment's container and in the NIMService's fields.
SIDE_BY_SIDE: dict[str, tuple[Doc, Doc, str]] = {
    # A GPU request without a limit: the API server refuses the operator's Deployment.
    "GPU-WL-001": (
        {"resources": {"requests": {"nvidia.com/gpu": 1}}},
        {"resources": {"requests": {"nvidia.com/gpu": 1}}},
        "spec.resources",
    ),
    # A literal Hugging Face token in the environment.
    "GPU-SEC-001": (
        {"env": [{"name": "HF_TOKEN", "value": TOKEN}]},
        {"env": [{"name": "HF_TOKEN", "value": TOKEN}]},
        "spec.env[HF_TOKEN]",
    ),
    # No memory limit or request on a GPU container.
    "GPU-WL-007": ({}, {}, "spec.resources"),
}


def test_the_same_pod_spec_problem_is_the_same_finding_on_the_nim_service() -> None:
    for check_id, (in_container, in_nim, path) in SIDE_BY_SIDE.items():
        plain = container(IMAGE, name="nim", **in_container)
        found = findings(check_id, deployment("llm", pod_spec(plain)), nim_service(**in_nim))
        assert len(found) == 2, check_id
        (_, _, deployment_severity, _), (kind, name, severity, nim_path) = found
        assert (kind, name, severity, nim_path) == ("NIMService", "llm", deployment_severity, path)


def test_a_nim_service_without_the_gpu_taint_toleration_is_reported_like_a_deployment() -> None:
    node = gpu_node("gpu-1", 8, taints=[TAINT])
    plain = deployment("llm", pod_spec(container(IMAGE, name="nim")))
    assert findings("GPU-SCHED-001", node, plain, nim_service()) == [
        ("Deployment", "llm", Severity.HIGH, "spec.template.spec.tolerations"),
        ("NIMService", "llm", Severity.HIGH, "spec.tolerations"),
    ]
    tolerant = nim_service(
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert verdicts(run_check_on("GPU-SCHED-001", [node, tolerant])) == [
        ("NIMService ml/llm", Outcome.PASS, None)
    ]
    nim = nim_service()
    (fix,) = run_check_on("GPU-SCHED-001", [node, nim]).findings
    fixed = remediated(fix.remediation, nim)["spec"]
    assert fixed == {**nim["spec"], "tolerations": fixed["tolerations"]}
    assert fixed["tolerations"][-1]["operator"] == "Exists"


def test_a_nim_container_fix_is_a_patch_of_the_nim_service_spec() -> None:
    nim = nim_service(resources={"requests": {"nvidia.com/gpu": 1}})
    (finding,) = run_check_on("GPU-WL-001", [nim]).findings
    assert "NIMService ml/llm (nim) container llm-ctr" in finding.result.message
    assert remediated(finding.remediation, nim)["spec"]["resources"] == {
        "requests": {"nvidia.com/gpu": 1},
        "limits": {"nvidia.com/gpu": 1},
    }
    nim = nim_service(env=[{"name": "HF_TOKEN", "value": TOKEN}])
    (secret,) = run_check_on("GPU-SEC-001", [nim]).findings
    env = remediated(secret.remediation, nim)["spec"]["env"]
    assert env == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "value"}}}
    ]


# --------------------------------------------------------------------------- what the operator adds


def test_the_operator_mounts_dev_shm_and_probes_so_the_nim_service_is_not_blamed() -> None:
    eight = {"limits": {"nvidia.com/gpu": 8, "memory": "200Gi"}, "requests": {"memory": "200Gi"}}
    plain = deployment("llm", pod_spec(container(IMAGE, name="nim", resources=eight)))
    nim = nim_service(resources=eight, storage={"pvc": {"name": "models"}})
    assert verdicts(run_check_on("GPU-WL-003", [plain, nim])) == [
        ("Deployment ml/llm", Outcome.FAIL, Severity.HIGH),
        ("NIMService ml/llm", Outcome.PASS, None),
    ]
    (template,) = templates(nim)
    assert template.spec["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {
            "name": "model-store",
            "persistentVolumeClaim": {"claimName": "models", "readOnly": False},
        },
    ]
    (main,) = template.containers()
    assert main.path == "spec"
    assert main.raw["ports"] == [{"containerPort": 8000, "protocol": "TCP", "name": "api"}]
    assert template.spec["securityContext"] == {
        "runAsUser": 1000,
        "runAsGroup": 2000,
        "fsGroup": 2000,
    }
    # The default startup probe covers the load (30 + 120 x 10 s): nothing to report.
    assert verdicts(run_check_on("GPU-SRV-005", [nim])) == [
        ("NIMService ml/llm", Outcome.PASS, None)
    ]
    # Without it, the default liveness probe kills a loading NIM after 15 + 3 x 10 s.
    no_startup = nim_service(startupProbe={"enabled": False})
    (finding,) = run_check_on("GPU-SRV-005", [no_startup]).findings
    assert "liveness probe kills the container after ~45s" in finding.result.message
    # The user's probe replaces the default.
    own = nim_service(startupProbe={"probe": {"exec": {"command": ["true"]}}})
    (template,) = templates(own)
    assert template.spec["containers"][0]["startupProbe"] == {"exec": {"command": ["true"]}}


def test_the_operator_environment_storage_and_sidecars() -> None:
    nim = nim_service(
        name="embed",
        env=[{"name": "NIM_LOG_LEVEL", "value": "DEBUG"}],
        authSecret="ngc-api",
        storage={"nimCache": {"name": "embed-cache"}, "sharedMemorySizeLimit": "8Gi"},
        tolerations=[{"key": "gpu", "operator": "Exists", "tolerationSeconds": 30}],
        sidecarContainers=[
            {"name": "log", "image": {"repository": "busybox", "tag": "1.36"}, "args": ["tail"]}
        ],
        runtimeClassName="nvidia",
    )
    (template,) = templates(nim)
    names = [c.name for c in template.containers()]
    assert names == ["embed-ctr", "log"]
    main, sidecar = template.containers()
    env = main.env()
    # The user's entries first and winning, then the operator's.
    assert env["NIM_LOG_LEVEL"]["value"] == "DEBUG"
    assert env["NIM_CACHE_PATH"]["value"] == "/model-store"
    # (the loader redacts the Secret's name, as it does every authSecret)
    assert env["NGC_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "NGC_API_KEY"
    assert sidecar.path == "spec.sidecarContainers[0]"
    assert sidecar.image == "busybox:1.36"
    volumes = {v["name"]: v for v in template.spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert volumes["model-store"]["persistentVolumeClaim"]["claimName"] == "embed-cache-pvc"
    assert "scratch" in volumes
    # The template keeps key, operator, value and effect of a toleration.
    assert template.spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert template.spec["runtimeClassName"] == "nvidia"


def test_a_multi_node_nim_is_a_leader_and_a_worker() -> None:
    nim = nim_service(
        name="r1",
        resources={"limits": {"nvidia.com/gpu": 8}},
        runtimeClassName="nvidia",
        multiNode={"parallelism": {"pipeline": 2, "tensor": 8}, "mpi": {"mpiStartTimeout": 600}},
    )
    leader, worker = templates(nim)
    assert [(t.replica_type, t.path) for t in (leader, worker)] == [
        ("nim leader", "spec"),
        ("nim worker", "spec"),
    ]
    assert [c.name for c in leader.containers()] == ["nim-leader"]
    assert [c.name for c in worker.containers()] == ["nim-worker"]
    # The LeaderWorkerSet template has no runtimeClassName: the field is not used.
    assert "runtimeClassName" not in leader.spec
    assert "readinessProbe" in leader.spec["containers"][0]
    assert "readinessProbe" not in worker.spec["containers"][0]
    assert {"name": "mpi-config", "mountPath": "/etc/mpi"} in leader.spec["containers"][0][
        "volumeMounts"
    ]
    assert leader.labels["nim-llm-role"] == "leader"
    # The KServe platform in Knative mode: unnamed ports, a 30-try startup probe.
    knative = nim_service(inferencePlatform="kserve", expose={"service": {"port": 9000}})
    (template,) = templates(knative)
    main = template.spec["containers"][0]
    assert main["ports"] == [{"containerPort": 9000, "protocol": "TCP"}]
    assert main["startupProbe"]["failureThreshold"] == 30
    assert main["startupProbe"]["httpGet"] == {"path": "/v1/health/ready", "port": 9000}


def test_dra_resources_become_pod_claims() -> None:
    nim = nim_service(
        resources={"limits": {"memory": "32Gi"}},
        draResources=[
            {"resourceClaimTemplateName": "one-gpu", "requests": ["gpu"]},
            {"claimCreationSpec": {"devices": [{"name": "gpu", "deviceClassName": "x"}]}},
        ],
    )
    (template,) = templates(nim)
    assert template.spec["resourceClaims"] == [
        {"name": "nim-dra-0", "resourceClaimTemplateName": "one-gpu"}
    ]
    assert template.spec["containers"][0]["resources"]["claims"] == [
        {"name": "nim-dra-0", "request": "gpu"}
    ]


def test_what_the_operator_creates_is_judged_through_the_nim_service() -> None:
    nim = nim_service()
    (template,) = templates(nim)
    owner = [
        {"apiVersion": NIM_API, "kind": "NIMService", "name": "llm", "uid": "u", "controller": True}
    ]
    rendered = deployment("llm", dict(template.spec))
    rendered["metadata"]["ownerReferences"] = owner
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml", "ownerReferences": owner},
        "spec": {"predictor": {"containers": [container(IMAGE, name="llm-ctr")]}},
    }
    snapshot = snapshot_of(nim, rendered, isvc)
    assert [str(t.owner.ref) for t in pod_templates(snapshot)] == ["NIMService ml/llm"]


def test_storage_ports_init_containers_and_the_ray_backend() -> None:
    grpc = nim_service(
        expose={"service": {"port": 8000, "grpcPort": 8001, "metricsPort": 8002}},
        storage={"hostPath": "/raid/nim"},
        initContainers=[
            {"name": "fetch", "image": {"repository": "busybox", "tag": "1.36"}, "args": ["x"]}
        ],
        livenessProbe={"enabled": False},
    )
    (template,) = templates(grpc)
    main = template.spec["containers"][0]
    assert [p["name"] for p in main["ports"]] == ["api", "grpc", "metrics"]
    assert {e["name"]: e["value"] for e in main["env"] if "value" in e}["NIM_GRPC_API_PORT"] == (
        "8001"
    )
    assert "livenessProbe" not in main
    assert template.annotations["openshift.io/required-scc"] == "hostmount-anyuid"
    volumes = {v["name"]: v for v in template.spec["volumes"]}
    assert volumes["model-store"]["hostPath"] == {"path": "/raid/nim", "type": "DirectoryOrCreate"}
    (init,) = [c for c in template.containers() if c.init]
    assert (init.path, init.image) == ("spec.initContainers[0]", "busybox:1.36")
    # Init containers get the model store and /scratch, not /dev/shm.
    assert [m["mountPath"] for m in init.raw["volumeMounts"]] == ["/model-store", "/scratch"]
    # KServe's Standard mode takes the standalone defaults; an emptyDir model store.
    standard = nim_service(
        inferencePlatform="kserve",
        annotations={"serving.kserve.io/deploymentMode": "Standard"},
        storage={"emptyDir": {"sizeLimit": "20Gi"}},
    )
    (template,) = templates(standard)
    assert template.spec["containers"][0]["startupProbe"]["failureThreshold"] == 120
    volumes = {v["name"]: v for v in template.spec["volumes"]}
    assert volumes["model-store"]["emptyDir"] == {"sizeLimit": "20Gi"}
    # A multi-node NIM on Ray: nim-serve-ray, a ray port, and the workers' `ray status` probe.
    on_ray = nim_service(
        name="r1",
        multiNode={"parallelism": {"pipeline": 2, "tensor": 8}, "ray": {"rayPort": 6380}},
    )
    leader, worker = templates(on_ray)
    assert leader.spec["containers"][0]["args"] == ["nim-serve-ray", "--head", "--port", "6380"]
    assert worker.spec["containers"][0]["args"][-1] == "$(LWS_LEADER_ADDRESS):6380"
    assert leader.spec["containers"][0]["ports"][-1] == {
        "containerPort": 6380,
        "protocol": "TCP",
        "name": "ray",
    }
    assert worker.spec["containers"][0]["startupProbe"]["exec"]["command"][-1] == "ray status"
    assert "mpi-config" not in {v["name"] for v in leader.spec["volumes"]}
    assert worker.labels == {}
