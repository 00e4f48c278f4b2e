"""The gpu-audit command line.

Exit codes: 0 scan complete and nothing at or above --fail-on; 1 findings at or above
--fail-on; 2 usage or input error; 3 scan incomplete (input not collected or a check raised).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from gpu_audit import __version__
from gpu_audit.catalog import check_metadata, checks_markdown
from gpu_audit.declarative import load_check_dirs
from gpu_audit.errors import InputError
from gpu_audit.model import Category, Check, Severity
from gpu_audit.postscan.diff import diff_reports, load_comparable, new_at_or_above
from gpu_audit.postscan.frameworks import Framework, frameworks_markdown, shipped_frameworks
from gpu_audit.postscan.history import summary_line
from gpu_audit.registry import RegistryError, load_checks, select_checks
from gpu_audit.report import Document, dumps, load_report
from gpu_audit.reports import RENDERERS
from gpu_audit.reports.table import render_diff_table
from gpu_audit.reports.terminal import cell
from gpu_audit.scan import (
    Connection,
    Inputs,
    ListOptions,
    LiveError,
    ScanOptions,
    load_snapshot,
    run_scan,
)
from gpu_audit.snapshot import Snapshot

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
SEVERITY_CHOICES = [s.value for s in Severity]
FORMAT_CHOICES = sorted(RENDERERS)

EPILOG = """\b
Exit codes:
  0  scan complete, no finding at or above --fail-on
  1  findings at or above --fail-on (or new ones at or above --fail-on-new)
  2  usage or input error (the message names the file and document)
  3  scan incomplete: input could not be collected or a check raised
"""


def _fail(problems: Iterable[str], code: int = EXIT_USAGE) -> NoReturn:
    for problem in problems:
        click.echo(f"gpu-audit: error: {cell(problem)}", err=True)
    sys.exit(code)


def _split(values: Sequence[str]) -> list[str]:
    """Options that take ids accept them repeated or comma-separated."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _registry(plugins: bool, checks_dirs: Sequence[str] = ()) -> dict[str, Check]:
    try:
        return load_checks(plugins=plugins, extra=load_check_dirs(checks_dirs))
    except RegistryError as exc:
        _fail([str(exc)])
    except InputError as exc:
        _fail(exc.problems)


checks_dir_option = click.option(
    "--checks-dir",
    "checks_dirs",
    multiple=True,
    metavar="DIR",
    help="Add the declarative checks (*.yaml) of this directory; see "
    "docs/declarative-checks.md. Repeat for several.",
)


def _write(text: str, destination: str | None, color_ok: bool = False) -> None:
    # Encoded before any file is opened, as UTF-8 whatever the locale: a character no UTF-8
    # holds (a lone surrogate) becomes a backslash escape, not a traceback that leaves a
    # truncated file or invalid UTF-8 on stdout.
    data = text.encode("utf-8", "backslashreplace")
    if destination is None:
        click.echo(data, nl=False)
        return
    try:
        Path(destination).write_bytes(data)
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


def _inputs(from_files: Sequence[str], live: dict[str, Any]) -> Inputs:
    """--from-file, or the live connection and listing options."""
    if not from_files and live["namespace"] and live["all_namespaces"]:
        _fail(["--namespace and --all-namespaces cannot be used together"])
    return Inputs(
        files=tuple(from_files),
        stdin=sys.stdin,
        connection=Connection(live["kubeconfig"], live["context"], live["in_cluster"]),
        listing=ListOptions(
            namespace=live["namespace"], page_size=live["page_size"], timeout=live["timeout"]
        ),
        progress=None if from_files else _progress(live["quiet"]),
    )


@contextlib.contextmanager
def _reading(inputs: Inputs) -> Iterator[None]:
    """Errors of a scan or a read as messages and exit codes; the progress line cleared."""
    try:
        yield
    except InputError as exc:
        _fail(exc.problems)
    except RegistryError as exc:
        _fail([str(exc)])
    except LiveError as exc:
        _fail([str(exc)], EXIT_INCOMPLETE)
    finally:
        if inputs.progress:
            click.echo("\r\033[K", err=True, nl=False)


