"""Declarative checks: simple field checks written as YAML, loaded as ordinary `Check` values.

A file names the objects it looks at (`target`), an optional condition that selects which of
them the check applies to (`where`), and the condition a compliant object satisfies
(`require`). Conditions test the values a JSONPath (jsonpath-ng, with its filter extension)
finds in the object. docs/declarative-checks.md is the user reference; this module is the
definition. Every mistake in a file is an InputError naming the file and the field.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from jsonpath_ng import JSONPath
from jsonpath_ng.exceptions import JSONPathError
from jsonpath_ng.ext.parser import parse as parse_jsonpath

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Container,
    QuantityError,
    Result,
    Snapshot,
    Target,
    check,
    failed,
    parse_quantity,
    passed,
    pod_templates,
)
from gpu_audit.errors import InputError
from gpu_audit.k8s.kinds import KNOWN_KINDS
from gpu_audit.model import AdmissionRule, Category, Check, FixKind, Severity

SCOPES = ("object", "pod", "container")
VALUE_OPERATORS = ("equals", "not_equals", "in", "not_in", "matches", "gt", "ge", "lt", "le")
PRESENCE_OPERATORS = ("exists", "absent")
OPERATORS = PRESENCE_OPERATORS + VALUE_OPERATORS
COMBINATORS = ("all_of", "any_of")
MODIFIERS = ("if_absent", "match")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TOP_LEVEL_KEYS = frozenset(
    {
        "id",
        "title",
        "category",
        "severity",
        "rationale",
        "detection",
        "severity_evidence",
        "remediation",
        "remediation_root",
        "remediation_generic",
        "fix_kind",
        "references",
        "target",
        "where",
        "require",
        "messages",
        "admission",
    }
)
REQUIRED_KEYS = (
    "id",
    "title",
    "category",
    "severity",
    "rationale",
    "detection",
    "remediation",
    "references",
    "target",
    "require",
)


class _FieldError(Exception):
    """A mistake at one field of a check file; becomes an InputError naming the file."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")


# --------------------------------------------------------------------------- conditions


@dataclass(frozen=True, slots=True)
class Leaf:
    """`path` finds values; `operator` with `operand` tests them.

    exists/absent: whether the path finds at least one non-null value. Every other operator
    holds when every value found satisfies it (`match: all`, the default) or at least one does
    (`match: any`); when the path finds none, the condition is `if_absent` (false unless the
    file says otherwise).
    """

    path: JSONPath
    text: str
    operator: str
    operand: Any
    if_absent: bool
    match_any: bool
    fix: tuple[tuple[str, str], ...] = ()  # remediation values when this test fails

    def holds(self, document: Mapping[str, Any]) -> bool:
        values = [m.value for m in self.path.find(document) if m.value is not None]
        if self.operator == "exists":
            return bool(values)
        if self.operator == "absent":
            return not values
        if not values:
            return self.if_absent
        verdicts = (_satisfies(self.operator, self.operand, v) for v in values)
        return any(verdicts) if self.match_any else all(verdicts)

    def first_failing(self, document: Mapping[str, Any]) -> Leaf | None:
        return None if self.holds(document) else self

    def leaves(self) -> Iterator[Leaf]:
        yield self

    def failure_path(self, document: Mapping[str, Any]) -> str:
        """Where a failing condition points: the first offending value, else the path."""
        if self.operator != "exists":
            for found in self.path.find(document):
                if found.value is None:
                    continue
                if self.operator == "absent" or not _satisfies(
                    self.operator, self.operand, found.value
                ):
                    return str(found.full_path).replace(".[", "[")
        return self.text.removeprefix("$").removeprefix(".")


