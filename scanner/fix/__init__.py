"""`gpu-audit fix`: the remediations of a scan's findings applied to the YAML files the
objects came from.

    from gpu_audit.fix import FixOptions, run_fix

    result = run_fix(FixOptions(files=("manifests/",), only=("GPU-WL-003",)))
    print(result.diff())

Each finding's remediation is read into edits (gpu_audit.fix.plan), applied to the round-trip
documents of its file (gpu_audit.fix.documents, gpu_audit.fix.merge), and proven: the input
is scanned again with the changes, and a finding the changes do not resolve gets its edits
taken back and becomes a TODO (a `# TODO(gpu-audit <check>): ...` comment above the object,
and a line of the result). Objects rendered by Helm (the chart, release and template named),
built by Kustomize, of a Kustomize directory, or read from stdin are not changed in place:
the result says so for each finding and shows its patch as a kustomization's `patches:`
entry (for a Helm post-renderer, or the directory's kustomization).
Nothing is written: `FixResult.changes` holds each file's text before and after.
"""

from __future__ import annotations

import datetime as dt
import difflib
import io
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO, Any

import yaml
from ruamel.yaml.scalarstring import LiteralScalarString

from gpu_audit.declarative import load_check_dirs
from gpu_audit.engine import Finding, run_checks
from gpu_audit.errors import InputError
from gpu_audit.fix.documents import (
    TODO_PREFIX,
    NotEditableError,
    YamlFile,
    dump,
    opening_comments,
)
from gpu_audit.fix.merge import PatchError, json_patch, strategic_merge
from gpu_audit.fix.plan import Create, Edit, JsonPatch, Plan, plan_finding
from gpu_audit.model import Check, ObjRef, Resource, Severity
from gpu_audit.postscan.exemptions import apply_exemptions
from gpu_audit.registry import load_checks, select_checks
from gpu_audit.reports.terminal import printable
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN, STDIN_NAME, expand_paths, load_files

__all__ = ["FindingFix", "FixOptions", "FixResult", "Status", "render_notes", "run_fix"]

KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# What says an object was rendered by Helm: the labels of Helm's best practices
# (https://helm.sh/docs/chart_best_practices/labels/: helm.sh/chart, managed-by {{
# .Release.Service }}, instance {{ .Release.Name }}), the release annotation Helm sets on the
# objects it installs, and the `# Source: <chart>/templates/<file>` comment `helm template`
# writes above each object. Kustomize's output says so only when the kustomization asks for it
# (https://kubectl.docs.kubernetes.io/references/kustomize/kustomization/buildmetadata/:
# managedByLabel sets managed-by kustomize-<version>, originAnnotations the file it came from).
HELM_CHART = "helm.sh/chart"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_SOURCE = "# Source: "
INSTANCE = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"
KUSTOMIZE_ORIGIN = "config.kubernetes.io/origin"
POST_RENDERING = "https://helm.sh/docs/topics/advanced/#post-rendering"
TODO_CHARS = 160  # of the finding's message in a TODO comment


@dataclass(frozen=True, slots=True)
class FixOptions:
    """The inputs (files, directories, "-" for `stdin`) and which findings to fix."""

    files: tuple[str, ...]
    stdin: IO[str] | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    min_severity: Severity | None = None
    plugins: bool = True
    checks_dirs: tuple[str, ...] = ()


class Status(Enum):
    FIXED = "fixed"  # the file change resolves it (proven by a second scan)
    TODO = "todo"  # it needs a value or a decision gpu-audit cannot make
    NOT_EDITABLE = "not-editable"  # rendered by Helm, Kustomize, or read from stdin
    COMMAND = "command"  # not a file change: commands to run


@dataclass(frozen=True, slots=True)
class FindingFix:
    """What became of one finding. `shown` is what to change by hand (the remediation, or
    the Kustomize patch); `commands` are commands its remediation has to be run with."""

    check_id: str
    ref: ObjRef
    severity: Severity
    file: str
    status: Status
    reason: str = ""
    shown: str = ""
    commands: tuple[str, ...] = ()
    alternatives: int = 0  # other ways its remediation offers, not applied


