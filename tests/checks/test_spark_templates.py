"""SparkApplications are pod templates like any workload (gpu_audit.k8s.spark).

The driver and executor pods are built from the SparkPodSpecs the way spark-submit and the
operator's webhook build them (the GPU of spec.<role>.gpu as a limit of gpu.name), named
`driver` and `executor`, with findings on the SparkApplication at the field a fix is written
in: the Spark container's own fields at spec.<role> itself."""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml

from gpu_audit.k8s.pods import PodTemplate, pod_templates, templates_of
from gpu_audit.model import Severity
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import Doc, container, deployment, pod, pod_spec, run_check_on
from tests.json_patch import remediated

API = "sparkoperator.k8s.io/v1beta2"
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
TOKEN = "hf_" + "Zq8Wx2Lm" * 5  # a Hugging Face token shape, not a real one


def spark_app(name: str = "etl", *, driver: Doc | None = None, **executor: Any) -> Doc:
    return {
        "apiVersion": API,
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "sparkVersion": "3.5.3",
            "image": "apache/spark:3.5.3",
            "mainApplicationFile": "local:///opt/app/etl.py",
            "driver": driver if driver is not None else {"cores": 1, "memory": "2g"},
            "executor": {"instances": 2, "cores": 4, "memory": "8g", **executor},
        },
    }


def snapshot_of(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


def roles(*objects: Doc) -> dict[str, PodTemplate]:
    snapshot = snapshot_of(*objects)
    (app,) = snapshot.of("SparkApplication.sparkoperator.k8s.io")
    return {t.replica_type: t for t in templates_of(app, snapshot)}


GPU: Doc = {"gpu": {"name": "nvidia.com/gpu", "quantity": 1}}

# The same problem in a Deployment's container and in the executor's fields.
PROBLEMS: dict[str, tuple[str, Doc, Doc]] = {
    # A GPU request without a limit, from the executor's pod template: every executor refused.
    "gpu-request-without-limit": (
        "GPU-WL-001",
        pod_spec(
            {"name": "main", "image": IMAGE, "resources": {"requests": {"nvidia.com/gpu": 1}}}
        ),
        {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "spark-kubernetes-executor",
                            "resources": {"requests": {"nvidia.com/gpu": 1}},
                        }
                    ]
                }
            }
        },
    ),
    # Two GPUs in one pod on the 64 MiB default /dev/shm.
    "no-dev-shm-two-gpus": (
        "GPU-WL-003",
        pod_spec(container(IMAGE, gpus=2)),
        {"image": IMAGE, "gpu": {"name": "nvidia.com/gpu", "quantity": 2}},
    ),
    "literal-token-in-env": (
        "GPU-SEC-001",
        pod_spec(container(IMAGE, env=[{"name": "HF_TOKEN", "value": TOKEN}])),
        {**GPU, "env": [{"name": "HF_TOKEN", "value": TOKEN}]},
    ),
    "privileged": (
        "GPU-WL-005",
        pod_spec(container(IMAGE, securityContext={"privileged": True})),
        {**GPU, "securityContext": {"privileged": True}},
    ),
}


def findings(check_id: str, obj: Doc) -> list[tuple[str, str, Severity]]:
    run = run_check_on(check_id, [obj])
    return [(f.result.ref.kind_name, f.result.ref.name, f.severity) for f in run.findings]


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_the_same_pod_spec_problem_is_the_same_finding_on_the_spark_application(
    problem: str,
) -> None:
    check_id, plain, executor = PROBLEMS[problem]
    baseline = findings(check_id, deployment("w", plain))
    assert baseline, f"{check_id} finds nothing in a Deployment"
    assert findings(check_id, spark_app("w", **executor)) == [
        ("SparkApplication", "w", s) for _, _, s in baseline
    ]


def test_findings_point_at_the_spark_pod_spec_and_fixes_are_written_there() -> None:
    (token,) = run_check_on(
        "GPU-SEC-001", [spark_app(**PROBLEMS["literal-token-in-env"][2])]
    ).findings
    assert token.result.path == "spec.executor.env[HF_TOKEN]"
    assert "SparkApplication ml/etl (executor) container spark-kubernetes-executor" in (
        token.result.message
    )
    app = spark_app(**PROBLEMS["privileged"][2])
    (privileged,) = run_check_on("GPU-WL-005", [app]).findings
    assert privileged.result.path == "spec.executor.securityContext.privileged"
    fixed = remediated(privileged.remediation, app)["spec"]["executor"]
    assert fixed["securityContext"]["privileged"] is False
    assert "containers" not in fixed
    # the GPU limit of the fix is the SparkPodSpec's gpu {name, quantity} (the webhook's addGPU)
    assert fixed["gpu"] == {"name": "nvidia.com/gpu", "quantity": 1}


