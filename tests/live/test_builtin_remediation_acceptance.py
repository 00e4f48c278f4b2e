"""The remediation of a pod-spec finding on a built-in kind, applied for real with the patch
type it names, fixes the finding and loses none of the list items the object had.

`kubectl patch` sends a built-in kind a strategic merge patch, which replaces whole every list
without a patchMergeKey (k8s.io/api core/v1 types.go): PodSpec.tolerations and node affinity's
nodeSelectorTerms among them (gpu_audit.k8s.smp_lists). Each case below is an object that
already has items in such a list (two tolerations, two node selector terms) and a problem a
check fixes by adding to it, on a Deployment, a CronJob, a bare Pod and a DaemonSet. Against
the test kube-apiserver:

1. `test_remediations_of_builtin_kinds_keep_existing_list_items`: the objects are created, read
   back and scanned; the finding's remediation is applied as the patch type it names (a
   `kubectl patch --type=json` command as that PATCH, a YAML fragment of the object as the
   strategic merge patch `kubectl patch` sends by default); every value and list item the
   object had is still there, and a new scan no longer reports the finding
   (tests/live/test_cr_remediation_acceptance.run_case).
2. `test_the_fragment_alone_drops_the_existing_items`: the same fix as the plain strategic
   merge fragment (what gpu-audit rendered before, and still renders without the object)
   applied the same way drops the items each case names: why the fix is a JSON patch.
3. `test_remediations_that_take_away_gpus_privileges_tokens_or_a_probe_handler`: fixes that
   remove something, applied the same way as 1: an init container's GPU limit, and its request
   where it has one (GPU-WL-002, on Deployments and, as a guarded JSON patch, on a
   PyTorchJob), privileges without a GPU given to a sidecar or an init container
   (GPU-WL-005), a TCP readiness handler replaced by Triton's HTTP one (GPU-SRV-002: a probe
   with two handlers is refused), and a pod's own automountServiceAccountToken: true
   (GPU-SEC-004: the pod's field wins over its ServiceAccount's; on a Deployment and, as a
   guarded JSON patch, on a PyTorchJob), or false added to a pod whose ServiceAccount a pod
   that uses the API shares.
4. `test_fixes_that_shorten_a_list_or_change_another_object`: GPU-WL-005's capabilities.add
   written back without CAP_SYS_ADMIN (only that item goes), and GPU-SEC-004's ServiceAccount
   manifest applied (the Deployment is untouched and no longer mounts the token).
5. `test_a_probe_with_two_handlers_is_refused`: an httpGet merged into a TCP readiness probe
   (GPU-SRV-002's fix before it set the other handler to null) is refused by the API server.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_audit.engine import Finding, render_remediation
from gpu_audit.k8s.cr_patches import MERGE_KEYS, pointer
from gpu_audit.registry import load_checks
from tests.json_patch import get, leaves, lost
from tests.live.cr_remediation_cases import GPU, NS, SPOT, TOLERATION, VLLM, Case, meta
from tests.live.test_cr_remediation_acceptance import (
    apply_remediation,
    cleanup,
    findings_on,
    read_back,
    run_all,
)
from tests.live.test_remediation_dry_run import (
    STRATEGIC_PATCH,
    Cluster,
    KubeRequest,
    discover,
    fixture_objects,
    is_command,
)

Doc = dict[str, Any]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checks"
NO_REPOSITORY = "fail-no-repository.yaml"
TAINTED = "fail-selector-picks-tainted-node.yaml"
TWO_PLUGINS = "fail-operator-and-nvdp-on-same-node.yaml"
PCI_TERM = {
    "matchExpressions": [
        {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}
    ]
}
PRODUCT = "nvidia.com/gpu.product"
H100 = "NVIDIA-H100-80GB-HBM3"
T4_SHARED = "Tesla-T4-SHARED"
TRAINING_TAINT = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
GFD = "nvcr.io/nvidia/gpu-feature-discovery:v0.8.2"
POOL_TERM = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["inference"]}]}


@dataclass(frozen=True)
class Builtin:
    """A case; the list items a strategic merge patch of the bare fragment drops; the lists
    (paths in the object) the check writes whole, with the object's items first."""

    case: Case
    dropped: tuple[Doc, ...]
    whole: tuple[tuple[str | int, ...], ...] = ()


