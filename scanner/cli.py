"""The gpu-audit command line.

Exit codes: 0 scan complete and nothing at or above --fail-on; 1 findings at or above
--fail-on; 2 usage or input error; 3 scan incomplete (input not collected or a check raised).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from gpu_audit import __version__
from gpu_audit.catalog import check_metadata, checks_markdown
from gpu_audit.engine import run_checks
from gpu_audit.errors import InputError
from gpu_audit.model import Category, Check, Severity
from gpu_audit.registry import RegistryError, load_checks, select_checks
from gpu_audit.report import Document, build_report, load_report, timestamp_from_epoch
from gpu_audit.reports import RENDERERS
from gpu_audit.snapshot import Snapshot
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


F = TypeVar("F", bound=Callable[..., Any])


def live_options(function: F) -> F:
    """Connection and listing options shared by `scan` (without --from-file) and `collect`."""
    options = [
        click.option(
            "--kubeconfig",
            metavar="PATH",
            help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
        ),
        click.option(
            "--context", metavar="NAME", help="Kubeconfig context (default: the current one)."
        ),
        click.option(
            "--in-cluster/--no-in-cluster",
            default=None,
            help="Use the pod's service account (auto-detected when running in a pod).",
        ),
        click.option(
            "-n",
            "--namespace",
            metavar="NS",
            help="Only this namespace (cluster-scoped kinds are still read).",
        ),
        click.option("-A", "--all-namespaces", is_flag=True, help="All namespaces (the default)."),
        click.option(
            "--timeout",
            type=click.FloatRange(min=1),
            default=120.0,
            show_default=True,
            help="Overall deadline for reading the cluster, in seconds.",
        ),
        click.option(
            "--page-size",
            type=click.IntRange(min=1),
            default=500,
            show_default=True,
            help="Objects per list request.",
        ),
        click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _progress(quiet: bool) -> Callable[[str, int], None] | None:
    if quiet or not sys.stderr.isatty():
        return None

    def show(type_: str, objects: int) -> None:
        click.echo(
            f"\rgpu-audit: read {objects} objects (listing {type_})\033[K", err=True, nl=False
        )

    return show


def _collect_live(types: Iterable[str], live: dict[str, Any]) -> Snapshot:
    from gpu_audit.sources.live import Connection, ListOptions, LiveError, collect

    if live["namespace"] and live["all_namespaces"]:
        _fail(["--namespace and --all-namespaces cannot be used together"])
    progress = _progress(live["quiet"])
    try:
        snapshot = collect(
            types,
            Connection(live["kubeconfig"], live["context"], live["in_cluster"]),
            ListOptions(
                namespace=live["namespace"], page_size=live["page_size"], timeout=live["timeout"]
            ),
            progress,
        )
    except LiveError as exc:
        _fail([str(exc)], EXIT_INCOMPLETE)
    finally:
        if progress:
            click.echo("\r\033[K", err=True, nl=False)
    return snapshot


def _required_types(checks: Iterable[Check]) -> set[str]:
    return {t for c in checks for t in c.required_types}


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
@live_options
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
    **live: Any,
) -> None:
    """Scan a cluster (or manifests) and report GPU misconfigurations.

    Without --from-file, reads the cluster of the current kubeconfig context (or the pod's
    service account in a pod), read-only, listing only what the enabled checks need.

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
    try:
        generated_at = timestamp_from_epoch(os.environ.get("SOURCE_DATE_EPOCH"))
        if from_files:
            snapshot = load_files(from_files, sys.stdin)
        else:
            snapshot = _collect_live(_required_types(enabled.values()), live)
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
@click.option(
    "--output-file", metavar="PATH", required=True, help="Where to write the snapshot JSON."
)
@click.option("--no-plugins", is_flag=True, help="Collect only what built-in checks read.")
@live_options
def collect(output_file: str, no_plugins: bool, **live: Any) -> None:
    """Write the cluster's objects that the checks read to a snapshot file (Secret values are
    never read), to scan later with `scan --from-file` or attach to a support ticket."""
    from gpu_audit.sources.snapshot_file import dumps_snapshot

    snapshot = _collect_live(_required_types(_registry(plugins=not no_plugins).values()), live)
    _write(dumps_snapshot(snapshot), output_file)
    for gap in snapshot.gaps:
        click.echo(f"gpu-audit: not collected: {gap.type}: {gap.reason}", err=True)
    sys.exit(EXIT_INCOMPLETE if snapshot.gaps else EXIT_OK)


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
