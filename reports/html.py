"""The HTML report: one self-contained page (inline CSS and JS, no network), autoescaped."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpu_audit.reports.base import Document, Renderer
from gpu_audit.reports.table import SEVERITIES


def _group_findings(document: Document) -> list[dict[str, Any]]:
    """Findings grouped under their check, checks in severity order. Presentation only: the
    findings and their order come from the document."""
    checks = {c["id"]: c for c in document["checks"]}
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in document["findings"]:
        grouped[finding["check_id"]].append(finding)
    return [{"check": checks[cid], "findings": items} for cid, items in grouped.items()]


def render_html(document: Document, color: bool = False) -> str:
    import jinja2  # imported here: only the HTML output needs it

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpu_audit.reports", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    template = env.get_template("report.html.j2")
    return template.render(
        report=document,
        groups=_group_findings(document),
        severities=SEVERITIES,
        blocked=[
            c
            for c in document["checks"]
            if c["status"] in ("not_evaluated", "error") and c["applicable"]
        ],
    )


HTML = Renderer("html", "html", render_html, "self-contained HTML page")
