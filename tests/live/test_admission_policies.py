"""The admission policies of `gpu-audit admission`, on the real kube-apiserver.

The generated ValidatingAdmissionPolicies and bindings are created (a dry-run creation first:
the apiserver compiles every CEL expression and refuses one that does not compile), and every
object of every check fixture whose type a policy matches is then submitted with a
server-side dry-run (admission runs on dry-run requests; nothing is stored, so the fixtures'
reused names do not collide):

* with the default Warn bindings, the checks named in the answer's Warning headers must be
  exactly the covered checks the Python check reports on that object when it scans the object
  alone (what admission sees): the side-by-side test of CEL against Python, on every object of
  every fixture, fail and pass. Where a scan of the whole fixture says otherwise (a ConfigMap
  the object's envFrom names), the check's admission form must say what it leaves to scans;
* with Deny bindings, every object a covered check reports is refused with the check's id,
  severity and message, and every other object (every pass-fixture object among them) is
  admitted.

Objects the apiserver refuses before any policy is installed (a fractional GPU quantity in a
Pod, by design of GPU-WL-001's fixtures; a PriorityClass this cluster lacks) cannot show a
policy's verdict and are counted apart. The policies are deleted at the end: the control
plane is shared by the live tests.
Policies take a moment to become active after creation, so a probe object is submitted until
the answer shows the policy (never a blind sleep).
"""

from __future__ import annotations

import copy
import io
import json
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.admission import (
    AdmissionOptions,
    admission_checks,
    matched_types,
    policy_name,
    render_objects,
    render_policy,
    rule_severity,
)
from gpu_audit.engine import run_check
from gpu_audit.k8s.kinds import KNOWN_KINDS, resource_type
from gpu_audit.k8s.operator_assets import OPERATOR_PLACEHOLDER
from gpu_audit.model import Severity
from gpu_audit.postscan.exemptions import EXEMPT_ANNOTATION, REASON_ANNOTATION
from gpu_audit.registry import load_checks
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, load_files
from tests.live.harness import ControlPlane, KubeRequest
from tests.live.test_remediation_dry_run import Discovery, discover, fixture_objects, plain

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((REPO_ROOT / "fixtures" / "checks").glob("*/*-*.yaml"))
CHECKS = load_checks(plugins=False)
COVERED = admission_checks(CHECKS.values())
POLICY_API = "/apis/admissionregistration.k8s.io/v1"
ACTIVE_TIMEOUT_S = 60.0
MERGE_PATCH = "application/merge-patch+json"
WARNING_CHECK = re.compile(r"ValidatingAdmissionPolicy '([a-z0-9-]+)'")
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation")
ObjectKey = tuple[str, str, str]  # (resource type, namespace, name)


@dataclass
class Answer:
    status: int
    body: Any
    warnings: list[str]

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else str(self.body)


def call(cp: ControlPlane, method: str, path: str, body: Any = None) -> Answer:
    """One HTTPS call as admin that also returns the Warning headers (kube_request drops
    them)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(cp.server + path, data=data, method=method)
    req.add_header("Accept", "application/json")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {cp.admin_token}")
    ctx = ssl.create_default_context(cafile=cp.ca_file)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            status, raw, headers = int(resp.status), resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        status, raw, headers = err.code, err.read(), err.headers
    text = raw.decode("utf-8", "replace")
    try:
        parsed: Any = json.loads(text) if text else None
    except json.JSONDecodeError:
        parsed = text
    return Answer(status, parsed, list(headers.get_all("Warning") or []))


def warned_checks(answer: Answer) -> set[str]:
    """The check ids of the policies named in the answer's warnings."""
    ids = {policy_name(c): c.id for c in COVERED}
    return {ids[m] for w in answer.warnings for m in WARNING_CHECK.findall(w) if m in ids}