def fixture(check_id: str, name: str, target: str) -> list[Doc]:
    """A fail fixture's objects, the finding's object (named `target`) first."""
    objects = fixture_objects(FIXTURES / check_id / name)
    return sorted(objects, key=lambda o: o["metadata"]["name"] != target)


def node(name: str, labels: Doc, taints: list[Doc]) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true", **labels}},
        "spec": {"taints": taints},
    }


def pod_spec(**fields: Any) -> Doc:
    """A vLLM pod on the H100 nodes, tolerating two taints but not the nodes' `dedicated`."""
    container = {
        "name": "vllm",
        "image": VLLM,
        "args": ["--model", "Qwen/Qwen2.5-1.5B-Instruct", "--max-model-len", "4096"],
        "resources": {"limits": {GPU: 1}},
    }
    spec: Doc = {"tolerations": [TOLERATION, SPOT], "containers": [container]}
    return {**spec, "nodeSelector": {PRODUCT: H100}, **fields}


def template(spec: Doc, app: str) -> Doc:
    return {"metadata": {"labels": {"app": app}}, "spec": spec}


def deployment(name: str, spec: Doc) -> Doc:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name),
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": template(spec, name)},
    }


def two_terms() -> Doc:
    """Required node affinity with two terms (ORed): the T4 pool, or a pool label."""
    terms = [
        {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": [T4_SHARED]}]},
        POOL_TERM,
    ]
    required = {"nodeSelectorTerms": terms}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def builtins() -> list[Builtin]:
    h100 = node("bfix-gpu-h100", {PRODUCT: H100}, [TRAINING_TAINT])
    t4 = node(
        "bfix-gpu-t4",
        {
            PRODUCT: T4_SHARED,
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
        },
        [{"key": GPU, "value": "present", "effect": "NoSchedule"}],
    )
    job = {"template": template(pod_spec(restartPolicy="Never"), "nightly")}
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta("nightly-eval"),
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job}},
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta("notebook"), "spec": pod_spec()}
    gfd_spec = {
        "tolerations": [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
            SPOT,
        ],
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "containers": [{"name": "gpu-feature-discovery", "image": GFD}],
    }
    gfd = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta("gpu-feature-discovery"),
        "spec": {
            "selector": {"matchLabels": {"app": "gfd"}},
            "template": template(gfd_spec, "gfd"),
        },
    }
    shared = deployment("llm-chat", pod_spec(nodeSelector={}, affinity=two_terms()))
    shared["spec"]["template"]["spec"]["tolerations"] = [TOLERATION]
    return [
        Builtin(
            Case(
                "Deployment, two tolerations",
                "GPU-SCHED-001",
                [deployment("llm", pod_spec()), h100],
            ),
            (TOLERATION, SPOT),
        ),
        Builtin(
            Case("CronJob, two tolerations", "GPU-SCHED-001", [cronjob, h100]), (TOLERATION, SPOT)
        ),
        Builtin(Case("Pod, two tolerations", "GPU-SCHED-001", [pod, h100]), (TOLERATION, SPOT)),
        Builtin(
            Case("DaemonSet, two tolerations", "GPU-STACK-012", [gfd, t4]),
            (),
            (("spec", "template", "spec", "tolerations"),),
        ),
        Builtin(  # command [tritonserver], args [--http-port=8000, --log-verbose=1]
            Case(
                "Deployment, an args list",
                "GPU-SRV-002",
                fixture("GPU-SRV-002", NO_REPOSITORY, "triton"),
            ),
            (),
            (("spec", "template", "spec", "containers", 0, "args"),),
        ),
        Builtin(  # one toleration, for another value of the nodes' taint
            Case(
                "StatefulSet, a toleration",
                "GPU-SCHED-001",
                fixture("GPU-SCHED-001", TAINTED, "llm"),
            ),
            (
                {
                    "key": "dedicated",
                    "operator": "Equal",
                    "value": "inference",
                    "effect": "NoSchedule",
                },
            ),
        ),
        Builtin(  # two terms (ORed): NFD's PCI label, or nvidia.com/gpu.present
            Case(
                "DaemonSet, two node selector terms",
                "GPU-STACK-004",
                fixture("GPU-STACK-004", TWO_PLUGINS, "nvdp-nvidia-device-plugin"),
            ),
            (PCI_TERM,),
        ),
        Builtin(
            Case("Deployment, two node selector terms", "GPU-SHARE-007", [shared, t4]),
            (POOL_TERM,),
        ),
    ]


