"""Pod-spec remediations of custom resources as JSON patches (gpu_audit.k8s.cr_patches), without
an apiserver: each is applied to the object with an RFC 6902 implementation
(tests/json_patch.py); the live proof is tests/live/test_cr_remediation_acceptance.py."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import yaml

from gpu_audit.engine import custom_resource_fix, render_remediation
from gpu_audit.k8s.cr_patches import (
    JsonPatch,
    UnpatchableError,
    dotted,
    immutable_field,
    json_patch,
    merge,
    pointer,
)
from gpu_audit.k8s.pods import templates_of
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import GPU, checks, gpu_node, run_check_on
from tests.json_patch import PatchError, apply_json_patch, lost, remediated, remediation_operations
from tests.live.cr_remediation_cases import NS, Case, cases, ray_cluster_spec

Doc = dict[str, Any]


def case(label: str) -> Case:
    return next(c for c in cases() if c.label == label)


def findings(check_id: str, objects: list[Doc], target: Doc) -> list[Any]:
    return [
        f
        for f in run_check_on(check_id, objects).findings
        if f.result.ref.name == target["metadata"]["name"]
    ]


@pytest.mark.parametrize("example", cases(), ids=lambda c: c.label)
def test_each_kinds_fix_applies_loses_nothing_and_fixes_the_finding(example: Case) -> None:
    current = example.target
    found = findings(example.check_id, example.objects, current)
    assert found
    for _ in range(3):  # one finding's patch at a time, as a user would
        operations = remediation_operations(found[0].remediation)
        fixed = apply_json_patch(current, operations)
        assert lost(current, fixed, operations) == []
        left = findings(example.check_id, [fixed, *example.objects[1:]], fixed)
        assert len(left) < len(found)
        current, found = fixed, left
        if not found:
            break
    assert found == []


def test_a_stale_index_fails_the_patch_instead_of_changing_another_item() -> None:
    example = case("RayCluster")
    (finding,) = findings(example.check_id, example.objects, example.target)
    moved = copy.deepcopy(example.target)
    groups = moved["spec"]["workerGroupSpecs"]
    groups.reverse()  # the GPU group is now first; the patch names index 1
    with pytest.raises(PatchError, match="groupName"):
        remediated(finding.remediation, moved)


def test_a_custom_resource_fix_is_a_json_patch_command_a_built_in_fix_a_fragment() -> None:
    example = case("JobSet")
    (finding,) = findings(example.check_id, example.objects, example.target)
    text = finding.remediation
    assert "kubectl patch jobsets.jobset.x-k8s.io pretrain -n cr-fix --type=json -p '[" in text
    assert text.startswith("# JobSet cr-fix/pretrain, container trainer: memory-backed /dev/shm")
    assert "test operations" in text  # the comment says what the tests guard
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "t"}},
            "template": {
                "metadata": {"labels": {"app": "t"}},
                "spec": example.target["spec"]["replicatedJobs"][1]["template"]["spec"]["template"][
                    "spec"
                ],
            },
        },
    }
    (builtin,) = run_check_on("GPU-WL-003", [deployment]).findings
    assert "kubectl" not in builtin.remediation
    assert "spec:\n  template:\n    spec:\n      volumes:" in builtin.remediation


def test_tolerations_are_added_beside_the_others() -> None:
    spec = ray_cluster_spec()
    spec["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {GPU: 1}
    }
    spec["workerGroupSpecs"][1]["template"]["spec"]["tolerations"] = [
        {"key": "spot", "operator": "Exists"}
    ]
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c", "namespace": NS},
        "spec": spec,
    }
    node = gpu_node("gpu-1", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    (finding,) = findings("GPU-SCHED-001", [node, cluster], cluster)
    fixed = remediated(finding.remediation, cluster)
    tolerations = fixed["spec"]["workerGroupSpecs"][1]["template"]["spec"]["tolerations"]
    assert tolerations[0] == {"key": "spot", "operator": "Exists"}
    assert tolerations[1]["key"] == "dedicated"


def ops(obj: Doc, at: str, fragment: Any, key: str = "") -> list[dict[str, Any]]:
    patch = JsonPatch()
    merge(patch, obj, dotted(at), fragment, key)
    return patch.operations()


def test_the_strategic_merge_rules_as_json_patch_operations() -> None:
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "env": [{"name": "X", "value": "1"}, {"name": "Y"}, {"name": "Z"}],
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In"}]},
                            {"matchFields": [{"key": "metadata.name", "operator": "In"}]},
                        ]
                    }
                }
            },
        }
    }
    # env merged by name: a null removes a field, $patch: delete removes the item (the last
    # index first, so that no removal moves another)
    fragment = {
        "containers": [
            {
                "name": "a",
                "env": [
                    {"name": "X", "value": None, "valueFrom": {"secretKeyRef": {"name": "s"}}},
                    {"name": "Y", "$patch": "delete"},
                    {"name": "Z", "$patch": "delete"},
                ],
            }
        ]
    }
    operations = ops(pod, "spec", fragment)
    assert [(o["op"], o["path"]) for o in operations if o["op"] != "test"] == [
        ("remove", "/spec/containers/0/env/0/value"),
        ("add", "/spec/containers/0/env/0/valueFrom"),
        ("remove", "/spec/containers/0/env/2"),
        ("remove", "/spec/containers/0/env/1"),
    ]
    assert apply_json_patch(pod, operations)["spec"]["containers"][0]["env"] == [
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s"}}}
    ]
    # a new nodeSelectorTerm's expressions are ANDed into every term (a new term, ORed,
    # would widen the placement)
    expression = {"key": "nvidia.com/gpu.sharing-strategy", "operator": "NotIn"}
    terms = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    fixed = apply_json_patch(
        pod,
        ops(pod, terms, {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}),
    )
    (zone, named) = fixed["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert zone["matchExpressions"][-1] == expression
    assert named["matchExpressions"] == [expression]
    assert named["matchFields"] == [{"key": "metadata.name", "operator": "In"}]


def test_json_pointers_escape_slash_and_tilde() -> None:
    assert pointer(("spec", "limits", "nvidia.com/gpu", "a~b", 0)) == (
        "/spec/limits/nvidia.com~1gpu/a~0b/0"
    )
    assert dotted("spec.replicatedJobs[1].template.spec.containers[0]") == (
        "spec",
        "replicatedJobs",
        1,
        "template",
        "spec",
        "containers",
        0,
    )


def loaded(*objects: Doc) -> Snapshot:
    return load_files([STDIN], stdin=io.StringIO(yaml.safe_dump_all(list(objects))))


def fix_of(obj: Doc, fragment: Doc, role: str = "") -> list[dict[str, Any]]:
    """The operations of `fragment` (a pod-spec fix) for the template of `obj` named `role`."""
    (resource,) = loaded(obj).all()
    template = next(t for t in templates_of(resource) if t.replica_type.endswith(role))
    return json_patch(resource, template, fragment)


def nim(**spec: Any) -> Doc:
    base = {
        "image": {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "latest"},
        "storage": {"pvc": {"name": "cache"}},
        "resources": {"limits": {GPU: 1}},
    }
    return {
        "apiVersion": "apps.nvidia.com/v1alpha1",
        "kind": "NIMService",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {**base, **spec},
    }


def test_a_nim_containers_fix_is_written_in_the_nim_services_own_fields() -> None:
    image = {
        "containers": [{"name": "llm-ctr", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3"}]
    }
    assert fix_of(nim(), image) == [{"op": "replace", "path": "/spec/image/tag", "value": "1.3.3"}]
    probe = {"httpGet": {"path": "/v1/health/ready", "port": 8000}, "failureThreshold": 60}
    startup = {"containers": [{"name": "llm-ctr", "startupProbe": probe}]}
    assert fix_of(nim(), startup) == [
        {"op": "add", "path": "/spec/startupProbe", "value": {"enabled": True, "probe": probe}}
    ]
    shm = {
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}],
        "containers": [
            {"name": "llm-ctr", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
        ],
    }
    assert fix_of(nim(), shm) == [
        {"op": "add", "path": "/spec/storage/sharedMemorySizeLimit", "value": "32Gi"}
    ]
    proxy = {"name": "proxy", "image": {"repository": "envoyproxy/envoy", "tag": "latest"}}
    sidecar = {"containers": [{"name": "proxy", "image": "envoyproxy/envoy:v1.31.2"}]}
    assert fix_of(nim(sidecarContainers=[proxy]), sidecar) == [
        {"op": "test", "path": "/spec/sidecarContainers/0/name", "value": "proxy"},
        {"op": "replace", "path": "/spec/sidecarContainers/0/image/tag", "value": "v1.31.2"},
    ]
    other = {"volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "m"}}]}
    with pytest.raises(UnpatchableError, match="volume other than /dev/shm"):
        fix_of(nim(), other)


def spark(**executor: Any) -> Doc:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "etl", "namespace": NS},
        "spec": {
            "type": "Python",
            "image": "spark:3.5.3",
            "driver": {"cores": 1},
            "executor": {"instances": 2, "gpu": {"name": GPU, "quantity": 1}, **executor},
        },
    }


def test_a_spark_containers_fix_is_written_in_the_spark_pod_spec() -> None:
    name = "spark-kubernetes-executor"
    resources = {"containers": [{"name": name, "resources": {"limits": {GPU: 2, "cpu": "4"}}}]}
    assert fix_of(spark(), resources, "executor") == [
        {"op": "replace", "path": "/spec/executor/gpu/quantity", "value": 2},
        {"op": "add", "path": "/spec/executor/coreLimit", "value": "4"},
    ]
    # a pod field the SparkPodSpec has not: in the role's pod template
    assert fix_of(spark(), {"runtimeClassName": "nvidia"}, "executor") == [
        {
            "op": "add",
            "path": "/spec/executor/template",
            "value": {"spec": {"runtimeClassName": "nvidia"}},
        }
    ]
    memory = {"containers": [{"name": name, "resources": {"requests": {"memory": "64Gi"}}}]}
    with pytest.raises(UnpatchableError, match="memory request"):
        fix_of(spark(), memory, "executor")


def test_a_fix_that_is_no_patch_is_the_fragment_with_the_reason() -> None:
    example = case("SparkApplication")
    (finding,) = findings(example.check_id, example.objects, example.target)
    memory = "# fix it\ncontainers:\n  - name: spark-kubernetes-executor\n"
    memory += "    resources:\n      requests: {memory: 64Gi}\n# after"
    text = custom_resource_fix(memory, finding.result, loaded(*example.objects))
    assert text.splitlines() == [
        "# fix it",
        "# a Spark pod's memory request is spark.<role>.memory plus overhead: write this "
        "pod-spec fragment at spec.executor of SparkApplication cr-fix/embed",
        *memory.splitlines()[1:],
    ]


def test_without_the_object_a_fix_is_the_fragment_and_says_why() -> None:
    example = case("RayCluster")
    (finding,) = findings(example.check_id, example.objects, example.target)
    text = render_remediation(checks()[example.check_id], finding.result)
    assert "# the object is not in the input: write this pod-spec fragment at" in text
    assert "spec.workerGroupSpecs[1].template.spec of RayCluster cr-fix/train" in text
    assert "kubectl patch" not in text


def test_an_immutable_field_is_fixed_by_recreating_the_object() -> None:
    example = case("TrainJob (resourcesPerNode)")
    (finding,) = findings(example.check_id, example.objects, example.target)
    assert "# /spec/trainer cannot change (the CRD's rule self == oldSelf)" in finding.remediation
    assert "kubectl get trainjobs.trainer.kubeflow.org finetune -n cr-fix -o json" in (
        finding.remediation
    )
    assert finding.remediation.endswith("  | kubectl replace --force -f -")
    volumes = "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/1"
    volumes += "/template/spec/template/spec/volumes"
    train_job = "TrainJob.trainer.kubeflow.org"
    assert immutable_field(train_job, [{"op": "add", "path": f"{volumes}/-"}]) == volumes
    tolerations = volumes.replace("volumes", "tolerations")
    assert immutable_field(train_job, [{"op": "add", "path": tolerations}]) == ""
    # a new runtimePatches entry changes no immutable field: a plain patch
    example = case("TrainJob (runtimePatches)")
    (finding,) = findings(example.check_id, example.objects, example.target)
    assert finding.remediation.splitlines()[-3].startswith("kubectl patch trainjobs")
    assert '"manager": "gpu-audit.dev/remediation"' in finding.remediation
