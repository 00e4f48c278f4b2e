"""Running checks over a snapshot. A check that raises is an ERROR, never the end of the scan.

What a check writes goes through gpu_audit.redact last: each result's message, each rendered
remediation and the error of a check that raised (an exception may quote the data).
"""

from __future__ import annotations

import string
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from gpu_audit.k8s.cr_patches import (
    ADDITIVE_LISTS,
    UnpatchableError,
    immutable_field,
    json_patch,
    patch_command,
    recreate_command,
)
from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.k8s.pods import PodTemplate, templates_of
from gpu_audit.k8s.smp_lists import lost_lists
from gpu_audit.model import (
    Check,
    CheckStatus,
    Exemption,
    Outcome,
    RelatedRef,
    RelatedRole,
    Resource,
    Result,
    Severity,
)
from gpu_audit.redact import redact_text
from gpu_audit.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Finding:
    """A failed result with what a reader needs: severity and the rendered remediation."""

    result: Result
    severity: Severity
    remediation: str
    # Set by gpu_audit.postscan.exemptions; an exempted finding does not count.
    exemption: Exemption | None = None


@dataclass(frozen=True, slots=True)
class CheckRun:
    """What happened to one check in one scan.

    `applicable` is False when the check ran but found nothing it applies to; such a check is
    NOT_EVALUATED but does not count against coverage.
    """

    check: Check
    status: CheckStatus
    results: tuple[Result, ...] = ()
    findings: tuple[Finding, ...] = ()
    reason: str = ""
    applicable: bool = True
    error_detail: str = ""

    @property
    def passed_count(self) -> int:
        return sum(1 for r in self.results if r.outcome is Outcome.PASS)

    @property
    def failed_count(self) -> int:
        """Failed results that count (not exempted)."""
        return sum(1 for f in self.findings if f.exemption is None)

    @property
    def exempted_count(self) -> int:
        return sum(1 for f in self.findings if f.exemption is not None)


def missing_inputs(check: Check, snapshot: Snapshot) -> str:
    """Why a check cannot be evaluated on this snapshot, or "" when it can."""
    gaps = {g.type: g.reason for g in snapshot.gaps}
    reasons: list[str] = []
    for entry in check.requires:
        alternatives = (entry,) if isinstance(entry, str) else entry
        if any(snapshot.has(t) for t in alternatives):
            continue
        blocked = [gaps[t] for t in alternatives if t in gaps]
        if blocked:
            reasons.extend(blocked)
        else:
            reasons.append(f"no {' or '.join(alternatives)} in the input")
    return "; ".join(dict.fromkeys(reasons))


def render_remediation(check: Check, result: Result, snapshot: Snapshot | None = None) -> str:
    """A finding's remediation: the check's template filled in. A pod-spec fragment becomes a
    patch of the object the finding names: for a built-in kind the fragment nested under the
    pod template's path (a strategic merge patch), or a JSON patch where that would drop list
    items the object has (builtin_fix); for a custom resource, which takes no
    strategic merge patch, a `kubectl patch --type=json` command computed from the object in
    `snapshot` (gpu_audit.k8s.cr_patches)."""
    values = {
        "kind": result.ref.kind_name,
        "namespace": result.ref.namespace or "default",
        "name": result.ref.name,
        **result.fix,
    }
    text = string.Template(check.remediation.template).substitute(values)
    if check.remediation.root != "pod_spec" or not result.pod_spec_path:
        return text
    if "." not in result.ref.kind:  # a built-in kind (gpu_audit.k8s.kinds.resource_type)
        return builtin_fix(text, result, snapshot)
    return custom_resource_fix(text, result, snapshot)


