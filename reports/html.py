"""The HTML report: one self-contained page (inline CSS, JS and SVG charts, no network).

Everything from the cluster goes through Jinja's autoescaping; links are made only from
http(s) URLs. The Content-Security-Policy allows nothing but the page's own style and script
blocks, named by their SHA-256, so injected markup could neither load nor run anything even if
it got through. The hashes keep the page byte-identical for the same report (a nonce would not).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from gpu_audit.reports.base import (
    Document,
    Renderer,
    fix_command,
    impact_text,
    number,
    related_groups,
)
from gpu_audit.reports.table import SEVERITIES

CLUSTER_SCOPED = "(cluster-scoped)"
NAMESPACE_CHART_ROWS = 20  # the chart shows the lowest-scoring ones; the table lists them all
FIX_FIRST = 10  # findings in the "Fix first" list at the top
INCOMPLETE = "incomplete"  # the grade below the coverage floor (gpu_audit.scoring)
_BINARY_UNITS = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)
_SUFFIXED_BYTES = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi)\b")
_MILLICORES = re.compile(r"(?<![\w.])(\d+)m\b")
_PLAIN_INT = re.compile(r"(?<![\w.])(\d{5,})(?![\w.])")
BYTE_RESOURCES = ("memory", "ephemeral-storage", "hugepages-")
WHOLE_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


def http_url(value: object) -> str | None:
    """The URL when it is an absolute http(s) URL, else None (no javascript:, data:, ...)."""
    if not isinstance(value, str):
        return None
    parts = urlsplit(value.strip())
    return value.strip() if parts.scheme in ("http", "https") and parts.netloc else None


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of a horizontal bar chart; `fraction` (0-1) of the track is filled."""

    label: str
    fraction: float | None
    text: str
    css: str


def coverage_text(row: Mapping[str, Any]) -> str:
    """ "5 of 9 checks evaluated" for a score row that says (schema 1.3), else ""."""
    cov = row.get("coverage")
    if not cov:
        return ""
    return f"{cov['evaluated']} of {cov['applicable']} checks evaluated"


def _score_bar(label: str, row: Mapping[str, Any]) -> Bar:
    cov = coverage_text(row)
    if row["score"] is None:
        return Bar(label, None, "not evaluated", "fill-none")
    grade = row["grade"]
    text = f"{row['score']:.1f} · {grade}" + (f" · {cov}" if cov else "")
    css = "fill-none" if grade in (None, INCOMPLETE) else f"fill-{grade}"
    return Bar(label, row["score"] / 100, text, css)


def _severity_bars(document: Document) -> list[Bar]:
    counts = document["summary"]["by_severity"]
    most = max([counts.get(sev, 0) for sev in SEVERITIES] + [1])
    return [
        Bar(sev, counts.get(sev, 0) / most, str(counts.get(sev, 0)), f"fill-{sev}")
        for sev in SEVERITIES
    ]


def _category_bars(document: Document) -> list[Bar]:
    return [_score_bar(row["title"], row) for row in document["score"]["categories"]]


def _namespace_bars(document: Document) -> list[Bar]:
    """The lowest-scoring namespaces first (unscored last), as many as the chart shows."""
    rows = sorted(
        document["score"]["namespaces"], key=lambda r: (r["score"] is None, r["score"] or 0.0)
    )
    return [_score_bar(r["namespace"] or CLUSTER_SCOPED, r) for r in rows[:NAMESPACE_CHART_ROWS]]


def usage_segments(counts: Mapping[str, Any]) -> Sequence[tuple[str, float, float]]:
    """(css class, start, width) over allocatable: in use, held by exited containers (part of
    what is requested), idle."""
    allocatable = float(counts["allocatable"] or 0)
    if allocatable <= 0:
        return ()
    held = min(float(counts["held_by_finished"]), float(counts["requested"]))
    parts = (
        ("requested", float(counts["requested"]) - held),
        ("held", held),
        ("idle", float(counts["idle"])),
    )
    segments, start = [], 0.0
    for css, amount in parts:
        width = max(0.0, min(amount / allocatable, 1.0 - start))
        if width > 0:
            segments.append((css, start, width))
            start += width
    return segments


def _csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def worst_severity(items: Sequence[Mapping[str, Any]]) -> str:
    """The most severe severity among these findings."""
    return str(min((f["severity"] for f in items), key=SEVERITIES.index))


