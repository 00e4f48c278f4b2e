"""The canonical JSON report: sorted keys, so the same input gives the same bytes."""

from __future__ import annotations

from gpu_audit.report import dumps
from gpu_audit.reports.base import Document, Renderer


def render_json(document: Document, color: bool = False) -> str:
    return dumps(document)


JSON = Renderer("json", "json", render_json, "canonical machine-readable report")