# Built-in kinds whose pod spec cannot change once created. A Pod takes new images,
# activeDeadlineSeconds and added tolerations only ("pod updates may not change fields other
# than ...", https://kubernetes.io/docs/concepts/workloads/pods/#pod-update-and-replacement);
# a Job's spec.template is immutable but for its scheduling directives while it is suspended
# (KEP-2926, https://kubernetes.io/docs/concepts/workloads/controllers/job/#mutable-scheduling-directives).
_FIXED_POD_SPEC = {
    "Pod": "a Pod's spec cannot change once created (only images, activeDeadlineSeconds and "
    "added tolerations can)",
    "Job": "a Job's pod template cannot change once created (only its scheduling fields, while "
    "it is suspended)",
}


def _recreated(result: Result, operations: Iterable[Mapping[str, Any]] = ()) -> str:
    """The note of a fix the API server refuses in place on this kind, or "": a Pod's added
    tolerations are the one pod-spec fix it takes."""
    reason = _FIXED_POD_SPEC.get(result.ref.kind)
    changes = [op for op in operations if op["op"] != "test"]
    if reason is None or (
        result.ref.kind == "Pod"
        and changes
        and all(
            op["op"] == "add" and str(op["path"]).startswith("/spec/tolerations/") for op in changes
        )
    ):
        return ""
    return f"# {reason}: recreate the {result.ref.kind_name} with the fix (its containers restart)"


def _nested(text: str, result: Result) -> str:
    """A strategic merge patch of a built-in kind, with the note that the object must be
    recreated with it where the API server refuses it in place."""
    note = _recreated(result)
    fragment = nest_fragment(text, result.pod_spec_path)
    if not note:
        return fragment
    comments, body, notes = _split_comments(fragment)
    where = "# merge this into its manifest, then: kubectl replace --force -f MANIFEST"
    return "\n".join([*comments, note, where, *body, *notes])


# The safe loader in libyaml's C when PyYAML has it: the same values, ten times faster (a
# large scan reads hundreds of fixes; 0.4 s of 5.7 s of checks at 50,000 pods).
_FRAGMENT_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _fix_target(
    body: list[str], result: Result, snapshot: Snapshot | None
) -> tuple[Resource | None, PodTemplate | None, Any]:
    """The finding's object in `snapshot`, its pod template the fix is of, and the fix read
    as YAML (None when it is not YAML)."""
    resource = (
        snapshot.get(result.ref.kind, result.ref.namespace, result.ref.name) if snapshot else None
    )
    templates = templates_of(resource, snapshot) if resource is not None else ()
    template = next((t for t in templates if t.path == result.pod_spec_path), None)
    try:
        fragment = yaml.load("\n".join(body), Loader=_FRAGMENT_LOADER) if body else None
    except yaml.YAMLError:
        fragment = None
    return resource, template, fragment


def builtin_fix(text: str, result: Result, snapshot: Snapshot | None) -> str:
    """A pod-spec fragment of a built-in kind: nested under the pod template's path (a
    strategic merge patch), unless that patch would replace whole a list the fix adds to and
    drop what the object has there (gpu_audit.k8s.smp_lists): then the guarded JSON patch
    computed from the object, as for a custom resource."""
    if not any(key in text for key in ADDITIVE_LISTS):  # no need to read the fix as YAML
        return _nested(text, result)
    comments, body, notes = _split_comments(text)
    resource, template, fragment = _fix_target(body, result, snapshot)
    if resource is None or template is None or not isinstance(fragment, Mapping):
        return _nested(text, result)
    lost = lost_lists(resource.raw, template.path, fragment)
    if not lost:
        return _nested(text, result)
    replaced = ", ".join(lost)
    try:
        operations = json_patch(resource, template, fragment)
    except UnpatchableError as exc:
        warning = f"# {exc}; as a strategic merge patch this replaces {replaced} whole"
        return "\n".join([warning, _nested(text, result)])
    guarded = any(op["op"] == "test" for op in operations)
    note = (
        f"# a JSON patch: a strategic merge patch replaces {replaced} whole (no "
        "patchMergeKey)\n# and would drop the items the object has"
        + (_GUARD_NOTE if guarded else "")
    )
    recreated = _recreated(result, operations)
    if recreated:
        note += "\n" + recreated
        command = recreate_command(resource, result.ref.kind.lower(), operations)
    else:
        command = patch_command(resource, result.ref.kind.lower(), operations)
    return "\n".join([*comments, note, command, *notes])


