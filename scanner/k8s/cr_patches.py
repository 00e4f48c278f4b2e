"""Pod-spec fixes of custom resources, as RFC 6902 JSON patches of the object in the input.

A check writes a pod-spec fix once, as a strategic-merge fragment of a pod spec (containers and
env merged by name, volumes by name, volumeMounts by mountPath). Built-in kinds take it as it
is: `kubectl patch` sends a strategic merge patch. A custom resource cannot: "Strategic merge
patch is not supported for custom resources" (https://kubernetes.io/docs/reference/kubectl/
generated/kubectl_patch/; the apiserver has no patchMergeKey for unstructured objects,
kubernetes/kubernetes#53558), and a JSON merge patch (RFC 7386) replaces every list it names
whole, so `containers: [{name: x, resources: ...}]` written at a custom resource's path drops
the container's image and command (tests/live/test_cr_remediation_acceptance.py shows it).
Server-side apply merges only the lists a CRD declares x-kubernetes-list-type: map: in
../shared/crds the KubeRay, JobSet, LeaderWorkerSet, Kubeflow, Volcano and Trainer CRDs do for
containers, env, volumes and volumeMounts, but not the Notebook, KServe and Knative containers,
the NIMService env or the SparkApplication volumes, and tolerations are atomic in all of them
(https://kubernetes.io/docs/reference/using-api/server-side-apply/#merge-strategy).

So the fragment is merged, with the strategic-merge rules, into the object the input holds, and
the difference is written as a JSON patch (RFC 6902) with concrete list indices. Each index the
patch goes through is guarded by a `test` operation on the item's name (or group name, or image
when it has no name): if the list changed since the scan, the whole patch fails and changes
nothing, instead of changing the wrong item (RFC 6902 section 5: a patch is atomic).

Where an operator builds the pod from fields of its own rather than a pod template, the fix is
written in those fields:
- NIMService (k8s-nim-operator api/apps/v1alpha1/nimservice_types.go): the NIM container's
  resources, env, command and args at spec.<field>; its image at spec.image.{repository,tag};
  its probes at spec.<probe>.probe (with enabled: true); /dev/shm is always a memory-backed
  emptyDir the operator mounts, sized by spec.storage.sharedMemorySizeLimit (GetVolumes);
  nodeSelector, tolerations, affinity, runtimeClassName, schedulerName, priorityClassName at
  spec.<field>; sidecar and init containers at spec.sidecarContainers[i] / initContainers[i].
- SparkApplication (kubeflow/spark-operator api/v1beta2 SparkPodSpec, internal/webhook/
  sparkpod_defaulter.go): the Spark container's GPU at spec.<role>.gpu {name, quantity}
  (addGPU), CPU at cores / coreRequest / coreLimit, memory limit at memoryLimit, env, image,
  volumeMounts, ports, securityContext, lifecycle at spec.<role>; volumes at spec.volumes (the
  webhook adds those a role's volumeMounts name, addVolumes); the pod's securityContext at
  podSecurityContext, its service account at serviceAccount, other pod fields the SparkPodSpec
  has at spec.<role>.<field>, the rest in the pod template spec.<role>.template.spec (Spark
  >= 3.0, https://spark.apache.org/docs/latest/running-on-kubernetes.html#pod-template).
- TrainJob (kubeflow/trainer pkg/runtime/framework/plugins/jobset/builder.go): the trainer's
  `node` container's resources at spec.trainer.resourcesPerNode, its env, image, command and
  args at spec.trainer; everything else in a spec.runtimePatches entry (a new one, managed by
  gpu-audit, when the TrainJob has none for the replicated job).
- KServe: the model container's fields at spec.<component>.model (kserve.py).
A fix these fields cannot express is left as the pod-spec fragment, with the reason
(UnpatchableError).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_audit.k8s.gpu_resources import is_gpu_resource
from gpu_audit.k8s.kubeflow_trainer import TRAIN_JOB
from gpu_audit.k8s.nim import NIM_SERVICE
from gpu_audit.k8s.nim import SHM as NIM_SHM
from gpu_audit.k8s.objects import as_list, as_mapping
from gpu_audit.k8s.pods import Container, PodTemplate
from gpu_audit.k8s.spark import SPARK_APPLICATION
from gpu_audit.model import Resource

Token = str | int
Pointer = tuple[Token, ...]
_MISSING: Any = object()

# The lists of a pod spec a strategic merge patch merges item by item: the patchMergeKey of
# each field in k8s.io/api core/v1 types.go. Other lists are replaced, except the two below.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "sidecarContainers": "name",
    "sidecars": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "volumeDevices": "devicePath",
}
# Replaced whole by a strategic merge patch, but what a fix of them means is "also this one":
# a toleration is added beside the others; a nodeSelectorTerm's expressions are ANDed into
# every existing term (terms are ORed: a new term would widen the placement).
_APPENDED = "tolerations"
_TERMS = "nodeSelectorTerms"
ADDITIVE_LISTS = frozenset({_APPENDED, _TERMS})
# Items of the lists a template path goes through, by the field that names them.
_IDENTITY = ("name", "groupName", "image")

TRAINJOB_PATCH_MANAGER = "gpu-audit.dev/remediation"
_SPARK_ROLE_FIELDS = frozenset(
    {
        "tolerations",
        "nodeSelector",
        "affinity",
        "hostNetwork",
        "dnsConfig",
        "terminationGracePeriodSeconds",
        "priorityClassName",
        "schedulerName",
        "shareProcessNamespace",
        "hostAliases",
    }
)
_SPARK_RENAMED = {"securityContext": "podSecurityContext", "serviceAccountName": "serviceAccount"}
_SPARK_CONTAINER_FIELDS = frozenset(
    {"env", "envFrom", "image", "volumeMounts", "ports", "securityContext", "lifecycle"}
)
_NIM_POD_FIELDS = frozenset(
    {
        "nodeSelector",
        "tolerations",
        "affinity",
        "runtimeClassName",
        "schedulerName",
        "priorityClassName",
    }
)
_NIM_CONTAINER_FIELDS = frozenset({"resources", "env", "command", "args"})
_NIM_EXTRA_FIELDS = frozenset({"env", "command", "args", "workingDir"})
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_TRAINER_FIELDS = frozenset({"env", "image", "command", "args"})


# Fields a kind's CRD declares immutable (x-kubernetes-validations `self == oldSelf`): a fix
# there recreates the object. TrainJob (trainer.kubeflow.org_trainjobs.yaml, kubeflow/trainer
# 8c0f5059bd51): spec.trainer, initializer, runtimeRef, activeDeadlineSeconds, and in a
# runtimePatches entry the pod's containers, initContainers, volumes, imagePullSecrets,
# securityContext, serviceAccountName and terminationGracePeriodSeconds ("*": any list index).
_PATCH_POD: tuple[str, ...] = ("spec", "runtimePatches", "*", "trainingRuntimeSpec")
_PATCH_POD += ("template", "spec", "replicatedJobs", "*", "template", "spec", "template", "spec")
IMMUTABLE: dict[str, tuple[tuple[str, ...], ...]] = {
    TRAIN_JOB: (
        ("spec", "trainer"),
        ("spec", "initializer"),
        ("spec", "runtimeRef"),
        ("spec", "activeDeadlineSeconds"),
        *(
            (*_PATCH_POD, name)
            for name in (
                "containers",
                "initContainers",
                "volumes",
                "imagePullSecrets",
                "securityContext",
                "serviceAccountName",
                "terminationGracePeriodSeconds",
            )
        ),
    )
}


def immutable_field(kind: str, operations: Sequence[Mapping[str, Any]]) -> str:
    """The first immutable field of `kind` an operation changes (a JSON pointer), or ""."""
    for op in operations:
        if op["op"] == "test":
            continue
        parts = str(op["path"]).split("/")[1:]
        for field_path in IMMUTABLE.get(kind, ()):
            if len(parts) >= len(field_path) and all(
                want in ("*", got) for want, got in zip(field_path, parts, strict=False)
            ):
                return "/" + "/".join(parts[: len(field_path)])
    return ""


class UnpatchableError(ValueError):
    """The fix cannot be written into this kind's fields (the message says why)."""