@dataclass(frozen=True, slots=True)
class Combined:
    combinator: str  # all_of | any_of
    parts: tuple[Condition, ...]

    def holds(self, document: Mapping[str, Any]) -> bool:
        results = (p.holds(document) for p in self.parts)
        return all(results) if self.combinator == "all_of" else any(results)

    def first_failing(self, document: Mapping[str, Any]) -> Leaf | None:
        """The leaf to point a finding at: the first failing part (of any_of: the first)."""
        if self.holds(document):
            return None
        for part in self.parts:
            leaf = part.first_failing(document)
            if leaf is not None:
                return leaf
        return None  # pragma: no cover - a failing combination has a failing part

    def leaves(self) -> Iterator[Leaf]:
        for part in self.parts:
            yield from part.leaves()


Condition = Leaf | Combined


def _same(a: object, b: object) -> bool:
    # YAML `true` and `1` are different values to a Kubernetes field; Python says they are equal.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return a == b


def _number(value: object) -> Decimal | None:
    """A number or a Kubernetes quantity ("500m", "1Gi"); None for anything else."""
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


_COMPARE: dict[str, Callable[[Decimal, Decimal], bool]] = {
    "gt": lambda v, o: v > o,
    "ge": lambda v, o: v >= o,
    "lt": lambda v, o: v < o,
    "le": lambda v, o: v <= o,
}


def _satisfies(operator: str, operand: Any, value: object) -> bool:
    if operator == "equals":
        return _same(value, operand)
    if operator == "not_equals":
        return not _same(value, operand)
    if operator == "in":
        return any(_same(value, o) for o in operand)
    if operator == "not_in":
        return not any(_same(value, o) for o in operand)
    if operator == "matches":
        return isinstance(value, str) and operand.search(value) is not None
    number = _number(value)
    return number is not None and _COMPARE[operator](number, operand)


def _parse_condition(raw: object, field: str) -> Condition:
    if not isinstance(raw, Mapping):
        raise _FieldError(field, "must be a mapping with `path` and one operator, or all_of/any_of")
    combinators = [k for k in COMBINATORS if k in raw]
    if combinators:
        if len(raw) != 1:
            raise _FieldError(field, f"{combinators[0]} must be the only key of its condition")
        name = combinators[0]
        parts = raw[name]
        if not isinstance(parts, list) or not parts:
            raise _FieldError(f"{field}.{name}", "must be a non-empty list of conditions")
        return Combined(
            name, tuple(_parse_condition(p, f"{field}.{name}[{i}]") for i, p in enumerate(parts))
        )
    unknown = sorted(set(raw) - {"path", "fix", *MODIFIERS, *OPERATORS})
    if unknown:
        known = ", ".join((*OPERATORS, *COMBINATORS))
        raise _FieldError(f"{field}.{unknown[0]}", f"unknown condition (expected one of {known})")
    if "path" not in raw:
        raise _FieldError(f"{field}.path", "missing")
    operators = [k for k in OPERATORS if k in raw]
    if len(operators) != 1:
        raise _FieldError(field, f"needs exactly one operator of {', '.join(OPERATORS)}")
    operator = operators[0]
    text = raw["path"]
    return Leaf(
        _parse_path(text, f"{field}.path"),
        str(text),
        operator,
        _parse_operand(operator, raw[operator], f"{field}.{operator}"),
        _parse_modifier(raw, "if_absent", operator, field) is True,
        _parse_modifier(raw, "match", operator, field) == "any",
        _parse_fix(raw.get("fix", {}), f"{field}.fix"),
    )


def _parse_fix(raw: object, field: str) -> tuple[tuple[str, str], ...]:
    """`fix`: names and values the remediation template gets when this test fails."""
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and _IDENTIFIER.match(k) and isinstance(v, str | int | float)
        for k, v in raw.items()
    ):
        raise _FieldError(field, "must map template names (letters, digits, _) to strings")
    return tuple((str(k), str(v)) for k, v in sorted(raw.items()))


def _parse_path(text: object, field: str) -> JSONPath:
    if not isinstance(text, str) or not text.startswith("$"):
        raise _FieldError(field, f"must be a JSONPath starting at the object root `$`: {text!r}")
    try:
        return parse_jsonpath(text)
    except (JSONPathError, ValueError, TypeError, AttributeError) as exc:
        raise _FieldError(field, f"invalid JSONPath {text!r}: {exc}") from None


