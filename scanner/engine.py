"""Running checks over a snapshot. A check that raises is an ERROR, never the end of the scan.

What a check writes goes through gpu_audit.redact last: each result's message, each rendered
remediation and the error of a check that raised (an exception may quote the data).
"""

from __future__ import annotations

import string
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpu_audit.model import (
    Check,
    CheckStatus,
    Exemption,
    Outcome,
    RelatedRef,
    RelatedRole,
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


def render_remediation(check: Check, result: Result) -> str:
    values = {
        "kind": result.ref.kind_name,
        "namespace": result.ref.namespace or "default",
        "name": result.ref.name,
        **result.fix,
    }
    text = string.Template(check.remediation.template).substitute(values)
    # A path through a list (Volcano's spec.tasks[i]) has no patch form that names the item.
    if (
        check.remediation.root == "pod_spec"
        and result.pod_spec_path
        and "[" not in result.pod_spec_path
    ):
        if result.container_keys:
            text = lift_containers(text, dict(result.container_keys))
        return nest_fragment(text, result.pod_spec_path)
    return text


def nest_fragment(text: str, path: str) -> str:
    """A YAML fragment moved under the mapping keys of a dotted path, its leading comments
    kept on top: `containers: [...]` at `spec.template.spec` becomes a patch of the object."""
    lines = text.splitlines()
    head = 0
    while head < len(lines) and (not lines[head].strip() or lines[head].lstrip().startswith("#")):
        head += 1
    keys = path.split(".")
    opening = [f"{'  ' * depth}{key}:" for depth, key in enumerate(keys)]
    indent = "  " * len(keys)
    body = [f"{indent}{line}" if line.strip() else "" for line in lines[head:]]
    return "\n".join([*lines[:head], *opening, *body])


def lift_containers(text: str, keys: dict[str, str]) -> str:
    """A pod-spec fragment whose `containers:` (or `initContainers:`) item for a container in
    `keys` is written under that key instead: KServe's model container is patched at
    spec.predictor.model, so `containers: [{name: kserve-container, image: x}]` at spec.predictor
    becomes `model: {image: x}`; under the key "" its fields are written beside `containers:`
    (a NIMService's spec.resources). Items written in flow style are left as they are."""
    lines = text.splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.rstrip() not in ("containers:", "initContainers:"):
            out.append(line)
            continue
        kept: list[str] = []
        lifted: list[str] = []
        while index < len(lines) and lines[index][:1] in (" ", "-"):
            item = [lines[index]]
            indent = _indent(item[0])
            index += 1
            while index < len(lines) and (
                not lines[index].strip() or _indent(lines[index]) > indent
            ):
                item.append(lines[index])
                index += 1
            first = item[0].strip()
            name = first.removeprefix("- name:").split("#", 1)[0].strip()
            if first.startswith("- name:") and name in keys and not keys[name]:
                # written at the pod spec's own level, beside `containers:`
                lifted.extend(part[indent + 2 :] for part in item[1:] if part.strip())
            elif first.startswith("- name:") and name in keys:
                lifted.append(f"{keys[name]}:")
                lifted.extend(f"  {part[indent + 2 :]}" for part in item[1:] if part.strip())
            else:
                kept.extend(item)
        if kept:
            out.extend([line, *kept])
        out.extend(lifted)
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


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
        related = {*result.related, *symptoms.get(index, ())}
        ordered = tuple(sorted(related, key=lambda r: r.sort_key))
        out.append(replace(result, related=ordered, inherited=None))
    return out


def _redacted(result: Result) -> Result:
    message = redact_text(result.message)
    return result if message is result.message else replace(result, message=message)


def run_check(check: Check, snapshot: Snapshot) -> CheckRun:
    reason = missing_inputs(check, snapshot)
    if reason:
        return CheckRun(check, CheckStatus.NOT_EVALUATED, reason=reason)
    try:
        results = tuple(
            sorted(map(_redacted, collapse_inherited(check.run(snapshot))), key=_result_key)
        )
        findings = tuple(
            Finding(r, r.severity or check.severity, redact_text(render_remediation(check, r)))
            for r in results
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
    status = CheckStatus.FAILED if findings else CheckStatus.PASSED
    return CheckRun(check, status, results, findings)


def run_checks(checks: Iterable[Check], snapshot: Snapshot) -> tuple[CheckRun, ...]:
    return tuple(run_check(c, snapshot) for c in sorted(checks, key=lambda c: c.id))
