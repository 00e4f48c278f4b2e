"""Every remediation of every fail fixture is accepted by the real kube-apiserver.

For each fail fixture the objects are applied to the test apiserver, the check runs on the
fixture, and each finding's remediation is submitted with a server-side dry-run:

* a whole object (apiVersion + kind) is server-side applied;
* a fragment is a patch of the object the finding names: strategic merge for built-in kinds,
  JSON merge for custom resources (what `kubectl patch` does by default). Bare Pods and Jobs
  cannot take a pod-template patch (the template is immutable), so the fix is to recreate them:
  the fragment is merged into the object locally and the result is created under a new name;
* `kubectl` commands are translated to the API call they make (patch, label, taint, delete,
  get/describe, create configmap, edit -> get) and sent with dryRun=All, so the object must exist
  and the change must validate. `helm` commands are only checked to be well-formed: the charts
  they name are not available offline.
"""

from __future__ import annotations

import json
import shlex
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from gpu_audit.engine import Finding, run_check
from gpu_audit.registry import load_checks
from gpu_audit.sources.files import load_files

REPO_ROOT = Path(__file__).resolve().parents[2]
FAIL_FIXTURES = sorted((REPO_ROOT / "fixtures" / "checks").glob("*/fail-*.yaml"))
CHECKS = load_checks(plugins=False)
FIELD_MANAGER = "gpu-audit-dry-run-test"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = {"strategic": STRATEGIC_PATCH, "merge": MERGE_PATCH, "json": JSON_PATCH}
# Kinds whose pod template cannot be changed in place (the apiserver answers 422).
IMMUTABLE_TEMPLATE_KINDS = frozenset({"Pod", "Job"})
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation")


class KubeRequest(Protocol):
    def __call__(
        self, method: str, path: str, body: Any = None, *, content_type: str = ...
    ) -> tuple[int, Any]: ...


@dataclass(frozen=True)
class ApiResource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str = "", name: str = "") -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


@dataclass
class Discovery:
    """The apiserver's resource types, by (group, kind) and by every name kubectl accepts."""

    by_kind: dict[tuple[str, str], ApiResource]  # preferred version
    by_version: dict[tuple[str, str, str], ApiResource]  # (group, version, kind)
    by_name: dict[str, ApiResource]

    def of_object(self, obj: Mapping[str, Any]) -> ApiResource:
        api_version = str(obj["apiVersion"])
        group, _, version = api_version.rpartition("/")
        found = self.by_version.get((group, version, str(obj["kind"])))
        assert found, f"the apiserver serves no {obj['kind']} in {api_version!r}"
        return found

    def of_kind(self, kind: str) -> ApiResource:
        """A ref's kind: "Deployment" or "ClusterPolicy.nvidia.com"."""
        bare, _, group = kind.partition(".")
        candidates = [
            r for (g, k), r in self.by_kind.items() if k == bare and (g == group or not group)
        ]
        assert candidates, f"the apiserver serves no kind {kind}"
        return sorted(candidates, key=lambda r: r.group != "")[0]

    def of_name(self, name: str) -> ApiResource:
        found = self.by_name.get(name.lower())
        assert found, f"kubectl resource name {name!r} is not served by the apiserver"
        return found


def discover(request: KubeRequest) -> Discovery:
    """Every served version; the preferred one (listed first) names a kind or a resource."""
    versions: list[tuple[str, str]] = [("", "v1")]
    status, groups = request("GET", "/apis")
    assert status == 200, groups
    for group in groups["groups"]:
        preferred = group["preferredVersion"]["version"]
        others = [v["version"] for v in group["versions"] if v["version"] != preferred]
        versions += [(group["name"], v) for v in [preferred, *others]]
    found = Discovery({}, {}, {})
    for group, version in versions:
        status, listing = request(
            "GET", f"/api/{version}" if not group else f"/apis/{group}/{version}"
        )
        assert status == 200, listing
        for res in listing["resources"]:
            if "/" in res["name"]:
                continue  # subresources
            api = ApiResource(group, version, res["kind"], res["name"], res["namespaced"])
            found.by_version[(group, version, res["kind"])] = api
            found.by_kind.setdefault((group, res["kind"]), api)
            names = [res["name"], res.get("singularName") or res["kind"].lower()]
            names += res.get("shortNames", [])
            for name in names:
                found.by_name.setdefault(name, api)  # the core group comes first, like kubectl
                if group:
                    found.by_name.setdefault(f"{name}.{group}", api)
    return found


