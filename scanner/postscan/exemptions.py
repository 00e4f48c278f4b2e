"""Exemptions: accepted findings that stay visible but do not count.

Applied between the engine and scoring (findings -> exemptions -> scoring). Two sources:

- the `gpu-audit.io/exempt` annotation (exact check ids, comma-separated) with a required
  `gpu-audit.io/exempt-reason`, read on the object a finding names (the Deployment, not its pod
  template: template annotations are copied to every pod and editing them rolls the workload);
- an exemptions file (`--exemptions FILE`): entries with check ids or globs, an object match,
  a reason and an optional expiry date.

An annotation without a reason exempts nothing and is reported; so are unknown ids, unused
annotations, and expired or unused file entries (an entry is valid through its expiry day,
judged on an injected date). A check whose only failures are exempted counts as passed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from gpu_audit.engine import CheckRun, Finding
from gpu_audit.errors import InputError
from gpu_audit.k8s.selectors import label_selector_matches
from gpu_audit.model import CheckStatus, Exemption, ObjRef, Resource
from gpu_audit.snapshot import Snapshot

EXEMPT_ANNOTATION = "gpu-audit.io/exempt"
REASON_ANNOTATION = "gpu-audit.io/exempt-reason"
_ENTRY_FIELDS = ("checks", "match", "reason", "expires")
_MATCH_FIELDS = ("kind", "namespace", "name", "labels")
_SELECTOR_FIELDS = ("matchLabels", "matchExpressions")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_GLOB_CHARS = frozenset("*?[")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _DatesAsText(yaml.SafeLoader):
    """A safe loader that leaves dates as text, so that an impossible one (2025-13-01) is
    reported on its entry and field instead of failing inside PyYAML."""


_DatesAsText.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True, slots=True)
class ObjectMatch:
    """Which objects a file entry covers. Empty fields match everything; `namespace` never
    matches cluster-scoped objects; `kind` is the bare kind or the full `Kind.group` type."""

    kind: str = ""
    namespace: str = ""
    name: str = ""
    labels: Mapping[str, Any] | None = None

    def matches(self, ref: ObjRef, labels: Mapping[str, str]) -> bool:
        if self.kind and self.kind not in (ref.kind, ref.kind_name):
            return False
        if self.namespace and not (ref.namespace and fnmatchcase(ref.namespace, self.namespace)):
            return False
        if self.name and not fnmatchcase(ref.name, self.name):
            return False
        return self.labels is None or label_selector_matches(self.labels, labels)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind or None,
            "namespace": self.namespace or None,
            "name": self.name or None,
            "labels": dict(self.labels) if self.labels is not None else None,
        }


@dataclass(frozen=True, slots=True)
class FileEntry:
    index: int  # 1-based, as in error messages
    checks: tuple[str, ...]  # exact ids or fnmatch patterns
    match: ObjectMatch
    reason: str
    expires: dt.date | None

    def covers(self, check_id: str) -> bool:
        return any(fnmatchcase(check_id, pattern) for pattern in self.checks)

    def expired(self, today: dt.date) -> bool:
        """An entry is valid through its `expires` day."""
        return self.expires is not None and today > self.expires


@dataclass(frozen=True, slots=True)
class ExemptionFile:
    path: str
    entries: tuple[FileEntry, ...]


@dataclass(frozen=True, slots=True)
class AnnotationExemption:
    """One object's exempt annotation, parsed. `checks` holds the known ids it lists; `owned`
    says the object has an owner (a Pod of a Deployment), on which its findings are reported."""

    ref: ObjRef
    checks: tuple[str, ...]
    reason: str
    problems: tuple[str, ...]
    owned: bool = False

    @property
    def valid(self) -> bool:
        return bool(self.reason)


def evaluation_date(today: dt.date | None, generated_at: str | None) -> dt.date:
    """The day expiry is judged on: `--today` when given, else the day of the
    SOURCE_DATE_EPOCH stamp, else today (UTC). Injected so tests and reruns are reproducible."""
    if today is not None:
        return today
    if generated_at:
        return dt.date.fromisoformat(generated_at[:10])
    return dt.datetime.now(dt.UTC).date()


# --- the exemptions file ---------------------------------------------------------------


def _is_pattern(text: str) -> bool:
    return bool(_GLOB_CHARS & set(text))


def _check_ids(value: object, known: Collection[str], problems: list[str]) -> tuple[str, ...]:
    """A check id, a comma-separated string of them, or a list; each may be a glob."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        problems.append("field 'checks': expected a check id or a non-empty list of them")
        return ()
    ids: list[str] = []
    for item in items:
        text = item.strip() if isinstance(item, str) else ""
        if not text:
            problems.append(f"field 'checks': {item!r} is not a check id")
        elif _is_pattern(text) and not any(fnmatchcase(k, text) for k in known):
            problems.append(f"field 'checks': pattern {text!r} matches no known check")
        elif not _is_pattern(text) and text not in known:
            problems.append(f"field 'checks': unknown check id {text!r}")
        else:
            ids.append(text)
    return tuple(ids)


