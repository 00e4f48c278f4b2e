"""What a finding's remediation asks of the files: edits of the object it names, new
objects, commands to run by hand, or a TODO when it needs a value gpu-audit cannot know.

The rendered remediation (gpu_audit.engine.render_remediation) is read section by section
(`---` lines): a YAML mapping without apiVersion/kind is a patch of the finding's object, one
with them is that object, another object to change, or a new object; `kubectl patch` lines of
the finding's object (`--type=merge` or `--type=json`) are patches too; other commands are
listed. A section after the first that opens with "# or ..." is another way to the same end,
left out: the first way is applied. Any <placeholder> (or a REDACTED value) makes the fix a
TODO, and so do the values a check gives only as examples to choose (CHOSEN).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpu_audit.engine import Finding
from gpu_audit.fix.documents import is_comment
from gpu_audit.k8s.kinds import KNOWN_KINDS, resource_type
from gpu_audit.model import Check, ObjRef

_SEPARATOR = re.compile(r"^---\s*$")
_ALTERNATIVE = re.compile(r"^#\s*or\b", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"<[^<>\s=][^<>=]*>")
_COMMAND = re.compile(r"^\s*(kubectl|helm)\s")

# Remediations whose values are examples for the reader to choose, not facts of the input:
# written into a file they would invent a value. check id -> (the fields that hold such a
# value, or () for every form of the check's remediation; what has to be chosen).
CHOSEN: Mapping[str, tuple[tuple[str, ...], str]] = {
    "GPU-HPA-001": ((), "the metric name the metrics adapter exposes and its target"),
    "GPU-HPA-004": ((), "the scale target and the replica range the GPUs you can get allow"),
    "GPU-COST-003": (("limits",), "the node pool's GPU and CPU budget"),
    "GPU-DIST-005": (("persistentVolumeClaim",), "the durable volume to checkpoint to"),
    "GPU-SRV-002": (("persistentVolumeClaim",), "where the model repository lives"),
    "GPU-SHARE-002": ((), "the sharing configuration (replicas, the resources to share)"),
    "GPU-WL-003": (("sizeLimit",), "the size of the memory-backed /dev/shm"),
    "GPU-WL-007": (("memory",), "the container's memory request and limit"),
    "GPU-STO-004": (("sizeLimit",), "the volume's size"),
    "GPU-QUOTA-002": (("value",), "the new PriorityClass's value among the cluster's classes"),
    "GPU-DIST-004": (
        ("activeDeadlineSeconds", "backoffLimit"),
        "the job's runtime and retry bounds",
    ),
}


@dataclass(frozen=True, slots=True)
class Merge:
    """A strategic-merge patch of an object."""

    target: ObjRef
    patch: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class JsonPatch:
    target: ObjRef
    operations: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Create:
    """A new object, written after the finding's object in its file."""

    ref: ObjRef
    manifest: Mapping[str, Any]


Edit = Merge | JsonPatch | Create


@dataclass
class Plan:
    """What one finding's remediation comes to: `todo` says why it cannot be applied."""

    edits: list[Edit] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    alternatives: int = 0
    todo: str = ""


def _sections(text: str) -> list[list[str]]:
    sections: list[list[str]] = [[]]
    for line in text.splitlines():
        if _SEPARATOR.match(line):
            sections.append([])
        else:
            sections[-1].append(line)
    return sections