def custom_resource_fix(text: str, result: Result, snapshot: Snapshot | None) -> str:
    """A pod-spec fragment as a JSON patch command of the custom resource; the fragment as it
    is, with the reason, when it cannot be one (the object is not in the input, or the kind
    has no field for part of the fix)."""
    comments, body, notes = _split_comments(text)
    resource, template, fragment = _fix_target(body, result, snapshot)
    if resource is None or template is None:
        reason = "the object is not in the input"
    elif not isinstance(fragment, Mapping):
        reason = "the fix is not a YAML mapping"
    if resource is not None and template is not None and isinstance(fragment, Mapping):
        try:
            operations = json_patch(resource, template, fragment)
        except UnpatchableError as exc:
            reason = str(exc)
        else:
            info = KNOWN_KINDS.get(result.ref.kind)
            name = f"{info.plural}.{info.group}" if info else result.ref.kind.lower()
            guarded = any(op["op"] == "test" for op in operations)
            note = _JSON_PATCH_NOTE + (_GUARD_NOTE if guarded else "")
            fixed = immutable_field(result.ref.kind, operations)
            if fixed:
                note += (
                    f"\n# {fixed} cannot change (the CRD's rule self == oldSelf): the "
                    f"{result.ref.kind_name} is recreated with the fix, and its pods restart"
                )
                command = recreate_command(resource, name, operations)
            else:
                command = patch_command(resource, name, operations)
            return "\n".join([*comments, note, command, *notes])
    where = f"# {reason}: write this pod-spec fragment at {result.pod_spec_path} of {result.ref}"
    return "\n".join([*comments, where, *body, *notes])


_JSON_PATCH_NOTE = "# a JSON patch (custom resources take no strategic merge patch)"
_GUARD_NOTE = (
    "; its test operations\n# make it fail, changing nothing, if the list items it names have moved"
)


def _split_comments(text: str) -> tuple[list[str], list[str], list[str]]:
    """The leading comment lines, the YAML body, and the comment lines after it."""
    lines = text.splitlines()
    head = 0
    while head < len(lines) and (not lines[head].strip() or lines[head].lstrip().startswith("#")):
        head += 1
    tail = len(lines)
    while tail > head and (not lines[tail - 1].strip() or lines[tail - 1].lstrip().startswith("#")):
        tail -= 1
    return lines[:head], lines[head:tail], [ln for ln in lines[tail:] if ln.strip()]


def nest_fragment(text: str, path: str) -> str:
    """A YAML fragment moved under the mapping keys of a dotted path, its leading comments
    kept on top: `containers: [...]` at `spec.template.spec` becomes a patch of the object."""
    comments, body, notes = _split_comments(text)
    keys = path.split(".")
    opening = [f"{'  ' * depth}{key}:" for depth, key in enumerate(keys)]
    indent = "  " * len(keys)
    nested = [f"{indent}{line}" if line.strip() else "" for line in [*body, *notes]]
    return "\n".join([*comments, *opening, *nested])


def _result_key(result: Result) -> tuple[str, str, str, str, str]:
    return (*result.ref.sort_key, result.path, result.message)


