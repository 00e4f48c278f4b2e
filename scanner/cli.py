"""The gpu-audit command line.

Exit codes: 0 scan complete and nothing at or above --fail-on; 1 findings at or above
--fail-on; 2 usage or input error; 3 scan incomplete (input not collected or a check raised).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from gpu_audit import __version__
from gpu_audit.catalog import check_metadata, checks_markdown
from gpu_audit.engine import run_checks
from gpu_audit.errors import InputError
from gpu_audit.model import Category, Check, Severity
from gpu_audit.registry import RegistryError, load_checks, select_checks
from gpu_audit.report import Document, build_report, load_report, timestamp_from_epoch
from gpu_audit.reports import RENDERERS
from gpu_audit.sources.files import load_files

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
SEVERITY_CHOICES = [s.value for s in Severity]
FORMAT_CHOICES = sorted(RENDERERS)

EPILOG = """\b
Exit codes:
  0  scan complete, no finding at or above --fail-on
  1  findings at or above --fail-on
  2  usage or input error (the message names the file and document)
  3  scan incomplete: input could not be collected or a check raised
"""


def _fail(problems: Iterable[str], code: int = EXIT_USAGE) -> NoReturn:
    for problem in problems:
        click.echo(f"gpu-audit: error: {problem}", err=True)
    sys.exit(code)


def _split(values: Sequence[str]) -> list[str]:
    """Options that take ids accept them repeated or comma-separated."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _registry(plugins: bool) -> dict[str, Check]:
    try:
        return load_checks(plugins=plugins)
    except RegistryError as exc:
        _fail([str(exc)])


def _write(text: str, destination: str | None, color_ok: bool = False) -> None:
    if destination is None:
        click.echo(text, nl=False)
        return
    try:
        Path(destination).write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail([f"{destination}: cannot write: {exc.strerror}"])
    click.echo(f"wrote {destination}", err=True)


def _use_color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _emit(
    document: Document, formats: Sequence[str], output_file: str | None, output_dir: str | None
) -> None:
    formats = list(dict.fromkeys(formats))
    if output_file and output_dir:
        _fail(["--output-file and --output-dir cannot be used together"])
    if len(formats) > 1 and not output_dir:
        _fail(["several --format values need --output-dir"])
    if output_dir:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
    for name in formats:
        renderer = RENDERERS[name]
        if output_dir:
            target: str | None = str(Path(output_dir) / f"report.{renderer.extension}")
        else:
            target = output_file
        color = target is None and name == "table" and _use_color()
        _write(renderer.render(document, color), target)


@click.group(epilog=EPILOG)
@click.version_option(__version__, prog_name="gpu-audit")
def main() -> None:
    """Audit Kubernetes clusters that run GPU and AI workloads."""


@main.command(epilog=EPILOG)
@click.option(
    "--from-file",
    "from_files",
    multiple=True,
    metavar="PATH",
    help="Scan manifests or dumps instead of a live cluster: a file, a directory (walked in "
    "sorted order), or - for stdin. Repeat to merge several.",
)
@click.option(
    "-o",
    "--format",
    "formats",
    multiple=True,
    type=click.Choice(FORMAT_CHOICES),
    help="Output format (repeat with --output-dir for several). Default: table.",
)
@click.option("--output-file", metavar="PATH", help="Write the report here instead of stdout.")
@click.option("--output-dir", metavar="DIR", help="Write one report.<ext> per --format here.")
@click.option(
    "--fail-on",
    type=click.Choice([*SEVERITY_CHOICES, "none"]),
    default="none",
    show_default=True,
    help="Exit 1 when a finding has this severity or worse.",
)
@click.option("--only", multiple=True, metavar="CHECK", help="Run only these check ids.")
@click.option("--skip", multiple=True, metavar="CHECK", help="Do not run these check ids.")
@click.option(
    "--category",
    "categories",
    multiple=True,
    metavar="CAT",
    help="Run only checks of these categories (name or id code, e.g. monitoring or MON).",
)
@click.option("--no-plugins", is_flag=True, help="Ignore third-party checks.")
def scan(
    from_files: tuple[str, ...],
    formats: tuple[str, ...],
    output_file: str | None,
    output_dir: str | None,
    fail_on: str,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    categories: tuple[str, ...],
    no_plugins: bool,
) -> None:
    """Scan a cluster (or manifests) and report GPU misconfigurations.

    The report holds no wall-clock time unless SOURCE_DATE_EPOCH is set, so the same input
    gives byte-identical JSON.
    """
    try:
        cats = [Category.parse(c) for c in _split(categories)]
    except ValueError as exc:
        _fail([str(exc)])
    registry = _registry(plugins=not no_plugins)
    try:
        enabled = select_checks(registry, only=_split(only), skip=_split(skip), categories=cats)
    except RegistryError as exc:
        _fail([str(exc)])
    if not from_files:
        _fail(
            [
                "live cluster scanning is not available in this version; "
                "scan manifests or a `kubectl get -A -o yaml` dump with --from-file PATH (- for stdin)"
            ]
        )
    try:
        snapshot = load_files(from_files, sys.stdin)
        generated_at = timestamp_from_epoch(os.environ.get("SOURCE_DATE_EPOCH"))
    except InputError as exc:
        _fail(exc.problems)
    runs = run_checks(enabled.values(), snapshot)
    document = build_report(snapshot, runs, generated_at=generated_at)
    _emit(document, formats or ("table",), output_file, output_dir)
    for run in runs:
        if run.error_detail:
            click.echo(f"gpu-audit: {run.check.id} {run.reason}", err=True)
    if not document["complete"]:
        sys.exit(EXIT_INCOMPLETE)
    if fail_on != "none":
        threshold = Severity(fail_on).rank
        if any(Severity(f["severity"]).rank >= threshold for f in document["findings"]):
            sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK)