def _selector(value: object, problems: list[str]) -> Mapping[str, Any] | None:
    where = "field 'match.labels'"
    if not isinstance(value, dict) or not value:
        problems.append(f"{where}: expected a label selector (matchLabels, matchExpressions)")
        return None
    problems.extend(
        f"{where}: unknown field {key!r} (expected matchLabels, matchExpressions)"
        for key in sorted(set(map(str, value)) - set(_SELECTOR_FIELDS))
    )
    labels = value.get("matchLabels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        problems.append(f"{where}.matchLabels: expected a mapping of label names to strings")
    expressions = value.get("matchExpressions", [])
    if not isinstance(expressions, list):
        problems.append(f"{where}.matchExpressions: expected a list")
        return value
    for number, expr in enumerate(expressions, 1):
        here = f"{where}.matchExpressions[{number}]"
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            problems.append(f"{here}: expected a mapping with a string 'key'")
            continue
        operator, values = expr.get("operator"), expr.get("values")
        if operator not in _OPERATORS:
            problems.append(f"{here}: operator {operator!r} is not one of {', '.join(_OPERATORS)}")
        elif operator in ("In", "NotIn") and not (
            isinstance(values, list) and values and all(isinstance(v, str) for v in values)
        ):
            problems.append(f"{here}: operator {operator} needs a non-empty list of string values")
        elif operator in ("Exists", "DoesNotExist") and values:
            problems.append(f"{here}: operator {operator} takes no values")
    return value


def _match(value: object, problems: list[str]) -> ObjectMatch:
    if value is None:
        return ObjectMatch()
    if not isinstance(value, dict):
        problems.append("field 'match': expected a mapping of kind, namespace, name, labels")
        return ObjectMatch()
    problems.extend(
        f"field 'match': unknown field {key!r} (expected {', '.join(_MATCH_FIELDS)})"
        for key in sorted(set(map(str, value)) - set(_MATCH_FIELDS))
    )
    texts: dict[str, str] = {}
    for field in ("kind", "namespace", "name"):
        if field not in value:
            continue
        text = value[field]
        if not isinstance(text, str) or not text.strip():
            problems.append(f"field 'match.{field}': expected a non-empty string")
        else:
            texts[field] = text.strip()
    labels = _selector(value["labels"], problems) if "labels" in value else None
    return ObjectMatch(**texts, labels=labels)


def _expiry(value: object, problems: list[str]) -> dt.date | None:
    if value is None:
        return None
    # fromisoformat alone would also take 20250601 and week dates.
    if isinstance(value, str) and _DATE.fullmatch(value.strip()):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    problems.append(f"field 'expires': {value!r} is not a date (YYYY-MM-DD)")
    return None


def _entry(index: int, raw: object, known: Collection[str]) -> tuple[FileEntry | None, list[str]]:
    if not isinstance(raw, dict):
        return None, ["expected a mapping with checks, match, reason and optional expires"]
    problems = [
        f"unknown field {key!r} (expected {', '.join(_ENTRY_FIELDS)})"
        for key in sorted(set(map(str, raw)) - set(_ENTRY_FIELDS))
    ]
    if "checks" not in raw:
        problems.append("field 'checks': required")
    checks = _check_ids(raw.get("checks"), known, problems) if "checks" in raw else ()
    match = _match(raw.get("match"), problems)
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        problems.append("field 'reason': required, a non-empty string saying why this is accepted")
        reason = ""
    expires = _expiry(raw.get("expires"), problems)
    if any(_is_pattern(c) for c in checks) and match == ObjectMatch():
        problems.append(
            "field 'match': required when 'checks' has patterns "
            "(to switch checks off everywhere, use --skip)"
        )
    entry = FileEntry(index, checks, match, reason.strip(), expires)
    return (None if problems else entry), problems


def load_exemptions(path: str, known_ids: Collection[str]) -> ExemptionFile:
    """Read and strictly validate an exemptions file; every problem names the entry and field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([f"{path}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError:
        raise InputError([f"{path}: not UTF-8 text"]) from None
    try:
        data = yaml.load(text, Loader=_DatesAsText)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError([f"{path}: invalid YAML{where}"]) from None
    if not isinstance(data, dict) or not isinstance(data.get("exemptions"), list):
        raise InputError([f"{path}: expected a mapping with an 'exemptions' list"])
    problems = [
        f"{path}: unknown top-level field {key!r} (expected exemptions)"
        for key in sorted(set(map(str, data)) - {"exemptions"})
    ]
    entries: list[FileEntry] = []
    for index, raw in enumerate(data["exemptions"], 1):
        entry, entry_problems = _entry(index, raw, known_ids)
        problems.extend(f"{path}: entry {index}: {p}" for p in entry_problems)
        if entry is not None:
            entries.append(entry)
    if problems:
        raise InputError(problems)
    return ExemptionFile(path, tuple(entries))


# --- annotations ---------------------------------------------------------------------------


def _annotation(resource: Resource, known: Collection[str]) -> AnnotationExemption:
    annotations = resource.annotations
    listed = [part.strip() for part in annotations[EXEMPT_ANNOTATION].split(",") if part.strip()]
    reason = annotations.get(REASON_ANNOTATION, "").strip()
    problems: list[str] = []
    if not listed:
        problems.append(f"{EXEMPT_ANNOTATION} lists no check id")
    if not reason:
        problems.append(f"{EXEMPT_ANNOTATION} has no {REASON_ANNOTATION}: nothing is exempted")
    for item in listed:
        if _is_pattern(item):
            problems.append(
                f"{EXEMPT_ANNOTATION} takes exact check ids, not {item!r} "
                "(use an exemptions file for patterns)"
            )
        elif item not in known:
            problems.append(f"{EXEMPT_ANNOTATION} lists unknown check id {item!r}")
    checks = tuple(sorted({item for item in listed if item in known}))
    owned = bool(resource.metadata.get("ownerReferences"))
    return AnnotationExemption(resource.ref, checks, reason, tuple(problems), owned)


def annotated_objects(
    snapshot: Snapshot, known_ids: Collection[str]
) -> tuple[AnnotationExemption, ...]:
    """Every object carrying the exempt annotation, in snapshot order."""
    return tuple(
        _annotation(r, known_ids) for r in snapshot.all() if EXEMPT_ANNOTATION in r.annotations
    )


# --- applying them -----------------------------------------------------------------------


def _resource(ref: ObjRef) -> dict[str, Any]:
    return {
        "type": ref.kind,
        "kind": ref.kind_name,
        "namespace": ref.namespace or None,
        "name": ref.name,
    }


class _Matcher:
    """Finds the exemption of each finding and counts what every source matched."""

    def __init__(
        self,
        snapshot: Snapshot,
        annotations: Sequence[AnnotationExemption],
        rules: ExemptionFile | None,
        today: dt.date,
    ) -> None:
        self.snapshot = snapshot
        self.by_ref = {a.ref: a for a in annotations}
        self.rules = rules
        self.today = today
        self.annotation_hits: Counter[tuple[ObjRef, str]] = Counter()
        self.entry_hits: Counter[int] = Counter()

    def exemption(self, check_id: str, finding: Finding) -> Exemption | None:
        ref = finding.result.ref
        chosen: Exemption | None = None
        annotation = self.by_ref.get(ref)
        if annotation is not None and annotation.valid and check_id in annotation.checks:
            self.annotation_hits[(ref, check_id)] += 1
            chosen = Exemption("annotation", annotation.reason)
        if self.rules is None:
            return chosen
        found = self.snapshot.get(ref.kind, ref.namespace, ref.name)
        labels = found.labels if found is not None else {}
        for entry in self.rules.entries:
            if not (entry.covers(check_id) and entry.match.matches(ref, labels)):
                continue
            self.entry_hits[entry.index] += 1
            if chosen is None and not entry.expired(self.today):
                expires = entry.expires.isoformat() if entry.expires else ""
                chosen = Exemption("file", entry.reason, self.rules.path, entry.index, expires)
        return chosen


def _exempted_run(run: CheckRun, matcher: _Matcher) -> CheckRun:
    if not run.findings:
        return run
    findings = tuple(
        dataclasses.replace(f, exemption=matcher.exemption(run.check.id, f)) for f in run.findings
    )
    counted = any(f.exemption is None for f in findings)
    status = run.status if counted else CheckStatus.PASSED
    return dataclasses.replace(run, findings=findings, status=status)


def _entry_section(entry: FileEntry, hits: int, today: dt.date) -> dict[str, Any]:
    status = "expired" if entry.expired(today) else "used" if hits else "unused"
    return {
        "entry": entry.index,
        "checks": list(entry.checks),
        "match": entry.match.as_dict(),
        "reason": entry.reason,
        "expires": entry.expires.isoformat() if entry.expires else None,
        "status": status,
        "findings": hits,
    }


def _annotation_section(
    annotation: AnnotationExemption, hits: Counter[tuple[ObjRef, str]]
) -> dict[str, Any]:
    used = {c: hits[(annotation.ref, c)] for c in annotation.checks}
    status = "invalid" if not annotation.valid else "used" if any(used.values()) else "unused"
    unused = [c for c, n in used.items() if not n] if annotation.valid else []
    problems = list(annotation.problems)
    if unused:
        problems.append(
            f"{EXEMPT_ANNOTATION} exempts {', '.join(unused)} but there is no such finding"
            + (
                " on this object (findings on owned objects such as Pods are reported on "
                "their top-most owner: annotate that one)"
                if annotation.owned
                else ""
            )
        )
    return {
        "resource": _resource(annotation.ref),
        "checks": list(annotation.checks),
        "reason": annotation.reason or None,
        "status": status,
        "problems": problems,
        "unused_checks": unused,
        "findings": sum(used.values()),
    }


def _warnings(
    path: str, entries: Iterable[Mapping[str, Any]], annotations: Iterable[Mapping[str, Any]]
) -> list[str]:
    warnings: list[str] = []
    for a in annotations:
        ref = a["resource"]
        where = (
            f"{ref['kind']} {ref['namespace']}/{ref['name']}"
            if ref["namespace"]
            else f"{ref['kind']} {ref['name']}"
        )
        warnings.extend(f"{where}: {problem}" for problem in a["problems"])
    for e in entries:
        if e["status"] == "expired":
            warnings.append(
                f"{path}: entry {e['entry']} expired on {e['expires']}; "
                f"its {e['findings']} finding(s) count again"
            )
        elif e["status"] == "unused":
            warnings.append(f"{path}: entry {e['entry']} matches no finding")
    return warnings


def apply_exemptions(
    runs: Sequence[CheckRun],
    snapshot: Snapshot,
    known_ids: Collection[str],
    rules: ExemptionFile | None,
    today: dt.date,
) -> tuple[tuple[CheckRun, ...], dict[str, Any]]:
    """The runs with exempted findings marked, and the report's `exemptions` section.

    The section's `date` is the day expiry was judged on, or null when no entry has an
    expiry date (so reports that do not depend on the date stay byte-identical every day).
    """
    annotations = annotated_objects(snapshot, known_ids)
    matcher = _Matcher(snapshot, annotations, rules, today)
    marked = tuple(_exempted_run(run, matcher) for run in runs)
    entries = [
        _entry_section(e, matcher.entry_hits[e.index], today)
        for e in (rules.entries if rules else ())
    ]
    annotation_sections = [_annotation_section(a, matcher.annotation_hits) for a in annotations]
    dated = rules is not None and any(e.expires for e in rules.entries)
    return marked, {
        "date": today.isoformat() if dated else None,
        "file": rules.path if rules else None,
        "entries": entries,
        "annotations": annotation_sections,
        "warnings": _warnings(rules.path if rules else "", entries, annotation_sections),
    }