@dataclass(frozen=True, slots=True)
class FixResult:
    fixes: tuple[FindingFix, ...]
    # (path, text before, text after) of each file that changes, in input order.
    changes: tuple[tuple[str, str, str], ...]
    # Findings the second scan reports and the first did not ("GPU-XXX-NNN Kind ns/name").
    introduced: tuple[str, ...] = ()

    def diff(self) -> str:
        """The changes as one unified diff (a/PATH, b/PATH), "" when nothing changes."""
        return "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for path, before, after in self.changes
            for line in difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                f"a/{path}",
                f"b/{path}",
            )
        )


@dataclass
class _Item:
    check: Check
    finding: Finding
    resource: Resource
    plan: Plan = field(default_factory=Plan)
    status: Status | None = None
    reason: str = ""
    as_kustomize_patch: bool = False  # not editable: its fix shown as a Kustomize patch

    @property
    def key(self) -> tuple[str, ObjRef]:
        return (self.check.id, self.finding.result.ref)

    @property
    def at(self) -> tuple[str, ObjRef, str, str]:
        """The finding itself: check, object, path and message."""
        return (*self.key, self.finding.result.path, self.finding.result.message)


def _read_stdin(options: FixOptions) -> str:
    if STDIN not in options.files:
        return ""
    return (options.stdin if options.stdin is not None else sys.stdin).read()


def _open_findings(
    checks: Iterable[Check], snapshot: Snapshot, registry: dict[str, Check]
) -> list[tuple[Check, Finding]]:
    runs, _ = apply_exemptions(
        run_checks(checks, snapshot), snapshot, registry, None, dt.datetime.now(dt.UTC).date()
    )
    return [(run.check, f) for run in runs for f in run.findings if f.exemption is None]


def _helm_release(resource: Resource, opening: list[str]) -> str:
    """The chart and release that rendered the object ("chart llm-0.3.1, release ml (template
    llm/templates/deployment.yaml)"), or "" when nothing in it says Helm rendered it."""
    labels, annotations = resource.labels, resource.annotations
    source = next((c.removeprefix(HELM_SOURCE) for c in opening if c.startswith(HELM_SOURCE)), "")
    helm = (
        HELM_CHART in labels
        or labels.get(MANAGED_BY, "").lower() == "helm"
        or HELM_RELEASE in annotations
        or "/templates/" in source
    )
    if not helm:
        return ""
    chart = labels.get(HELM_CHART) or source.split("/", 1)[0] or "unknown"
    release = annotations.get(HELM_RELEASE) or labels.get(INSTANCE)
    return (
        f"chart {chart}"
        + (f", release {release}" if release else "")
        + (f" (template {source})" if source else "")
    )


def _kustomize_build(resource: Resource) -> str:
    """Whether Kustomize built the object, as its build metadata says ("built by Kustomize
    from base/llm.yaml"), or "" when it says nothing."""
    origin = resource.annotations.get(KUSTOMIZE_ORIGIN)
    if origin is None and not resource.labels.get(MANAGED_BY, "").lower().startswith("kustomize"):
        return ""
    try:
        path = (yaml.safe_load(origin or "") or {}).get("path")
    except (yaml.YAMLError, AttributeError):
        path = None
    return "built by Kustomize" + (f" from {path}" if isinstance(path, str) else "")


def _not_editable(resource: Resource, texts: Mapping[str, str]) -> tuple[str, bool]:
    """Why `resource` cannot be changed in its file ("" when it can), and whether its fix is
    to be shown as a Kustomize patch (for Helm's and Kustomize's output and stdin)."""
    path = resource.source.file
    opening = opening_comments(texts[path], resource.source.document) if path in texts else []
    helm = _helm_release(resource, opening)
    if helm:
        return (
            f"rendered by Helm {helm}: set the chart's values (or change its templates) so "
            "that it renders this, then upgrade the release; or add this patch to the "
            f"kustomization of a Helm post-renderer ({POST_RENDERING})",
            True,
        )
    built = _kustomize_build(resource)
    if built:
        return f"{built}: add this patch to its kustomization's `patches:`", True
    if path == STDIN_NAME:
        return "read from stdin (Helm or Kustomize output): change its source instead", True
    if path not in texts:
        return f"{path}: cannot be matched to an input file", False
    kustomization = next(
        (Path(path).parent / n for n in KUSTOMIZATIONS if (Path(path).parent / n).is_file()),
        None,
    )
    if kustomization is not None:
        return (
            f"in a Kustomize directory ({kustomization}): add this patch to its `patches:` "
            "(or change the base it comes from)",
            True,
        )
    if path.lower().endswith(".json"):
        return "a JSON file: apply the patch by hand", False
    return "", False