@dataclass
class Case:
    """One fixture object a policy matches, with the covered checks Python reports on it."""

    fixture: Path
    key: ObjectKey
    obj: dict[str, Any]
    python_fails: set[str]  # in a scan of the whole fixture
    alone_fails: set[str]  # in a scan of this object alone: what admission can know
    matched_by: set[str] = field(default_factory=set)

    def __str__(self) -> str:
        return f"{self.fixture.parent.name}/{self.fixture.name}: {self.key}"


def python_failures(fixture: Path) -> dict[ObjectKey, set[str]]:
    snapshot = load_files([str(fixture)])
    found: dict[ObjectKey, set[str]] = {}
    for check in COVERED:
        for finding in run_check(check, snapshot).findings:
            ref = finding.result.ref
            found.setdefault((ref.kind, ref.namespace, ref.name), set()).add(check.id)
    return found


def failures_alone(obj: Mapping[str, Any]) -> set[str]:
    """The covered checks that fail the object in a cluster that holds nothing else (every
    type read and empty): what the apiserver knows when it admits the object."""
    loaded = load_files([STDIN], stdin=io.StringIO(yaml.safe_dump(plain(obj))))
    snapshot = Snapshot(loaded.all(), available=KNOWN_KINDS)
    return {c.id for c in COVERED if run_check(c, snapshot).findings}