def holds(value: Any, item: Doc) -> bool:
    """Whether `item` is an item of some list in `value`."""
    if isinstance(value, dict):
        return any(holds(v, item) for v in value.values())
    if isinstance(value, list):
        return item in value or any(holds(v, item) for v in value)
    return False


def apply_named_patch(cluster: Cluster, finding: Finding) -> list[dict[str, Any]]:
    """The remediation applied as the patch type it names: a `kubectl patch` command as the
    call it makes (JSON patch operations returned); a YAML fragment of the object as the
    strategic merge patch `kubectl patch` sends a built-in kind by default (the values it
    sets returned as operations)."""
    if is_command(finding.remediation):
        return apply_remediation(cluster, finding)
    status, reply = strategic_patch(cluster, finding)
    assert status == 200, f"HTTP {status}: {reply}\n{finding.remediation}"
    return named_values(yaml.safe_load(finding.remediation))


def named_values(fragment: Doc) -> list[dict[str, Any]]:
    """The values a strategic merge fragment sets, as the `replace` operations `lost` leaves
    out: its scalars, except those in lists a strategic merge patch replaces whole (their
    items, the object's included, must all be kept). An item of a merged list is taken at its
    index in the fragment: a case whose object has it elsewhere fails (it never passes)."""
    named = []
    for path, _ in leaves(fragment):
        inside = [path[i - 1] for i, token in enumerate(path) if isinstance(token, int)]
        if all(key in MERGE_KEYS for key in inside):
            named.append({"op": "replace", "path": pointer(path)})
    return named


def strategic_patch(cluster: Cluster, finding: Finding) -> tuple[int, Any]:
    """The remediation, a YAML fragment of the object, sent as a strategic merge patch."""
    body = yaml.safe_load(finding.remediation)
    assert isinstance(body, dict), finding.remediation
    ref = finding.result.ref
    path = cluster.discovery.of_kind(ref.kind).path(ref.namespace, ref.name)
    return cluster.call("PATCH", f"{path}?fieldValidation=Strict", body, STRATEGIC_PATCH)


def test_remediations_of_builtin_kinds_keep_existing_list_items(
    kube_request: KubeRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = Cluster(kube_request, discover(kube_request))
    cluster.ensure_namespace(NS)
    run_all(cluster, [b.case for b in builtins()], capsys, apply_named_patch)


def test_the_fragment_alone_drops_the_existing_items(
    kube_request: KubeRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = Cluster(kube_request, discover(kube_request))
    cluster.ensure_namespace(NS)
    checks = dict(load_checks(plugins=False))
    lines = []
    for builtin in (b for b in builtins() if b.dropped):
        case = builtin.case
        try:
            for obj in case.objects:
                status, reply = cluster.apply(obj, dry_run=False)
                assert status in (200, 201), reply
            before = read_back(cluster, case.objects)
            (finding, *_) = findings_on(case, before)
            # rendered without the object: the fragment nested under the template's path
            fragment = render_remediation(checks[case.check_id], finding.result)
            assert not is_command(fragment), fragment
            status, reply = strategic_patch(cluster, replace(finding, remediation=fragment))
            if case.target["kind"] == "Pod":  # a pod's tolerations may only be added to
                assert status == 422 and "existing toleration" in reply["message"], reply
                lines.append(f"{case.label}: rejected, HTTP 422: {reply['message']}")
                continue
            assert status == 200, reply
            after = read_back(cluster, case.objects)
            for item in builtin.dropped:
                assert holds(before[0], item), f"{case.label}: no {item} to begin with"
                assert not holds(after[0], item), f"{case.label}: {item} survived"
            problems = lost(before[0], after[0], [])
            assert problems, f"{case.label}: the strategic merge patch lost nothing"
            lines.append(f"{case.label}: {'; '.join(problems)}")
        finally:
            cleanup(cluster, case)
    with capsys.disabled():
        print("\nlost by the bare strategic merge fragment:\n" + "\n".join(lines))


# --------------------------------------------------------------------------- removals

SECRETS_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": meta("read-secrets"),
    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
}


def service_account(name: str, **fields: Any) -> Doc:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name), **fields}


def token_deployment(name: str, account: str, **pod: Any) -> Doc:
    """A vLLM Deployment running as `account`, bound to a Role that reads Secrets."""
    spec = pod_spec(serviceAccountName=account, **pod)
    spec.pop("nodeSelector")
    return deployment(name, spec)