def _kustomize_patch(item: _Item, snapshot: Snapshot) -> str:
    """The finding's patches as the entries of a kustomization's `patches:` (a strategic merge
    patch or a JSON 6902 patch each, in the remediation's order) and the new objects it
    creates, for its `resources:`; the remediation as it is when it has neither."""
    entries: list[dict[str, Any]] = []
    created: list[Any] = []
    for edit in item.plan.edits:
        if isinstance(edit, Create):
            created.append(edit.manifest)
            continue
        ref = edit.target
        target = {"kind": ref.kind_name, "name": ref.name}
        if ref.namespace:
            target["namespace"] = ref.namespace
        if isinstance(edit, JsonPatch):
            operations = textwrap.dedent(dump([dict(o) for o in edit.operations]))
            entries.append({"target": target, "patch": LiteralScalarString(operations)})
            continue
        found = snapshot.get(ref.kind, ref.namespace, ref.name)
        metadata = {"name": ref.name, **({"namespace": ref.namespace} if ref.namespace else {})}
        patch = {
            "apiVersion": found.api_version if found else item.resource.api_version,
            "kind": ref.kind_name,
            "metadata": metadata,
        }
        for key, value in edit.patch.items():
            patch[key] = {**metadata, **value} if key == "metadata" else value
        entries.append({"target": target, "patch": LiteralScalarString(dump(patch))})
    if not entries and not created:
        return item.finding.remediation
    parts = [dump({"patches": entries})] if entries else []
    if created:
        parts.append("# new objects, for its resources:\n" + "---\n".join(map(dump, created)))
    return "".join(parts)


class _Files:
    """The round-trip files of one attempt, read from the original texts."""

    def __init__(self, texts: dict[str, str], snapshot: Snapshot) -> None:
        self.texts = texts
        self.snapshot = snapshot
        self.files: dict[str, YamlFile] = {}
        self.created: set[ObjRef] = set()

    def file(self, path: str) -> YamlFile:
        if path not in self.files:
            self.files[path] = YamlFile(path, self.texts[path])
        return self.files[path]

    def locate(self, ref: ObjRef) -> tuple[Any, MutableMapping[str, Any]]:
        resource = self.snapshot.get(ref.kind, ref.namespace, ref.name)
        if resource is None or resource.source.file not in self.texts:
            raise NotEditableError(f"{ref} is not in an input file that can be changed")
        why, _ = _not_editable(resource, self.texts)
        if why:
            raise NotEditableError(f"{ref}: {why}")
        return self.file(resource.source.file).find(ref, resource.source.document)

    def apply(self, item: _Item) -> None:
        for edit in item.plan.edits:
            self._apply(edit, item.finding.result.ref)

    def _apply(self, edit: Edit, owner: ObjRef) -> None:
        if isinstance(edit, Create):
            if edit.ref in self.created:
                return
            self.created.add(edit.ref)
            chunk, _ = self.locate(owner)
            chunk.added.append(edit.manifest)
            return
        chunk, obj = self.locate(edit.target)
        if isinstance(edit, JsonPatch):
            json_patch(obj, edit.operations)
        else:
            strategic_merge(obj, edit.patch)
        chunk.changed, chunk.rendered = True, None

    def todo(self, item: _Item) -> None:
        """A TODO comment above the finding's object, when its file can be changed."""
        try:
            chunk, _ = self.locate(item.finding.result.ref)
        except NotEditableError:
            return
        message = printable(" ".join(item.finding.result.message.split()))
        if len(message) > TODO_CHARS:
            message = message[: TODO_CHARS - 1] + "…"
        chunk.todos.append((f"{TODO_PREFIX}{item.check.id}): {message}", item.reason))

    def changes(self) -> list[tuple[str, str, str]]:
        out = []
        for path, yaml_file in self.files.items():
            after = yaml_file.text()
            if after != yaml_file.original:
                out.append((path, yaml_file.original, after))
        return out