def controlled_by(obj: Mapping[str, Any]) -> set[str]:
    """The resource types of the object's controllers (ownerReferences with controller)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {
        resource_type(str(r.get("apiVersion", "")), str(r.get("kind", "")))
        for r in refs
        if r.get("controller") is True
    }


def expected_alone(obj: Mapping[str, Any]) -> set[str]:
    """What admission can know: the failures of the object alone, except that pod and
    container rules leave an object controlled by a kind they match to its controller (a
    scan reports it on the top-most owner, which was judged when it was admitted)."""
    owners = controlled_by(obj)
    return {
        check_id
        for check_id in failures_alone(obj)
        if (rule := CHECKS[check_id].admission) is not None
        and (rule.scope == "object" or not owners & set(matched_types(rule)))
    }


def cases() -> list[Case]:
    matchers = {c.id: set(matched_types(c.admission)) for c in COVERED if c.admission}
    out = []
    for fixture in FIXTURES:
        if fixture.name == "expected.yaml":
            continue
        fails = python_failures(fixture)
        for obj in fixture_objects(fixture):
            meta = obj.get("metadata") or {}
            if OPERATOR_PLACEHOLDER.fullmatch(str(meta.get("namespace") or "")):
                continue  # a GPU Operator asset template: no apiserver takes it as written
            type_ = resource_type(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
            matched = {cid for cid, types in matchers.items() if type_ in types}
            if not matched:
                continue
            key = (type_, str(meta.get("namespace") or ""), str(meta.get("name", "")))
            namespaced = KNOWN_KINDS[type_].namespaced
            lookup = (type_, (key[1] or "default") if namespaced else "", key[2])
            python = fails.get(lookup, set()) & matched
            alone = expected_alone(obj) & matched
            out.append(Case(fixture, key, obj, python, alone, matched))
    return out


CASES = cases()


# --------------------------------------------------------------------------- the cluster


def policy_path(obj: Mapping[str, Any]) -> str:
    """The collection of a ValidatingAdmissionPolicy or of a binding."""
    kind = str(obj["kind"]).lower()
    return f"{POLICY_API}/{kind.removesuffix('y') + 'ies' if kind.endswith('y') else kind + 's'}"


@dataclass
class Admission:
    cp: ControlPlane
    request: KubeRequest
    discovery: Discovery
    namespaces: set[str] = field(default_factory=set)
    # Cases the apiserver refuses before any policy is installed: invalid by design (a
    # fractional GPU quantity in a Pod) or naming what this cluster lacks (a PriorityClass).
    invalid: set[int] = field(default_factory=set)
    baselined: bool = False

    def baseline(self) -> None:
        """Submit every case once before any policy is installed (the module's tests install
        them): what is refused now is refused whatever the policies say."""
        if self.baselined:
            return
        self.remove(render_objects(COVERED, AdmissionOptions()))
        for index, case in enumerate(CASES):
            if self.submit(case.obj).status not in (200, 201):
                self.invalid.add(index)
        self.baselined = True

    def submit(self, obj: Mapping[str, Any]) -> Answer:
        """Create the object with a server-side dry-run (admission runs, nothing is kept)."""
        api = self.discovery.of_object(obj)
        body = {k: v for k, v in plain(obj).items() if k != "status"}
        meta = {k: v for k, v in body.get("metadata", {}).items() if k not in SERVER_FIELDS}
        ns = str(meta.get("namespace") or "default") if api.namespaced else ""
        if ns:
            meta["namespace"] = ns
            self.ensure_namespace(ns)
        body["metadata"] = meta
        for _ in range(10):  # a CRD's first request may answer 429 while its cache fills
            answer = call(self.cp, "POST", api.path(ns) + "?dryRun=All", body)
            if answer.status != 429:
                return answer
            time.sleep(1)
        return answer

    def ensure_namespace(self, name: str) -> None:
        if name in self.namespaces:
            return
        status, reply = self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        assert status in (201, 409), reply
        self.namespaces.add(name)

    def install(self, objects: list[dict[str, Any]]) -> None:
        """Create or replace each policy and binding."""
        for obj in objects:
            path, name = policy_path(obj), obj["metadata"]["name"]
            status, current = self.request("GET", f"{path}/{name}")
            if status == 200:
                body = copy.deepcopy(obj)
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                status, reply = self.request("PUT", f"{path}/{name}", body)
                assert status == 200, f"replacing {name}: HTTP {status}: {reply}"
            else:
                status, reply = self.request("POST", path, obj)
                assert status == 201, f"creating {name}: HTTP {status}: {reply}"

    def remove(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            self.request("DELETE", f"{policy_path(obj)}/{obj['metadata']['name']}")

    def wait(self, probes: Mapping[str, Case], state: PolicyState) -> None:
        """Submit each check's probe until the answer shows its policy in `state` (not a
        blind sleep): in force, warning or denying and naming it, after an install; gone after
        a delete (the apiserver drops a deleted policy from its cache a moment later, and the
        live tests that run next create GPU pods that a lingering Deny policy would refuse).
        The probe is exempted from the other checks it fails: a denial names one policy."""
        pending = {check_id: exempted(case, check_id) for check_id, case in probes.items()}
        deadline = time.monotonic() + ACTIVE_TIMEOUT_S
        while pending:
            for check_id, obj in sorted(pending.items()):
                if shows(self.submit(obj), check_id) is state:
                    del pending[check_id]
            if pending and time.monotonic() > deadline:
                pytest.fail(
                    f"policies not {state.value} after {ACTIVE_TIMEOUT_S:.0f}s: {sorted(pending)}"
                )
            if pending:
                time.sleep(0.2)


class PolicyState(Enum):
    WARN = "warning"
    DENY = "denying"
    GONE = "gone"


def shows(answer: Answer, check_id: str) -> PolicyState:
    """What the answer to a probe of `check_id` shows of its policy."""
    if answer.status in (403, 422) and check_id in answer.message:
        return PolicyState.DENY
    return PolicyState.WARN if check_id in warned_checks(answer) else PolicyState.GONE


def exempted(case: Case, keep: str) -> dict[str, Any]:
    """The case's object, exempted by annotation from every check it fails but `keep`."""
    obj = copy.deepcopy(case.obj)
    others = sorted(case.alone_fails - {keep})
    if others:
        annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[EXEMPT_ANNOTATION] = ",".join(others)
        annotations[REASON_ANNOTATION] = "probe of one policy"
    return obj