def binding(account: str) -> Doc:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(f"{account}-read-secrets"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "read-secrets",
        },
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NS}],
    }


def removal_cases() -> list[Case]:
    no_gpu_app = pod_spec(
        initContainers=[
            {
                "name": "gpu-check",
                "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                "command": ["nvidia-smi"],
                "resources": {"limits": {GPU: 1}},
            }
        ]
    )
    no_gpu_app["containers"][0].pop("resources")
    from_fixtures = [
        # a limit only (a pod template's request is not defaulted; a Pod's is)
        ("Deployment, an init container's GPU limit", "GPU-WL-002", "fail-init-holds-gpus", "llm"),
        # a limit and a request written in the manifest
        (
            "Deployment, an init container's GPU limit and request",
            "GPU-WL-002",
            "fail-init-limit-and-request",
            "embedder",
        ),
        (
            "PyTorchJob, the only GPU on an init container",
            "GPU-WL-002",
            "fail-init-limit-and-request",
            "tokenize",
        ),
        (
            "Deployment, a privileged docker-in-docker sidecar",
            "GPU-WL-005",
            "fail-dind-sidecar-and-dev-mount",
            "ci-runner",
        ),
        # two rounds: the init container's privilege, then the 8-GPU trainer's
        (
            "Deployment, a privileged init container and trainer",
            "GPU-WL-005",
            "fail-privileged-init-and-capabilities",
            "trainer",
        ),
        (
            "Deployment, a TCP readiness probe",
            "GPU-SRV-002",
            "fail-tcp-readiness-and-exec-startup",
            "triton-tcp",
        ),
        (
            "Deployment, a ServiceAccount shared with a Jupyter server",
            "GPU-SEC-004",
            "fail-account-shared-with-api-user",
            "vllm",
        ),
        (
            "PyTorchJob, a worker's automountServiceAccountToken: true",
            "GPU-SEC-004",
            "fail-account-shared-with-api-user",
            "finetune",
        ),
    ]
    return [
        *(
            Case(label, check_id, fixture(check_id, f"{name}.yaml", target))
            for label, check_id, name, target in from_fixtures
        ),
        Case(
            "Deployment, the only GPU on an init container",
            "GPU-WL-002",
            [deployment("gpu-check", no_gpu_app)],
        ),
        Case(
            "Deployment, automountServiceAccountToken: true",
            "GPU-SEC-004",
            [
                token_deployment("finetune", "trainer", automountServiceAccountToken=True),
                service_account("trainer", automountServiceAccountToken=False),
                SECRETS_ROLE,
                binding("trainer"),
            ],
        ),
    ]


def apply_keyed_patch(cluster: Cluster, finding: Finding) -> list[dict[str, Any]]:
    """As apply_named_patch, but an item of a merged list is named where the object has it
    (by its merge key: a sidecar after the app container), not at its index in the fragment."""
    ref = finding.result.ref
    path = cluster.discovery.of_kind(ref.kind).path(ref.namespace, ref.name)
    status, current = cluster.call("GET", path)
    assert status == 200, current
    if is_command(finding.remediation):
        operations = apply_remediation(cluster, finding)
    else:
        status, reply = strategic_patch(cluster, finding)
        assert status == 200, f"HTTP {status}: {reply}\n{finding.remediation}"
        fragment = yaml.safe_load(finding.remediation)
        named = keyed_leaves(current, fragment, ())
        operations = [{"op": "replace", "path": pointer(p)} for p in named]
    if not finding.result.path.endswith(".resources"):  # only a fix of resources changes them
        status, now = cluster.call("GET", path)
        spec = finding.result.pod_spec_path
        assert resources(now, spec) == resources(current, spec), finding.remediation
    return operations


def resources(obj: Doc, pod_spec_path: str) -> dict[str, Any]:
    """Each container's resources in the pod spec at the dotted path (`...[0]...` indexes)."""
    spec: Any = obj
    for part in pod_spec_path.replace("]", "").replace("[", ".").split("."):
        spec = spec[int(part)] if isinstance(spec, list) else spec[part]
    return {
        f"{section}/{c['name']}": c.get("resources", {})
        for section in ("initContainers", "containers")
        for c in spec.get(section, [])
    }