@dataclass
class JsonPatch:
    """The operations of one patch: the guarding tests first, then the changes, then the
    removals of list items from the last index down (so that no removal moves another's)."""

    tests: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    removals: list[tuple[Pointer, dict[str, Any]]] = field(default_factory=list)

    def test(self, at: Pointer, value: Any) -> None:
        op = {"op": "test", "path": pointer(at), "value": value}
        if op not in self.tests:
            self.tests.append(op)

    def change(self, op: str, at: Pointer, value: Any = _MISSING) -> None:
        entry: dict[str, Any] = {"op": op, "path": pointer(at)}
        if value is not _MISSING:
            entry["value"] = value
        self.changes.append(entry)

    def remove_item(self, at: Pointer) -> None:
        self.removals.append((at, {"op": "remove", "path": pointer(at)}))

    def operations(self) -> list[dict[str, Any]]:
        ordered = sorted(self.removals, key=lambda r: r[0][-1], reverse=True)
        return [*self.tests, *self.changes, *(op for _, op in ordered)]


def pointer(tokens: Pointer) -> str:
    """A JSON pointer (RFC 6901): `~` as `~0`, `/` as `~1` (nvidia.com/gpu)."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def dotted(path: str) -> Pointer:
    """A result path (`spec.workerGroupSpecs[0].template.spec`) as pointer tokens."""
    out: list[Token] = []
    for part in path.split(".") if path else []:
        name, _, rest = part.partition("[")
        if name:
            out.append(name)
        out.extend(int(index.rstrip("]")) for index in (rest.split("[") if rest else []))
    return tuple(out)


def json_pointer(path: str) -> str:
    """A result path (`spec.template.spec`, `...nodeSelectorTerms[0]`) as a JSON pointer."""
    return pointer(dotted(path))


def at(obj: Any, tokens: Pointer) -> Any:
    """The value at `tokens` in `obj`, _MISSING when absent."""
    node = obj
    for token in tokens:
        if isinstance(token, int):
            if not isinstance(node, list | tuple) or token >= len(node):
                return _MISSING
            node = node[token]
        elif isinstance(node, Mapping) and token in node:
            node = node[token]
        else:
            return _MISSING
    return node


def plain(value: Any) -> Any:
    """A fragment value as it is written into the object: nulls and `$patch` directives out."""
    if isinstance(value, Mapping):
        return {
            str(k): plain(v)
            for k, v in value.items()
            if v is not None and not str(k).startswith("$")
        }
    if isinstance(value, list | tuple):
        return [plain(v) for v in value if not _deleted(v)]
    return value


def _deleted(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("$patch") == "delete"


# --------------------------------------------------------------------------- merging


def merge(patch: JsonPatch, obj: Mapping[str, Any], tokens: Pointer, value: Any, key: str) -> None:
    """The operations that merge `value` (a strategic-merge fragment) into the object at
    `tokens`; `key` is the field's name (which decides how a list merges)."""
    base = at(obj, tokens)
    if value is None:
        if base is not _MISSING:
            patch.change("remove", tokens)
        return
    if base is _MISSING:
        patch.change("add", tokens, plain(value))
        return
    if isinstance(value, Mapping) and isinstance(base, Mapping):
        for name, item in value.items():
            if not str(name).startswith("$"):
                merge(patch, obj, (*tokens, str(name)), item, str(name))
        return
    if isinstance(value, list) and isinstance(base, list | tuple):
        _merge_list(patch, obj, tokens, value, list(base), key)
        return
    if plain(value) != base:
        patch.change("replace", tokens, plain(value))