@pytest.fixture(scope="module")
def discovery(kube_request: KubeRequest) -> Discovery:
    return discover(kube_request)


def plain(value: Any) -> Any:
    """Snapshot data (read-only mappings, tuples) as JSON-able dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def fixture_objects(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            out.extend(doc["items"])
        elif isinstance(doc, dict):
            out.append(doc)
    return out


@dataclass
class Cluster:
    """The test apiserver, seen the way a user applying a remediation sees it."""

    request: KubeRequest
    discovery: Discovery

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = JSON
    ) -> tuple[int, Any]:
        return self.request(method, path, body, content_type=content_type)

    def ensure_namespace(self, name: str) -> None:
        if name:
            status, reply = self.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
            assert status in (201, 409), reply

    def apply(
        self, obj: Mapping[str, Any], *, dry_run: bool, namespace: str = ""
    ) -> tuple[int, Any]:
        api = self.discovery.of_object(obj)
        body = plain(obj)
        body.pop("status", None)
        meta = body.setdefault("metadata", {})
        for key in SERVER_FIELDS:
            meta.pop(key, None)
        ns = str(meta.get("namespace") or namespace or "default") if api.namespaced else ""
        if api.namespaced:
            meta["namespace"] = ns
        self.ensure_namespace(ns)
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        path = f"{api.path(ns, meta['name'])}?{urllib.parse.urlencode(query)}"
        return self.call("PATCH", path, body, APPLY_PATCH)

    def dry_run(
        self, method: str, path: str, body: Any = None, content_type: str = JSON
    ) -> tuple[int, Any]:
        sep = "&" if "?" in path else "?"
        return self.call(method, f"{path}{sep}dryRun=All", body, content_type)


def seed(cluster: Cluster, fixture: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Apply the fixture's objects; returns those the apiserver accepted by (kind, ns, name)."""
    accepted: dict[tuple[str, str, str], dict[str, Any]] = {}
    objects = fixture_objects(fixture)
    objects.sort(
        key=lambda o: (o.get("kind") != "Namespace", cluster.discovery.of_object(o).namespaced)
    )
    for obj in objects:
        status, reply = cluster.apply(obj, dry_run=False)
        if status in (200, 201):
            api = cluster.discovery.of_object(obj)
            ns = reply["metadata"].get("namespace", "")
            accepted[(api.kind, ns, reply["metadata"]["name"])] = reply
    return accepted


def code_lines(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    joined: list[str] = []
    for line in lines:  # shell line continuations
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line.strip())
    return joined


def is_command(text: str) -> bool:
    lines = code_lines(text)
    return bool(lines) and lines[0].startswith(("kubectl ", "helm "))


