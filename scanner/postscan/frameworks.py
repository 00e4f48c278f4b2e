"""Compliance frameworks: the controls of published guidance, each mapped to the checks that
show it on a cluster, and the verdict of every control in one report.

A framework is a YAML file (the shipped ones are in framework_mappings/). Controls that no
check can show are listed under `not_assessable` with the reason, so a framework never looks
more covered than it is.

Control verdicts, from the mapped checks' statuses in the report:

- fail: at least one mapped check failed (exempted results count as their check counts them);
- pass: no mapped check failed, none was left unassessed, and at least one passed; checks that
  found nothing to apply to (not applicable) are neutral;
- not_evaluated: otherwise: a mapped check was not evaluated, raised an error or was not run
  (--only, --skip, --category), so a partially evaluated control is not a pass; or every mapped
  check was not applicable.

score = 100 * passed controls / (passed + failed controls), null when no control was decided.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_audit.errors import InputError

FRAMEWORK_DIR = Path(__file__).parent / "framework_mappings"
CHECK_ID = re.compile(r"[A-Z][A-Z0-9]*-[A-Z]+-[0-9]{3}")
CONTROL_STATUSES = ("pass", "fail", "not_evaluated")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_FRAMEWORK_KEYS = {"id", "title", "version", "date", "url", "description", "controls"}
_OPTIONAL_FRAMEWORK_KEYS = {"not_assessable"}
_CONTROL_KEYS = {"id", "title", "description", "url", "checks"}
_UNASSESSED_KEYS = {"id", "title", "url", "reason"}


@dataclass(frozen=True, slots=True)
class Control:
    id: str
    title: str
    description: str
    url: str
    checks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UnassessedControl:
    """A control of the framework that no check can show, and why."""

    id: str
    title: str
    url: str
    reason: str


@dataclass(frozen=True, slots=True)
class Framework:
    id: str
    title: str
    version: str
    date: str  # when the mapping was last reviewed against the source, YYYY-MM-DD
    url: str
    description: str
    controls: tuple[Control, ...]
    not_assessable: tuple[UnassessedControl, ...]
    file: str


class _Problems:
    """Collects every problem of one file, so the user fixes them in one pass."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(
            f"{self.file}: {where}: {message}" if where else f"{self.file}: {message}"
        )

    def text(self, data: Mapping[str, Any], key: str, where: str, *, url: bool = False) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            self.add(where, f"{key} must be a non-empty string")
            return ""
        if url and not value.startswith("https://"):
            self.add(where, f"{key} must be an https:// URL, not {value!r}")
        return value.strip()

    def keys(self, data: Mapping[str, Any], allowed: set[str], where: str) -> None:
        unknown = sorted(str(k) for k in data if k not in allowed)
        if unknown:
            self.add(
                where,
                f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})",
            )


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([f"{path}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError:
        raise InputError([f"{path}: not UTF-8 text"]) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError([f"{path}: invalid YAML{line}"]) from None


def _check_ids(
    raw: Any, where: str, known: Collection[str], problems: _Problems
) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        problems.add(where, "checks must be a non-empty list of check ids")
        return ()
    ids: list[str] = []
    for value in raw:
        if not isinstance(value, str) or not CHECK_ID.fullmatch(value):
            problems.add(where, f"{value!r} is not a check id (like GPU-NODE-001)")
        elif value not in known:
            problems.add(where, f"unknown check id {value} (see `gpu-audit checks list`)")
        elif value in ids:
            problems.add(where, f"check {value} is listed twice")
        else:
            ids.append(value)
    return tuple(sorted(ids))


def _entries(data: Mapping[str, Any], key: str, problems: _Problems) -> list[tuple[str, Any]]:
    raw = data.get(key, [] if key in _OPTIONAL_FRAMEWORK_KEYS else None)
    if not isinstance(raw, list) or (key not in _OPTIONAL_FRAMEWORK_KEYS and not raw):
        problems.add(
            "", f"{key} must be a {'' if key in _OPTIONAL_FRAMEWORK_KEYS else 'non-empty '}list"
        )
        return []
    found: list[tuple[str, Any]] = []
    for index, entry in enumerate(raw):
        label = entry.get("id") if isinstance(entry, dict) else None
        where = f"{key}[{index}]" + (f" ({label})" if isinstance(label, str) else "")
        if not isinstance(entry, dict):
            problems.add(where, "must be a mapping")
            continue
        found.append((where, entry))
    return found


def load_framework(path: Path, known_checks: Collection[str]) -> Framework:
    """Read and validate one framework file; every problem is reported with the file and the
    control it is in. `known_checks` are the ids a mapping may name."""
    data = _read_yaml(path)
    problems = _Problems(str(path))
    if not isinstance(data, dict):
        raise InputError(
            [
                f"{path}: a framework file is a YAML mapping with {', '.join(sorted(_FRAMEWORK_KEYS))}"
            ]
        )
    problems.keys(data, _FRAMEWORK_KEYS | _OPTIONAL_FRAMEWORK_KEYS, "")
    framework_id = problems.text(data, "id", "")
    title = problems.text(data, "title", "")
    version = problems.text(data, "version", "")
    description = problems.text(data, "description", "")
    url = problems.text(data, "url", "", url=True)
    raw_date = data.get("date")
    # YAML reads a bare 2026-01-31 as a date, a quoted one as a string: accept both.
    date = raw_date.isoformat() if isinstance(raw_date, dt.date) else raw_date
    if not isinstance(date, str) or not _DATE.fullmatch(date):
        problems.add("", "date must be YYYY-MM-DD")
        date = ""
    controls: list[Control] = []
    for where, entry in _entries(data, "controls", problems):
        problems.keys(entry, _CONTROL_KEYS, where)
        controls.append(
            Control(
                id=problems.text(entry, "id", where),
                title=problems.text(entry, "title", where),
                description=problems.text(entry, "description", where),
                url=problems.text(entry, "url", where, url=True),
                checks=_check_ids(entry.get("checks"), where, known_checks, problems),
            )
        )
    unassessed: list[UnassessedControl] = []
    for where, entry in _entries(data, "not_assessable", problems):
        problems.keys(entry, _UNASSESSED_KEYS, where)
        unassessed.append(
            UnassessedControl(
                id=problems.text(entry, "id", where),
                title=problems.text(entry, "title", where),
                url=problems.text(entry, "url", where, url=True),
                reason=problems.text(entry, "reason", where),
            )
        )
    seen: set[str] = set()
    for control_id in [c.id for c in controls] + [u.id for u in unassessed]:
        if control_id and control_id in seen:
            problems.add("", f"control id {control_id} is used twice")
        seen.add(control_id)
    if problems.items:
        raise InputError(problems.items)
    return Framework(
        id=framework_id,
        title=title,
        version=version,
        date=date,
        url=url,
        description=description,
        controls=tuple(controls),
        not_assessable=tuple(unassessed),
        file=str(path),
    )


def shipped_frameworks(known_checks: Collection[str]) -> dict[str, Framework]:
    """The frameworks shipped with gpu-audit, by id."""
    found: dict[str, Framework] = {}
    for path in sorted(FRAMEWORK_DIR.glob("*.yaml")):
        framework = load_framework(path, known_checks)
        if framework.id in found:
            raise InputError(
                [f"{path}: framework id {framework.id} is also used by {found[framework.id].file}"]
            )
        found[framework.id] = framework
    return found


def resolve_frameworks(names: Iterable[str], known_checks: Collection[str]) -> list[Framework]:
    """`--framework` values: a shipped framework's id, or the path of a framework file."""
    shipped: dict[str, Framework] | None = None
    chosen: dict[str, Framework] = {}
    for name in names:
        if name.endswith((".yaml", ".yml")) or "/" in name:
            framework = load_framework(Path(name), known_checks)
        else:
            shipped = shipped if shipped is not None else shipped_frameworks(known_checks)
            if name not in shipped:
                raise InputError(
                    [
                        f"--framework {name!r}: unknown framework (available: {', '.join(sorted(shipped))}, or a .yaml file)"
                    ]
                )
            framework = shipped[name]
        chosen[framework.id] = framework
    return [chosen[key] for key in sorted(chosen)]


def _check_state(entry: Mapping[str, Any] | None) -> str:
    """A check's status as a control sees it: not_applicable and not_run are told apart from
    not_evaluated because they weigh differently."""
    if entry is None:
        return "not_run"
    if entry["status"] == "not_evaluated" and not entry["applicable"]:
        return "not_applicable"
    return str(entry["status"])


def control_verdict(states: Mapping[str, str]) -> tuple[str, str | None]:
    """(status, reason) of a control whose mapped checks (by id) have these states."""
    if "failed" in states.values():
        return "fail", None
    assessed = {c: s for c, s in states.items() if s != "not_applicable"}
    if not assessed:
        return "not_evaluated", "nothing in the input that its checks apply to"
    open_ = {c: s for c, s in assessed.items() if s != "passed"}
    if open_:
        by_state: dict[str, list[str]] = {}
        for check_id, state in sorted(open_.items()):
            by_state.setdefault(state.replace("_", " "), []).append(check_id)
        parts = [f"{state}: {', '.join(ids)}" for state, ids in sorted(by_state.items())]
        passed = len(assessed) - len(open_)
        return "not_evaluated", f"{'; '.join(parts)} ({passed} of {len(assessed)} passed)"
    return "pass", None


def _framework_result(
    framework: Framework, checks: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    controls = []
    for control in framework.controls:
        states = {check_id: _check_state(checks.get(check_id)) for check_id in control.checks}
        status, reason = control_verdict(states)
        controls.append(
            {
                "id": control.id,
                "title": control.title,
                "description": control.description,
                "url": control.url,
                "status": status,
                "reason": reason,
                "checks": [{"id": check_id, "status": state} for check_id, state in states.items()],
            }
        )
    counts = {s: sum(1 for c in controls if c["status"] == s) for s in CONTROL_STATUSES}
    decided = counts["pass"] + counts["fail"]
    return {
        "id": framework.id,
        "title": framework.title,
        "version": framework.version,
        "date": framework.date,
        "url": framework.url,
        "summary": {
            "score": round(100 * counts["pass"] / decided, 1) if decided else None,
            "passed": counts["pass"],
            "failed": counts["fail"],
            "not_evaluated": counts["not_evaluated"],
            "not_assessable": len(framework.not_assessable),
        },
        "controls": controls,
        "not_assessable": [
            {"id": u.id, "title": u.title, "url": u.url, "reason": u.reason}
            for u in framework.not_assessable
        ],
    }


def compliance_section(
    frameworks: Sequence[Framework], checks: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The report's `compliance` list, from its `checks` entries."""
    by_id = {entry["id"]: entry for entry in checks}
    return [_framework_result(framework, by_id) for framework in frameworks]


def frameworks_markdown(frameworks: Iterable[Framework], check_titles: Mapping[str, str]) -> str:
    """docs/frameworks.md. Generated, never edited by hand: the tests fail when it drifts."""
    ordered = sorted(frameworks, key=lambda f: f.id)
    lines = [
        "# Compliance frameworks",
        "",
        "<!-- Generated by `gpu-audit frameworks docs`; do not edit. `make docs` regenerates it. -->",
        "",
        "`gpu-audit scan --framework ID` adds a `compliance` section to the report: one verdict per",
        "control, from the statuses of the checks mapped to it. A control **fails** when a mapped",
        "check failed; it **passes** when no mapped check failed or was left unassessed and at least",
        "one passed (checks with nothing to apply to are neutral); otherwise it is **not evaluated**",
        "(a mapped check was not evaluated, raised, or was not run), so a partially evaluated",
        "control is never a pass. The score is the share of passing controls among the passed and",
        "failed ones. A passing control means the cluster shows no violation the checks can see,",
        "not that every recommendation of the source is followed.",
        "",
        "| ID | Framework | Version | Controls | Not assessable |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| [`{f.id}`](#{f.id}) | {f.title} | {f.version} | {len(f.controls)} | {len(f.not_assessable)} |"
        for f in ordered
    ]
    for framework in ordered:
        lines += [
            "",
            f"## {framework.id}",
            "",
            f"**{framework.title}**, version {framework.version} (mapping reviewed {framework.date}).",
            f"Source: <{framework.url}>",
            "",
            framework.description,
            "",
            "| Control | Checks |",
            "| --- | --- |",
        ]
        for control in framework.controls:
            checks = ", ".join(f"[{c}](checks.md#{c.lower()})" for c in control.checks)
            lines.append(f"| [{control.id}]({control.url}): {control.title} | {checks} |")
        for control in framework.controls:
            lines += [
                "",
                f"### {control.id}",
                "",
                f"[{control.title}]({control.url})",
                "",
                control.description,
                "",
            ]
            lines += [
                f"- {c}: {check_titles.get(c, '(not a built-in check)')}" for c in control.checks
            ]
        if framework.not_assessable:
            lines += ["", "### Not assessable by a scanner", ""]
            lines += [
                f"- [{u.id}]({u.url}) {u.title}: {u.reason}" for u in framework.not_assessable
            ]
    return "\n".join(lines) + "\n"