def _merge_list(
    patch: JsonPatch,
    obj: Mapping[str, Any],
    tokens: Pointer,
    items: list[Any],
    base: list[Any],
    key: str,
) -> None:
    merge_key = MERGE_KEYS.get(key)
    if merge_key:
        for item in map(as_mapping, items):
            wanted = item.get(merge_key)
            index = next(
                (i for i, old in enumerate(base) if as_mapping(old).get(merge_key) == wanted),
                None,
            )
            if index is None:
                if not _deleted(item):
                    patch.change("add", (*tokens, "-"), plain(item))
                continue
            patch.test((*tokens, index, merge_key), wanted)
            if _deleted(item):
                patch.remove_item((*tokens, index))
            elif key == "volumes":  # retainKeys: a volume's source is replaced, not merged
                if plain(item) != base[index]:
                    patch.change("replace", (*tokens, index), plain(item))
            else:
                for name, value in item.items():
                    if name != merge_key and not str(name).startswith("$"):
                        merge(patch, obj, (*tokens, index, str(name)), value, str(name))
        return
    if key == _APPENDED:
        for item in map(plain, items):
            if item not in base:
                patch.change("add", (*tokens, "-"), item)
        return
    if key == _TERMS and base:
        for index, term in enumerate(map(as_mapping, base)):
            for section in ("matchExpressions", "matchFields"):
                added = [e for t in items for e in as_list(as_mapping(t).get(section))]
                for expression in map(plain, added):
                    if section not in term:
                        patch.change("add", (*tokens, index, section), [expression])
                        term = {**term, section: [expression]}
                    elif expression not in as_list(term.get(section)):
                        patch.change("add", (*tokens, index, section, "-"), expression)
        return
    if plain(items) != base:
        patch.change("replace", tokens, plain(items))


