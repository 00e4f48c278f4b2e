"""Every remediation of every fail fixture is accepted by the real kube-apiserver.

For each fail fixture the objects are applied to the test apiserver (and deleted afterwards:
fixtures reuse names with different immutable fields), the check runs on the fixture, and each
finding's remediation is submitted with a server-side dry-run and strict field validation (what
kubectl's default --validate=strict asks for), so a field the object does not have is an error,
not a silently dropped no-op:

* every fixture object must be accepted, except those in INVALID_BY_DESIGN, whose rejection is
  what the check finds (a fractional GPU quantity); their fix is checked by merging the
  fragment into the fixture object locally and creating the result under a new name;
* a whole object (apiVersion + kind) is server-side applied, by another field manager than the
  fixture's, as a user's `kubectl apply` of a partial object would be;
* a fragment is a patch of the object the finding names: strategic merge for built-in kinds,
  JSON merge for custom resources (what `kubectl patch` does by default); a pod-spec fix of a
  custom resource is a `kubectl patch --type=json` command instead (its JSON patch one
  operation a line), checked as a command. Bare Pods and Jobs
  cannot take a pod-template patch (the template is immutable), so the fix is to recreate them:
  the fragment is merged into the object locally (by the merge keys of the pod-spec lists,
  honouring `$patch: delete`) and the result is created under a new name;
* `kubectl` commands are translated to the API call they make (patch, label, taint, delete,
  get/describe, create configmap/secret generic, edit -> get) and sent with dryRun=All, so the
  object must exist and the change must validate; `delete -l/--field-selector` deletes what
  the selectors match, `rollout restart TYPE -l SELECTOR` must match at least one object. `apply|create -f -` and `replace --force -f -`
  read the objects from a here-document; `replace --force` deletes then creates, so the object
  must exist, its deletion must be allowed, and the new object must be valid (created under a
  new name: the dry-run deletion leaves the original in place). `helm` commands and
  `kubectl apply -n NS -f https://...` of a known upstream manifest are only checked to be
  well-formed: the charts and URLs they name are not available offline (the manifest's
  objects, kept in UPSTREAM_MANIFESTS, are created so the commands after it can be checked).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import time
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
# The fixture's objects and the remediations are applied by different managers, as in a real
# cluster: applying a partial object with the manager that created the whole one would drop
# every field the partial object leaves out.
FIXTURE_MANAGER = "gpu-audit-fixture"
REMEDIATION_MANAGER = "gpu-audit-remediation"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = {"strategic": STRATEGIC_PATCH, "merge": MERGE_PATCH, "json": JSON_PATCH}
# Kinds whose pod template cannot be changed in place (the apiserver answers 422).
IMMUTABLE_TEMPLATE_KINDS = frozenset({"Pod", "Job"})
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation")
RETRIES_429 = 10  # client-go's default for responses with Retry-After


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
        """One call, retried as kubectl (client-go) retries a 429 with Retry-After: the first
        list of a custom resource answers "storage is (re)initializing" while its watch cache
        fills."""
        for _ in range(RETRIES_429):
            status, reply = self.request(method, path, body, content_type=content_type)
            if status != 429:
                break
            details = reply.get("details", {}) if isinstance(reply, dict) else {}
            time.sleep(float(details.get("retryAfterSeconds", 1)))
        return status, reply

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
        manager = REMEDIATION_MANAGER if dry_run else FIXTURE_MANAGER
        query = {"fieldManager": manager, "force": "true", "fieldValidation": "Strict"}
        if dry_run:
            query["dryRun"] = "All"
        path = f"{api.path(ns, meta['name'])}?{urllib.parse.urlencode(query)}"
        return self.call("PATCH", path, body, APPLY_PATCH)

    def dry_run(
        self, method: str, path: str, body: Any = None, content_type: str = JSON
    ) -> tuple[int, Any]:
        sep = "&" if "?" in path else "?"
        query = "dryRun=All" + ("&fieldValidation=Strict" if method in ("POST", "PATCH") else "")
        return self.call(method, f"{path}{sep}{query}", body, content_type)


ObjectKey = tuple[str, str, str]  # (kind, namespace, name); namespace "" if cluster-scoped


@dataclass
class Seeded:
    accepted: dict[ObjectKey, dict[str, Any]]  # as the apiserver stored them
    rejected: dict[ObjectKey, str]  # the apiserver's message
    originals: dict[ObjectKey, dict[str, Any]]  # as the fixture has them


@contextlib.contextmanager
def seeded_fixture(cluster: Cluster, fixture: Path) -> Iterator[Seeded]:
    """Apply the fixture's objects, and delete them afterwards: the fixtures reuse names (Job
    ml/finetune, ClusterPolicy cluster-policy) with different immutable fields, so each case
    needs a clean apiserver. Namespaces stay (without a controller-manager they never finish
    deleting); Background propagation, a zero grace period and clearing the finalizers (PVC
    and PV protection) delete at once, without the garbage collector, a kubelet or the
    controllers that would release the finalizers."""
    seeded = Seeded({}, {}, {})
    objects = fixture_objects(fixture)
    objects.sort(
        key=lambda o: (o.get("kind") != "Namespace", cluster.discovery.of_object(o).namespaced)
    )
    try:
        for obj in objects:
            status, reply = cluster.apply(obj, dry_run=False)
            api = cluster.discovery.of_object(obj)
            ns = str(obj["metadata"].get("namespace") or "default") if api.namespaced else ""
            key = (api.kind, ns, str(obj["metadata"]["name"]))
            seeded.originals[key] = obj
            if status in (200, 201):
                seeded.accepted[key] = reply
            else:
                message = reply.get("message") if isinstance(reply, dict) else reply
                seeded.rejected[key] = str(message)
        yield seeded
    finally:
        query = urllib.parse.urlencode({"propagationPolicy": "Background", "gracePeriodSeconds": 0})
        for obj in seeded.accepted.values():
            if obj["kind"] == "Namespace":
                continue
            meta = obj["metadata"]
            path = cluster.discovery.of_object(obj).path(meta.get("namespace", ""), meta["name"])
            if meta.get("finalizers"):
                unblock = {"metadata": {"finalizers": None}}
                status, reply = cluster.call("PATCH", path, unblock, MERGE_PATCH)
                assert status in (200, 404), f"cleanup of {path}: HTTP {status}: {reply}"
            status, reply = cluster.call("DELETE", f"{path}?{query}")
            assert status in (200, 202, 404), f"cleanup of {path}: HTTP {status}: {reply}"


HEREDOC = re.compile(r"""\s*<<-?\s*(['"]?)(\w+)\1\s*$""")


def command_lines(text: str) -> list[tuple[str, str]]:
    """The shell lines of a remediation (comments dropped, continuations joined, a quoted
    word that spans lines kept whole: a JSON patch one operation a line), each with the
    here-document it reads as stdin ("" when none)."""
    out: list[tuple[str, str]] = []
    lines = iter(text.splitlines())
    for raw in lines:
        if out and open_quote(out[-1][0]):
            out[-1] = (out[-1][0] + "\n" + raw, "")
            continue
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if out and out[-1][0].endswith("\\"):
            out[-1] = (out[-1][0][:-1] + " " + line, "")
        else:
            out.append((line, ""))
        heredoc = HEREDOC.search(out[-1][0])
        if heredoc:
            body: list[str] = []
            for body_line in lines:
                if body_line.strip() == heredoc.group(2):
                    break
                body.append(body_line)
            else:
                pytest.fail(f"here-document {heredoc.group(2)} is not terminated:\n{text}")
            out[-1] = (out[-1][0][: heredoc.start()], "\n".join(body))
    return out


def open_quote(line: str) -> bool:
    """True when `line` ends inside a quoted word (the shell reads on; a trailing backslash
    continues the line, which command_lines joins itself)."""
    try:
        shlex.split(line.removesuffix("\\"), comments=True)
    except ValueError:
        return True
    return False


def is_command(text: str) -> bool:
    lines = command_lines(text)
    return bool(lines) and lines[0][0].startswith(("kubectl ", "helm "))


# The merge key of the pod-spec lists a strategic merge patch merges item by item (the
# patchMergeKey of each field in the Kubernetes API types); other lists are replaced.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
}


def strategic_merge(base: Any, patch: Any, merge_key: str = "") -> Any:
    """The strategic-merge rules pod specs rely on: maps merge, the lists of MERGE_KEYS merge
    item by item (an item with `$patch: delete` removes its match), other lists are
    replaced, null deletes."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = strategic_merge(base.get(key), value, MERGE_KEYS.get(key, ""))
        return out
    if merge_key and isinstance(base, list | None) and isinstance(patch, list):
        merged = {item[merge_key]: item for item in base or []}
        for item in patch:
            key = item[merge_key]
            if item.get("$patch") == "delete":
                merged.pop(key, None)
            else:
                merged[key] = strategic_merge(merged.get(key), item)
        return list(merged.values())
    return patch


# --------------------------------------------------------------------------- YAML remediations


def recreated_under_new_name(base: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """`base` with the patch merged in, as a new object: what a user recreating an object whose
    fields cannot change in place would create (the dry-run cannot delete the original)."""
    recreated: dict[str, Any] = strategic_merge(plain(base), patch)
    meta = base["metadata"]
    recreated["metadata"] = {
        "name": f"{str(meta['name'])[:40]}-fixed",
        "namespace": meta.get("namespace", "default"),
        "labels": plain(meta.get("labels", {})),
    }
    recreated.pop("status", None)
    recreated.get("spec", {}).pop("nodeName", None)  # set by the (absent) scheduler
    if base["kind"] == "Job":  # the apiserver generates the selector of a new Job
        recreated["spec"].pop("selector", None)
        labels = recreated["spec"]["template"].get("metadata", {}).get("labels", {})
        for key in (
            "controller-uid",
            "job-name",
            "batch.kubernetes.io/controller-uid",
            "batch.kubernetes.io/job-name",
        ):
            labels.pop(key, None)
    return recreated


def submit_yaml(cluster: Cluster, finding: Finding, seeded: Seeded) -> None:
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
        key = (api.kind, ref.namespace if api.namespaced else "", ref.name)
        target = seeded.accepted.get(key)
        if target is None:
            # An object the apiserver refuses by design (see INVALID_BY_DESIGN): the fixed
            # object must be one it accepts.
            assert key in seeded.rejected, f"{ref} (the object to patch) is not in the fixture"
            fixed = recreated_under_new_name(seeded.originals[key], doc)
            status, reply = cluster.dry_run("POST", api.path(ref.namespace), fixed)
            assert status == 201, f"fixed {ref} rejected: HTTP {status}: {reply}"
            continue
        path = api.path(ref.namespace, ref.name)
        content_type = STRATEGIC_PATCH if api.group in BUILTIN_GROUPS else MERGE_PATCH
        status, reply = cluster.dry_run("PATCH", path, doc, content_type)
        if status == 422 and api.kind in IMMUTABLE_TEMPLATE_KINDS:
            fixed = recreated_under_new_name(target, doc)
            status, reply = cluster.dry_run("POST", api.path(ref.namespace), fixed)
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

    @property
    def source(self) -> str:
        """The -f/--filename argument: `-` (stdin), a path or a URL."""
        return self.flags.get("f") or self.flags.get("filename") or ""

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
    "f",
    "filename",
    "c",
    "container",
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


def submit_manifests(cluster: Cluster, call: KubectlCall, line: str, stdin: str) -> None:
    """`kubectl apply|create|replace --force -f -` with the objects on stdin."""
    assert call.source == "-" and stdin, f"{line}: only a here-document on stdin can be checked"
    for doc in (d for d in yaml.safe_load_all(stdin) if d is not None):
        api = cluster.discovery.of_object(doc)
        ns = str(doc["metadata"].get("namespace") or call.namespace or "default")
        if call.verb == "apply":
            status, reply = cluster.apply(doc, dry_run=True, namespace=ns)
            assert status in (200, 201), f"{line}: HTTP {status}: {reply}"
            continue
        if call.verb == "replace":  # --force: delete, then create the object again
            assert "force" in call.switches, f"{line}: replace without --force needs the object"
            path = api.path(ns, doc["metadata"]["name"])
            status, reply = cluster.dry_run("DELETE", path)
            assert status in (200, 202), f"{line}: delete: HTTP {status}: {reply}"
            # The dry-run delete leaves the original in place: create under a new name.
            doc = {**doc, "metadata": {**doc["metadata"], "name": f"{doc['metadata']['name']}-new"}}
        else:
            assert call.verb == "create", f"{line}: unexpected kubectl {call.verb} -f"
        body = {**doc, "metadata": {**doc["metadata"], "namespace": ns}} if api.namespaced else doc
        cluster.ensure_namespace(ns if api.namespaced else "")
        status, reply = cluster.dry_run("POST", api.path(ns), body)
        assert status == 201, f"{line}: HTTP {status}: {reply}"


# Upstream manifests a remediation applies by URL, which cannot be fetched offline: the
# objects that later commands of the same remediation change, as the manifest defines them
# (trimmed to what the apiserver requires). NVIDIA/dcgm-exporter
# deployment/examples/dcgm-exporter.yaml (at 8dc9e11b): its DaemonSet "dcgm-exporter", which
# has no tolerations (the Service it also defines no command changes).
DCGM_EXPORTER_LABELS = {"app.kubernetes.io/name": "dcgm-exporter"}
UPSTREAM_MANIFESTS: dict[str, list[dict[str, Any]]] = {
    "https://raw.githubusercontent.com/NVIDIA/dcgm-exporter/main/deployment/examples/"
    "dcgm-exporter.yaml": [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "dcgm-exporter", "labels": DCGM_EXPORTER_LABELS},
            "spec": {
                "selector": {"matchLabels": DCGM_EXPORTER_LABELS},
                "template": {
                    "metadata": {"labels": DCGM_EXPORTER_LABELS},
                    "spec": {
                        "containers": [
                            {
                                "name": "dcgm-exporter",
                                "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.1-4.8.4-distroless",
                            }
                        ]
                    },
                },
            },
        }
    ]
}


def apply_upstream(
    cluster: Cluster, seeded: Seeded, call: KubectlCall, line: str, stdin: str
) -> None:
    """`kubectl apply -n NS -f https://...` of a known upstream manifest: like `helm`, only the
    form is checked (the verb, the URL as the only source, the namespace its objects land in);
    the manifest's objects are then created for real (and deleted with the fixture's) so the
    commands after it are dry-run against them."""
    assert not stdin and not call.args, f"{line}: -f URL must be the only source"
    assert call.namespace, f"{line}: no -n/--namespace for the manifest's objects"
    assert call.source in UPSTREAM_MANIFESTS, f"{line}: not a known upstream manifest"
    for obj in UPSTREAM_MANIFESTS[call.source]:
        status, reply = cluster.apply(obj, dry_run=False, namespace=call.namespace)
        assert status in (200, 201), f"{line}: {obj['kind']}: HTTP {status}: {reply}"
        meta = reply["metadata"]
        seeded.accepted[(reply["kind"], meta["namespace"], meta["name"])] = reply


# What `kubectl rollout restart` sends: a new pod-template annotation.
RESTART_PATCH = {
    "spec": {
        "template": {
            "metadata": {
                "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
            }
        }
    }
}


def submit_kubectl(cluster: Cluster, seeded: Seeded, line: str, stdin: str = "") -> None:
    words = shlex.split(line.split(" | ")[0], comments=True)
    call = parse_kubectl(words)
    ns = call.namespace
    if call.verb == "apply" and call.source.startswith("https://"):
        apply_upstream(cluster, seeded, call, line, stdin)
        return
    if call.verb in ("apply", "replace") or (call.verb == "create" and "f" in call.flags):
        submit_manifests(cluster, call, line, stdin)
        return
    assert not stdin, f"{line}: kubectl {call.verb} does not read a here-document"
    if call.verb == "create":  # `create configmap|quota NAME ...`, `create secret generic`
        namespace = ns or "default"
        if call.args[0] in ("quota", "resourcequota"):  # `--hard=K=V,K=V`, as kubectl builds it
            hard = dict(item.split("=", 1) for item in call.flags["hard"].split(","))
            body: dict[str, Any] = {"kind": "ResourceQuota", "spec": {"hard": hard}}
            name, plural = call.args[1], "resourcequotas"
        elif call.args[0] == "configmap":
            key = call.flags["from-file"].split("=", 1)[0]
            body = {"kind": "ConfigMap", "data": {key: ""}}
            name, plural = call.args[1], "configmaps"
        else:
            assert call.args[:2] == ["secret", "generic"], f"unexpected kubectl create: {line}"
            key, _, value = call.flags["from-literal"].partition("=")
            body = {"kind": "Secret", "stringData": {key: value}}
            name, plural = call.args[2], "secrets"
        body |= {"apiVersion": "v1", "metadata": {"name": name, "namespace": namespace}}
        cluster.ensure_namespace(namespace)
        path = f"/api/v1/namespaces/{namespace}/{plural}"
        status, reply = cluster.dry_run("POST", path, body)
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
    query = {
        k: v
        for k, v in (
            ("labelSelector", call.flags.get("l")),
            ("fieldSelector", call.flags.get("field-selector")),
        )
        if v
    }
    if call.verb in ("get", "describe", "edit", "logs"):
        if call.switches & {"A", "all-namespaces"}:
            path = api.path("", name)
        status, reply = cluster.call(
            "GET", f"{path}?{urllib.parse.urlencode(query)}" if query else path
        )
        assert status == 200, f"{line}: HTTP {status}: {reply}"
        return
    if call.verb == "rollout restart" and not name:  # `-l SELECTOR`: every match restarts
        assert query, f"{line}: rollout restart needs a name or a selector"
        status, listing = cluster.call("GET", f"{path}?{urllib.parse.urlencode(query)}")
        assert status == 200, f"{line}: HTTP {status}: {listing}"
        assert listing["items"], f"{line}: the selector matches no object (kubectl errors)"
        for item in listing["items"]:
            one = api.path(ns or "default", item["metadata"]["name"])
            status, reply = cluster.dry_run("PATCH", one, RESTART_PATCH, STRATEGIC_PATCH)
            assert status == 200, f"{line}: {one}: HTTP {status}: {reply}"
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
        body, content_type = RESTART_PATCH, STRATEGIC_PATCH
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
    elif call.verb == "delete":  # by name, or every object the selectors match
        selected = f"{path}?{urllib.parse.urlencode(query)}" if query and not name else path
        status, reply = cluster.dry_run("DELETE", selected)
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
        if word in ("-n", "--namespace", "--set", "--version", "-f", "--values", "--repo"):
            next(it)
        elif not word.startswith("-"):
            positional.append(word)
    wanted = 1 if words[1] == "uninstall" else 2
    assert len(positional) == wanted, f"expected {wanted} positional arguments: {line}"
    if words[1] != "uninstall":
        # CHART is repo/chart, or a bare chart name with `--repo URL` ("chart repository url
        # where to locate the requested chart", `helm upgrade --help`, helm v4.3.2).
        with_repo = any(w == "--repo" or w.startswith("--repo=") for w in words)
        assert "/" in positional[1] or with_repo, f"no chart reference in: {line}"


def submit_commands(cluster: Cluster, finding: Finding, seeded: Seeded) -> None:
    for line, stdin in command_lines(finding.remediation):
        assert line.startswith(("kubectl ", "helm ")), f"mixes commands with other text: {line}"
        if line.startswith("helm "):
            assert not stdin, f"{line}: unexpected here-document"
            check_helm(line)
        else:
            submit_kubectl(cluster, seeded, line, stdin)


# --------------------------------------------------------------------------- the test


# Fixture objects the apiserver refuses, where that is what the check finds: a remediation
# for them is checked by creating the fixed object under a new name (dry-run). (Without
# strict field validation the apiserver would accept the Prometheus and silently drop the
# field: the manifest still does not mean what it says.)
INVALID_BY_DESIGN: dict[str, dict[ObjectKey, str]] = {
    "GPU-WL-001/fail-fractional-and-request-only": {
        ("Deployment", "ml", "half-gpu"): "a fractional GPU limit",
        ("Job", "ml", "request-only"): "a GPU request without a limit",
    },
    "GPU-WL-001/fail-request-differs-from-limit": {
        ("Pod", "ml", "mismatch"): "a GPU request different from its limit",
    },
    "GPU-WL-001/fail-non-gpu-extended-resource": {
        ("Pod", "ml", "rdma-helper"): "an RDMA (extended resource) request without a limit",
    },
    "GPU-QUOTA-003/fail-min-only-rejects-containers": {
        ("LimitRange", "team-c", "gpu-cap"): "a GPU max (copied to default) with defaultRequest 0",
    },
    "GPU-MON-004/fail-match-names-namespace-selector": {
        ("Prometheus", "monitoring", "k8s"): "matchNames, not a LabelSelector field",
    },
}


def findings_of(fixture: Path) -> Iterator[Finding]:
    run = run_check(CHECKS[fixture.parent.name], load_files([str(fixture)]))
    yield from run.findings


@pytest.mark.parametrize("fixture", FAIL_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_remediations_pass_a_server_side_dry_run(
    fixture: Path, kube_request: KubeRequest, discovery: Discovery
) -> None:
    cluster = Cluster(kube_request, discovery)
    found = list(findings_of(fixture))
    assert found, "a fail fixture must produce findings"
    with seeded_fixture(cluster, fixture) as seeded:
        expected = INVALID_BY_DESIGN.get(f"{fixture.parent.name}/{fixture.stem}", {})
        assert seeded.rejected.keys() == expected.keys(), (
            f"the apiserver rejected fixture objects: {seeded.rejected}"
        )
        for finding in found:
            if is_command(finding.remediation):
                submit_commands(cluster, finding, seeded)
            else:
                submit_yaml(cluster, finding, seeded)
