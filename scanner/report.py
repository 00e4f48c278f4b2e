"""The report document: the one model every renderer reads (JSON is its canonical form).

Renderers receive this plain, JSON-shaped dict, whether it was just computed or read back from a
saved report, so no renderer can know or care where the data came from.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpu_audit import __version__
from gpu_audit.engine import CheckRun, Finding
from gpu_audit.errors import InputError
from gpu_audit.impact import finding_impact
from gpu_audit.json_text import canonical_json
from gpu_audit.model import Category, CheckStatus, Exemption, ObjRef, Outcome, RelatedRef, Severity
from gpu_audit.scoring import Score, category_scores, coverage, namespace_scores, overall_score
from gpu_audit.snapshot import Snapshot

SCHEMA_VERSION = "1.3"
SCHEMA_FILE = Path(__file__).parent / "schema" / "report.schema.json"
Document = dict[str, Any]
NO_EXEMPTIONS: Mapping[str, Any] = {
    "date": None,
    "file": None,
    "entries": [],
    "annotations": [],
    "warnings": [],
}


def _score(score: Score) -> dict[str, Any]:
    return {
        "score": score.value,
        "grade": score.grade,
        "capped_by": score.capped_by,
        "checks_passed": score.checks_passed,
        "checks_failed": score.checks_failed,
    }


def _category_coverage(runs: Sequence[CheckRun], category: Category) -> dict[str, Any]:
    """How many of the category's checks that could apply were evaluated: the evidence
    behind its score (below scoring.COVERAGE_FLOOR its grade is "incomplete")."""
    cov = coverage([r for r in runs if r.check.category is category])
    return {
        "evaluated": cov.evaluated,
        "applicable": cov.enabled - cov.not_applicable,
        "ratio": cov.ratio,
    }


def _resource(snapshot: Snapshot, ref: ObjRef) -> dict[str, Any]:
    found = snapshot.get(ref.kind, ref.namespace, ref.name)
    return {
        "type": ref.kind,
        "kind": ref.kind_name,
        "api_version": found.api_version if found else None,
        "namespace": ref.namespace or None,
        "name": ref.name,
        "source": (
            {"file": found.source.file, "document": found.source.document + 1}
            if found is not None and found.source.file
            else None
        ),
    }


def _finding(
    snapshot: Snapshot, run: CheckRun, finding: Finding, prices: Mapping[str, Decimal] | None
) -> dict[str, Any]:
    result = finding.result
    impact = finding_impact(snapshot, result.ref, result.related)
    return {
        "check_id": run.check.id,
        "title": run.check.title,
        "severity": finding.severity.value,
        "category": run.check.category.value,
        "resource": _resource(snapshot, result.ref),
        "message": result.message,
        "path": result.path,
        "remediation": finding.remediation,
        "related": [_related(r) for r in sorted(set(result.related), key=lambda r: r.sort_key)],
        "impact": impact.as_dict(prices),
        **({"exemption": _exemption(finding.exemption)} if finding.exemption else {}),
    }


def _related(related: RelatedRef) -> dict[str, Any]:
    ref = related.ref
    return {
        "type": ref.kind,
        "kind": ref.kind_name,
        "namespace": ref.namespace or None,
        "name": ref.name,
        "role": related.role.value,
    }


def _exemption(exemption: Exemption) -> dict[str, Any]:
    return {
        "source": exemption.source,
        "reason": exemption.reason,
        "file": exemption.file or None,
        "entry": exemption.entry or None,
        "expires": exemption.expires or None,
    }


def fingerprint(item: Mapping[str, Any], *, with_message: bool = False) -> str:
    """A finding's stable identity: sha256 over [check id, resource type, namespace, name,
    path] as compact JSON. Findings that share it in one report add their message."""
    res = item["resource"]
    identity = [item["check_id"], res["type"], res["namespace"] or "", res["name"], item["path"]]
    if with_message:
        identity.append(item["message"])
    text = json.dumps(identity, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprints(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The fingerprint of each finding of one report, unique within it."""
    plain = [fingerprint(item) for item in items]
    shared = {fp for fp, n in Counter(plain).items() if n > 1}
    return [
        fingerprint(item, with_message=True) if fp in shared else fp
        for item, fp in zip(items, plain, strict=True)
    ]


