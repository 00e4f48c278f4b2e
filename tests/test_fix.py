"""`gpu-audit fix` on the fail fixture of every check whose remediation changes an object (a
patch or a manifest): the fix is written, the next scan passes the check for every object it
fixed, comments and untouched documents stay byte for byte, and a second run changes nothing.

The findings a file change cannot resolve are listed in NOT_FIXABLE with the reason; `fix`
must leave each of them as a TODO (a `# TODO(gpu-audit ...)` comment above the object and a
line of its output) or as commands to run, never as a change. The test ids name them
(`pytest -v tests/test_fix.py -k not_fixable`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_audit.cli import main
from gpu_audit.engine import Finding, run_check
from gpu_audit.fix import FixOptions, FixResult, Status, render_notes, run_fix
from gpu_audit.fix.documents import NotEditableError, YamlFile, dump, split_documents
from gpu_audit.fix.merge import PatchError, json_patch, strategic_merge
from gpu_audit.fix.plan import JsonPatch, plan_finding
from gpu_audit.model import FixKind, ObjRef, Outcome, Result, Severity
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files
from tests.builders import upstream_manifest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "checks"
CHECKS = load_checks(plugins=False)
CASES = [
    (check_id, path.name)
    for check_id, check in sorted(CHECKS.items())
    if check.remediation.kind in (FixKind.PATCH, FixKind.MANIFEST)
    for path in sorted((FIXTURES / check_id).glob("fail-*.yaml"))
]

RUNTIME = "the input holds pods already running: the manifest change prevents it next time"
PROSE = "the remediation says in prose what to remove"
CHOOSE = "its values are examples the reader has to choose"
ANOTHER_OBJECT = (
    "another object has to be deleted or changed in a way the remediation leaves to the reader"
)

# (check, fail fixture, object) -> why the file change cannot resolve the finding.
NOT_FIXABLE: dict[tuple[str, str, str], str] = {
    (
        "GPU-COST-002",
        "fail-finished-job-pods-still-running.yaml",
        "PyTorchJob ml/pretrain",
    ): RUNTIME,
    ("GPU-COST-002", "fail-sidecar-and-default-clean-policy.yaml", "Job ml/finetune"): RUNTIME,
    ("GPU-COST-003", "fail-unbounded-gpu-pool.yaml", "NodePool gpu"): CHOOSE + " (the GPU budget)",
    ("GPU-COST-004", "fail-no-interruption-queue.yaml", "Deployment kube-system/karpenter"): (
        "a helm upgrade with the cluster's SQS queue name"
    ),
    (
        "GPU-COST-004",
        "fail-spot-gpu-nodes-without-queue.yaml",
        "Deployment kube-system/karpenter",
    ): ("a helm upgrade with the cluster's SQS queue name"),
    ("GPU-DIST-001", "fail-no-gang-gpus-contended.yaml", "Job ml/llama-a"): (
        "the PodGroup is created but the pod-group label is only named in a comment"
    ),
    ("GPU-DIST-001", "fail-no-gang-gpus-contended.yaml", "Job ml/llama-b"): (
        "the PodGroup is created but the pod-group label is only named in a comment"
    ),
    ("GPU-DIST-001", "fail-partial-gang-and-missing-queue.yaml", "MPIJob ml/allreduce"): (
        "the Kueue LocalQueue it names does not exist (the queue to use is an alternative)"
    ),
    ("GPU-DIST-002", "fail-deployment-replicas.yaml", "Deployment research/ddp"): (
        "the fix is a PyTorchJob that replaces the Deployment: " + ANOTHER_OBJECT
    ),
    ("GPU-DIST-002", "fail-single-pod-two-nodes.yaml", "Pod ml/llm-train"): (
        "the fix is a PyTorchJob that replaces the Pod: " + ANOTHER_OBJECT
    ),
    ("GPU-DIST-005", "fail-spot-job-already-reclaimed.yaml", "Job ml/llama-lora"): (
        CHOOSE + " (the durable volume)"
    ),
    ("GPU-DIST-005", "fail-spot-job-emptydir-only.yaml", "Job ml/finetune"): (
        CHOOSE + " (the durable volume)"
    ),
    (
        "GPU-HPA-001",
        "fail-gpu-container-resource-next-to-cpu.yaml",
        "HorizontalPodAutoscaler inference/triton",
    ): CHOOSE + " (the adapter's metric)",
    (
        "GPU-HPA-001",
        "fail-gpu-resource-metric.yaml",
        "HorizontalPodAutoscaler inference/llm-server",
    ): (CHOOSE + " (the adapter's metric)"),
    (
        "GPU-HPA-003",
        "fail-hpa-and-scaled-object.yaml",
        "HorizontalPodAutoscaler inference/llm-server-cpu",
    ): ANOTHER_OBJECT + " (which autoscaler to keep)",
    ("GPU-HPA-003", "fail-two-hpas.yaml", "HorizontalPodAutoscaler inference/vllm"): (
        ANOTHER_OBJECT + " (which autoscaler to keep)"
    ),
    ("GPU-HPA-003", "fail-two-hpas.yaml", "HorizontalPodAutoscaler inference/vllm-gpu"): (
        ANOTHER_OBJECT + " (which autoscaler to keep)"
    ),
    (
        "GPU-HPA-004",
        "fail-missing-and-unscalable-target.yaml",
        "HorizontalPodAutoscaler gpu-operator/dcgm-exporter",
    ): "the fix is a kubectl delete (listed as a command)",
    (
        "GPU-HPA-004",
        "fail-missing-and-unscalable-target.yaml",
        "HorizontalPodAutoscaler inference/llm-server",
    ): CHOOSE + " (the scale target)",
    ("GPU-HPA-004", "fail-pinned-range.yaml", "HorizontalPodAutoscaler inference/triton"): (
        CHOOSE + " (the replica range)"
    ),
    ("GPU-HPA-004", "fail-pinned-range.yaml", "ScaledObject inference/llm-server"): (
        CHOOSE + " (the replica range)"
    ),
    (
        "GPU-MON-003",
        "fail-numeric-port-and-undeclared-target-port.yaml",
        "ServiceMonitor inference/triton",
    ): "the Service port has to be named, and the pods' container port declared",
    ("GPU-MON-003", "fail-selector-matches-pod-labels.yaml", "ServiceMonitor inference/vllm"): (
        "the labels have to go on the Service"
    ),
    ("GPU-QUOTA-002", "fail-batch-preempts-serving.yaml", "Deployment serving/llm-server"): (
        "an existing PriorityClass is recreated with kubectl replace (listed as a command)"
    ),
    ("GPU-QUOTA-002", "fail-batch-preempts-serving.yaml", "PyTorchJob research/pretrain"): (
        "an existing PriorityClass is recreated with kubectl replace (listed as a command)"
    ),
    ("GPU-SCHED-003", "fail-zone-annotation-only.yaml", "Deployment serving/llm"): (
        "the remediation covers one of the two annotations"
    ),
    ("GPU-SEC-001", "fail-literal-tokens-in-env-and-args.yaml", "Deployment inference/nim-llm"): (
        "the --api-key argument is to be rewritten by hand (a comment says how)"
    ),
    ("GPU-SEC-003", "fail-hostport-and-hostipc.yaml", "Deployment inference/torchserve"): (
        PROSE + " (the hostPort)"
    ),
    ("GPU-SEC-003", "fail-hostport-and-hostipc.yaml", "StatefulSet inference/tgi"): (
        PROSE + " (the hostPort)"
    ),
    (
        "GPU-SHARE-002",
        "fail-mps-and-time-slicing-together.yaml",
        "ConfigMap gpu-operator/sharing-config",
    ): (CHOOSE + " (the sharing configuration)"),
    (
        "GPU-SHARE-002",
        "fail-rename-under-flags-and-replicas-one.yaml",
        "ConfigMap nvidia-device-plugin/nvdp-nvidia-device-plugin-configs",
    ): CHOOSE + " (the sharing configuration)",
    (
        "GPU-SRV-001",
        "fail-kserve-pytorch-predictor.yaml",
        "InferenceService kserve-test/torchserve",
    ): ("another model server has to be chosen"),
    ("GPU-SRV-001", "fail-torchserve-deployment.yaml", "Deployment serving/bert"): (
        "another model server has to be chosen"
    ),
    ("GPU-SRV-001", "fail-torchserve-deployment.yaml", "Deployment serving/custom-ts"): (
        "another model server has to be chosen"
    ),
    (
        "GPU-SRV-002",
        "fail-custom-image-and-startup-only.yaml",
        "Deployment inference/triton-baked",
    ): (CHOOSE + " (the model repository)"),
    ("GPU-SRV-002", "fail-no-repository.yaml", "Deployment inference/triton"): (
        CHOOSE + " (the model repository)"
    ),
    (
        "GPU-SRV-002",
        "fail-readiness-on-metrics-port.yaml",
        "StatefulSet inference/triton-ensemble",
    ): (CHOOSE + " (the model repository)"),
    ("GPU-SRV-003", "fail-nodeport-on-public-nodes.yaml", "Service ray/raycluster-dashboard"): (
        PROSE + " (the public port)"
    ),
    ("GPU-SRV-003", "fail-ray-dashboard-nodeport.yaml", "Service ray/raycluster-dashboard"): (
        PROSE + " (the public port)"
    ),
    ("GPU-SRV-003", "fail-torchserve-all-ports-loadbalancer.yaml", "Service serving/bert"): (
        PROSE + " (the public port)"
    ),
    (
        "GPU-SRV-003",
        "fail-triton-explicit-model-control-internal-lb.yaml",
        "Service inference/triton-llm",
    ): PROSE + " (the public port)",
    ("GPU-SRV-003", "fail-kuberay-head-service-type.yaml", "RayService ray-serve/sd"): (
        PROSE + " (the head service type, and how Ray Serve is published instead)"
    ),
    (
        "GPU-SRV-004",
        "fail-cpu-runtimes-with-gpu.yaml",
        "InferenceService kserve-test/sklearn-iris-gpu",
    ): "the GPU request is to be dropped by hand",
    ("GPU-SRV-004", "fail-gpu-hidden-from-cuda.yaml", "Deployment inference/embedder"): (
        PROSE + " (CUDA_VISIBLE_DEVICES, --device cpu)"
    ),
    ("GPU-SRV-004", "fail-mig-request-cpu-build.yaml", "InferenceService llm/huggingface-llama3"): (
        PROSE + " (runtimeVersion)"
    ),
    ("GPU-SRV-004", "fail-mig-request-cpu-build.yaml", "InferenceService llm/mistral-mig"): (
        "it needs the runtime version (<version>)"
    ),
    ("GPU-SRV-004", "fail-mig-request-cpu-build.yaml", "InferenceService llm/xgb-churn"): (
        "a GPU build has to be verified by hand"
    ),
    ("GPU-STO-001", "fail-rwx-on-ebs.yaml", "PersistentVolumeClaim ml/checkpoints"): (
        "a claim's storage class cannot change: a new claim on an RWX driver"
    ),
    ("GPU-STO-001", "fail-rwx-on-ebs.yaml", "PersistentVolumeClaim ml/datasets"): (
        "a claim's storage class cannot change: a new claim on an RWX driver"
    ),
    ("GPU-STO-001", "fail-rwx-on-ebs.yaml", "PersistentVolumeClaim ml/uploads"): (
        "a claim's storage class cannot change: a new claim on an RWX driver"
    ),
    ("GPU-WL-006", "fail-cuda-latest-and-untagged.yaml", "Deployment serving/tgi"): (
        "it needs the image version (<version>)"
    ),
    ("GPU-WL-006", "fail-drifted-replicas.yaml", "StatefulSet serving/llm"): (
        "it needs the image version (<version>)"
    ),
    ("GPU-WL-006", "fail-drifted-replicas.yaml", "StatefulSet serving/llm-steady"): (
        "it needs the image version (<version>)"
    ),
    ("GPU-WL-006", "fail-floating-tags.yaml", "CronJob research/nightly-eval"): (
        "it needs the image version (<version>)"
    ),
}

# The values these checks write are examples to choose (gpu_audit.fix.plan.CHOSEN): written
# into a file they would invent a memory size, a volume size, a priority or a deadline.
EXAMPLE_VALUES: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "GPU-DIST-004": (
        "the runtime and retry bounds",
        {
            "fail-churning-without-bounds.yaml": (
                "Job ml/eval-sweep",
                "PyTorchJob ml/llm-sft",
            ),
            "fail-no-deadline.yaml": (
                "CronJob ml/nightly-train",
                "MPIJob ml/nccl-tests",
            ),
        },
    ),
    "GPU-QUOTA-002": (
        "the new PriorityClass value",
        {
            "fail-level-while-preemption-in-use.yaml": ("Deployment serving/llm-server",),
            "fail-no-priorities-and-system-class.yaml": (
                "Deployment serving/llm-server",
                "Job research/urgent",
            ),
            "fail-no-priority-classes.yaml": ("Deployment serving/llm-server",),
        },
    ),
    "GPU-STO-004": (
        "the volume size",
        {
            "fail-unbounded-hf-cache.yaml": (
                "Deployment inference/tgi",
                "Deployment inference/tgi-70b",
                "Deployment inference/vllm-ram-cache",
                "Deployment test-ai/qwen-predictor",
            ),
        },
    ),
    # Only where a container sets no memory limit: otherwise the pod's limits bound the
    # volume, and the fix writes no sizeLimit.
    "GPU-WL-003": (
        "the /dev/shm size",
        {
            "fail-disk-backed-shm.yaml": ("PyTorchJob research/llm-pretrain",),
            "fail-knative-tensor-parallel-without-dev-shm.yaml": ("Service serving/llama-tp2",),
            "fail-multi-process-and-multi-pod.yaml": (
                "Job research/ddp-8gpu-noshm",
                "MPIJob research/nccl-allreduce",
                "PyTorchJob research/ddp-4x1",
            ),
            "fail-no-shm.yaml": ("PyTorchJob research/mnist-gloo",),
        },
    ),
    "GPU-WL-007": (
        "the memory size",
        {
            "fail-colocated-oom-pressure.yaml": (
                "Pod ml/alone",
                "Pod ml/disk-evicted",
                "Pod ml/memory-evicted",
                "Pod ml/oom-job",
                "Pod ml/pressure",
                "Pod team-a/trainer-a",
            ),
            "fail-no-memory.yaml": (
                "Deployment serving/vllm",
                "Job ml/sweep",
            ),
        },
    ),
}
NOT_FIXABLE.update(
    {
        (check_id, fixture, ref): f"{CHOOSE} ({what})"
        for check_id, (what, cases) in EXAMPLE_VALUES.items()
        for fixture, refs in cases.items()
        for ref in refs
    }
)


def _fix(path: Path, check_id: str) -> FixResult:
    return run_fix(FixOptions(files=(str(path),), only=(check_id,), plugins=False))


def _write(result: FixResult) -> None:
    for path, _, after in result.changes:
        Path(path).write_text(after, encoding="utf-8")


def _failing(check_id: str, path: Path) -> set[str]:
    run = run_check(CHECKS[check_id], load_files([str(path)]))
    return {str(r.ref) for r in run.results if r.outcome is Outcome.FAIL}


def _comments(text: str) -> list[str]:
    """The comment lines of a YAML text (not the lines of a block scalar that start with #)."""
    inside: set[int] = set()
    for token in yaml.scan(text):
        if isinstance(token, yaml.ScalarToken):
            end = token.end_mark.line + (1 if token.end_mark.column else 0)
            inside.update(range(token.start_mark.line, end))
    lines = enumerate(text.splitlines())
    return [ln.strip() for n, ln in lines if n not in inside and ln.lstrip().startswith("#")]


def _identity(body: str) -> str:
    """`Kind namespace/name` of a document, as ObjRef prints it ("" when it is none)."""
    data = yaml.safe_load(body)
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return ""
    meta = data["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{data.get('kind')} {where}{meta.get('name')}"


@pytest.mark.parametrize(("check_id", "fixture"), CASES, ids=[f"{c}/{f}" for c, f in CASES])
def test_fix_resolves_the_findings_of_the_fail_fixture(
    check_id: str, fixture: str, tmp_path: Path
) -> None:
    path = tmp_path / fixture
    shutil.copy(FIXTURES / check_id / fixture, path)
    original = path.read_text(encoding="utf-8")
    result = _fix(path, check_id)
    assert result.fixes, "the fail fixture gave no finding to fix"
    unfixable = {o for c, f, o in NOT_FIXABLE if (c, f) == (check_id, fixture)}
    fixed = set()
    for fix in result.fixes:
        if fix.status in (Status.TODO, Status.COMMAND):
            assert str(fix.ref) in unfixable, fix
            assert fix.reason and (fix.shown or fix.commands)
        else:
            assert fix.status is Status.FIXED, fix
            fixed.add(str(fix.ref))
    # Each NOT_FIXABLE object has a finding left to do (others of it may be fixed).
    left = {str(f.ref) for f in result.fixes if f.status is not Status.FIXED}
    assert unfixable == left, "NOT_FIXABLE is stale"
    _write(result)
    after = path.read_text(encoding="utf-8")
    # The next scan passes the check for every object fixed (and not also left a TODO).
    assert _failing(check_id, path) & (fixed - unfixable) == set()
    # Every comment is kept (the TODO comments are added), and so is every document that
    # holds no object a finding names, byte for byte.
    kept = _comments(after)
    assert [c for c in _comments(original) if c not in kept] == []
    touched = {str(f.ref) for f in result.fixes}
    for chunk in split_documents(original):
        if _identity(chunk.body) not in touched:
            assert chunk.head + chunk.body in after
    for fix in result.fixes:
        if fix.status is Status.TODO:
            assert f"# TODO(gpu-audit {check_id}): " in after
    # A second run changes nothing.
    again = _fix(path, check_id)
    assert again.changes == ()
    assert {str(f.ref) for f in again.fixes} <= unfixable


@pytest.mark.parametrize(
    "entry",
    sorted(NOT_FIXABLE),
    ids=[f"{c}/{f}/{o}: {NOT_FIXABLE[c, f, o]}" for c, f, o in sorted(NOT_FIXABLE)],
)
def test_not_fixable_entries_name_a_case(entry: tuple[str, str, str]) -> None:
    check_id, fixture, _ = entry
    assert (check_id, fixture) in CASES


GPU_DEPLOYMENT = """\
# a request-only GPU: GPU-WL-001 fails it
apiVersion: apps/v1
kind: Deployment
metadata:
  name: llm
  namespace: ml
  labels: {LABELS}
spec:
  selector: {matchLabels: {app: llm}}
  template:
    metadata: {labels: {app: llm}}
    spec:
      containers:
        - name: server
          image: vllm/vllm-openai:v0.6.3
          resources:
            requests: {"nvidia.com/gpu": 1}
"""


def test_a_helm_rendered_object_is_not_changed_and_the_patch_is_shown(tmp_path: Path) -> None:
    path = tmp_path / "rendered.yaml"
    path.write_text(
        GPU_DEPLOYMENT.replace("{LABELS}", '{"helm.sh/chart": "llm-0.3.1", app: llm}'),
        encoding="utf-8",
    )
    result = _fix(path, "GPU-WL-001")
    (fix,) = result.fixes
    assert fix.status is Status.NOT_EDITABLE
    assert fix.reason.startswith("rendered by Helm chart llm-0.3.1: set the chart's values")
    assert "Helm post-renderer" in fix.reason
    # The patch is shown as a kustomization's patches entry, not as an edit of the file.
    (entry,) = yaml.safe_load(fix.shown)["patches"]
    assert entry["target"] == {"kind": "Deployment", "name": "llm", "namespace": "ml"}
    (container,) = yaml.safe_load(entry["patch"])["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert result.changes == ()


def test_managed_by_helm_counts_as_helm(tmp_path: Path) -> None:
    path = tmp_path / "rendered.yaml"
    path.write_text(
        GPU_DEPLOYMENT.replace("{LABELS}", '{"app.kubernetes.io/managed-by": Helm}'),
        encoding="utf-8",
    )
    (fix,) = _fix(path, "GPU-WL-001").fixes
    assert fix.status is Status.NOT_EDITABLE and "Helm" in fix.reason


def test_kustomize_build_output_says_where_it_came_from(tmp_path: Path) -> None:
    """`kustomize build` with buildMetadata [managedByLabel, originAnnotations] marks its
    output: not editable in place, and the patch goes to the kustomization."""
    path = tmp_path / "built.yaml"
    labels = '{"app.kubernetes.io/managed-by": kustomize-v5.4.2}'
    text = GPU_DEPLOYMENT.replace("{LABELS}", labels).replace(
        "  namespace: ml\n",
        '  namespace: ml\n  annotations: {"config.kubernetes.io/origin": "path: base/llm.yaml\\n"}\n',
        1,
    )
    path.write_text(text, encoding="utf-8")
    result = _fix(path, "GPU-WL-001")
    (fix,) = result.fixes
    assert fix.status is Status.NOT_EDITABLE and result.changes == ()
    assert fix.reason.startswith("built by Kustomize from base/llm.yaml: add this patch")
    assert yaml.safe_load(fix.shown)["patches"][0]["target"]["name"] == "llm"


def test_an_object_of_a_kustomize_directory_gets_a_patches_entry(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: [llm.yaml]\n", encoding="utf-8")
    path = tmp_path / "llm.yaml"
    path.write_text(GPU_DEPLOYMENT.replace("{LABELS}", "{app: llm}"), encoding="utf-8")
    result = _fix(path, "GPU-WL-001")
    (fix,) = result.fixes
    assert fix.status is Status.NOT_EDITABLE and "Kustomize" in fix.reason
    assert result.changes == ()
    (entry,) = yaml.safe_load(fix.shown)["patches"]
    assert entry["target"] == {"kind": "Deployment", "name": "llm", "namespace": "ml"}
    patch = yaml.safe_load(entry["patch"])
    assert patch["metadata"] == {"name": "llm", "namespace": "ml"}
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "server"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_stdin_is_shown_never_changed(runner: CliRunner) -> None:
    text = GPU_DEPLOYMENT.replace("{LABELS}", "{app: llm}")
    result = runner.invoke(main, ["fix", "--from-file", "-", "--only", "GPU-WL-001"], input=text)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "not editable in place: GPU-WL-001 Deployment ml/llm (<stdin>)" in result.stderr
    assert "read from stdin" in result.stderr


def test_cli_shows_a_diff_then_writes_it_and_is_idempotent(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "llm.yaml"
    text = GPU_DEPLOYMENT.replace("{LABELS}", "{app: llm}")
    path.write_text(text, encoding="utf-8")
    args = ["fix", "--from-file", str(path), "--only", "GPU-WL-001"]
    shown = runner.invoke(main, args)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith(f"--- a/{path}\n+++ b/{path}\n")
    assert "+            limits:\n+              nvidia.com/gpu: 1\n" in shown.stdout
    assert path.read_text(encoding="utf-8") == text  # nothing written without --write
    assert "fixed: GPU-WL-001 Deployment ml/llm" in shown.stderr
    written = runner.invoke(main, [*args, "--write"])
    assert written.exit_code == 0 and written.stdout == ""
    assert f"wrote {path}" in written.stderr
    assert _failing("GPU-WL-001", path) == set()
    again = runner.invoke(main, [*args, "--write"])
    assert again.exit_code == 0 and "0 file(s) change" in again.stderr


def test_min_severity_leaves_lower_findings_alone(tmp_path: Path) -> None:
    path = tmp_path / "fail-no-shm.yaml"
    shutil.copy(FIXTURES / "GPU-WL-003" / "fail-no-shm.yaml", path)  # all low
    result = run_fix(
        FixOptions(files=(str(path),), only=("GPU-WL-003",), min_severity=Severity.MEDIUM)
    )
    assert result.fixes == () and result.changes == ()


def test_bad_input_exits_2_naming_the_file(runner: CliRunner, tmp_path: Path) -> None:
    missing = runner.invoke(main, ["fix", "--from-file", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2
    assert f"{tmp_path / 'none.yaml'}: no such file or directory" in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Deployment\nmetadata: [\n", encoding="utf-8")
    result = runner.invoke(main, ["fix", "--from-file", str(broken)])
    assert result.exit_code == 2 and str(broken) in result.stderr
    assert "Traceback" not in result.output


# --- the merge ------------------------------------------------------------------------


def test_strategic_merge_merges_named_items_and_deletes() -> None:
    target = {
        "containers": [
            {"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]},
            {"name": "b", "image": "y"},
        ],
        "volumes": [{"name": "old", "emptyDir": {}}],
        "tolerations": [{"key": "t", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        "nodeSelector": {"zone": "a"},
    }
    strategic_merge(
        target,
        {
            "containers": [
                {
                    "name": "a",
                    "env": [{"name": "K", "$patch": "delete"}, {"name": "N", "value": "2"}],
                },
                {"name": "b", "$patch": "delete"},
            ],
            "volumes": [{"name": "old", "$patch": "delete"}],
            "tolerations": [{"key": "t", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"zone": None, "gpu": "true"},
        },
    )
    assert target == {
        "containers": [{"name": "a", "image": "x", "env": [{"name": "N", "value": "2"}]}],
        # the toleration already there is kept, the new one added (not merged into it)
        "tolerations": [
            {"key": "t", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
            {"key": "t", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "nodeSelector": {"gpu": "true"},
    }


def test_strategic_merge_adds_a_toleration_once() -> None:
    toleration = {"key": "t", "operator": "Exists", "effect": "NoSchedule"}
    target = {"tolerations": [dict(toleration)]}
    strategic_merge(target, {"tolerations": [toleration]})
    assert target == {"tolerations": [toleration]}


def test_a_null_where_nothing_is_writes_nothing() -> None:
    # As the API server's strategic merge patch: a null deletes a key that is there, and where
    # it is not (a manifest's pod template without requests), no null is written.
    gpu = "nvidia.com/gpu"
    target: dict[str, object] = {"limits": {gpu: 1, "memory": "4Gi"}}
    strategic_merge(target, {"limits": {gpu: None}, "requests": {gpu: None}})
    assert target == {"limits": {"memory": "4Gi"}}
    strategic_merge(target, {"requests": {gpu: 1, "cpu": None}})
    assert target == {"limits": {"memory": "4Gi"}, "requests": {gpu: 1}}


def test_new_strings_stay_strings_for_a_yaml_1_1_reader() -> None:
    target: dict[str, object] = {}
    values = {"a": "true", "b": "0400", "c": "plain", "d": "x\ny\n", "e": "1.0", "f": "yes"}
    strategic_merge(target, values)
    text = dump(target)
    assert yaml.safe_load(text) == values  # PyYAML reads YAML 1.1, as kubectl does
    assert 'b: "0400"' in text and "c: plain" in text and "d: |\n  x\n  y\n" in text


def test_json_patch_applies_rfc_6902_operations() -> None:
    doc = {"spec": {"containers": [{"name": "a"}], "x": 1}}
    json_patch(
        doc,
        [
            {"op": "test", "path": "/spec/containers/0/name", "value": "a"},
            {"op": "add", "path": "/spec/containers/-", "value": {"name": "b"}},
            {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "K"}]},
            {"op": "replace", "path": "/spec/x", "value": 2},
            {"op": "copy", "from": "/spec/x", "path": "/spec/y"},
            {"op": "move", "from": "/spec/y", "path": "/spec/z~1w"},
            {"op": "remove", "path": "/spec/containers/1"},
        ],
    )
    assert doc == {
        "spec": {"containers": [{"name": "a", "env": [{"name": "K"}]}], "x": 2, "z/w": 2}
    }


@pytest.mark.parametrize(
    "operation",
    [
        {"op": "test", "path": "/spec/containers/0/name", "value": "b"},
        {"op": "remove", "path": "/spec/containers/3"},
        {"op": "replace", "path": "/spec/missing", "value": 1},
        {"op": "add", "path": "spec", "value": 1},
        {"op": "frobnicate", "path": "/spec"},
    ],
)
def test_json_patch_refuses_what_does_not_apply(operation: dict[str, object]) -> None:
    doc = {"spec": {"containers": [{"name": "a"}]}}
    with pytest.raises(PatchError):
        json_patch(doc, [operation])
    assert doc == {"spec": {"containers": [{"name": "a"}]}}


# --- the files ------------------------------------------------------------------------


def test_a_file_is_rewritten_only_where_it_changes() -> None:
    first = (
        "# head comment\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ml}\n"
        "data: {k: 'v'}   # quoted\n"
    )
    second = (
        "# second\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n    name: b\n    namespace: ml\n"
        'data:\n    list: "x"   # kept\n    items:\n    - one\n'
    )
    yaml_file = YamlFile("f.yaml", f"{first}---\n{second}")
    chunk, obj = yaml_file.find(ObjRef("ConfigMap", "ml", "b"), 1)
    strategic_merge(obj, {"data": {"new": "1", "items": ["one", "two"]}})
    chunk.changed = True
    chunk.todos.append(("# TODO(gpu-audit X): y", "why"))
    # The other document byte for byte; this one in its own indentation, quotes, comments.
    assert yaml_file.text() == (
        f"{first}---\n# second\n# TODO(gpu-audit X): y (why)\napiVersion: v1\nkind: ConfigMap\n"
        "metadata:\n    name: b\n    namespace: ml\n"
        'data:\n    list: "x"   # kept\n    items:\n    - one\n    - two\n    new: "1"\n'
    )
    again = YamlFile("f.yaml", yaml_file.text())
    again.chunks[1].todos.append(("# TODO(gpu-audit X): y", "another reason"))
    assert again.text() == yaml_file.text()


def test_files_with_document_end_markers_are_not_rewritten() -> None:
    yaml_file = YamlFile("f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n...\n")
    with pytest.raises(NotEditableError, match="document end markers"):
        yaml_file.find(ObjRef("ConfigMap", "default", "a"), 0)


def test_crlf_line_ends_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "llm.yaml"
    text = GPU_DEPLOYMENT.replace("{LABELS}", "{app: llm}").replace("\n", "\r\n")
    path.write_bytes(text.encode("utf-8"))
    result = _fix(path, "GPU-WL-001")
    ((_, before, after),) = result.changes
    assert before == text
    assert after.count("\r\n") == after.count("\n") > text.count("\r\n")
    _write(result)
    assert _failing("GPU-WL-001", path) == set()


def test_an_alternative_is_not_applied_and_is_said(tmp_path: Path) -> None:
    # GPU-DIST-001 offers Kueue as another way ("# or let Kueue admit the whole job ..."):
    # only the scheduling policy is written.
    fixture = "fail-no-gang-without-evidence.yaml"
    path = tmp_path / fixture
    shutil.copy(FIXTURES / "GPU-DIST-001" / fixture, path)
    result = _fix(path, "GPU-DIST-001")
    assert {f.alternatives for f in result.fixes} == {1}
    assert "kueue.x-k8s.io/queue-name" not in result.diff()
    assert "minAvailable: 4" in result.diff()
    assert "offers 1 other way(s), not applied" in render_notes(result)


def test_an_item_of_a_list_document_is_fixed_in_place(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    item = GPU_DEPLOYMENT.replace("{LABELS}", "{app: llm}").split("\n", 1)[1]
    head = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n"
    text = (
        head
        + "  metadata: {name: cfg, namespace: ml}   # kept\n- "
        + item.replace("\n", "\n  ").rstrip(" ")
    )
    path.write_text(text, encoding="utf-8")
    result = _fix(path, "GPU-WL-001")
    assert [f.status for f in result.fixes] == [Status.FIXED]
    _write(result)
    after = path.read_text(encoding="utf-8")
    assert after.startswith(head + "  metadata: {name: cfg, namespace: ml}   # kept\n")
    assert _failing("GPU-WL-001", path) == set()


def test_a_bare_pod_spec_fragment_of_a_custom_resource_is_a_todo() -> None:
    # What the engine renders when a custom resource's kind has no field for the fix
    # (gpu_audit.k8s.cr_patches.UnpatchableError): the fragment, not a patch of the object.
    result = Result(
        Outcome.FAIL,
        ObjRef("PyTorchJob.kubeflow.org", "ml", "ddp"),
        "no /dev/shm",
        pod_spec_path="spec.pytorchReplicaSpecs.Worker.template.spec",
    )
    text = "# no field: write this pod-spec fragment\nvolumes:\n  - {name: dshm, emptyDir: {}}\n"
    plan = plan_finding(CHECKS["GPU-WL-003"], Finding(result, Severity.LOW, text), frozenset())
    assert plan.edits == [] and "pod-spec fragment" in plan.todo
    built_in = Result(Outcome.FAIL, ObjRef("Pod", "ml", "p"), "no /dev/shm", pod_spec_path="spec")
    nested = "spec:\n  volumes:\n    - {name: dshm, emptyDir: {}}\n"
    plan = plan_finding(CHECKS["GPU-WL-003"], Finding(built_in, Severity.LOW, nested), frozenset())
    assert plan.todo == "" and len(plan.edits) == 1


def test_a_custom_resource_is_fixed_through_its_json_patch(tmp_path: Path) -> None:
    # The engine writes a custom resource's pod-spec fix as `kubectl patch --type=json` with
    # list indices guarded by test operations (gpu_audit.k8s.cr_patches); fix applies the
    # operations to the file.
    fixture = FIXTURES / "GPU-WL-001" / "fail-operator-custom-resources.yaml"
    snapshot = load_files([str(fixture)])
    run = run_check(CHECKS["GPU-WL-001"], snapshot)
    (finding,) = [f for f in run.findings if f.result.ref.name == "batch-inference"]
    plan = plan_finding(CHECKS["GPU-WL-001"], finding, frozenset(r.ref for r in snapshot.all()))
    (edit,) = plan.edits
    assert isinstance(edit, JsonPatch)
    assert edit.operations[0]["op"] == "test"
    assert {op["op"] for op in edit.operations} == {"test", "add"}
    path = tmp_path / fixture.name
    shutil.copy(fixture, path)
    _write(_fix(path, "GPU-WL-001"))
    assert "RayJob research/batch-inference" not in _failing("GPU-WL-001", path)


def test_a_document_of_two_list_styles_keeps_both() -> None:
    # As NVIDIA's gpu-feature-discovery-daemonset.yaml: `- ` indented under containers and
    # volumes, unindented under values. ruamel.yaml writes one style; the lines the change
    # does not touch stay as they were, the new ones follow their neighbours.
    text = (
        "spec:\n"
        "  containers:\n"
        "    - name: a\n"
        "      volumeMounts:\n"
        "        - {name: x, mountPath: /x}\n"
        "  affinity:\n"
        "    values:\n"
        "    - one\n"
        "  volumes:\n"
        "    - name: x\n"
        "      emptyDir: {}\n"
    )
    yaml_file = YamlFile("f.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n" + text)
    chunk, obj = yaml_file.find(ObjRef("Pod", "default", "p"), 0)
    strategic_merge(
        obj,
        {
            "spec": {
                "containers": [{"name": "a", "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
                "volumes": [{"name": "s", "emptyDir": {"medium": "Memory"}}],
                "priorityClassName": "p",
            }
        },
    )
    chunk.changed = True
    assert yaml_file.text() == yaml_file.original.replace(
        "        - {name: x, mountPath: /x}\n",
        "        - {name: x, mountPath: /x}\n        - name: s\n          mountPath: /s\n",
    ).replace(
        "      emptyDir: {}\n",
        "      emptyDir: {}\n    - name: s\n      emptyDir:\n        medium: Memory\n"
        "  priorityClassName: p\n",
    )


def test_an_upstream_manifest_keeps_its_layout_where_the_fix_does_not_touch_it(
    tmp_path: Path,
) -> None:
    # NVIDIA's driver DaemonSet (gpu-operator assets), which no one here wrote: lists written
    # both ways, comments, and flow lists on the line after their key (`command:` then
    # `[sh, -c, ...]`), which ruamel.yaml would join.
    # Copied into a namespace of its own: with the operator's placeholder namespace it is a
    # template the operator fills in, which no check judges (gpu_audit.k8s.operator_assets).
    source = upstream_manifest("gpu-operator", "assets", "state-driver", "0500_daemonset.yaml")
    path = tmp_path / source.name
    placeholder = '  namespace: "FILLED BY THE OPERATOR"\n'
    text = source.read_text(encoding="utf-8")
    assert text.count(placeholder) == 1
    path.write_text(text.replace(placeholder, '  namespace: "drivers"\n'), encoding="utf-8")
    original = path.read_text(encoding="utf-8")
    result = run_fix(FixOptions(files=(str(path),), plugins=False))
    ((_, _, after),) = result.changes
    probe = "            command:\n              [sh, -c, 'nvidia-driver probe_nvidia_peermem']\n"
    assert original.count(probe) == after.count(probe) == 2
    assert [c for c in _comments(original) if c not in _comments(after)] == []
    # Nothing but the fixed objects' lines moves: every line the diff takes out holds a field
    # a fix changes, and the data is what the fixes wrote.
    removed = [
        ln[1:] for ln in result.diff().splitlines() if ln.startswith("-") and ln[1:4] != "-- "
    ]
    assert removed and len(removed) < len(original.splitlines()) // 4
    assert yaml.safe_load(after) != yaml.safe_load(original)


def test_beta_topology_labels_become_the_ga_labels_with_the_same_values(tmp_path: Path) -> None:
    """GPU-SCHED-007's fix (a guarded JSON patch) puts the GA label in place of each beta one
    with the value it selects, never another zone; a GA label already there is kept as it is;
    the operator and values of an affinity expression stay; a second run changes nothing."""
    path = tmp_path / "fail-beta-labels.yaml"
    shutil.copy(FIXTURES / "GPU-SCHED-007" / "fail-beta-labels.yaml", path)
    result = _fix(path, "GPU-SCHED-007")
    assert [f.status for f in result.fixes] == [Status.FIXED] * 3, render_notes(result)
    _write(result)
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(path.read_text("utf-8"))}
    assert docs["notebook"]["spec"]["nodeSelector"] == {"topology.kubernetes.io/zone": "us-east-1b"}
    required = docs["llm"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {
                    "key": "node.kubernetes.io/instance-type",
                    "operator": "In",
                    "values": ["g5.12xlarge"],
                }
            ]
        }
    ]
    worker = docs["finetune"]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["nodeSelector"] == {
        "topology.kubernetes.io/region": "us-east-1",
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
    }
    assert _failing("GPU-SCHED-007", path) == set()
    assert _fix(path, "GPU-SCHED-007").changes == ()


LLM_CHART = {
    "Chart.yaml": "apiVersion: v2\nname: llm\nversion: 0.3.1\n",
    "values.yaml": "zone: us-east-1b\ngpus: 1\n",
    # The labels of Helm's best practices (helm create writes them).
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-server
  namespace: ml
  labels:
    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/managed-by: {{ .Release.Service }}
spec:
  selector: {matchLabels: {app: llm}}
  template:
    metadata: {labels: {app: llm}}
    spec:
      nodeSelector:
        failure-domain.beta.kubernetes.io/zone: {{ .Values.zone }}
      containers:
        - name: server
          image: vllm/vllm-openai:v0.6.3
          resources:
            requests: {"nvidia.com/gpu": {{ .Values.gpus }}}
""",
    # No label says Helm: the `# Source:` comment helm template writes does.
    "templates/job.yaml": """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: {{ .Release.Name }}-warmup, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          nodeSelector: {beta.kubernetes.io/instance-type: g5.xlarge}
          containers:
            - {name: pytorch, image: "nvcr.io/nvidia/pytorch:24.08-py3", resources: {limits: {nvidia.com/gpu: 1}}}
""",
}


@pytest.mark.skipif(
    not os.environ.get("GPU_AUDIT_HELM"), reason="GPU_AUDIT_HELM (a helm binary) is not set"
)
def test_helm_template_output_is_not_edited_and_each_finding_says_what_to_change(
    tmp_path: Path,
) -> None:
    """What `helm template` renders is not the source: each finding names the chart, release
    and template, and shows its patch as a kustomization's `patches:` entry (a strategic merge
    patch, or the JSON 6902 patch of GPU-SCHED-007 that keeps the zone the chart renders)."""
    chart = tmp_path / "llm"
    for name, text in LLM_CHART.items():
        (chart / name).parent.mkdir(parents=True, exist_ok=True)
        (chart / name).write_text(text, encoding="utf-8")
    helm = os.environ["GPU_AUDIT_HELM"]
    rendered = subprocess.run(
        [helm, "template", "team-llm", str(chart)], capture_output=True, text=True, check=True
    ).stdout
    path = tmp_path / "rendered.yaml"
    path.write_text(rendered, encoding="utf-8")
    result = run_fix(
        FixOptions(files=(str(path),), only=("GPU-WL-001", "GPU-SCHED-007"), plugins=False)
    )
    assert result.changes == ()
    fixes = {(f.check_id, str(f.ref)): f for f in result.fixes}
    assert set(fixes) == {
        ("GPU-WL-001", "Deployment ml/team-llm-server"),
        ("GPU-SCHED-007", "Deployment ml/team-llm-server"),
        ("GPU-SCHED-007", "PyTorchJob ml/team-llm-warmup"),
    }
    assert {f.status for f in fixes.values()} == {Status.NOT_EDITABLE}
    server = "rendered by Helm chart llm-0.3.1, release team-llm (template "
    assert fixes["GPU-WL-001", "Deployment ml/team-llm-server"].reason.startswith(
        server + "llm/templates/deployment.yaml): set the chart's values"
    )
    # The custom resource's fix, a JSON patch, is a JSON 6902 entry that keeps the value.
    warmup = fixes["GPU-SCHED-007", "PyTorchJob ml/team-llm-warmup"]
    assert warmup.reason.startswith("rendered by Helm chart llm (template llm/templates/job.yaml)")
    (entry,) = yaml.safe_load(warmup.shown)["patches"]
    assert entry["target"] == {"kind": "PyTorchJob", "name": "team-llm-warmup", "namespace": "ml"}
    selector = "/spec/pytorchReplicaSpecs/Worker/template/spec/nodeSelector/"
    assert yaml.safe_load(entry["patch"]) == [
        {
            "op": "test",
            "path": selector + "beta.kubernetes.io~1instance-type",
            "value": "g5.xlarge",
        },
        {"op": "remove", "path": selector + "beta.kubernetes.io~1instance-type"},
        {"op": "add", "path": selector + "node.kubernetes.io~1instance-type", "value": "g5.xlarge"},
    ]
    (entry,) = yaml.safe_load(fixes["GPU-SCHED-007", "Deployment ml/team-llm-server"].shown)[
        "patches"
    ]
    patch = yaml.safe_load(entry["patch"])
    assert patch["spec"]["template"]["spec"]["nodeSelector"] == {
        "failure-domain.beta.kubernetes.io/zone": None,
        "topology.kubernetes.io/zone": "us-east-1b",
    }
    (entry,) = yaml.safe_load(fixes["GPU-WL-001", "Deployment ml/team-llm-server"].shown)["patches"]
    patch = yaml.safe_load(entry["patch"])
    assert (patch["apiVersion"], patch["kind"]) == ("apps/v1", "Deployment")
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    notes = render_notes(result)
    assert "not editable in place: GPU-SCHED-007 PyTorchJob ml/team-llm-warmup" in notes
    assert "0 fixed, 0 TODO, 3 not editable in place" in notes


# --------------------------------------------------------------------------- removals

ABSENT = "<absent>"
_GPU_LIMIT = "spec/template/spec/initContainers/0/resources/limits"
_GPU_REQUEST = "spec/template/spec/initContainers/0/resources/requests"
_WORKER = "spec/pytorchReplicaSpecs/Worker/template/spec/initContainers/0/resources"
_PROBE = "spec/template/spec/containers/0/readinessProbe"
_TOKEN = "spec/template/spec/automountServiceAccountToken"
# (check, fail fixture) -> {(document, path): (before, after)}: every value the fix changes.
REMOVALS: dict[tuple[str, str], dict[tuple[int, str], tuple[object, object]]] = {
    # The init container's limit and request both go (down to the app's 1, or away): a GPU
    # left in either is still allocated.
    ("GPU-WL-002", "fail-init-limit-and-request.yaml"): {
        (0, _GPU_LIMIT + "/nvidia.com/gpu"): ("2", 1),
        (0, _GPU_REQUEST + "/nvidia.com/gpu"): ("2", 1),
        (1, _WORKER + "/limits/nvidia.com/gpu"): (1, ABSENT),
        (1, _WORKER + "/limits"): (ABSENT, {}),
        (1, _WORKER + "/requests/nvidia.com/gpu"): (1, ABSENT),
        (1, _WORKER + "/requests"): (ABSENT, {}),
    },
    # Privileges only: the 8-GPU trainer keeps its 8, the init container gets none, IPC_LOCK
    # and the dropped NET_RAW stay.
    ("GPU-WL-005", "fail-privileged-init-and-capabilities.yaml"): {
        (0, "spec/template/spec/initContainers/0/securityContext/privileged"): (True, False),
        (0, "spec/template/spec/containers/0/securityContext/privileged"): (True, False),
        (1, "spec/template/spec/containers/0/securityContext/capabilities/add/1"): (
            "CAP_SYS_ADMIN",
            ABSENT,
        ),
    },
    # One handler: the TCP one goes, the exec startup probe and the probe's timing stay.
    ("GPU-SRV-002", "fail-tcp-readiness-and-exec-startup.yaml"): {
        (0, _PROBE + "/tcpSocket/port"): ("http", ABSENT),
        (0, _PROBE + "/httpGet/path"): (ABSENT, "/v2/health/ready"),
        (0, _PROBE + "/httpGet/port"): (ABSENT, 9000),
        (1, _PROBE + "/httpGet/path"): ("/v2/health/live", "/v2/health/ready"),
    },
    # The pod's own field wins over its ServiceAccount's, which already opts out.
    ("GPU-SEC-004", "fail-token-with-secret-access.yaml"): {(3, _TOKEN): (True, False)},
    # The ServiceAccount is the Jupyter server's too, which uses the API: the pod opts out.
    # A PyTorchJob's worker sets it itself: a JSON patch of the custom resource.
    ("GPU-SEC-004", "fail-account-shared-with-api-user.yaml"): {
        (1, _TOKEN): (ABSENT, False),
        (3, "spec/pytorchReplicaSpecs/Worker/template/spec/automountServiceAccountToken"): (
            True,
            False,
        ),
    },
}


def _values(value: object, at: str = "") -> dict[str, object]:
    """Every scalar (an empty map or list counts as one) of a document by its slash path."""
    if isinstance(value, dict) and value:
        return {p: v for k, item in value.items() for p, v in _values(item, f"{at}/{k}").items()}
    if isinstance(value, list) and value:
        return {p: v for i, item in enumerate(value) for p, v in _values(item, f"{at}/{i}").items()}
    return {at.lstrip("/"): value}


@pytest.mark.parametrize(("check_id", "fixture"), sorted(REMOVALS), ids=lambda v: str(v))
def test_a_fix_changes_only_what_it_takes_away(check_id: str, fixture: str, tmp_path: Path) -> None:
    path = tmp_path / fixture
    shutil.copy(FIXTURES / check_id / fixture, path)
    before = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    result = _fix(path, check_id)
    assert {f.status for f in result.fixes} == {Status.FIXED}
    _write(result)
    after = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    changed = {}
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        old_values, new_values = _values(old), _values(new)
        for key in old_values.keys() | new_values.keys():
            pair = (old_values.get(key, ABSENT), new_values.get(key, ABSENT))
            if pair[0] != pair[1]:
                changed[index, key] = pair
    assert changed == REMOVALS[check_id, fixture]
    assert _failing(check_id, path) == set()


# NVIDIA/k8s-device-plugin examples/tensorflow-notebook.yml (commit 70aa1c42ef0a), with the
# GPU in requests instead of limits, so that GPU-WL-001 adds the limit: the blank line that
# ends the resources block stays where it was, before `ports:`.
TF_NOTEBOOK = """\
# Copyright (c) 2017, NVIDIA CORPORATION. All rights reserved.

# Define the tensorflow deployment
apiVersion: apps/v1
kind: Deployment

metadata:
  name: tf-notebook
  labels:
    app: tf-notebook

spec:
  replicas: 1

  selector: # define how the deployment finds the pods it mangages
    matchLabels:
      app: tf-notebook

  template: # define the pods specifications
    metadata:
      labels:
        app: tf-notebook

    spec:
      containers:
      - name: tf-notebook
        image: tensorflow/tensorflow:1.4.1-gpu-py3
        resources:
          requests:
            nvidia.com/gpu: 1

        ports:
        - containerPort: 8888
          hostPort: 8888
"""


def test_keys_added_to_a_block_go_above_the_blank_line_that_ends_it(tmp_path: Path) -> None:
    path = tmp_path / "tensorflow-notebook.yml"
    path.write_text(TF_NOTEBOOK, encoding="utf-8")
    result = _fix(path, "GPU-WL-001")
    ((_, before, after),) = result.changes
    assert before == TF_NOTEBOOK
    expected = TF_NOTEBOOK.replace(
        "            nvidia.com/gpu: 1\n\n",
        "            nvidia.com/gpu: 1\n          limits:\n            nvidia.com/gpu: 1\n\n",
    )
    assert after == expected


# kubernetes-sigs/lws docs/examples/sglang/lws.yaml (commit 060ab4da17ee), trimmed: the image
# tag is `latest`, and a custom resource's fix is a JSON patch whose value is the
# `<version>` to choose; written into the file it would become the image reference.
SGLANG_LWS = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: sglang
spec:
  replicas: 1
  leaderWorkerTemplate:
    size: 2
    leaderTemplate:
      metadata:
        labels:
          role: leader
      spec:
        containers:
          - name: sglang-leader
            image: lmsysorg/sglang:latest
            resources:
              limits:
                nvidia.com/gpu: "1"
    workerTemplate:
      spec:
        containers:
          - name: sglang-worker
            image: lmsysorg/sglang:latest
            resources:
              limits:
                nvidia.com/gpu: "1"
"""


def test_a_placeholder_in_a_json_patch_makes_a_todo_not_an_image(tmp_path: Path) -> None:
    path = tmp_path / "lws.yaml"
    path.write_text(SGLANG_LWS, encoding="utf-8")
    result = _fix(path, "GPU-WL-006")
    assert {f.status for f in result.fixes} == {Status.TODO}
    assert all("<version>" in f.reason for f in result.fixes)
    ((_, _, after),) = result.changes
    assert (
        "<version>" not in after.split("# TODO(gpu-audit ")[-1].split(")", 1)[1].split("\n", 1)[1]
    )
    assert after.count("image: lmsysorg/sglang:latest\n") == 2
    assert after.count("# TODO(gpu-audit GPU-WL-006): ") == 2
    assert after.endswith(SGLANG_LWS.split("metadata:\n", 1)[1])


def test_example_values_of_a_remediation_are_never_written(tmp_path: Path) -> None:
    # The same upstream LeaderWorkerSet: no memory size, /dev/shm size, PriorityClass value
    # or deadline comes from gpu-audit; each such finding is a TODO and the YAML is unchanged.
    path = tmp_path / "lws.yaml"
    path.write_text(SGLANG_LWS, encoding="utf-8")
    chosen = {"GPU-WL-007", "GPU-WL-003", "GPU-STO-004", "GPU-QUOTA-002", "GPU-DIST-004"}
    result = run_fix(FixOptions(files=(str(path),), only=tuple(sorted(chosen)), plugins=False))
    assert {f.check_id for f in result.fixes} & chosen == {"GPU-WL-003", "GPU-WL-007"}
    assert all(f.status is Status.TODO for f in result.fixes if f.check_id in chosen)
    ((_, _, after),) = result.changes
    assert yaml.safe_load(after) == yaml.safe_load(SGLANG_LWS)