@main.command()
@click.argument("report_file", metavar="REPORT.json")
@click.option("-o", "--format", "formats", multiple=True, type=click.Choice(FORMAT_CHOICES))
@click.option("--output-file", metavar="PATH")
@click.option("--output-dir", metavar="DIR")
def render(
    report_file: str, formats: tuple[str, ...], output_file: str | None, output_dir: str | None
) -> None:
    """Re-render a saved JSON report in other formats."""
    try:
        document = load_report(report_file)
    except InputError as exc:
        _fail(exc.problems)
    _emit(document, formats or ("table",), output_file, output_dir)


@main.group()
def checks() -> None:
    """Inspect the available checks."""


@checks.command("list")
@click.option("-o", "--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--category", "categories", multiple=True, metavar="CAT")
@click.option("--severity", "severities", multiple=True, type=click.Choice(SEVERITY_CHOICES))
@click.option("--no-plugins", is_flag=True)
def list_checks(
    fmt: str, categories: tuple[str, ...], severities: tuple[str, ...], no_plugins: bool
) -> None:
    """List checks, optionally filtered by category and severity."""
    from tabulate import tabulate

    try:
        cats = {Category.parse(c) for c in _split(categories)}
    except ValueError as exc:
        _fail([str(exc)])
    wanted = {Severity(s) for s in severities}
    selected = [
        c
        for c in _registry(plugins=not no_plugins).values()
        if (not cats or c.category in cats) and (not wanted or c.severity in wanted)
    ]
    if fmt == "json":
        click.echo(json.dumps([check_metadata(c) for c in selected], indent=2, sort_keys=True))
        return
    rows = [[c.id, c.severity.value, c.category.value, c.title] for c in selected]
    click.echo(tabulate(rows, headers=["ID", "SEVERITY", "CATEGORY", "TITLE"], tablefmt="simple"))


@checks.command("show")
@click.argument("check_id")
@click.option("-o", "--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def show_check(check_id: str, fmt: str) -> None:
    """Show a check's rationale, detection, remediation and references."""
    registry = _registry(plugins=True)
    found = registry.get(check_id.upper())
    if found is None:
        _fail([f"unknown check id {check_id!r} (see `gpu-audit checks list`)"])
    meta: dict[str, Any] = check_metadata(found)
    if fmt == "json":
        click.echo(json.dumps(meta, indent=2, sort_keys=True))
        return
    click.echo(f"{found.id}: {found.title}")
    click.echo(
        f"severity {found.severity.value} · category {found.category.value} · from {found.origin}"
    )
    for heading, body in (
        ("Why it matters", found.rationale),
        ("How it is detected", found.detection),
        ("Reads", ", ".join(meta["requires"])),
        ("Remediation", found.remediation),
        ("References", "\n".join(found.references)),
    ):
        if body:
            click.echo(f"\n{heading}:\n{body}")


@checks.command("docs")
def docs() -> None:
    """Print the check reference as Markdown (docs/checks.md is generated with this)."""
    click.echo(checks_markdown(_registry(plugins=False).values()), nl=False)