def _rescan(
    changes: list[tuple[str, str, str]],
    paths: list[str],
    stdin_text: str,
    checks: Iterable[Check],
    registry: dict[str, Check],
) -> set[tuple[str, ObjRef, str, str]]:
    """The findings (check, object, path, message) once `changes` are made."""
    changed = {path: after for path, _, after in changes}
    with tempfile.TemporaryDirectory(prefix="gpu-audit-fix-") as tmp:
        load: list[str] = []
        for index, path in enumerate(paths):
            if path in changed:
                copy = Path(tmp) / f"{index}-{Path(path).name}"
                copy.write_bytes(changed[path].encode("utf-8"))
                load.append(str(copy))
            else:
                load.append(path)
        snapshot = load_files(load, io.StringIO(stdin_text))
    return {
        (c.id, f.result.ref, f.result.path, f.result.message)
        for c, f in _open_findings(checks, snapshot, registry)
    }


def run_fix(options: FixOptions) -> FixResult:
    """Plan, apply and prove the fixes of `options`' findings. Raises InputError (bad input
    or options) or RegistryError (a plugin or a check selection)."""
    registry = load_checks(plugins=options.plugins, extra=load_check_dirs(options.checks_dirs))
    enabled = select_checks(registry, only=options.only, skip=options.skip, categories=[])
    stdin_text = _read_stdin(options)
    paths, problems, _ = expand_paths(options.files)
    if problems:
        raise InputError(problems)
    snapshot = load_files(options.files, io.StringIO(stdin_text))
    texts: dict[str, str] = {}
    for path in paths:
        if path != STDIN:
            try:
                with Path(path).open(encoding="utf-8", newline="") as handle:
                    texts[path] = handle.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError([f"{path}: cannot read: {exc}"]) from None
    threshold = options.min_severity.rank if options.min_severity else -1
    before = _open_findings(enabled.values(), snapshot, registry)
    existing = frozenset(r.ref for r in snapshot.all())
    items: list[_Item] = []
    for check, finding in before:
        if finding.severity.rank < threshold:
            continue
        ref = finding.result.ref
        resource = snapshot.get(ref.kind, ref.namespace, ref.name)
        if resource is None:  # a finding on an object the input does not hold
            continue
        item = _Item(check, finding, resource)
        item.plan = plan_finding(check, finding, existing)
        why, item.as_kustomize_patch = _not_editable(resource, texts)
        if why:
            item.status, item.reason = Status.NOT_EDITABLE, why
        elif item.plan.todo:
            item.status, item.reason = Status.TODO, item.plan.todo
        elif not item.plan.edits and item.plan.commands:
            item.status = Status.COMMAND
            item.reason = "not a change to a file: run the commands"
        elif not item.plan.edits:
            item.status, item.reason = Status.TODO, "its remediation has nothing to apply to a file"
        items.append(item)
    files, after = _attempt(items, texts, paths, stdin_text, snapshot, enabled.values(), registry)
    for item in items:
        if item.status is None:
            item.status = Status.FIXED
        elif item.status is Status.TODO:
            files.todo(item)
    before_keys = {(c.id, f.result.ref) for c, f in before}
    changes = sorted(files.changes(), key=lambda change: paths.index(change[0]))
    introduced = sorted({f"{c} {ref}" for c, ref, *_ in after if (c, ref) not in before_keys})
    fixes = tuple(_result(item, snapshot) for item in items)
    return FixResult(fixes, tuple(changes), tuple(introduced))