def _parse_operand(operator: str, operand: object, field: str) -> Any:
    if operator in PRESENCE_OPERATORS:
        if operand is not True:
            raise _FieldError(field, "must be true")
        return True
    if operator in ("in", "not_in"):
        if not isinstance(operand, list) or not operand:
            raise _FieldError(field, "must be a non-empty list")
        return tuple(operand)
    if operator == "matches":
        if not isinstance(operand, str):
            raise _FieldError(field, "must be a regular expression string")
        try:
            return re.compile(operand)
        except re.error as exc:
            raise _FieldError(field, f"invalid regular expression {operand!r}: {exc}") from None
    if operator in _COMPARE:
        number = _number(operand)
        if number is None:
            raise _FieldError(field, f"must be a number or a quantity, not {operand!r}")
        return number
    if isinstance(operand, Mapping | list):
        raise _FieldError(field, "must be a single value (string, number, boolean)")
    return operand


def _parse_modifier(raw: Mapping[str, Any], key: str, operator: str, field: str) -> object:
    """if_absent (true/false) or match (all/any): they qualify value operators only."""
    if key not in raw:
        return None
    if operator in PRESENCE_OPERATORS:
        raise _FieldError(f"{field}.{key}", f"does not apply to {operator}")
    value = raw[key]
    allowed: tuple[object, ...] = (True, False) if key == "if_absent" else ("all", "any")
    if not any(_same(value, a) for a in allowed):
        raise _FieldError(f"{field}.{key}", f"must be {' or '.join(map(str, allowed)).lower()}")
    return value


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class TargetSpec:
    kinds: tuple[str, ...]
    scope: str
    gpu_only: bool

    def documents(self, snapshot: Snapshot) -> Iterator[tuple[Target, Mapping[str, Any], str]]:
        """(what to report on, the document the paths are evaluated in, its path in the
        object) for every object, pod template or container the check looks at."""
        if self.scope == "object":
            for resource in snapshot.of(*self.kinds):
                yield resource, resource.raw, ""
            return
        for template in pod_templates(snapshot, self.kinds):
            if self.gpu_only and not template.requests_gpu:
                continue
            if self.scope == "pod":
                # The pod's own metadata and spec: a Pod itself, or a controller's template.
                yield (
                    template,
                    {"metadata": template.metadata, "spec": template.spec},
                    (template.path.removesuffix("spec").removesuffix(".")),
                )
                continue
            containers: Sequence[Container] = (
                template.gpu_containers() if self.gpu_only else template.containers()
            )
            for container in containers:
                yield container, container.raw, container.path


def _parse_target(raw: object) -> TargetSpec:
    if not isinstance(raw, Mapping):
        raise _FieldError("target", "must be a mapping with `kinds` (and optionally `scope`)")
    unknown = sorted(set(raw) - {"kinds", "scope", "gpu_only"})
    if unknown:
        raise _FieldError(f"target.{unknown[0]}", "unknown field (expected kinds, scope, gpu_only)")
    scope = raw.get("scope", "object")
    if scope not in SCOPES:
        raise _FieldError("target.scope", f"{scope!r} is not one of {', '.join(SCOPES)}")
    gpu_only = raw.get("gpu_only", False)
    if not isinstance(gpu_only, bool):
        raise _FieldError("target.gpu_only", "must be true or false")
    if gpu_only and scope == "object":
        raise _FieldError("target.gpu_only", "applies to scope pod or container only")
    kinds = raw.get("kinds", list(WORKLOAD_TYPES) if scope != "object" else None)
    if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) for k in kinds):
        raise _FieldError("target.kinds", "must be a non-empty list of resource types")
    allowed = set(KNOWN_KINDS) if scope == "object" else set(WORKLOAD_TYPES)
    for index, kind in enumerate(kinds):
        if kind not in allowed:
            what = "a resource type gpu-audit reads" if scope == "object" else "a workload type"
            raise _FieldError(f"target.kinds[{index}]", f"unknown kind {kind!r} (not {what})")
    return TargetSpec(tuple(dict.fromkeys(kinds)), scope, gpu_only)