def _publish(
    document: Document, history_dir: str | None, keep: int, pushgateway: str | None
) -> str | None:
    """Keep the run in the history and push its metrics; returns the run's HTML report."""
    from gpu_audit.postscan.history import record
    from gpu_audit.postscan.pushgateway import push
    from gpu_audit.reports.prometheus import render_prometheus

    where = None
    try:
        if history_dir:
            rendered = {"json": dumps(document), "html": RENDERERS["html"].render(document, False)}
            recorded = record(
                history_dir, document, rendered, keep=keep, now=dt.datetime.now(dt.UTC)
            )
            for stem in recorded.unreadable:
                click.echo(
                    f"gpu-audit: warning: {history_dir}: runs/{stem}.json unreadable", err=True
                )
            where = str(recorded.run.with_suffix(".html"))
        if pushgateway:
            target = push(
                pushgateway, document["cluster"] or "unnamed", render_prometheus(document)
            )
            click.echo(f"gpu-audit: pushed metrics to {target}", err=True)
    except InputError as exc:
        _fail(exc.problems)
    return where


def _required_types(checks: Iterable[Check]) -> set[str]:
    return {t for c in checks for t in c.required_types}


def _severity(value: str | None) -> Severity | None:
    return Severity(value) if value and value != "none" else None


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
@click.option(
    "--strict",
    is_flag=True,
    help="Input warnings are errors (exit 2): fields of a type the API server would refuse, "
    "objects given twice, directory entries that cannot be read.",
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
@click.option(
    "--record-duration",
    is_flag=True,
    help="Put the scan's wall-clock duration in the report (scan_duration_seconds); the "
    "output is then no longer the same bytes for the same input.",
)
@click.option(
    "--exemptions",
    "exemptions_file",
    metavar="FILE",
    help="YAML file of accepted findings (check ids, objects, reason, optional expiry): they "
    "stay in the report as exempted and do not count.",
)
@click.option(
    "--today",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    hidden=True,
    help="The date exemption expiry is judged on (default: the SOURCE_DATE_EPOCH day, else "
    "today). For reproducible tests.",
)
@click.option(
    "--baseline",
    metavar="REPORT.json",
    help="A previous JSON report: the report gains a baseline section of new, resolved and "
    "unchanged findings.",
)
@click.option(
    "--fail-on-new",
    type=click.Choice(SEVERITY_CHOICES),
    help="With --baseline: exit 1 when a new finding (not exempted) has this severity or worse.",
)
@click.option(
    "--framework",
    "frameworks",
    multiple=True,
    metavar="NAME",
    help="Add a compliance section for this framework (see `gpu-audit frameworks list`, or a "
    "framework .yaml file). Repeat for several.",
)
@checks_dir_option
@click.option(
    "--cluster-name",
    metavar="NAME",
    help="The cluster's name in the report, history and metrics (default: the kubeconfig "
    'context of a live scan, "in-cluster" in a pod).',
)
@click.option(
    "--history-dir",
    metavar="DIR",
    help="Also keep this run in DIR: runs/<UTC time>-<cluster>.json and .html, latest.json, "
    "latest.html and index.html (runs with the score trend). Without -o/--output-*, nothing "
    "else is written.",
)
@click.option(
    "--history-keep",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="With --history-dir: how many runs to keep (the oldest go first).",
)
@click.option(
    "--pushgateway",
    metavar="URL",
    help="Also PUT the Prometheus metrics to this Pushgateway, grouped by job gpu-audit and "
    "the cluster name.",
)
@live_options
def scan(
    from_files: tuple[str, ...],
    formats: tuple[str, ...],
    output_file: str | None,
    output_dir: str | None,
    fail_on: str,
    strict: bool,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    categories: tuple[str, ...],
    no_plugins: bool,
    record_duration: bool,
    exemptions_file: str | None,
    today: dt.datetime | None,
    baseline: str | None,
    fail_on_new: str | None,
    frameworks: tuple[str, ...],
    checks_dirs: tuple[str, ...],
    cluster_name: str | None,
    history_dir: str | None,
    history_keep: int,
    pushgateway: str | None,
    **live: Any,
) -> None:
    """Scan a cluster (or manifests) and report GPU misconfigurations.

    Without --from-file, reads the cluster of the current kubeconfig context (or the pod's
    service account in a pod), read-only, listing only what the enabled checks need.

    The report holds no wall-clock time unless SOURCE_DATE_EPOCH is set (or the run goes to
    --history-dir or --pushgateway, which stamp it with the clock), so the same input gives
    byte-identical JSON.
    """
    inputs = _inputs(from_files, live)
    options = ScanOptions(
        inputs=inputs,
        only=tuple(_split(only)),
        skip=tuple(_split(skip)),
        categories=tuple(_split(categories)),
        plugins=not no_plugins,
        checks_dirs=checks_dirs,
        exemptions_file=exemptions_file,
        today=today.date() if today else None,
        baseline=baseline,
        frameworks=tuple(_split(frameworks)),
        cluster_name=cluster_name,
        record_duration=record_duration,
        source_date_epoch=os.environ.get("SOURCE_DATE_EPOCH"),
        # A scheduled run is a point in a history and in a time series: stamp it.
        stamp_with_clock=bool(history_dir or pushgateway),
        fail_on=_severity(fail_on),
        fail_on_new=_severity(fail_on_new),
        strict=strict,
    )
    with _reading(inputs):
        result = run_scan(options)
    document = result.document
    on_stdout = not (output_file or output_dir) and (
        bool(formats) or not (history_dir or pushgateway)
    )
    if formats or output_file or output_dir or on_stdout:
        _emit(document, formats or ("table",), output_file, output_dir)
    where = _publish(document, history_dir, history_keep, pushgateway)
    for run in result.errors:
        click.echo(f"gpu-audit: {run.check.id} {cell(run.reason)}", err=True)
    for warning in result.warnings:
        click.echo(f"gpu-audit: warning: {cell(warning)}", err=True)
    if not on_stdout:  # a job's log gets one line; a terminal already shows the report
        click.echo(cell(summary_line(document, where or output_file or output_dir)), err=True)
    if not result.complete:
        sys.exit(EXIT_INCOMPLETE)
    sys.exit(EXIT_FINDINGS if result.failed else EXIT_OK)


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

    types = _required_types(_registry(plugins=not no_plugins).values())
    inputs = _inputs((), live)
    with _reading(inputs):
        snapshot = load_snapshot(inputs, types)
    _write(dumps_snapshot(snapshot), output_file)
    for gap in snapshot.gaps:
        click.echo(f"gpu-audit: not collected: {gap.type}: {cell(gap.reason)}", err=True)
    sys.exit(EXIT_OK if snapshot.complete else EXIT_INCOMPLETE)


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


@main.command("diff")
@click.argument("old_file", metavar="OLD.json")
@click.argument("new_file", metavar="NEW.json")
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
)
@click.option("--output-file", metavar="PATH", help="Write the comparison here instead of stdout.")
@click.option(
    "--fail-on-new",
    type=click.Choice(SEVERITY_CHOICES),
    help="Exit 1 when NEW.json has a new finding (not exempted) of this severity or worse.",
)
def diff_command(
    old_file: str, new_file: str, fmt: str, output_file: str | None, fail_on_new: str | None
) -> None:
    """Compare two JSON reports (schema 1.1 or later): the findings new in NEW.json,
    resolved since OLD.json, unchanged, and those not re-checked (their check did not run)."""
    try:
        old, new = load_comparable(old_file), load_comparable(new_file)
    except InputError as exc:
        _fail(exc.problems)
    document = diff_reports(old, old_file, new, new_file)
    if fmt == "json":
        text = dumps(document)
    else:
        text = render_diff_table(document, output_file is None and _use_color())
    _write(text, output_file)
    if fail_on_new and new_at_or_above(document, Severity(fail_on_new)):
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK)


