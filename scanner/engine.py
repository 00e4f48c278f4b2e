"""Running checks over a snapshot. A check that raises is an ERROR, never the end of the scan."""

from __future__ import annotations

import string
import traceback
from collections.abc import Iterable
from dataclasses import dataclass

from gpu_audit.model import Check, CheckStatus, Exemption, Outcome, Result, Severity
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


def _result_key(result: Result) -> tuple[str, str, str, str, str]:
    return (*result.ref.sort_key, result.path, result.message)


def run_check(check: Check, snapshot: Snapshot) -> CheckRun:
    reason = missing_inputs(check, snapshot)
    if reason:
        return CheckRun(check, CheckStatus.NOT_EVALUATED, reason=reason)
    try:
        results = tuple(sorted(check.run(snapshot), key=_result_key))
        findings = tuple(
            Finding(r, r.severity or check.severity, render_remediation(check, r))
            for r in results
            if r.outcome is Outcome.FAIL
        )
    except Exception as exc:
        return CheckRun(
            check,
            CheckStatus.ERROR,
            reason=f"check raised {type(exc).__name__}: {exc}",
            error_detail="".join(traceback.format_exception(exc)),
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