def guard_path(patch: JsonPatch, obj: Mapping[str, Any], tokens: Pointer) -> None:
    """A test of each list item `tokens` goes through, by the field that names it."""
    for depth, token in enumerate(tokens):
        if not isinstance(token, int):
            continue
        item = as_mapping(at(obj, tokens[: depth + 1]))
        name = next((f for f in _IDENTITY if item.get(f) and isinstance(item[f], str)), "")
        if name:
            patch.test((*tokens[: depth + 1], name), item[name])


# --------------------------------------------------------------------------- placing


@dataclass(frozen=True, slots=True)
class Placement:
    """Part of a fragment, merged at `tokens` of the object; `key` names the field there."""

    tokens: Pointer
    value: Any
    key: str


def json_patch(
    resource: Resource, template: PodTemplate, fragment: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The JSON patch operations that apply `fragment` (a pod-spec fix of `template`) to
    `resource`. Raises UnpatchableError when the kind has no field for a part of the fix."""
    obj = resource.raw
    patch = JsonPatch()
    for placement in _placements(resource, template, fragment):
        tokens, value = _existing_parent(obj, placement.tokens, placement.value)
        guard_path(patch, obj, tokens)
        merge(patch, obj, tokens, value, placement.key if tokens == placement.tokens else "")
    operations = patch.operations()
    if not any(op["op"] != "test" for op in operations):
        raise UnpatchableError(f"{resource.ref} already has what the fix writes")
    return operations


def _existing_parent(obj: Mapping[str, Any], tokens: Pointer, value: Any) -> tuple[Pointer, Any]:
    """`value` at `tokens`, moved up to the first parent the object has (`add` needs the
    parent): spec.executor.template.spec.runtimeClassName without a template becomes the
    template {spec: {runtimeClassName}}."""
    while len(tokens) > 1 and at(obj, tokens[:-1]) is _MISSING:
        if isinstance(tokens[-1], int) or tokens[-1] == "-":
            raise UnpatchableError(f"{pointer(tokens[:-1])} is not in the object")
        tokens, value = tokens[:-1], {tokens[-1]: value}
    return tokens, value


def _placements(
    resource: Resource, template: PodTemplate, fragment: Mapping[str, Any]
) -> list[Placement]:
    kind = resource.ref.kind
    if kind == TRAIN_JOB:
        return _trainjob_placements(resource, template, fragment)
    base = dotted(template.path)
    out: list[Placement] = []
    pod_fields: dict[str, Any] = {}
    for key, value in fragment.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            for item in map(as_mapping, value):
                found = _located(resource, template, str(key), item)
                out.extend(_container(resource, template, found, item))
        else:
            pod_fields[str(key)] = value
    if kind == NIM_SERVICE:
        out.extend(_nim_pod(base, pod_fields, fragment))
    elif kind == SPARK_APPLICATION:
        out.extend(_spark_pod(base, pod_fields))
    else:
        out.extend(Placement((*base, k), v, k) for k, v in pod_fields.items())
    return out


def _located(
    resource: Resource, template: PodTemplate, section: str, item: Mapping[str, Any]
) -> Container:
    name = str(item.get("name", ""))
    if _deleted(item):
        raise UnpatchableError(f"removing container {name} is not a patch this fix writes")
    init = section == "initContainers"
    found = next((c for c in template.containers() if (c.name, c.init) == (name, init)), None)
    if found is None:
        raise UnpatchableError(f"{resource.ref} has no {section[:-1]} {name}")
    return found


def _container(
    resource: Resource, template: PodTemplate, found: Container, item: Mapping[str, Any]
) -> list[Placement]:
    name = found.name
    fields = {k: v for k, v in item.items() if k != "name"}
    tokens = dotted(found.path)
    kind = resource.ref.kind
    if found.path == template.path:  # written inline, beside the pod-level fields
        if kind == NIM_SERVICE and name == template.inline_container:
            return _nim_container(tokens, fields)
        if kind == SPARK_APPLICATION and name == template.inline_container:
            return _spark_container(tokens, fields)
        raise UnpatchableError(f"{resource.ref} does not write container {name} in its spec")
    if isinstance(tokens[-1], int):
        raw = at(resource.raw, tokens)
        if not isinstance(raw, Mapping) or raw.get("name") not in (None, "", name):
            raise UnpatchableError(f"{resource.ref}: {found.path} is not container {name}")
    if kind == NIM_SERVICE:  # spec.sidecarContainers[i], initContainers[i]: NIMContainerSpecs
        return _nim_extra_container(tokens, fields)
    return [Placement(tokens, fields, "")]


def _nim_container(base: Pointer, fields: Mapping[str, Any]) -> list[Placement]:
    spec = base
    out = []
    for key, value in fields.items():
        if key in _NIM_CONTAINER_FIELDS:
            out.append(Placement((*spec, key), value, key))
        elif key == "image" and isinstance(value, str):
            repository, tag = _split_image(value)
            out.append(Placement((*spec, "image"), {"repository": repository, "tag": tag}, ""))
        elif key in _PROBES:
            out.append(Placement((*spec, key), {"enabled": True, "probe": value}, key))
        elif key == "volumeMounts" and all(
            as_mapping(m).get("mountPath") == NIM_SHM for m in as_list(value)
        ):
            continue  # the operator mounts its memory-backed dshm at /dev/shm itself
        else:
            raise UnpatchableError(f"a NIMService has no field for its container's {key}")
    return out


def _nim_extra_container(item: Pointer, fields: Mapping[str, Any]) -> list[Placement]:
    """A NIMService's init or sidecar container (NIMContainerSpec: name, image {repository,
    tag}, command, args, env, workingDir)."""
    out = []
    for key, value in fields.items():
        if key == "image" and isinstance(value, str):
            repository, tag = _split_image(value)
            out.append(Placement((*item, "image"), {"repository": repository, "tag": tag}, ""))
        elif key in _NIM_EXTRA_FIELDS:
            out.append(Placement((*item, key), value, key))
        else:
            raise UnpatchableError(f"a NIMService has no field for a sidecar's {key}")
    return out


def _split_image(image: str) -> tuple[str, str]:
    name, at_sign, digest = image.partition("@")
    if at_sign:
        return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name, digest
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = name.rsplit(":", 1)
        return repository, tag
    return name, "latest"


def _nim_pod(
    base: Pointer, fields: Mapping[str, Any], fragment: Mapping[str, Any]
) -> list[Placement]:
    shm_volumes = {
        str(as_mapping(m).get("name"))
        for c in as_list(fragment.get("containers"))
        for m in as_list(as_mapping(c).get("volumeMounts"))
        if as_mapping(m).get("mountPath") == NIM_SHM
    }
    out = []
    for key, value in fields.items():
        if key in _NIM_POD_FIELDS:
            out.append(Placement((*base, key), value, key))
            continue
        if key != "volumes":
            raise UnpatchableError(f"a NIMService has no field for the pod's {key}")
        for volume in map(as_mapping, as_list(value)):
            empty_dir = as_mapping(volume.get("emptyDir"))
            if volume.get("name") not in shm_volumes or empty_dir.get("medium") != "Memory":
                raise UnpatchableError("a NIMService has no field for a volume other than /dev/shm")
            size = empty_dir.get("sizeLimit")
            if size is not None:
                out.append(Placement((*base, "storage", "sharedMemorySizeLimit"), size, "storage"))
    return out


def _spark_container(role: Pointer, fields: Mapping[str, Any]) -> list[Placement]:
    out = []
    for key, value in fields.items():
        if key in _SPARK_CONTAINER_FIELDS:
            out.append(Placement((*role, key), value, key))
        elif key == "resources":
            out.extend(_spark_resources(role, as_mapping(value)))
        else:
            raise UnpatchableError(
                f"a SparkApplication has no field for the Spark container's {key}"
            )
    return out


def _spark_resources(role: Pointer, resources: Mapping[str, Any]) -> list[Placement]:
    """A container's resources as SparkPodSpec fields: GPU -> gpu {name, quantity} (a limit,
    addGPU), cpu -> coreRequest / coreLimit, the memory limit -> memoryLimit. The memory
    request is the JVM memory plus its overhead: a Spark setting, not a patchable field."""
    out = []
    limits, requests = as_mapping(resources.get("limits")), as_mapping(resources.get("requests"))
    for name in sorted({str(k) for k in (*limits, *requests) if is_gpu_resource(str(k))}):
        amount = limits.get(name, requests.get(name))
        if amount is None:
            out.append(Placement((*role, "gpu"), None, "gpu"))
            continue
        quantity = int(str(amount)) if str(amount).isdigit() else amount
        out.append(Placement((*role, "gpu"), {"name": name, "quantity": quantity}, "gpu"))
    if "cpu" in requests:
        out.append(Placement((*role, "coreRequest"), _text(requests["cpu"]), "coreRequest"))
    if "cpu" in limits:
        out.append(Placement((*role, "coreLimit"), _text(limits["cpu"]), "coreLimit"))
    if "memory" in limits:
        out.append(Placement((*role, "memoryLimit"), _text(limits["memory"]), "memoryLimit"))
    if "memory" in requests:
        raise UnpatchableError("a Spark pod's memory request is spark.<role>.memory plus overhead")
    left = {str(k) for k in (*limits, *requests)} - {"cpu", "memory"}
    if any(not is_gpu_resource(k) for k in left):
        raise UnpatchableError("a SparkApplication takes other resources through sparkConf")
    return out


def _text(value: Any) -> Any:
    return None if value is None else str(value)


def _spark_pod(role: Pointer, fields: Mapping[str, Any]) -> list[Placement]:
    out = []
    for key, value in fields.items():
        if key == "volumes":  # the webhook adds the volumes a role's volumeMounts name
            out.append(Placement(("spec", "volumes"), value, "volumes"))
        elif key in _SPARK_ROLE_FIELDS:
            out.append(Placement((*role, key), value, key))
        elif key in _SPARK_RENAMED:
            out.append(Placement((*role, _SPARK_RENAMED[key]), value, key))
        else:
            out.append(Placement((*role, "template", "spec", key), value, key))
    return out


def _trainjob_placements(
    resource: Resource, template: PodTemplate, fragment: Mapping[str, Any]
) -> list[Placement]:
    """The trainer's `node` container's resources, env, image, command and args at
    spec.trainer; everything else in the replicated job's runtimePatches entry."""
    trainer = ("spec", "trainer")
    out = []
    pod_fields = {k: v for k, v in fragment.items() if k not in ("containers", "initContainers")}
    for section in ("initContainers", "containers"):
        for item in map(as_mapping, as_list(fragment.get(section))):
            found = _located(resource, template, section, item)
            rest = {k: v for k, v in item.items() if k != "name"}
            if found.path == "spec.trainer":
                for key in [k for k in rest if k in _TRAINER_FIELDS or k == "resources"]:
                    value = rest.pop(key)
                    if key == "resources":
                        key = "resourcesPerNode"
                        value = {k: v for k, v in as_mapping(value).items() if k != "claims"}
                    out.append(Placement((*trainer, key), value, key))
            if rest:
                pod_fields.setdefault(section, []).append({"name": found.name, **rest})
    if pod_fields:
        out.append(_runtime_patch(resource, template, pod_fields))
    return out