def probes(admission: Admission) -> dict[str, Case]:
    """A fail-fixture object of each check that the apiserver's validation accepts, failing
    that check alone where there is one (a denial names one policy)."""
    assert admission.baselined
    found: dict[str, Case] = {}
    ranked = sorted(enumerate(CASES), key=lambda item: len(item[1].alone_fails))
    for index, case in ranked:
        if case.fixture.name.startswith("fail-") and index not in admission.invalid:
            for check_id in sorted(case.python_fails & case.alone_fails):
                found.setdefault(check_id, case)
    return found


@pytest.fixture(scope="module")
def admission(control_plane: ControlPlane, kube_request: KubeRequest) -> Iterator[Admission]:
    cluster = Admission(control_plane, kube_request, discover(kube_request))
    objects = render_objects(COVERED, AdmissionOptions())
    try:
        yield cluster
    finally:
        cluster.remove(objects)
        if cluster.baselined:
            cluster.wait(probes(cluster), PolicyState.GONE)


# --------------------------------------------------------------------------- the tests


def test_every_covered_check_has_fixtures_on_both_sides() -> None:
    """Each covered check has a fail-fixture object it reports and a pass-fixture object of
    a type its policy matches: otherwise the live comparison would prove nothing for it."""
    assert len(COVERED) >= 15, [c.id for c in COVERED]
    for check in COVERED:
        fails = [c for c in CASES if check.id in c.python_fails & c.alone_fails]
        passes = [
            c for c in CASES if check.id in c.matched_by and c.fixture.name.startswith("pass-")
        ]
        assert fails, f"{check.id}: no fixture object it reports is of a type its policy matches"
        assert passes, f"{check.id}: no pass-fixture object of a type its policy matches"


def test_only_checks_that_say_so_need_other_objects() -> None:
    """Where a scan of the whole fixture and a scan of the object alone disagree, the check
    reads other objects (a ConfigMap its envFrom names, the cluster's runtime settings, another
    quota): its admission form must say what it leaves to scans (`note`)."""
    for case in CASES:
        for check_id in case.python_fails ^ case.alone_fails:
            rule = CHECKS[check_id].admission
            assert rule is not None and rule.note, f"{case}: {check_id} depends on other objects"


def test_policies_compile_on_the_apiserver(admission: Admission) -> None:
    """A dry-run creation of every policy: the apiserver compiles the CEL and refuses an
    expression with a syntax or type error, naming it."""
    for check in COVERED:
        policy = render_policy(check)
        status, reply = admission.request(
            "POST", f"{POLICY_API}/validatingadmissionpolicies?dryRun=All", policy
        )
        message = reply.get("message", "") if isinstance(reply, dict) else str(reply)
        errors = sorted(set(re.findall(r"ERROR: <input>:\d+:\d+: [^\n|]*", message)))
        assert status == 201, f"{check.id}: HTTP {status}: {errors or message[-1500:]}"


def _compare(admission: Admission) -> list[str]:
    problems: list[str] = []
    for index, case in enumerate(CASES):
        if index in admission.invalid:
            continue
        answer = admission.submit(case.obj)
        if answer.status not in (200, 201):
            problems.append(f"{case}: refused with Warn bindings: {answer.message}")
            continue
        errors = [w for w in answer.warnings if "expression" in w and "error" in w.lower()]
        problems += [f"{case}: CEL runtime error: ...{w[-600:]}" for w in errors]
        warned = warned_checks(answer)
        if warned != case.alone_fails:
            problems.append(
                f"{case}: CEL says {sorted(warned)}, Python says {sorted(case.alone_fails)}"
            )
    return problems


def test_warn_policies_agree_with_python_on_every_fixture_object(admission: Admission) -> None:
    admission.baseline()
    admission.install(render_objects(COVERED, AdmissionOptions()))
    admission.wait(probes(admission), PolicyState.WARN)
    problems = _compare(admission)
    assert not problems, "\n".join(problems)
    compared = len(CASES) - len(admission.invalid)
    assert compared >= 100, compared