def keyed_leaves(obj: Any, value: Any, at: tuple[str | int, ...]) -> list[tuple[str | int, ...]]:
    """The paths in `obj` of the values the strategic merge fragment `value` sets or removes;
    a list without a merge key is named whole."""
    if not isinstance(value, dict) or not value:
        return [at]
    out: list[tuple[str | int, ...]] = []
    for key, item in value.items():
        if isinstance(item, list) and key in MERGE_KEYS:
            base = obj.get(key, []) if isinstance(obj, dict) else []
            for entry in item:
                wanted = entry.get(MERGE_KEYS[key])
                index = next(
                    (i for i, old in enumerate(base) if old.get(MERGE_KEYS[key]) == wanted),
                    len(base),
                )
                found = base[index] if index < len(base) else {}
                rest = {k: v for k, v in entry.items() if k != MERGE_KEYS[key]}
                out.extend(keyed_leaves(found, rest, (*at, key, index)))
        else:
            inner = obj.get(key) if isinstance(obj, dict) else None
            out.extend(keyed_leaves(inner, item, (*at, key)))
    return out


def in_namespace(kube_request: KubeRequest) -> Cluster:
    cluster = Cluster(kube_request, discover(kube_request))
    cluster.ensure_namespace(NS)
    return cluster


def created(cluster: Cluster, case: Case) -> list[Doc]:
    """The case's objects, created and read back."""
    for obj in case.objects:
        status, reply = cluster.apply(obj, dry_run=False)
        assert status in (200, 201), reply
    return read_back(cluster, case.objects)


def test_remediations_that_take_away_gpus_privileges_tokens_or_a_probe_handler(
    kube_request: KubeRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = in_namespace(kube_request)
    run_all(cluster, removal_cases(), capsys, apply_keyed_patch)


def test_fixes_that_shorten_a_list_or_change_another_object(kube_request: KubeRequest) -> None:
    cluster = in_namespace(kube_request)
    capabilities = Case(
        "StatefulSet, CAP_SYS_ADMIN beside IPC_LOCK",
        "GPU-WL-005",
        fixture("GPU-WL-005", "fail-privileged-init-and-capabilities.yaml", "llm"),
    )
    added = ("spec", "template", "spec", "containers", 0, "securityContext", "capabilities", "add")
    try:
        before = created(cluster, capabilities)
        (finding,) = findings_on(capabilities, before)
        status, reply = strategic_patch(cluster, finding)
        assert status == 200, f"HTTP {status}: {reply}\n{finding.remediation}"
        after = read_back(cluster, capabilities.objects)
        assert get(after[0], added) == ["IPC_LOCK"]
        problems = lost(before[0], after[0], [{"op": "replace", "path": pointer(added)}])
        assert problems == ["/".join(map(str, added)) + ": 2 items -> 1"], problems
        assert findings_on(capabilities, after) == []
    finally:
        cleanup(cluster, capabilities)
    account = service_account("inference")
    shared = Case(
        "Deployment, a token left to its ServiceAccount",
        "GPU-SEC-004",
        [token_deployment("llm-tokens", "inference"), account, SECRETS_ROLE, binding("inference")],
    )
    try:
        before = created(cluster, shared)
        (finding,) = findings_on(shared, before)
        manifest = yaml.safe_load(finding.remediation)
        assert (manifest["kind"], manifest["metadata"]["name"]) == ("ServiceAccount", "inference")
        status, reply = cluster.apply(manifest, dry_run=False)
        assert status == 200, f"HTTP {status}: {reply}\n{finding.remediation}"
        after = read_back(cluster, shared.objects)
        assert after[1]["automountServiceAccountToken"] is False
        assert lost(before[0], after[0], []) == []  # the Deployment is as it was
        assert findings_on(shared, after) == []
    finally:
        cleanup(cluster, shared)


def test_a_probe_with_two_handlers_is_refused(kube_request: KubeRequest) -> None:
    cluster = in_namespace(kube_request)
    case = Case(
        "Deployment, a TCP readiness probe",
        "GPU-SRV-002",
        fixture("GPU-SRV-002", "fail-tcp-readiness-and-exec-startup.yaml", "triton-tcp"),
    )
    try:
        (finding,) = findings_on(case, created(cluster, case))
        fragment = yaml.safe_load(finding.remediation)
        (container,) = fragment["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"].pop("tcpSocket", "absent") is None
        status, reply = strategic_patch(cluster, replace(finding, remediation=yaml.dump(fragment)))
        assert status == 422, reply
        assert "may not specify more than 1 handler type" in reply["message"], reply
    finally:
        cleanup(cluster, case)