def collapse_inherited(results: Iterable[Result]) -> list[Result]:
    """A result on a pod template derived from another object's (Result.inherited) that the
    base template gets exactly as well comes from the base object: it is dropped, and its
    object is listed as a symptom of the base's result. The results kept drop `inherited`: it
    is not redacted, and nothing reads it afterwards."""
    results = list(results)

    def identity(r: Result) -> tuple[object, ...]:
        # Not the fix: its values may name the object's namespace (a Secret to create).
        return (r.ref, r.path, r.message, r.outcome, r.severity)

    own = {identity(r): i for i, r in enumerate(results) if r.inherited is None}
    symptoms: dict[int, list[RelatedRef]] = {}
    dropped: set[int] = set()
    for index, result in enumerate(results):
        base = result.inherited
        at = own.get(identity(base)) if base is not None else None
        if at is not None:
            symptoms.setdefault(at, []).append(RelatedRef(result.ref, RelatedRole.SYMPTOM))
            dropped.add(index)
    out = []
    for index, result in enumerate(results):
        if index in dropped:
            continue
        if not result.related and index not in symptoms and result.inherited is None:
            out.append(result)  # most results: nothing to merge or sort
            continue
        related = {*result.related, *symptoms.get(index, ())}
        ordered = tuple(sorted(related, key=lambda r: r.sort_key))
        out.append(replace(result, related=ordered, inherited=None))
    return out


def _redacted(result: Result) -> Result:
    message = redact_text(result.message)
    return result if message is result.message else replace(result, message=message)


def unlisted_namespaces(check: Check, snapshot: Snapshot) -> str:
    """Why the check's verdicts on cluster-scoped objects cannot be given on this snapshot, or
    "". A live listing of one namespace (`scan --namespace`, recorded in the source's details,
    also when saved to a snapshot file) holds only that namespace's objects of the namespaced
    types the check reads: a Node judged from them (idle GPUs, its tenants, the agent pods it
    runs) would be judged without the pods of every other namespace."""
    namespace = snapshot.source.details.get("namespace")
    if not namespace:
        return ""
    partial = sorted(
        KNOWN_KINDS[t].plural
        for t in check.required_types
        if t in KNOWN_KINDS and KNOWN_KINDS[t].namespaced and snapshot.has(t)
    )
    if not partial:
        return ""
    return (
        f"{', '.join(partial)} of other namespaces were not listed (--namespace {namespace}): "
        "its verdicts on cluster-scoped objects are not assessed"
    )


def _listed(result: Result, snapshot: Snapshot) -> bool:
    """A result on an object of the listed namespace (all of whose objects were read), or on
    that Namespace itself (judged from its own objects, such as its ResourceQuotas)."""
    ref = result.ref
    return bool(ref.namespace) or (
        ref.kind == "Namespace" and ref.name == snapshot.source.details.get("namespace")
    )


def run_check(check: Check, snapshot: Snapshot) -> CheckRun:
    reason = missing_inputs(check, snapshot)
    if reason:
        return CheckRun(check, CheckStatus.NOT_EVALUATED, reason=reason)
    unlisted = unlisted_namespaces(check, snapshot)
    try:
        results = tuple(
            sorted(map(_redacted, collapse_inherited(check.run(snapshot))), key=_result_key)
        )
        judged = tuple(r for r in results if _listed(r, snapshot)) if unlisted else results
        findings = tuple(
            Finding(
                r, r.severity or check.severity, redact_text(render_remediation(check, r, snapshot))
            )
            for r in judged
            if r.outcome is Outcome.FAIL
        )
    except Exception as exc:
        return CheckRun(
            check,
            CheckStatus.ERROR,
            reason=redact_text(f"check raised {type(exc).__name__}: {exc}"),
            error_detail=redact_text("".join(traceback.format_exception(exc))),
        )
    if not results:
        return CheckRun(
            check,
            CheckStatus.NOT_EVALUATED,
            reason="not applicable: nothing in the input it applies to",
            applicable=False,
        )
    if not judged:
        return CheckRun(check, CheckStatus.NOT_EVALUATED, reason=unlisted)
    status = CheckStatus.FAILED if findings else CheckStatus.PASSED
    reason = unlisted if len(judged) < len(results) else ""
    return CheckRun(check, status, judged, findings, reason=reason)


def run_checks(checks: Iterable[Check], snapshot: Snapshot) -> tuple[CheckRun, ...]:
    return tuple(run_check(c, snapshot) for c in sorted(checks, key=lambda c: c.id))