def test_warning_header_text(admission: Admission) -> None:
    """The warning a user sees on `kubectl apply`: the policy, the check id, severity and
    message, and the failing containers."""
    admission.baseline()
    admission.install(render_objects(COVERED, AdmissionOptions()))
    check = CHECKS["GPU-WL-005"]
    case = next(c for c in CASES if c.key == ("Deployment", "ci", "ci-runner"))
    admission.wait({check.id: case}, PolicyState.WARN)
    answer = admission.submit(case.obj)
    assert answer.status == 201, answer.message
    mine = [w for w in answer.warnings if policy_name(check) in w]
    assert len(mine) == 1, answer.warnings
    assert mine[0].startswith("299 - ")
    assert (
        f"GPU-WL-005 (high): {check.admission.message if check.admission else ''} "
        "(containers: dind)" in mine[0]
    ), mine[0]


def test_exempted_and_controlled_objects_are_left_alone(admission: Admission) -> None:
    """The exempt annotation (with its reason) silences the check, as in a scan; without a
    reason it exempts nothing. A Pod controlled by a ReplicaSet is judged on its owner."""
    admission.baseline()
    admission.install(render_objects(COVERED, AdmissionOptions()))
    case = next(c for c in CASES if c.key == ("Deployment", "ci", "ci-runner"))
    admission.wait({"GPU-WL-005": case}, PolicyState.WARN)
    exempt = copy.deepcopy(case.obj)
    exempt["metadata"]["annotations"] = {
        EXEMPT_ANNOTATION: "GPU-WL-004, GPU-WL-005",
        REASON_ANNOTATION: "CI runner, isolated node pool",
    }
    assert "GPU-WL-005" not in warned_checks(admission.submit(exempt))
    no_reason = copy.deepcopy(exempt)
    del no_reason["metadata"]["annotations"][REASON_ANNOTATION]
    assert "GPU-WL-005" in warned_checks(admission.submit(no_reason))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "ci-runner-abc12",
            "namespace": "ci",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "ci-runner-5d4f",
                    "uid": "0b0c3b1e-5f57-4bde-9d44-3c3d3b1f4a01",
                    "controller": True,
                }
            ],
        },
        "spec": case.obj["spec"]["template"]["spec"],
    }
    assert "GPU-WL-005" not in warned_checks(admission.submit(pod))
    del pod["metadata"]["ownerReferences"]
    assert "GPU-WL-005" in warned_checks(admission.submit(pod))


def test_deny_policies_refuse_fail_fixtures_and_admit_pass_fixtures(
    admission: Admission,
) -> None:
    options = AdmissionOptions(deny=frozenset(Severity))
    objects = render_objects(COVERED, options)
    assert all(
        o["spec"]["validationActions"] == ["Deny", "Audit"]
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
    )
    admission.baseline()
    admission.install(objects)
    admission.wait(probes(admission), PolicyState.DENY)
    problems = []
    denied = admitted = 0
    for index, case in enumerate(CASES):
        answer = admission.submit(case.obj)
        if index in admission.invalid:
            assert answer.status not in (200, 201), f"{case}: refused before, now admitted"
            continue
        if case.alone_fails:
            if answer.status not in (403, 422):
                problems.append(f"{case}: admitted although {sorted(case.alone_fails)} fail")
                continue
            denied += 1
            named = [c for c in COVERED if c.id in answer.message and c.id in case.alone_fails]
            if answer.message.startswith("ValidatingAdmissionPolicy") and not named:
                problems.append(f"{case}: denied without the check's id: {answer.message}")
            for check in named:
                text = f"{check.id} ({rule_severity(check).value}): "
                if check.admission and text + check.admission.message not in answer.message:
                    problems.append(f"{case}: message lacks {text!r}...: {answer.message}")
        else:
            if answer.status != 201:
                problems.append(f"{case}: refused although nothing fails: {answer.message}")
            admitted += 1
    assert not problems, "\n".join(problems)
    assert denied >= len(COVERED) and admitted >= len(COVERED), (denied, admitted)