def _attempt(
    items: list[_Item],
    texts: dict[str, str],
    paths: list[str],
    stdin_text: str,
    snapshot: Snapshot,
    checks: Iterable[Check],
    registry: dict[str, Check],
) -> tuple[_Files, set[tuple[str, ObjRef, str, str]]]:
    """The files with the edits of every item that still has no status applied, and the
    findings of the input so changed (none when nothing changes: the TODO comments added
    later change no finding); an item whose edits do not apply, or do not resolve its
    finding, becomes a TODO and the files are built again without it."""
    while True:
        files = _Files(texts, snapshot)
        pending = [item for item in items if item.status is None]
        failed = False
        for item in pending:
            try:
                files.apply(item)
            except (NotEditableError, PatchError) as exc:
                item.status, item.reason = Status.TODO, f"its patch does not apply: {exc}"
                failed = True
                break
        if failed:
            continue
        changes = files.changes()
        if not changes:  # the input as it was: every finding is still there
            for item in pending:
                item.status, item.reason = Status.TODO, "its remediation changes nothing"
            return files, set()
        remaining = _rescan(changes, paths, stdin_text, checks, registry)
        unresolved = _unresolved(items, pending, remaining)
        if not unresolved:
            return files, remaining
        for item in unresolved:
            item.status = Status.TODO
            item.reason = "its remediation applied to the file does not resolve it on this input"


def _unresolved(
    items: list[_Item], pending: list[_Item], remaining: set[tuple[str, ObjRef, str, str]]
) -> list[_Item]:
    """The applied items whose finding the changed input still has. What a check still
    reports on an object must be one of its findings left undone; if it is not, the applied
    items still reported are unresolved, and when none is, all the applied items of that
    check and object are (their changes moved the problem, or made a new one)."""
    left = {item.at for item in items if item.status is not None}
    out: list[_Item] = []
    for key in dict.fromkeys(item.key for item in pending):
        applied = [item for item in pending if item.key == key]
        unexplained = {at for at in remaining if at[:2] == key} - left
        if not unexplained:
            continue
        still = [item for item in applied if item.at in unexplained]
        out.extend(still or applied)
    return out


def _result(item: _Item, snapshot: Snapshot) -> FindingFix:
    assert item.status is not None
    shown = ""
    if item.status is Status.NOT_EDITABLE and item.as_kustomize_patch:
        shown = _kustomize_patch(item, snapshot)
    elif item.status is not Status.FIXED:
        shown = item.finding.remediation
    return FindingFix(
        item.check.id,
        item.finding.result.ref,
        item.finding.severity,
        item.resource.source.file,
        item.status,
        item.reason,
        shown,
        tuple(dict.fromkeys(item.plan.commands)),
        item.plan.alternatives,
    )


# How each status is headed, and what is shown under it.
_NOTES = {
    Status.FIXED: ("fixed", ""),
    Status.TODO: ("TODO", "  change by hand:"),
    Status.NOT_EDITABLE: ("not editable in place", "  instead:"),
    Status.COMMAND: ("not a file change", "  run by hand:"),
}


def render_notes(result: FixResult) -> str:
    """What became of each finding, for stderr: one line each, then for those not fixed the
    reason and what to change by hand, and the commands a fix comes with."""
    lines: list[str] = []
    for fix in result.fixes:
        where = f" ({fix.file})" if fix.file else ""
        heading, shown = _NOTES[fix.status]
        lines.append(f"{heading}: {fix.check_id} {fix.ref}{where}")
        if fix.reason:
            lines.append(f"  why: {fix.reason}")
        if fix.alternatives and fix.status is Status.FIXED:
            lines.append(f"  its remediation offers {fix.alternatives} other way(s), not applied")
        if fix.shown:
            lines.append(shown)
            lines.extend(f"    {line}" for line in fix.shown.splitlines())
        if fix.commands and fix.status is Status.FIXED:
            lines.append("  and run, where needed:")
            lines.extend(f"    {line}" for c in fix.commands for line in c.splitlines())
    lines.extend(f"warning: the changes bring a new finding: {f}" for f in result.introduced)
    counts = {s: sum(1 for f in result.fixes if f.status is s) for s in Status}
    lines.append(
        f"{counts[Status.FIXED]} fixed, {counts[Status.TODO]} TODO, "
        f"{counts[Status.NOT_EDITABLE]} not editable in place, "
        f"{counts[Status.COMMAND]} not file changes; {len(result.changes)} file(s) change"
    )
    return "\n".join(lines) + "\n"