def test_the_pods_are_built_as_spark_submit_and_the_webhook_build_them() -> None:
    app = spark_app(
        driver={"cores": 1, "coreLimit": "1200m", "memory": "512m", "serviceAccount": "spark"},
        image="example.com/spark-rapids:24.10",
        memoryOverhead="2g",
        gpu={"name": "nvidia.com/gpu", "quantity": 2},
        env=[{"name": "A", "value": "1"}],
        volumeMounts=[
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "undeclared", "mountPath": "/x"},
        ],
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
        nodeSelector={"pool": "a100"},
        podSecurityContext={"runAsUser": 185},
        sidecars=[{"name": "log", "image": "busybox:1.36"}],
    )
    app["spec"]["nodeSelector"] = {"zone": "a"}
    app["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "unused", "emptyDir": {}},
    ]
    app["metadata"]["labels"] = {"team": "etl", "kueue.x-k8s.io/queue-name": "q"}
    by_role = roles(app)
    driver, executor = by_role["driver"], by_role["executor"]
    (driver_container,) = driver.spec["containers"]
    assert driver_container["name"] == "spark-kubernetes-driver"
    assert driver_container["image"] == "apache/spark:3.5.3"  # spec.image
    # 512m + max(10%, 384Mi) overhead, as request and limit; cores as the CPU request.
    assert driver_container["resources"] == {
        "requests": {"memory": "896Mi", "cpu": "1"},
        "limits": {"memory": "896Mi", "cpu": "1200m"},
    }
    assert driver.spec["serviceAccountName"] == "spark"
    assert driver.spec["nodeSelector"] == {"zone": "a"}
    spark, log = executor.spec["containers"]
    assert (spark["name"], spark["image"]) == (
        "spark-kubernetes-executor",
        "example.com/spark-rapids:24.10",
    )
    assert spark["resources"] == {
        "requests": {"memory": "10240Mi", "cpu": "4"},
        "limits": {"memory": "10240Mi", "nvidia.com/gpu": 2},
    }
    assert spark["env"] == [{"name": "A", "value": "1"}]
    # Only the volumes a mount names reach the pod, and only mounts of declared volumes.
    assert spark["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert executor.spec["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert executor.spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert executor.spec["nodeSelector"] == {"zone": "a", "pool": "a100"}
    assert executor.spec["securityContext"] == {"runAsUser": 185}
    assert log["name"] == "log"
    assert executor.labels == {
        "team": "etl",
        "sparkoperator.k8s.io/app-name": "etl",
        "sparkoperator.k8s.io/launched-by-spark-operator": "true",
        "spark-role": "executor",
    }
    paths = {c.name: c.path for c in executor.containers()}
    assert paths == {
        "spark-kubernetes-executor": "spec.executor",
        "log": "spec.executor.sidecars[0]",
    }


def test_gpus_from_spark_conf_and_an_invalid_gpu_field() -> None:
    """spark-rapids asks for GPUs through spark.executor.resource.gpu.*; a gpu without a name
    or a positive quantity is ignored by the webhook."""
    app = spark_app(gpu={"name": "", "quantity": 1})
    app["spec"]["sparkConf"] = {
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.vendor": "nvidia.com",
        "spark.task.resource.gpu.amount": "0.25",
    }
    limits = roles(app)["executor"].spec["containers"][0]["resources"]["limits"]
    assert limits == {"memory": "9011Mi", "nvidia.com/gpu": "1"}
    assert "nvidia.com/gpu" not in str(roles(spark_app())["driver"].spec)


def test_a_pod_template_is_the_base_of_the_spark_pod() -> None:
    template = {
        "metadata": {"labels": {"from": "template"}},
        "spec": {
            "runtimeClassName": "nvidia",
            "containers": [
                {"name": "init-sidecar", "image": "busybox:1.36"},
                {
                    "name": "spark-kubernetes-executor",
                    "volumeMounts": [{"name": "t", "mountPath": "/t"}],
                },
            ],
        },
    }
    executor = roles(spark_app(template=template, **GPU))["executor"]
    assert executor.spec["runtimeClassName"] == "nvidia"
    other, spark = executor.spec["containers"]
    assert other["name"] == "init-sidecar"
    assert spark["volumeMounts"] == [{"name": "t", "mountPath": "/t"}]
    assert spark["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert executor.labels["from"] == "template"
    paths = {c.name: c.path for c in executor.containers()}
    assert paths == {
        "init-sidecar": "spec.executor.template.spec.containers[0]",
        "spark-kubernetes-executor": "spec.executor",
    }


def test_the_driver_and_its_executors_are_judged_through_the_application() -> None:
    app = spark_app(**PROBLEMS["privileged"][2])
    spec = pod_spec(container(IMAGE, securityContext={"privileged": True}))
    labels = {
        "sparkoperator.k8s.io/app-name": "etl",
        "sparkoperator.k8s.io/launched-by-spark-operator": "true",
    }
    driver = pod("etl-driver", spec, labels={**labels, "spark-role": "driver"})
    driver["metadata"]["ownerReferences"] = [
        {
            "apiVersion": API,
            "kind": "SparkApplication",
            "name": "etl",
            "uid": "u",
            "controller": True,
        }
    ]
    executor = pod("etl-exec-1", spec, labels={**labels, "spark-role": "executor"})
    executor["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "etl-driver", "uid": "d", "controller": True}
    ]
    # spark-submit without the operator: the executor keeps its own pod spec.
    plain = pod("other-exec-1", spec, labels={"spark-role": "executor"})
    plain["metadata"]["ownerReferences"] = executor["metadata"]["ownerReferences"]
    owners = sorted(
        {str(t.owner.ref) for t in pod_templates(snapshot_of(app, driver, executor, plain))}
    )
    assert owners == ["Pod ml/other-exec-1", "SparkApplication ml/etl"]