def finding_order(item: Mapping[str, Any]) -> tuple[Any, ...]:
    """Worst first, then the most GPUs (gpu_audit.impact), then by check and object: the
    order of every list of findings."""
    res = item["resource"]
    return (
        -Severity(item["severity"]).rank,
        -(item.get("impact") or {}).get("gpus", 0),
        item["check_id"],
        res["type"],
        res["namespace"] or "",
        res["name"],
        item["path"],
        item["message"],
    )


def _check(run: CheckRun) -> dict[str, Any]:
    c = run.check
    return {
        "id": c.id,
        "title": c.title,
        "category": c.category.value,
        "severity": c.severity.value,
        "status": run.status.value,
        "reason": run.reason or None,
        "applicable": run.applicable,
        "results": {
            "passed": run.passed_count,
            "failed": run.failed_count,
            "exempted": run.exempted_count,
        },
        "rationale": c.rationale,
        "detection": c.detection,
        "remediation": c.remediation.template,  # each finding has it filled in
        "references": list(c.references),
        "origin": c.origin,
    }


def timestamp_from_epoch(epoch: str | None) -> str | None:
    """SOURCE_DATE_EPOCH (seconds) as an RFC 3339 UTC time; None keeps reports reproducible."""
    if not epoch:
        return None
    try:
        seconds = int(epoch)
    except ValueError:
        raise InputError(
            [f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds"]
        ) from None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def report_entries(
    snapshot: Snapshot, runs: Sequence[CheckRun], prices: Mapping[str, Decimal] | None = None
) -> Document:
    """The report's `checks`, `findings` and `exempted_findings` (findings worst first, each
    with its fingerprint and its GPU impact, priced with `prices`, product -> $/GPU-hour, when
    given): what its baseline and compliance sections are computed from
    (gpu_audit.postscan.diff.baseline_section, gpu_audit.postscan.frameworks.compliance_section)
    before build_report puts them all together."""
    every = sorted(
        (_finding(snapshot, run, f, prices) for run in runs for f in run.findings),
        key=finding_order,
    )
    for item, fp in zip(every, fingerprints(every), strict=True):
        item["fingerprint"] = fp
    return {
        "checks": [_check(r) for r in runs],
        "findings": [f for f in every if "exemption" not in f],
        "exempted_findings": [f for f in every if "exemption" in f],
    }


def build_report(
    snapshot: Snapshot,
    runs: Sequence[CheckRun],
    *,
    entries: Mapping[str, Any] | None = None,
    generated_at: str | None = None,
    scan_duration_seconds: float | None = None,
    exemptions: Mapping[str, Any] | None = None,
    diagnostics: Mapping[str, Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
    compliance: Sequence[Mapping[str, Any]] = (),
    cluster: str | None = None,
) -> Document:
    """The finished report, every section given: nothing edits it afterwards.

    `entries` is what report_entries(snapshot, runs) returned (computed here when None);
    `exemptions` the section gpu_audit.postscan.exemptions.apply_exemptions made for these
    runs; `diagnostics` the one gpu_audit.diagnostics.diagnostics_section made for the
    snapshot; `baseline` gpu_audit.postscan.diff.baseline_section's comparison with a
    previous report; `compliance` gpu_audit.postscan.frameworks.compliance_section's list;
    `cluster` the cluster's name (--cluster-name, else the kubeconfig context)."""
    overall = overall_score(runs)
    cov = coverage(runs)
    if entries is None:
        entries = report_entries(snapshot, runs)
    findings = list(entries["findings"])
    exempted = list(entries["exempted_findings"])
    by_severity = Counter(f["severity"] for f in findings)
    by_category = Counter(f["category"] for f in findings)
    statuses = Counter(r.status.value for r in runs)
    results = Counter(res.outcome for run in runs for res in run.results)
    source = snapshot.source
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "gpu-audit", "version": __version__},
        "generated_at": generated_at,
        # Wall-clock time: null unless asked for (`scan --record-duration`), so that the same
        # input keeps giving the same bytes.
        "scan_duration_seconds": scan_duration_seconds,
        "source": {
            "type": source.kind,
            "inputs": list(source.inputs),
            "details": dict(source.details),
            "objects": len(snapshot),
            "types": {t: snapshot.count(t) for t in snapshot.types},
            "warnings": list(source.warnings),
            "gaps": [{"type": g.type, "reason": g.reason} for g in snapshot.gaps],
        },
        "score": {
            "overall": overall.value,
            "grade": overall.grade,
            "capped_by": overall.capped_by,
            "categories": [
                {
                    "category": cat.value,
                    "title": cat.title,
                    **_score(s),
                    "coverage": _category_coverage(runs, cat),
                }
                for cat, s in category_scores(runs).items()
            ],
            "namespaces": [
                {"namespace": ns or None, **_score(s)} for ns, s in namespace_scores(runs).items()
            ],
        },
        "coverage": {
            "enabled": cov.enabled,
            "evaluated": cov.evaluated,
            "not_applicable": cov.not_applicable,
            "not_evaluated": cov.not_evaluated,
            "errors": cov.errors,
            "ratio": cov.ratio,
        },
        "summary": {
            "findings": len(findings),
            "exempted": len(exempted),
            "by_severity": {s.value: by_severity.get(s.value, 0) for s in Severity},
            "by_category": {
                r.check.category.value: by_category[r.check.category.value] for r in runs
            },
            "checks": {s.value: statuses.get(s.value, 0) for s in CheckStatus},
            "results": {
                "passed": results.get(Outcome.PASS, 0),
                "failed": results.get(Outcome.FAIL, 0) - len(exempted),  # they do not count
            },
        },
        "complete": snapshot.complete and cov.errors == 0,
        "checks": list(entries["checks"]),
        "findings": findings,
        "exempted_findings": exempted,
        "exemptions": dict(exemptions or NO_EXEMPTIONS),
        "baseline": dict(baseline) if baseline is not None else None,
        "compliance": [dict(framework) for framework in compliance],
        "diagnostics": dict(diagnostics) if diagnostics is not None else None,
        "cluster": cluster,
    }


