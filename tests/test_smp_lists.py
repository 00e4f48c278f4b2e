"""Pod-spec fixes of built-in kinds that a strategic merge patch would apply with a loss
(gpu_audit.k8s.smp_lists) become JSON patches; the others stay strategic-merge fragments.
Without an apiserver: each patch is applied with an RFC 6902 implementation
(tests/json_patch.py); the live proof is tests/live/test_builtin_remediation_acceptance.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpu_audit.engine import builtin_fix, render_remediation
from gpu_audit.k8s.smp_lists import lost_lists
from tests.builders import checks, container, job, pod, pod_spec, run_check_on
from tests.json_patch import get, lost, remediated
from tests.live.cr_remediation_cases import SPOT, TOLERATION
from tests.live.test_builtin_remediation_acceptance import Builtin, builtins, holds
from tests.test_cr_patches import loaded

Doc = dict[str, Any]
NEW = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
POOL = {"key": "pool", "operator": "In", "values": ["gpu"]}
SHARED = {"key": "nvidia.com/gpu.sharing-strategy", "operator": "NotIn", "values": ["x"]}


def deployment(**spec: Any) -> Doc:
    return {"kind": "Deployment", "spec": {"template": {"spec": spec}}}


def terms(*expressions: list[Doc]) -> Doc:
    required = {"nodeSelectorTerms": [{"matchExpressions": e} for e in expressions]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


PATH = "spec.template.spec"
TOLERATIONS = "/spec/template/spec/tolerations"
AFFINITY = "/spec/template/spec/affinity/nodeAffinity"
TERMS = f"{AFFINITY}/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"


@pytest.mark.parametrize(
    ("obj", "fragment", "expected"),
    [
        (deployment(tolerations=[TOLERATION, SPOT]), {"tolerations": [NEW]}, [TOLERATIONS]),
        (deployment(tolerations=[TOLERATION, SPOT]), {"tolerations": [TOLERATION, SPOT, NEW]}, []),
        (deployment(), {"tolerations": [NEW]}, []),
        (deployment(tolerations=[]), {"tolerations": [NEW]}, []),
        # a toleration with one more field tolerates less: the old one is not kept
        (
            deployment(tolerations=[{"key": "spot", "operator": "Exists"}]),
            {"tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]},
            [TOLERATIONS],
        ),
        (deployment(affinity=terms([ZONE], [POOL])), {"affinity": terms([SHARED])}, [TERMS]),
        # every old term narrowed by the new expression: nothing is lost
        (
            deployment(affinity=terms([ZONE], [POOL])),
            {"affinity": terms([ZONE, SHARED], [POOL, SHARED])},
            [],
        ),
        (deployment(affinity=terms([ZONE], [POOL])), {"affinity": terms([ZONE, SHARED])}, [TERMS]),
        # a container's args are replaced on purpose (the check writes them whole)
        (
            deployment(containers=[{"name": "c", "args": ["--a"]}]),
            {"containers": [{"name": "c", "args": ["--b"]}]},
            [],
        ),
    ],
)
def test_lost_lists(obj: Doc, fragment: Doc, expected: list[str]) -> None:
    assert lost_lists(obj, PATH, fragment) == expected


def test_lists_under_a_container_are_found_by_its_merge_key() -> None:
    obj = {"spec": {"containers": [{"name": "a"}, {"name": "b", "x": {"tolerations": [SPOT]}}]}}
    fragment = {"containers": [{"name": "b", "x": {"tolerations": [NEW]}}]}
    assert lost_lists(obj, "spec", fragment) == ["/spec/containers/1/x/tolerations"]


@pytest.mark.parametrize("builtin", builtins(), ids=lambda b: b.case.label)
def test_each_builtin_fix_keeps_the_items_and_fixes_the_finding(builtin: Builtin) -> None:
    case = builtin.case
    run = run_check_on(case.check_id, case.objects)
    (finding,) = [f for f in run.findings if f.result.ref.name == case.target["metadata"]["name"]]
    if builtin.whole:  # the check writes the whole list: a strategic merge fragment
        fragment = yaml.safe_load(finding.remediation)
        for path in builtin.whole:
            had, has = get(case.target, path), get(fragment, path)
            assert isinstance(had, list) and had, path
            assert isinstance(has, list) and has[: len(had)] == had and len(has) > len(had)
        return
    assert "--type=json" in finding.remediation
    fixed = remediated(finding.remediation, case.target)
    assert lost(case.target, fixed, []) == []
    left = run_check_on(case.check_id, [fixed, *case.objects[1:]]).findings
    assert not [f for f in left if f.result.ref == finding.result.ref]
    # without the object (no snapshot) the fix stays the fragment, which would drop them
    bare = render_remediation(checks()[case.check_id], finding.result)
    assert not bare.lstrip().startswith("kubectl")
    assert not any(holds(yaml.safe_load(bare), item) for item in builtin.dropped)


def test_a_fix_the_object_already_has_says_what_the_fragment_would_drop() -> None:
    """Nothing to add, yet the fragment leaves out a toleration the object has: the JSON
    patch would be empty, so the fragment is shown with what it would replace."""
    builtin = builtins()[0]
    run = run_check_on(builtin.case.check_id, builtin.case.objects)
    (finding,) = [f for f in run.findings if f.result.ref.kind == "Deployment"]
    snapshot = loaded(*builtin.case.objects)
    text = yaml.safe_dump({"tolerations": [TOLERATION]})
    out = builtin_fix(text, finding.result, snapshot)
    assert out.startswith(f"# {finding.result.ref} already has what the fix writes; ")
    assert f"replaces {TOLERATIONS} whole" in out.splitlines()[0]
    assert yaml.safe_load(out)["spec"]["template"]["spec"]["tolerations"] == [TOLERATION]


def _as_job(deployment_doc: Doc) -> Doc:
    """The Deployment's pod template as a batch/v1 Job's."""
    template = deployment_doc["spec"]["template"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": dict(deployment_doc["metadata"]),
        "spec": {"template": {**template, "spec": {**template["spec"], "restartPolicy": "Never"}}},
    }


def test_a_jobs_template_fix_recreates_the_job_and_a_pods_added_toleration_does_not() -> None:
    """A Job's pod template is immutable (KEP-2926): a JSON patch of it is refused, so the
    fix is the same operations applied to the Job read back and recreated. A Pod takes added
    tolerations in place: its fix stays a patch."""
    deployment_case = builtins()[0].case
    job_doc = _as_job(deployment_case.target)
    objects = [job_doc, *deployment_case.objects[1:]]
    (finding,) = [
        f for f in run_check_on("GPU-SCHED-001", objects).findings if f.result.ref.kind == "Job"
    ]
    text = finding.remediation
    assert "a Job's pod template cannot change once created" in text
    assert "kubectl patch job" not in text.replace("kubectl patch --local", "")
    assert text.rstrip().endswith("| kubectl replace --force -f -")
    fixed = remediated(text, job_doc)
    assert lost(job_doc, fixed, []) == []
    assert not run_check_on("GPU-SCHED-001", [fixed, *objects[1:]]).findings

    pod_case = builtins()[2].case
    assert pod_case.target["kind"] == "Pod"
    run = run_check_on(pod_case.check_id, pod_case.objects)
    (pod_finding,) = [f for f in run.findings if f.result.ref.kind == "Pod"]
    assert "kubectl patch pod" in pod_finding.remediation
    assert "cannot change once created" not in pod_finding.remediation


def test_a_pods_spec_fix_says_to_recreate_it_and_a_deployments_does_not() -> None:
    spec = pod_spec(container(name="cuda", securityContext={"privileged": True}))
    run = run_check_on(
        "GPU-WL-005",
        [
            pod("bare", spec),
            job("batch", spec),
            {**deployment(**spec), "apiVersion": "apps/v1", "metadata": {"name": "d"}},
        ],
    )
    by_kind = {f.result.ref.kind: f.remediation for f in run.findings}
    assert set(by_kind) == {"Pod", "Job", "Deployment"}
    assert "a Pod's spec cannot change once created" in by_kind["Pod"]
    assert "a Job's pod template cannot change once created" in by_kind["Job"]
    for kind in ("Pod", "Job"):
        assert "kubectl replace --force -f MANIFEST" in by_kind[kind]
        assert yaml.safe_load(by_kind[kind])  # still the fragment to merge
    assert "cannot change once created" not in by_kind["Deployment"]