def test_large_workloads_stay_within_the_cel_cost_budget(admission: Admission) -> None:
    """A Deployment far larger than real ones (30 containers of 100 variables, 20 mounts and
    a GPU each, 600 volumes) is judged by every policy within the apiserver's CEL cost
    budget: an evaluation over budget would come back as an error warning, not a verdict."""
    containers = [
        {
            "name": f"c{i}",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "env": [{"name": f"VAR_{j}", "value": str(j)} for j in range(100)],
            "volumeMounts": [{"name": f"v{i}-{j}", "mountPath": f"/m/{j}"} for j in range(20)],
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }
        for i in range(30)
    ]
    volumes = [{"name": f"v{i}-{j}", "emptyDir": {}} for i in range(30) for j in range(20)]
    big = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "large", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"app": "large"}},
            "template": {
                "metadata": {"labels": {"app": "large"}},
                "spec": {"containers": containers, "volumes": volumes},
            },
        },
    }
    admission.baseline()
    admission.install(render_objects(COVERED, AdmissionOptions()))
    admission.wait(probes(admission), PolicyState.WARN)
    answer = admission.submit(big)
    assert answer.status == 201, answer.message
    errors = [w for w in answer.warnings if "error" in w.lower() or "cost" in w.lower()]
    assert not errors, [w[-300:] for w in errors]
    matching = {c.id for c in COVERED if c.admission and "Deployment" in matched_types(c.admission)}
    assert warned_checks(answer) == expected_alone(big) & matching == set()


def test_updates_ratchet_under_deny(admission: Admission) -> None:
    """With Deny bindings, an object admitted before the policy (here under Warn) can still be
    updated (labelled, scaled); an update that makes a compliant object fail is refused."""
    check = CHECKS["GPU-WL-005"]
    case = next(c for c in CASES if c.key == ("Deployment", "ci", "ci-runner"))
    failing = copy.deepcopy(case.obj)
    failing["metadata"] = {"name": "ratchet-failing", "namespace": "admission-ratchet"}
    compliant = copy.deepcopy(failing)
    compliant["metadata"]["name"] = "ratchet-compliant"
    del compliant["spec"]["template"]["spec"]["containers"][1]["securityContext"]
    admission.baseline()
    admission.install(render_objects(COVERED, AdmissionOptions()))
    admission.wait({check.id: case}, PolicyState.WARN)
    admission.ensure_namespace("admission-ratchet")
    base = "/apis/apps/v1/namespaces/admission-ratchet/deployments"
    try:
        created = {
            o["metadata"]["name"]: call(admission.cp, "POST", base, o) for o in (failing, compliant)
        }
        assert all(answer.status == 201 for answer in created.values()), created
        assert check.id in warned_checks(created["ratchet-failing"])
        assert check.id not in warned_checks(created["ratchet-compliant"])
        admission.install(render_objects(COVERED, AdmissionOptions(deny=frozenset(Severity))))
        admission.wait(probes(admission), PolicyState.DENY)

        def patch(name: str, body: dict[str, Any]) -> tuple[int, Any]:
            return admission.request(
                "PATCH", f"{base}/{name}?dryRun=All", body, content_type=MERGE_PATCH
            )

        relabel = {"metadata": {"labels": {"team": "ci"}}, "spec": {"replicas": 3}}
        status, reply = patch("ratchet-failing", relabel)
        assert status == 200, reply
        status, reply = patch("ratchet-compliant", relabel)
        assert status == 200, reply
        privileged = {"spec": {"template": {"spec": {"containers": [
            {"name": "runner", "image": "ghcr.io/actions/actions-runner:2.320.0",
             "securityContext": {"privileged": True},
             "resources": {"limits": {"nvidia.com/gpu": 1}}},
        ]}}}}  # fmt: skip
        status, reply = patch("ratchet-compliant", privileged)
        assert status in (403, 422) and check.id in reply["message"], reply
    finally:
        for name in ("ratchet-failing", "ratchet-compliant"):
            admission.request("DELETE", f"{base}/{name}")
