"""The HTML report: one self-contained page (inline CSS, JS and SVG charts, no network).

Everything from the cluster goes through Jinja's autoescaping; links are made only from
http(s) URLs. The Content-Security-Policy allows nothing but the page's own style and script
blocks, named by their SHA-256, so injected markup could neither load nor run anything even if
it got through. The hashes keep the page byte-identical for the same report (a nonce would not).
"""

from __future__ import annotations

import base64
import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpu_audit.reports.base import (
    Document,
    Renderer,
    fix_first,
    humanise,
    impact_text,
    number,
    quantity,
    related_groups,
)
from gpu_audit.reports.table import SEVERITIES

if TYPE_CHECKING:
    import jinja2

CLUSTER_SCOPED = "(cluster-scoped)"
NAMESPACE_CHART_ROWS = 20  # the chart shows the lowest-scoring ones; the table lists them all
INCOMPLETE = "incomplete"  # the grade below the coverage floor (gpu_audit.scoring)


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


def group_by_check(document: Document, items: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
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


def _filter_options(document: Document) -> dict[str, list[tuple[str, str]]]:
    """(value, label) of the categories and namespaces that have findings, for the filters."""
    titles = {c["category"]: c["title"] for c in document["score"]["categories"]}
    categories = sorted({f["category"] for f in document["findings"]})
    namespaces = sorted({f["resource"]["namespace"] or "" for f in document["findings"]})
    return {
        "categories": [(c, titles.get(c, c)) for c in categories],
        "namespaces": [(ns, ns or CLUSTER_SCOPED) for ns in namespaces],
    }


def environment() -> jinja2.Environment:
    """The Jinja environment of the HTML pages (this report, the fleet's): autoescaping,
    undefined names an error, the filters and globals the templates use."""
    import jinja2  # imported here: only the HTML output needs it

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpu_audit.reports", "templates"),
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
    return env


def page_assets(env: jinja2.Environment, script: bool = True) -> dict[str, Any]:
    """The page's own stylesheet and script, inserted verbatim (files of this package, not
    cluster data), and the Content-Security-Policy that allows only them, by SHA-256; without
    `script`, no script at all."""
    from markupsafe import Markup

    loader = env.loader
    assert loader is not None  # environment() gives it one
    css = loader.get_source(env, "report.css")[0]
    js = loader.get_source(env, "report.js")[0] if script else ""
    scripts = _csp_hash(js) if script else "'none'"
    return {
        "css": Markup(css),
        "js": Markup(js),
        "csp": (
            f"default-src 'none'; style-src {_csp_hash(css)}; script-src {scripts}; "
            "base-uri 'none'; form-action 'none'"
        ),
    }


def render_html(document: Document, color: bool = False) -> str:
    env = environment()
    diagnostics = document.get("diagnostics") or {}
    return env.get_template("report.html.j2").render(
        report=document,
        **page_assets(env),
        severities=SEVERITIES,
        groups=group_by_check(document, document["findings"]),
        fix_first=fix_first(document),
        exempted_groups=group_by_check(document, document.get("exempted_findings") or []),
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