def _group_by_check(document: Document, items: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Findings under their check, in the document's order (severity first). A group's
    severity is its worst finding's: a check's findings may be rated below its default."""
    checks = {c["id"]: c for c in document["checks"]}
    grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for finding in items:
        grouped[finding["check_id"]].append(finding)
    return [
        {"check": checks[cid], "findings": found, "severity": worst_severity(found)}
        for cid, found in grouped.items()
    ]


def _fix_first(document: Document) -> list[dict[str, Any]]:
    """The first findings of the document's order (severity, then GPU impact), each with its
    fix in one line: its command, else the state its check asks for (the check's title)."""
    return [{"finding": f, "command": fix_command(f)} for f in document["findings"][:FIX_FIRST]]


def _bytes(value: Decimal) -> str:
    """Bytes in the largest binary unit they reach: 256Gi, 29.9Gi, 512."""
    for unit, size in _BINARY_UNITS:
        if abs(value) >= size:
            scaled = value / size
            if scaled == scaled.to_integral_value():
                return f"{int(scaled)}{unit}"
            return f"{format(round(scaled, 1).normalize(), 'f')}{unit}"
    return number(int(value)) if value == value.to_integral_value() else number(float(value))


def _cores(value: Decimal) -> str:
    text = format(round(value, 2).normalize(), "f")
    return f"{text} core{'' if value == 1 else 's'}"


def quantity(value: object, resource: str) -> str:
    """A resource amount as a person reads it: memory in Gi/Mi, CPU in cores, GPUs counted."""
    if isinstance(value, bool):
        return str(value)
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return humanise(f"{resource}: {value}").split(": ", 1)[1]
    if resource.startswith(BYTE_RESOURCES):
        return _bytes(amount)
    if resource == "cpu":
        return _cores(amount)
    if resource in WHOLE_GPU_RESOURCES:
        return f"{number(value)} GPU{'' if amount == 1 else 's'}"
    return number(value)


def _suffixed(match: re.Match[str]) -> str:
    unit = dict(_BINARY_UNITS)[match.group(2)]
    return _bytes(Decimal(match.group(1)) * unit)


def humanise(text: str) -> str:
    """Quantities in a sentence made readable: `allocatable 31369508Ki` -> 29.9Gi, a memory
    clause's raw bytes -> Gi, a cpu clause's millicores -> cores. Display only: the JSON and
    the remediations keep the exact values."""
    clauses = []
    for clause in text.split(";"):
        head = clause.lstrip().split(":", 1)[0]
        clause = _SUFFIXED_BYTES.sub(_suffixed, clause)
        if head.startswith(BYTE_RESOURCES):
            clause = _PLAIN_INT.sub(lambda m: _bytes(Decimal(m.group(1))), clause)
        elif head == "cpu":
            clause = _MILLICORES.sub(lambda m: _cores(Decimal(m.group(1)) / 1000), clause)
        clauses.append(clause)
    return ";".join(clauses)


def _filter_options(document: Document) -> dict[str, list[tuple[str, str]]]:
    """(value, label) of the categories and namespaces that have findings, for the filters."""
    titles = {c["category"]: c["title"] for c in document["score"]["categories"]}
    categories = sorted({f["category"] for f in document["findings"]})
    namespaces = sorted({f["resource"]["namespace"] or "" for f in document["findings"]})
    return {
        "categories": [(c, titles.get(c, c)) for c in categories],
        "namespaces": [(ns, ns or CLUSTER_SCOPED) for ns in namespaces],
    }


def render_html(document: Document, color: bool = False) -> str:
    import jinja2  # imported here: only the HTML output needs it
    from markupsafe import Markup

    loader = jinja2.PackageLoader("gpu_audit.reports", "templates")
    env = jinja2.Environment(
        loader=loader,
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["http_url"] = http_url
    env.filters["number"] = number
    env.filters["quantity"] = quantity
    env.filters["humanise"] = humanise
    env.filters["impact_text"] = impact_text
    env.filters["coverage_text"] = coverage_text
    env.globals["usage_segments"] = usage_segments
    env.globals["related_groups"] = related_groups
    # The page's own assets, inserted verbatim: they are files of this package, not cluster data.
    css = loader.get_source(env, "report.css")[0]
    js = loader.get_source(env, "report.js")[0]
    csp = (
        f"default-src 'none'; style-src {_csp_hash(css)}; script-src {_csp_hash(js)}; "
        "base-uri 'none'; form-action 'none'"
    )
    diagnostics = document.get("diagnostics") or {}
    return env.get_template("report.html.j2").render(
        report=document,
        css=Markup(css),
        js=Markup(js),
        csp=csp,
        severities=SEVERITIES,
        groups=_group_by_check(document, document["findings"]),
        fix_first=_fix_first(document),
        exempted_groups=_group_by_check(document, document.get("exempted_findings") or []),
        options=_filter_options(document),
        charts={
            "severity": _severity_bars(document),
            "category": _category_bars(document),
            "namespace": _namespace_bars(document),
        },
        cluster_scoped=CLUSTER_SCOPED,
        inventory=diagnostics.get("inventory"),
        pending_pods=diagnostics.get("pending_pods"),
        exemptions=document.get("exemptions") or {},
        baseline=document.get("baseline"),
        compliance=document.get("compliance"),
        blocked=[
            c
            for c in document["checks"]
            if c["status"] in ("not_evaluated", "error") and c["applicable"]
        ],
    )


HTML = Renderer("html", "html", render_html, "self-contained HTML page")
