"""Renderers: each turns the report document into one output format."""

from __future__ import annotations

from gpu_audit.reports.base import Renderer
from gpu_audit.reports.html import HTML
from gpu_audit.reports.json import JSON
from gpu_audit.reports.junit import JUNIT
from gpu_audit.reports.prometheus import PROMETHEUS
from gpu_audit.reports.sarif import SARIF
from gpu_audit.reports.table import TABLE

RENDERERS: dict[str, Renderer] = {r.name: r for r in (JSON, TABLE, HTML, SARIF, JUNIT, PROMETHEUS)}

__all__ = ["RENDERERS", "Renderer"]