def dumps(document: Mapping[str, Any]) -> str:
    """The canonical JSON text: sorted keys, fixed indentation, a final newline (that of
    json.dumps, written fast: gpu_audit.json_text)."""
    return canonical_json(document)


def shown_findings(
    document: Mapping[str, Any], keep: Callable[[Mapping[str, Any]], bool], **applied: str
) -> Document:
    """The document with only the findings (and exempted findings) `keep` accepts, and an
    `output_filter` that records the filter `applied` (added to one applied before) and how
    many findings were left out in all. Score, grade, coverage and summary stay those of the
    whole scan: a filter changes what is shown, not what was checked."""
    findings, exempted = document["findings"], document.get("exempted_findings", [])
    shown = {
        "findings": [f for f in findings if keep(f)],
        "exempted_findings": [f for f in exempted if keep(f)],
    }
    earlier = document.get("output_filter") or {}
    hidden = len(findings) + len(exempted) - sum(map(len, shown.values()))
    hidden += earlier.get("hidden_findings", 0)
    return {**document, **shown, "output_filter": {**earlier, **applied, "hidden_findings": hidden}}


def in_namespace(document: Document, namespace: str | None) -> Document:
    """The document as `scan --namespace` shows it: only the findings on that namespace's
    objects and on the Namespace itself (those on other cluster-scoped objects, such as Nodes
    and ClusterPolicies, are left out, and counted in `output_filter`); `document` itself
    without a namespace."""
    if not namespace:
        return document
    this = {"kind": "Namespace", "namespace": None, "name": namespace}

    def kept(finding: Mapping[str, Any]) -> bool:
        res = finding["resource"]
        return bool(res["namespace"] == namespace or this.items() <= res.items())

    shown = shown_findings(document, kept, namespace=namespace)
    diagnostics = document.get("diagnostics")
    if not diagnostics or diagnostics["pending_pods"] is None:
        return shown
    # The Pending pods explained are that namespace's too (the GPU inventory is of the nodes).
    pending = [p for p in diagnostics["pending_pods"] if p["pod"]["namespace"] == namespace]
    return {**shown, "diagnostics": {**diagnostics, "pending_pods": pending}}


def load_report(path: str) -> Document:
    """Read a saved JSON report back, refusing files that are not gpu-audit reports."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([f"{path}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError:
        raise InputError([f"{path}: not UTF-8 text"]) from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError([f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}"]) from None
    if not isinstance(document, dict) or "schema_version" not in document:
        raise InputError([f"{path}: not a gpu-audit JSON report (no schema_version)"])
    major = str(document["schema_version"]).split(".", 1)[0]
    if major != SCHEMA_VERSION.split(".", 1)[0]:
        raise InputError(
            [
                f"{path}: report schema {document['schema_version']} is not readable by "
                f"this gpu-audit (schema {SCHEMA_VERSION})"
            ]
        )
    return document