def strategic_merge(base: Any, patch: Any) -> Any:
    """The strategic-merge rules pod specs rely on: maps merge, lists of named items merge by
    name (containers, env, volumes, volumeMounts), other lists are replaced, null deletes."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = strategic_merge(base.get(key), value)
        return out
    named = (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(i, dict) and "name" in i for i in base + patch)
    )
    if named:
        merged = {item["name"]: item for item in base}
        for item in patch:
            merged[item["name"]] = strategic_merge(merged.get(item["name"]), item)
        return list(merged.values())
    return patch


# --------------------------------------------------------------------------- YAML remediations


def submit_yaml(
    cluster: Cluster, finding: Finding, seeded: Mapping[tuple[str, str, str], Any]
) -> None:
    docs = [d for d in yaml.safe_load_all(finding.remediation) if d is not None]
    assert docs, f"remediation has no YAML document:\n{finding.remediation}"
    ref = finding.result.ref
    for doc in docs:
        assert isinstance(doc, dict), (
            f"remediation document is not a mapping:\n{finding.remediation}"
        )
        if "apiVersion" in doc and "kind" in doc:
            status, reply = cluster.apply(doc, dry_run=True, namespace=ref.namespace)
            assert status in (200, 201), f"whole object rejected: HTTP {status}: {reply}"
            continue
        api = cluster.discovery.of_kind(ref.kind)
        target = seeded.get((api.kind, ref.namespace if api.namespaced else "", ref.name))
        assert target is not None, f"{ref} (the object to patch) was not accepted from the fixture"
        path = api.path(ref.namespace, ref.name)
        content_type = STRATEGIC_PATCH if api.group in BUILTIN_GROUPS else MERGE_PATCH
        status, reply = cluster.dry_run("PATCH", path, doc, content_type)
        if status == 422 and api.kind in IMMUTABLE_TEMPLATE_KINDS:
            recreated = strategic_merge(plain(target), doc)
            recreated["metadata"] = {
                "name": f"{ref.name[:40]}-fixed",
                "namespace": ref.namespace,
                "labels": target["metadata"].get("labels", {}),
            }
            for key in ("nodeName",):  # set by the (absent) scheduler on a recreated pod
                recreated.get("spec", {}).pop(key, None)
            if api.kind == "Job":  # the apiserver generates the selector of a new Job
                recreated["spec"].pop("selector", None)
                labels = recreated["spec"]["template"].get("metadata", {}).get("labels", {})
                for key in (
                    "controller-uid",
                    "job-name",
                    "batch.kubernetes.io/controller-uid",
                    "batch.kubernetes.io/job-name",
                ):
                    labels.pop(key, None)
            status, reply = cluster.dry_run("POST", api.path(ref.namespace), recreated)
        assert status in (200, 201), f"patch of {ref} rejected: HTTP {status}: {reply}"


BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "networking.k8s.io",
        "storage.k8s.io",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "node.k8s.io",
        "discovery.k8s.io",
        "apiregistration.k8s.io",
        "resource.k8s.io",
        "coordination.k8s.io",
    }
)


# --------------------------------------------------------------------------- commands


@dataclass
class KubectlCall:
    verb: str
    args: list[str]
    flags: dict[str, str]
    switches: set[str]

    @property
    def namespace(self) -> str:
        return self.flags.get("n") or self.flags.get("namespace") or ""

    def target(self, cluster: Cluster) -> tuple[ApiResource, str]:
        """(resource type, name) from `TYPE NAME` or `TYPE/NAME`."""
        first = self.args[0]
        if "/" in first:
            type_name, _, name = first.partition("/")
        else:
            type_name, name = first, (self.args[1] if len(self.args) > 1 else "")
        return cluster.discovery.of_name(type_name), name


VALUE_FLAGS = {
    "n",
    "namespace",
    "type",
    "p",
    "patch",
    "l",
    "L",
    "o",
    "field-selector",
    "from-file",
    "from-literal",
}


def parse_kubectl(words: list[str]) -> KubectlCall:
    flags: dict[str, str] = {}
    switches: set[str] = set()
    positional: list[str] = []
    it = iter(words[1:])
    for word in it:
        if word.startswith("-") and word != "-":
            key, eq, value = word.lstrip("-").partition("=")
            if eq:
                flags[key] = value
            elif key in VALUE_FLAGS:
                flags[key] = next(it)
            else:
                switches.add(key)
        else:
            positional.append(word)
    assert positional, f"kubectl without a verb: {words}"
    return KubectlCall(positional[0], positional[1:], flags, switches)


def submit_kubectl(cluster: Cluster, line: str) -> None:
    words = shlex.split(line.split(" | ")[0], comments=True)
    call = parse_kubectl(words)
    ns = call.namespace
    if call.verb == "create":
        assert call.args[0] == "configmap", f"unexpected kubectl create: {line}"
        key = call.flags["from-file"].split("=", 1)[0]
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": call.args[1], "namespace": ns or "default"},
            "data": {key: ""},
        }
        cluster.ensure_namespace(ns or "default")
        status, reply = cluster.dry_run(
            "POST", f"/api/v1/namespaces/{ns or 'default'}/configmaps", body
        )
        assert status == 201, f"{line}: HTTP {status}: {reply}"
        return
    if call.verb in ("rollout", "set"):  # `rollout restart X`, `set env X K=V`: a template patch
        call = KubectlCall(call.verb + " " + call.args[0], call.args[1:], call.flags, call.switches)
    if call.verb == "logs" and not (call.args and "/" in call.args[0]):  # the pod(s) must exist
        call = KubectlCall("get", ["pod", *call.args], call.flags, call.switches)
    if call.verb == "drain":  # cordon, then evict: the cordon is the change to the object
        call = KubectlCall("drain", ["node", *call.args], call.flags, call.switches)
    api, name = call.target(cluster)
    path = api.path(ns or "default", name)
    if call.verb in ("get", "describe", "edit", "logs"):
        query = {
            k: v
            for k, v in (
                ("labelSelector", call.flags.get("l")),
                ("fieldSelector", call.flags.get("field-selector")),
            )
            if v
        }
        if call.switches & {"A", "all-namespaces"}:
            path = api.path("", name)
        status, reply = cluster.call(
            "GET", f"{path}?{urllib.parse.urlencode(query)}" if query else path
        )
        assert status == 200, f"{line}: HTTP {status}: {reply}"
        return
    status, current = cluster.call("GET", path)
    assert status == 200, f"{line}: the object does not exist: HTTP {status}: {current}"
    if call.verb == "patch":
        content_type = PATCH_TYPES[call.flags.get("type", "strategic")]
        body = json.loads(call.flags.get("p") or call.flags["patch"])
    elif call.verb == "label":
        labels: dict[str, str | None] = {}
        for item in call.args[2:] if "/" not in call.args[0] else call.args[1:]:
            key, eq, value = item.partition("=")
            labels[key.rstrip("-")] = value if eq else None
        body, content_type = {"metadata": {"labels": labels}}, MERGE_PATCH
    elif call.verb == "taint":
        spec, _, effect = call.args[2].rpartition(":")
        key, _, value = spec.partition("=")
        taints = [
            t
            for t in current.get("spec", {}).get("taints", [])
            if (t["key"], t["effect"]) != (key, effect)
        ]
        taints.append({"key": key, "effect": effect, **({"value": value} if value else {})})
        body, content_type = {"spec": {"taints": taints}}, MERGE_PATCH
    elif call.verb == "rollout restart":
        stamp = {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
        body = {"spec": {"template": {"metadata": {"annotations": stamp}}}}
        content_type = STRATEGIC_PATCH
    elif call.verb == "set env":
        env = [dict(zip(("name", "value"), a.split("=", 1), strict=True)) for a in call.args[1:]]
        containers = current["spec"]["template"]["spec"]["containers"]
        wanted = call.flags.get("c") or call.flags.get("containers")
        names = [c["name"] for c in containers if not wanted or c["name"] == wanted]
        assert names, f"{line}: no such container"
        body = {
            "spec": {"template": {"spec": {"containers": [{"name": n, "env": env} for n in names]}}}
        }
        content_type = STRATEGIC_PATCH
    elif call.verb == "drain":
        body, content_type = {"spec": {"unschedulable": True}}, MERGE_PATCH
    elif call.verb == "delete":
        status, reply = cluster.dry_run("DELETE", path)
        assert status in (200, 202), f"{line}: HTTP {status}: {reply}"
        return
    else:
        pytest.fail(f"remediation uses kubectl {call.verb}, which this test cannot check: {line}")
    status, reply = cluster.dry_run("PATCH", path, body, content_type)
    assert status == 200, f"{line}: HTTP {status}: {reply}"


def check_helm(line: str) -> None:
    """RELEASE and CHART present for upgrade/install, RELEASE for uninstall (charts are not
    reachable offline, so this is all that can be checked)."""
    words = shlex.split(line, comments=True)
    assert words[1] in ("upgrade", "install", "uninstall"), line
    positional: list[str] = []
    it = iter(words[2:])
    for word in it:
        if word in ("-n", "--namespace", "--set", "--version", "-f", "--values"):
            next(it)
        elif not word.startswith("-"):
            positional.append(word)
    wanted = 1 if words[1] == "uninstall" else 2
    assert len(positional) == wanted, f"expected {wanted} positional arguments: {line}"
    if words[1] != "uninstall":
        assert "/" in positional[1], f"no chart reference (repo/chart) in: {line}"


def submit_commands(cluster: Cluster, finding: Finding) -> None:
    for line in code_lines(finding.remediation):
        assert line.startswith(("kubectl ", "helm ")), f"mixes commands with other text: {line}"
        if line.startswith("helm "):
            check_helm(line)
        else:
            submit_kubectl(cluster, line)


# --------------------------------------------------------------------------- the test


def findings_of(fixture: Path) -> Iterator[Finding]:
    run = run_check(CHECKS[fixture.parent.name], load_files([str(fixture)]))
    yield from run.findings


@pytest.mark.parametrize("fixture", FAIL_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_remediations_pass_a_server_side_dry_run(
    fixture: Path, kube_request: KubeRequest, discovery: Discovery
) -> None:
    cluster = Cluster(kube_request, discovery)
    seeded = seed(cluster, fixture)
    found = list(findings_of(fixture))
    assert found, "a fail fixture must produce findings"
    for finding in found:
        if is_command(finding.remediation):
            submit_commands(cluster, finding)
        else:
            submit_yaml(cluster, finding, seeded)