def _strings(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _same_kind(token: str, ref: ObjRef) -> bool:
    """Whether kubectl's resource word (`pod`, `pods`, `pytorchjobs.kubeflow.org`) names the
    kind of `ref`."""
    info = KNOWN_KINDS.get(ref.kind)
    names = {ref.kind_name.lower(), ref.kind_name.lower() + "s", info.plural if info else ""}
    return token.split(".", 1)[0].lower() in names


def _kubectl_patch(line: str, ref: ObjRef) -> JsonPatch | Merge | None:
    """`kubectl [-n NS] patch KIND/NAME|KIND NAME [-n NS] --type=merge|json -p 'JSON'` of the
    finding's object as an edit; None for any other command."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if "patch" not in words:
        return None
    rest = words[words.index("patch") + 1 :]
    positional: list[str] = []
    options: dict[str, str] = {}
    index = 0
    while index < len(rest):
        word = rest[index]
        if word.startswith("--") and "=" in word:
            key, value = word.split("=", 1)
            options[key] = value
        elif word.startswith("-") and index + 1 < len(rest):
            options[word] = rest[index + 1]
            index += 1
        else:
            positional.append(word)
        index += 1
    if len(positional) == 1 and "/" in positional[0]:
        positional = positional[0].split("/", 1)
    body = options.get("-p", options.get("--patch"))
    kind = options.get("--type", "strategic")
    if len(positional) != 2 or body is None or not _same_kind(positional[0], ref):
        return None
    if positional[1] != ref.name:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if kind == "json" and isinstance(data, list) and all(isinstance(o, dict) for o in data):
        return JsonPatch(ref, tuple(data))
    if kind in ("merge", "strategic") and isinstance(data, dict):
        return Merge(ref, data)
    return None


def plan_finding(check: Check, finding: Finding, existing: frozenset[ObjRef]) -> Plan:
    """The plan of one finding; `existing` is every object of the input."""
    ref = finding.result.ref
    plan = Plan()
    # A pod-spec fragment on a template is a patch of a built-in kind's object (the engine
    # nests it under the template's path); a custom resource's comes as a JSON patch command,
    # or, when its kind has no field for the fix, as the bare fragment, a patch of nothing.
    fragment = (
        check.remediation.root == "pod_spec"
        and bool(finding.result.pod_spec_path)
        and "." in ref.kind
    )
    for index, lines in enumerate(_sections(finding.remediation)):
        opening = next((ln.strip() for ln in lines if ln.strip()), "")
        code = [ln for ln in lines if not is_comment(ln)]
        if index and _ALTERNATIVE.match(opening):  # "# or ...": another way, not a next step
            plan.alternatives += 1
            continue
        mentioned = (ln.strip().lstrip("#").strip().removeprefix("then:").strip() for ln in lines)
        plan.commands.extend(
            m
            for m, ln in zip(mentioned, lines, strict=True)
            if is_comment(ln) and _COMMAND.match(m)
        )
        if not code:
            continue
        if _COMMAND.match(code[0]) or "<<" in code[0]:
            _commands(plan, code, ref)
            continue
        _manifest(plan, "\n".join(lines), ref, existing, fragment)
    fields, what = CHOSEN.get(check.id, (None, ""))
    if fields is not None and plan.edits and (not fields or _names(plan.edits, fields)):
        plan.todo = f"its values are examples to choose: {what}"
    if plan.todo:
        plan.edits.clear()
    return plan


def _keys(value: Any) -> set[str]:
    if isinstance(value, Mapping):
        return {str(k) for k in value} | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def _written(edit: Edit) -> Any:
    if isinstance(edit, Create):
        return edit.manifest
    if isinstance(edit, Merge):
        return edit.patch
    return [op.get("value") for op in edit.operations]


def _names(edits: list[Edit], fields: tuple[str, ...]) -> bool:
    """Whether an edit of `edits` writes one of `fields` (a key of what it writes, or the
    last step of a JSON patch operation's path: .../limits/memory)."""
    ends = {
        str(op.get("path", "")).rsplit("/", 1)[-1]
        for e in edits
        if isinstance(e, JsonPatch)
        for op in e.operations
    }
    return bool((ends | set().union(*(_keys(_written(e)) for e in edits))) & set(fields))


def _commands(plan: Plan, code: list[str], ref: ObjRef) -> None:
    # Continued lines (a trailing backslash, or a quoted word still open: a JSON patch one
    # operation a line) are one command.
    joined: list[str] = []
    for line in code:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
        elif joined and not _complete(joined[-1]):
            joined[-1] += "\n" + line
        else:
            joined.append(line.strip())
    if any("<<" in line for line in joined):  # a here-document: the whole text is one command
        plan.commands.append("\n".join(code))
        return
    for line in joined:
        edit = _kubectl_patch(line, ref)
        if edit is not None:
            plan.edits.append(edit)
        else:
            plan.commands.append(line)
    if any(_PLACEHOLDER.search(c) for c in plan.commands):
        plan.todo = "its commands need values gpu-audit cannot know"
    unknown = sorted(
        {
            m.group(0)
            for e in plan.edits
            for s in _strings(_written(e))
            for m in _PLACEHOLDER.finditer(s)
        }
    )
    if unknown and not plan.todo:
        plan.todo = f"it needs a value gpu-audit cannot know: {', '.join(unknown)}"


def _complete(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:  # No closing quotation
        return False
    return True


def _manifest(
    plan: Plan, text: str, ref: ObjRef, existing: frozenset[ObjRef], fragment: bool
) -> None:
    try:  # read as kubectl reads it (YAML 1.1: 0400 is octal, yes is true)
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        plan.todo = "the remediation is not YAML that can be applied"
        return
    if not isinstance(data, dict):
        plan.todo = "the remediation is not a YAML mapping"
        return
    unknown = sorted({m.group(0) for s in _strings(data) for m in _PLACEHOLDER.finditer(s)})
    if unknown:
        plan.todo = f"it needs a value gpu-audit cannot know: {', '.join(unknown)}"
        return
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if not (isinstance(api_version, str) and isinstance(kind, str)):
        if fragment:
            plan.todo = "it is a pod-spec fragment that no field of this kind takes as it is"
        else:
            plan.edits.append(Merge(ref, data))
        return
    found = data.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    name = str(metadata.get("name", ""))
    namespace = str(metadata.get("namespace") or "")
    body = {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
    if kind == ref.kind_name and name == ref.name:  # the finding's object, written whole
        plan.edits.append(Merge(ref, body))
        return
    other = ObjRef(resource_type(api_version, kind), namespace, name)
    defaulted = ObjRef(other.kind, namespace or "default", name)  # kubectl's namespace
    target = next((r for r in (other, defaulted) if r in existing), None)
    plan.edits.append(Merge(target, body) if target else Create(other, data))