# --------------------------------------------------------------------------- files


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value.strip():
        raise _FieldError(key, "must be a non-empty string")
    return value


def _messages(raw: Mapping[str, Any]) -> tuple[str, str]:
    messages = raw.get("messages", {})
    if not isinstance(messages, Mapping) or set(messages) - {"pass", "fail"}:
        raise _FieldError("messages", "must be a mapping with `pass` and/or `fail`")
    for key in ("pass", "fail"):
        if key in messages and not isinstance(messages[key], str):
            raise _FieldError(f"messages.{key}", "must be a string")
    title = _text(raw, "title")
    return (
        str(messages.get("pass", f"meets: {title}")),
        str(messages.get("fail", f"does not meet: {title}")),
    )


def _evaluator(
    target: TargetSpec, where: Condition | None, require: Condition, messages: tuple[str, str]
) -> Callable[[Snapshot], Iterator[Result]]:
    pass_message, fail_message = messages

    def evaluate(snapshot: Snapshot) -> Iterator[Result]:
        for subject, document, prefix in target.documents(snapshot):
            if where is not None and not where.holds(document):
                continue
            leaf = require.first_failing(document)
            if leaf is None:
                yield passed(subject, pass_message)
                continue
            field = leaf.failure_path(document)
            fix = (
                {
                    "container": subject.name,
                    "section": "initContainers" if subject.init else "containers",
                }
                if isinstance(subject, Container)
                else {}
            )
            fix.update(leaf.fix)
            yield failed(subject, fail_message, path=_join(prefix, field), fix=fix)

    return evaluate


def _join(prefix: str, field: str) -> str:
    return f"{prefix}.{field}" if prefix and field else prefix or field


def _build(raw: Mapping[str, Any], stem: str, origin_file: str) -> Check:
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise _FieldError(missing[0], "missing")
    unknown = sorted(set(raw) - TOP_LEVEL_KEYS)
    if unknown:
        raise _FieldError(unknown[0], "unknown field")
    try:
        category = Category.parse(_text(raw, "category"))
    except ValueError as exc:
        raise _FieldError("category", str(exc)) from None
    try:
        severity = Severity.parse(_text(raw, "severity"))
    except ValueError as exc:
        raise _FieldError("severity", str(exc)) from None
    references = raw["references"]
    if not isinstance(references, list) or not references:
        raise _FieldError("references", "must be a non-empty list of https:// URLs")
    for index, ref in enumerate(references):
        if not isinstance(ref, str) or not ref.startswith("https://"):
            raise _FieldError(f"references[{index}]", f"must be an https:// URL, not {ref!r}")
    target = _parse_target(raw["target"])
    where = _parse_condition(raw["where"], "where") if "where" in raw else None
    require = _parse_condition(raw["require"], "require")
    _check_template_names(_text(raw, "remediation"), target, require)
    function = _evaluator(target, where, require, _messages(raw))
    function.__name__ = function.__qualname__ = stem
    function.__module__ = origin_file
    remediation_root = raw.get("remediation_root", "")
    fix_kind = _fix_kind(raw)
    generic = raw.get("remediation_generic", "")
    if not isinstance(generic, str):
        raise _FieldError("remediation_generic", "must be a string")
    severity_evidence = raw.get("severity_evidence", "")
    if not isinstance(severity_evidence, str):
        raise _FieldError("severity_evidence", "must be a string")
    requires = (target.kinds[0],) if len(target.kinds) == 1 else (target.kinds,)
    admission = (
        _admission(raw["admission"], target, _messages(raw)[1]) if "admission" in raw else None
    )
    try:
        declared = check(
            id=_text(raw, "id"),
            title=_text(raw, "title"),
            category=category,
            severity=severity,
            rationale=_text(raw, "rationale"),
            detection=_text(raw, "detection"),
            severity_evidence=severity_evidence,
            remediation=_text(raw, "remediation"),
            references=references,
            requires=requires,
            remediation_root=remediation_root,
            fix_kind=fix_kind,
            remediation_generic=generic,
            admission=admission,
        )
    except ValueError as exc:
        fields = ("remediation_root", "remediation_generic")
        field = next((f for f in fields if f in str(exc)), "id")
        raise _FieldError(field, str(exc)) from None
    return declared(function)