@main.group()
def checks() -> None:
    """Inspect the available checks."""


@checks.command("list")
@click.option("-o", "--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--category", "categories", multiple=True, metavar="CAT")
@click.option("--severity", "severities", multiple=True, type=click.Choice(SEVERITY_CHOICES))
@click.option("--no-plugins", is_flag=True)
@checks_dir_option
def list_checks(
    fmt: str,
    categories: tuple[str, ...],
    severities: tuple[str, ...],
    no_plugins: bool,
    checks_dirs: tuple[str, ...],
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
        for c in _registry(plugins=not no_plugins, checks_dirs=checks_dirs).values()
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
@checks_dir_option
def show_check(check_id: str, fmt: str, checks_dirs: tuple[str, ...]) -> None:
    """Show a check's rationale, detection, remediation and references."""
    from gpu_audit.catalog import describe_fix

    registry = _registry(plugins=True, checks_dirs=checks_dirs)
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
        ("Fix kind", describe_fix(found.remediation)),
        ("Remediation", found.remediation.generic),
        ("References", "\n".join(found.references)),
    ):
        if body:
            click.echo(f"\n{heading}:\n{body}")


@checks.command("docs")
@checks_dir_option
def docs(checks_dirs: tuple[str, ...]) -> None:
    """Print the check reference as Markdown (docs/checks.md is generated with this; with
    --checks-dir, the reference of the built-in checks and those)."""
    registry = _registry(plugins=False, checks_dirs=checks_dirs)
    click.echo(checks_markdown(registry.values()), nl=False)