def _runtime_patch(
    resource: Resource, template: PodTemplate, pod_fields: Mapping[str, Any]
) -> Placement:
    """Pod-spec fields of a TrainJob's replicated job, in its runtimePatches entry; a new
    entry (of the manager gpu-audit.dev/remediation) when it has none for the job."""
    tokens = dotted(template.path)
    if at(resource.raw, tokens) is not _MISSING:
        return Placement(tokens, pod_fields, "")
    pod = {"template": {"spec": {"template": {"spec": dict(pod_fields)}}}}
    entry = {
        "manager": TRAINJOB_PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": template.replica_type, **pod}]}}
        },
    }
    if at(resource.raw, ("spec", "runtimePatches")) is _MISSING:
        return Placement(("spec", "runtimePatches"), [entry], "")
    return Placement(("spec", "runtimePatches", "-"), entry, "")


# --------------------------------------------------------------------------- rendering


def patch_command(
    resource: Resource, resource_name: str, operations: Sequence[Mapping[str, Any]]
) -> str:
    """`kubectl patch <resource> <name> -n <ns> --type=json -p '[...]'`, one operation a line
    (a single-quoted shell word may span lines)."""
    return (
        f"kubectl patch {resource_name} {resource.ref.name}{_namespace(resource)} "
        f"--type=json -p {_quoted(operations)}"
    )


def recreate_command(
    resource: Resource, resource_name: str, operations: Sequence[Mapping[str, Any]]
) -> str:
    """The object read, patched locally and recreated (`kubectl replace --force` deletes it
    and creates the patched object): for a fix of an immutable field."""
    return (
        f"kubectl get {resource_name} {resource.ref.name}{_namespace(resource)} -o json \\\n"
        f"  | kubectl patch --local -f - --type=json -o json -p {_quoted(operations)} \\\n"
        "  | kubectl replace --force -f -"
    )


def _namespace(resource: Resource) -> str:
    return f" -n {resource.ref.namespace}" if resource.ref.namespace else ""


def _quoted(operations: Sequence[Mapping[str, Any]]) -> str:
    """The operations as one single-quoted shell word, one a line."""
    body = ",\n".join(f"  {json.dumps(op, ensure_ascii=False)}" for op in operations)
    return "'" + f"[\n{body}\n]".replace("'", "'\\''") + "'"