_ADMISSION_KEYS = ("valid", "where", "message", "severity", "note")


def _admission(raw: object, target: TargetSpec, fail_message: str) -> AdmissionRule:
    """`admission`: the check as CEL on the object at admission (gpu_audit.admission), for
    the same target: `valid` (required), `where`, `message` (default: messages.fail),
    `severity` and `note` (when the CEL decides a part of the check)."""
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        raise _FieldError("admission", f"must be a mapping of {', '.join(_ADMISSION_KEYS)}")
    unknown = sorted(set(map(str, raw)) - set(_ADMISSION_KEYS))
    if unknown:
        raise _FieldError(f"admission.{unknown[0]}", "unknown field")
    try:
        severity = Severity.parse(raw["severity"]) if "severity" in raw else None
        return AdmissionRule(
            scope=target.scope,
            valid=str(raw.get("valid", "")).strip(),
            message=str(raw.get("message", fail_message)).strip(),
            kinds=target.kinds,
            where=str(raw.get("where", "")).strip(),
            severity=severity,
            note=str(raw.get("note", "")).strip(),
        )
    except ValueError as exc:
        raise _FieldError("admission", str(exc)) from None


def _fix_kind(raw: Mapping[str, Any]) -> FixKind | None:
    if "fix_kind" not in raw:
        return None
    value = raw["fix_kind"]
    if not isinstance(value, str):
        raise _FieldError("fix_kind", f"must be one of {', '.join(k.value for k in FixKind)}")
    try:
        return FixKind.parse(value)
    except ValueError as exc:
        raise _FieldError("fix_kind", str(exc)) from None


def _check_template_names(remediation: str, target: TargetSpec, require: Condition) -> None:
    """Every $name of the remediation is one the engine fills in, or one each test of
    `require` gives in its `fix`: a finding points at any one of them."""
    given = {"kind", "namespace", "name"}
    if target.scope == "container":
        given |= {"container", "section"}
    template = string.Template(remediation)
    if not template.is_valid():
        raise _FieldError("remediation", "is not a valid template (write $$ for a literal $)")
    names = set(template.get_identifiers())
    for leaf in require.leaves():
        missing = sorted(names - given - {k for k, _ in leaf.fix})
        if missing:
            raise _FieldError(
                "remediation",
                f"uses ${missing[0]}, which the test of {leaf.text} does not give in its `fix`",
            )


def load_check_file(path: Path) -> Check:
    """One declarative check file. Raises InputError naming the file and the field."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError([f"{path}: cannot read: {exc.strerror}"]) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError([f"{path}: not valid YAML: {exc}"]) from None
    if not isinstance(raw, Mapping):
        raise InputError([f"{path}: a check file is one YAML mapping"])
    try:
        return _build(raw, path.stem, str(path))
    except _FieldError as exc:
        raise InputError([f"{path}: {exc}"]) from None


def load_check_dir(directory: Path) -> list[Check]:
    """Every *.yaml / *.yml file of a directory (not recursive), sorted by file name.

    All problems are collected, so one run lists every broken file; two files with one id are
    an error naming both.
    """
    if not directory.is_dir():
        raise InputError([f"{directory}: not a directory"])
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    checks: list[Check] = []
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for path in files:
        try:
            found = load_check_file(path)
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        if found.id in seen:
            problems.append(f"{path}: id: {found.id} is already defined by {seen[found.id]}")
            continue
        seen[found.id] = path
        checks.append(found)
    if problems:
        raise InputError(problems)
    return checks


def load_check_dirs(directories: Iterable[str]) -> list[tuple[str, list[Check]]]:
    """(origin, checks) per --checks-dir, ready for registry.load_checks(extra=...)."""
    return [(f"--checks-dir {d}", load_check_dir(Path(d))) for d in directories]