@checks.command("kinds")
def kinds_docs() -> None:
    """Print, as Markdown, every kind gpu-audit reads: API group, versions and the checks
    that read it (docs/kinds.md is generated with this)."""
    from gpu_audit.kinds_doc import kinds_markdown

    click.echo(kinds_markdown(_registry(plugins=False).values()), nl=False)


@checks.command("api-docs")
def api_docs() -> None:
    """Print the plugin API reference as Markdown: every name `gpu_audit.api` offers check
    authors, by group (docs/plugin-api.md is generated with this)."""
    from gpu_audit.plugin_api import plugin_api_markdown

    click.echo(plugin_api_markdown(), nl=False)


@main.group("frameworks")
def frameworks_group() -> None:
    """Inspect the compliance frameworks `scan --framework` can report on."""


def _shipped_frameworks(registry: dict[str, Check]) -> dict[str, Framework]:
    try:
        return shipped_frameworks(registry)
    except InputError as exc:
        _fail(exc.problems)


@frameworks_group.command("list")
@click.option("-o", "--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def list_frameworks(fmt: str) -> None:
    """List the shipped frameworks: id, version, and how many controls checks can show."""
    from tabulate import tabulate

    found = _shipped_frameworks(_registry(plugins=False))
    rows = [
        {
            "id": f.id,
            "title": f.title,
            "version": f.version,
            "url": f.url,
            "controls": len(f.controls),
            "not_assessable": len(f.not_assessable),
        }
        for f in found.values()
    ]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    table = [[r["id"], r["controls"], r["not_assessable"], r["title"]] for r in rows]
    click.echo(
        tabulate(table, headers=["ID", "CONTROLS", "NOT ASSESSABLE", "TITLE"], tablefmt="simple")
    )


@frameworks_group.command("docs")
def frameworks_docs() -> None:
    """Print the framework reference as Markdown (docs/frameworks.md is generated with this)."""
    registry = _registry(plugins=False)
    titles = {check_id: c.title for check_id, c in registry.items()}
    click.echo(frameworks_markdown(_shipped_frameworks(registry).values(), titles), nl=False)


@main.command()
@click.option("--only", multiple=True, metavar="CHECK", help="Only these check ids.")
@click.option("--skip", multiple=True, metavar="CHECK", help="Not these check ids.")
@click.option("--category", "categories", multiple=True, metavar="CAT")
@click.option("--name", default="gpu-audit-reader", show_default=True, help="The role's name.")
@click.option(
    "--chart-index",
    is_flag=True,
    help="Print instead what each built-in check lists, the data the Helm chart computes its "
    "ClusterRole from (deploy/helm/gpu-audit/files/read-access.yaml).",
)
def rbac(
    only: tuple[str, ...],
    skip: tuple[str, ...],
    categories: tuple[str, ...],
    name: str,
    chart_index: bool,
) -> None:
    """Print the read-only ClusterRole a scan with these checks needs: list on exactly what
    they read (never Secrets), one rule per API group."""
    from gpu_audit import rbac as access

    registry = _registry(plugins=not chart_index)
    if chart_index:
        click.echo(
            access.dump_yaml(access.chart_index(registry), access.CHART_INDEX_HEADER), nl=False
        )
        return
    try:
        cats = [Category.parse(c) for c in _split(categories)]
        enabled = select_checks(registry, only=_split(only), skip=_split(skip), categories=cats)
    except (ValueError, RegistryError) as exc:
        _fail([str(exc)])
    role = access.cluster_role(name, access.scan_types(enabled.values()))
    click.echo(access.dump_yaml(role), nl=False)


def _diagnostic_snapshot(from_files: Sequence[str], live: dict[str, Any]) -> Snapshot:
    """The input of `inventory` and `why-pending`: files, or every namespace of the cluster
    (GPU accounting needs every pod bound to a node, whatever its namespace)."""
    from gpu_audit.diagnostics import DIAGNOSTIC_TYPES, REQUIRED_TYPES

    if live["namespace"] and not from_files:
        _fail(["--namespace: the diagnostics count every pod on every node; omit it"])
    inputs = _inputs(from_files, live)
    with _reading(inputs):
        snapshot = load_snapshot(inputs, DIAGNOSTIC_TYPES)
    for gap in snapshot.gaps:
        click.echo(f"gpu-audit: not collected: {gap.type}: {cell(gap.reason)}", err=True)
    missing = [t for t in REQUIRED_TYPES if not snapshot.has(t)]
    if missing and not from_files:
        _fail([f"cannot diagnose without {', '.join(missing)}"], EXIT_INCOMPLETE)
    if "Node" in missing:
        named = ", ".join(from_files)
        _fail([f"the input has no Nodes ({named}): add `kubectl get nodes -o yaml` to it"])
    return snapshot


def _diagnostic_output(
    payload: dict[str, Any], text: str, fmt: str, output_file: str | None
) -> None:
    _write(dumps(payload) if fmt == "json" else text, output_file)


_FROM_FILE_HELP = (
    "Read manifests or dumps instead of a live cluster: a file, a directory, or - for stdin. "
    "Repeat to merge several."
)


@main.command()
@click.option("--from-file", "from_files", multiple=True, metavar="PATH", help=_FROM_FILE_HELP)
@click.option("-o", "--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--output-file", metavar="PATH", help="Write here instead of stdout.")
@live_options
def inventory(from_files: tuple[str, ...], fmt: str, output_file: str | None, **live: Any) -> None:
    """GPUs per node pool and product: nodes, capacity, allocatable, MIG, sharing, requested,
    idle and held GPUs, and how many pods of 1, 2, 4 and 8 GPUs still fit."""
    from gpu_audit.diagnostics import build_inventory
    from gpu_audit.reports.diagnostics_table import render_inventory

    found = build_inventory(_diagnostic_snapshot(from_files, live)).as_dict()
    _diagnostic_output({"inventory": found}, render_inventory(found), fmt, output_file)


@main.command("why-pending")
@click.argument("target", metavar="[NAMESPACE/POD | NAMESPACE/KIND/NAME]", required=False)
@click.option("--from-file", "from_files", multiple=True, metavar="PATH", help=_FROM_FILE_HELP)
@click.option("-o", "--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--output-file", metavar="PATH", help="Write here instead of stdout.")
@live_options
def why_pending(
    target: str | None,
    from_files: tuple[str, ...],
    fmt: str,
    output_file: str | None,
    **live: Any,
) -> None:
    """Explain why a pod is Pending: every scheduler predicate on every node, the summary in
    the scheduler's words, the fix, and whether its FailedScheduling events agree.

    NAMESPACE/KIND/NAME (e.g. ml-training/Job/train) explains a workload's pod template as a
    new pod. Without an argument, every Pending pod that requests GPUs is explained.
    """
    from gpu_audit.diagnostics import explain_targets
    from gpu_audit.reports.diagnostics_table import render_pending

    snapshot = _diagnostic_snapshot(from_files, live)
    try:
        explained = [e.as_dict() for e in explain_targets(snapshot, target)]
    except InputError as exc:
        _fail(exc.problems)
    text = render_pending(explained) if explained else "No Pending pod requests a GPU.\n"
    _diagnostic_output({"pending_pods": explained}, text, fmt, output_file)
