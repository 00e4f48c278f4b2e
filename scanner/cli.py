"""The gpu-audit command line.

Exit codes: 0 scan complete and nothing at or above --fail-on; 1 findings at or above
--fail-on; 2 usage, input or kubeconfig error; 3 scan incomplete (input not collected or a check
raised). Every non-zero exit is explained on stderr in one line, whatever -q says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar

import click

from gpu_audit import __version__
from gpu_audit.catalog import check_metadata, checks_markdown
from gpu_audit.declarative import load_check_dirs
from gpu_audit.errors import InputError, did_you_mean
from gpu_audit.fleet import (
    COMPLETE,
    DEFAULT_WORKERS,
    build_fleet,
    fleet_contexts,
    load_members,
    scan_fleet,
)
from gpu_audit.impact import load_prices, priced
from gpu_audit.model import Category, Check, Severity
from gpu_audit.postscan.diff import diff_reports, load_comparable, new_at_or_above
from gpu_audit.postscan.frameworks import Framework, frameworks_markdown, shipped_frameworks
from gpu_audit.postscan.history import summary_line
from gpu_audit.registry import RegistryError, load_checks, select_checks
from gpu_audit.report import Document, dumps, load_report
from gpu_audit.reports import RENDERERS
from gpu_audit.reports.base import at_or_above
from gpu_audit.reports.fleet import FLEET_RENDERERS
from gpu_audit.reports.table import render_diff_table, render_table
from gpu_audit.reports.terminal import block, cell
from gpu_audit.scan import (
    ConfigError,
    Connection,
    Inputs,
    ListOptions,
    LiveError,
    ScanOptions,
    left_at_exit,
    load_snapshot,
    run_scan,
)
from gpu_audit.snapshot import CollectionGap, Snapshot

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
SEVERITY_CHOICES = [s.value for s in Severity]
FORMAT_CHOICES = sorted(RENDERERS)

MIN_SEVERITY_HELP = (
    "Show only findings of this severity or worse. The score, grade, coverage and counts stay "
    "those of the whole scan (--only, --skip and --category change what is checked)."
)


def _choice(values: Sequence[str]) -> click.Choice[str]:
    """Formats and severities in any case: `-o JSON`, `--fail-on HIGH`."""
    return click.Choice(values, case_sensitive=False)


EPILOG = """\b
Exit codes:
  0  scan complete, no finding at or above --fail-on
  1  findings at or above --fail-on (or new ones at or above --fail-on-new)
  2  usage, input or kubeconfig error (the message names the file and document)
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


table_or_json_option = click.option(
    "-o",
    "--format",
    "fmt",
    type=_choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table: text for a terminal; json: the same content as JSON.",
)
category_option = click.option(
    "--category",
    "categories",
    multiple=True,
    metavar="CAT",
    help="Only checks of these categories (name or id code, e.g. monitoring or MON); "
    "repeat or comma-separate.",
)
checks_dir_option = click.option(
    "--checks-dir",
    "checks_dirs",
    multiple=True,
    metavar="DIR",
    help="Add the declarative checks (*.yaml) of this directory; see "
    "docs/declarative-checks.md. Repeat for several.",
)


def _write(text: str, destination: str | None) -> None:
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
    _note(f"wrote {destination}")


def _note(message: str) -> None:
    """A line on stderr that is not an error (what was written, warnings, the summary): -q
    silences it. Errors and the line that explains a non-zero exit are never silenced."""
    context = click.get_current_context(silent=True)
    if context is None or not context.params.get("quiet"):
        click.echo(message, err=True)


def _exit(code: int, why: str = "") -> NoReturn:
    """Exit with `code`; a non-zero one explained on stderr in one line."""
    if code != EXIT_OK:
        click.echo(f"gpu-audit: exit {code}: {cell(why)}", err=True)
    sys.exit(code)


def _terminal_width() -> int | None:
    """The width of the terminal stdout is (COLUMNS first, as shutil reads it); None for a
    file or a pipe, which get the same bytes whatever terminal ran the command."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _use_color() -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to anything (no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _targets(
    formats: Sequence[str],
    extensions: Mapping[str, str],
    output_file: str | None,
    output_dir: str | None,
    stem: str,
) -> list[tuple[str, str | None]]:
    """(format, file or None for stdout) of each --format: --output-dir gets <stem>.<ext>."""
    formats = list(dict.fromkeys(formats))
    if output_file and output_dir:
        _fail(["--output-file and --output-dir cannot be used together"])
    if len(formats) > 1 and not output_dir:
        _fail(["several --format values need --output-dir"])
    if output_dir:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        return [(n, str(Path(output_dir) / f"{stem}.{extensions[n]}")) for n in formats]
    return [(name, output_file) for name in formats]


def _emit(
    document: Document,
    formats: Sequence[str],
    output_file: str | None,
    output_dir: str | None,
    min_severity: str | None = None,
) -> None:
    shown = at_or_above(document, _severity(min_severity))
    extensions = {name: renderer.extension for name, renderer in RENDERERS.items()}
    for name, target in _targets(formats, extensions, output_file, output_dir, "report"):
        renderer = RENDERERS[name]
        if target is None and name == "table":
            _write(render_table(shown, _use_color(), _terminal_width()), target)
        else:
            _write(renderer.render(shown, False), target)


F = TypeVar("F", bound=Callable[..., Any])


FLEET_CONTEXT_HELP = (
    "Kubeconfig context (default: the current one). Repeat to scan several clusters "
    "concurrently into one fleet report (see --all-contexts)."
)


def live_options(function: F, *, fleet: bool = False) -> F:
    """Connection and listing options shared by `scan` (without --from-file) and `collect`;
    with `fleet` (scan), --context may be repeated."""
    options = [
        click.option(
            "--kubeconfig",
            metavar="PATH",
            help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
        ),
        click.option(
            "--context", "contexts", multiple=True, metavar="NAME", help=FLEET_CONTEXT_HELP
        )
        if fleet
        else click.option(
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
            help=(
                "Only this namespace: live, only its namespaced objects are listed "
                "(cluster-scoped kinds are still read); scan shows only its objects' findings."
            ),
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
        click.option(
            "-q",
            "--quiet",
            is_flag=True,
            help="Nothing on stderr but errors and the line that explains a non-zero exit (no "
            "progress, summary, warnings or `wrote` lines).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def fleet_live_options(function: F) -> F:
    """live_options of `scan`, whose --context may be repeated for a fleet."""
    return live_options(function, fleet=True)


GPU_PRICES_HELP = (
    "A YAML/JSON price table, GPU product -> $/GPU-hour (docs/gpu-prices.example.yaml): each "
    "finding's impact gets its cost per day."
)


def report_output_options(function: F) -> F:
    """Where `scan` and `render` write the report, in which formats, showing what."""
    options = [
        click.option(
            "-o",
            "--format",
            "formats",
            multiple=True,
            type=_choice(FORMAT_CHOICES),
            help="Output format (repeat with --output-dir for several). Default: table.",
        ),
        click.option(
            "--output-file", metavar="PATH", help="Write the report here instead of stdout."
        ),
        click.option(
            "--output-dir", metavar="DIR", help="Write one report.<ext> per --format here."
        ),
        click.option("--min-severity", type=_choice(SEVERITY_CHOICES), help=MIN_SEVERITY_HELP),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _progress(quiet: bool) -> Callable[[str, int], None] | None:
    if quiet or not sys.stderr.isatty():
        return None

    started = time.monotonic()

    def show(type_: str, objects: int) -> None:
        # Objects per second since the read began: a slow API server shows as a low rate.
        rate = objects / max(time.monotonic() - started, 0.001)
        click.echo(
            f"\rgpu-audit: read {objects} objects at {rate:.0f}/s (listing {type_})\033[K",
            err=True,
            nl=False,
        )

    return show


def _inputs(
    from_files: Sequence[str], live: dict[str, Any], stdin: IO[str] | None = None
) -> Inputs:
    """--from-file, or the live connection and listing options. --namespace limits a live
    listing; files are read whole (run_scan shows the namespace's findings in both cases)."""
    if live["namespace"] and live["all_namespaces"]:
        _fail(["--namespace and --all-namespaces cannot be used together"])
    kubeconfig = live["kubeconfig"]
    if not from_files and kubeconfig and not Path(kubeconfig).exists():
        # The client would call a missing file "Invalid kube-config file".
        _fail([f"cannot load {kubeconfig} (--kubeconfig): no such file"])
    if (
        not from_files
        and not kubeconfig
        and not live["in_cluster"]
        and not {"KUBECONFIG", "KUBERNETES_SERVICE_HOST"} & set(os.environ)
        and not Path("~/.kube/config").expanduser().exists()
    ):  # the client would say "Invalid kube-config file. No configuration found."
        _fail(
            [
                "cannot load kubeconfig: $KUBECONFIG is unset and ~/.kube/config does not exist; "
                "pass --kubeconfig, or --from-file to read manifests or a dump"
            ]
        )
    if not from_files and live["context"] and not live["in_cluster"]:
        try:  # the client would say "Expected object with name X in .../contexts list"
            fleet_contexts(kubeconfig, [live["context"]], every=False)
        except ConfigError as exc:
            _fail([str(exc)])
    for path in from_files:
        if (Path(path) / "Chart.yaml").is_file():
            _fail(
                [
                    f"{path} is a Helm chart, not manifests: render it first, "
                    f"`helm template {path} | gpu-audit scan --from-file -` "
                    f"(or `gpu-audit scan --helm-chart {path}` with helm on PATH)"
                ]
            )
    return Inputs(
        files=tuple(from_files),
        stdin=stdin or sys.stdin,
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
    except ConfigError as exc:
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
                _note(f"gpu-audit: warning: {history_dir}: runs/{stem}.json unreadable")
            where = str(recorded.run.with_suffix(".html"))
        if pushgateway:
            target = push(
                pushgateway, document["cluster"] or "unnamed", render_prometheus(document)
            )
            _note(f"gpu-audit: pushed metrics to {target}")
    except InputError as exc:
        _fail(exc.problems)
    return where


def _required_types(checks: Iterable[Check]) -> set[str]:
    return {t for c in checks for t in c.required_types}


def _severity(value: str | None) -> Severity | None:
    return Severity(value) if value and value != "none" else None


# The exit status of a process killed by SIGPIPE, as a shell reports it: `gpu-audit scan | head
# -1` ends as quietly as any Unix tool whose reader went away.
EXIT_BROKEN_PIPE = 141


def _closed_pipe() -> NoReturn:
    # Whatever is still buffered for the closed pipe goes nowhere instead of raising again
    # when the interpreter flushes stdout on exit.
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_BROKEN_PIPE)


class _Main(click.Group):
    """The command group with one error style for every problem: click's usage errors are
    printed as `gpu-audit: error: ...` on one line and exit 2, like the commands' own."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _closed_pipe()

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()  # `gpu-audit` alone: the help, as click prints it
            sys.exit(EXIT_USAGE)
        except click.UsageError as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            _fail([exc.format_message().rstrip(".") + where])
        except click.ClickException as exc:
            _fail([exc.format_message()])
        except click.Abort:
            _fail(["aborted"], EXIT_FINDINGS)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else EXIT_OK)


@click.group("gpu-audit", cls=_Main, epilog=EPILOG)
@click.version_option(__version__, prog_name="gpu-audit")
def main() -> None:
    """Audit Kubernetes clusters that run GPU and AI workloads."""


def run() -> None:
    """The gpu-audit executable: `main`, leaving what it made to the operating system."""
    with left_at_exit():
        main()


def kubectl_plugin() -> None:
    """The kubectl plugin (the kubectl-gpu_audit executable, which kubectl runs for `kubectl
    gpu-audit ...`): the same commands, named in help and usage lines as kubectl users type
    them."""
    with left_at_exit():
        main(prog_name="kubectl gpu-audit")


@main.command()
def version() -> None:
    """Print gpu-audit's version (as `--version` does; `kubectl gpu-audit version` too)."""
    click.echo(f"gpu-audit, version {__version__}")


@main.command(epilog=EPILOG)
@click.option(
    "--from-file",
    "from_files",
    multiple=True,
    metavar="PATH",
    help="Scan manifests or dumps instead of a live cluster: a file, a directory (walked in "
    "sorted order), or - for stdin. Repeat to merge several.",
)
@report_output_options
@click.option(
    "--fail-on",
    type=_choice([*SEVERITY_CHOICES, "none"]),
    default="none",
    show_default=True,
    help="Exit 1 when a finding has this severity or worse.",
)
@click.option(
    "--helm-chart",
    metavar="DIR",
    help="Scan what this Helm chart renders: runs `helm template DIR` (helm must be on PATH). "
    "For values or a release name, pipe instead: `helm template NAME DIR -f values.yaml | "
    "gpu-audit scan --from-file -`.",
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
    type=_choice(SEVERITY_CHOICES),
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
@click.option("--gpu-prices", metavar="FILE", help=GPU_PRICES_HELP)
@click.option(
    "--all-contexts",
    is_flag=True,
    help="Scan every context of the kubeconfig concurrently into one fleet report (as "
    "--context given once per context).",
)
@click.option(
    "--fleet-workers",
    type=click.IntRange(min=1),
    default=DEFAULT_WORKERS,
    show_default=True,
    help="With several --context or --all-contexts: how many clusters are read at a time.",
)
@fleet_live_options
def scan(
    from_files: tuple[str, ...],
    formats: tuple[str, ...],
    output_file: str | None,
    output_dir: str | None,
    fail_on: str,
    min_severity: str | None,
    helm_chart: str | None,
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
    gpu_prices: str | None,
    all_contexts: bool,
    fleet_workers: int,
    **live: Any,
) -> None:
    """Scan a cluster (or manifests) and report GPU misconfigurations.

    Without --from-file, reads the cluster of the current kubeconfig context (or the pod's
    service account in a pod), read-only, listing only what the enabled checks need.

    With several --context (or --all-contexts), scans those clusters concurrently into one
    fleet report: a fleet summary, worst cluster first, then each cluster's report; a
    cluster that cannot be read is in it as failed, with the reason.

    The report holds no wall-clock time unless SOURCE_DATE_EPOCH is set (or the run goes to
    --history-dir or --pushgateway, which stamp it with the clock), so the same input gives
    byte-identical JSON.
    """
    contexts: tuple[str, ...] = live.pop("contexts")
    fleet = all_contexts or len(set(contexts)) > 1
    live["context"] = None if fleet or not contexts else contexts[0]
    if fleet:
        _refuse_in_a_fleet(
            {
                "--from-file": bool(from_files),
                "--helm-chart": bool(helm_chart),
                "--in-cluster": bool(live["in_cluster"]),
                "--cluster-name": bool(cluster_name),
                "--baseline": bool(baseline),
                "--history-dir": bool(history_dir),
                "--pushgateway": bool(pushgateway),
            },
            formats,
        )
    if helm_chart:
        if "-" in from_files:
            _fail(["--helm-chart reads the chart's templates as stdin: drop --from-file -"])
        from_files, rendered = (*from_files, "-"), _helm_template(helm_chart)
        inputs = dataclasses.replace(
            _inputs(from_files, live, rendered), stdin_name=f"<helm template {helm_chart}>"
        )
    else:
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
        gpu_prices=gpu_prices,
        cluster_name=cluster_name,
        record_duration=record_duration,
        source_date_epoch=os.environ.get("SOURCE_DATE_EPOCH"),
        # A scheduled run is a point in a history and in a time series: stamp it.
        stamp_with_clock=bool(history_dir or pushgateway),
        fail_on=_severity(fail_on),
        fail_on_new=_severity(fail_on_new),
        strict=strict,
    )
    if fleet:
        outputs = (formats, output_file, output_dir, min_severity)
        _fleet_scan(options, contexts, all_contexts, fleet_workers, *outputs)
    with _reading(inputs):
        result = run_scan(options)
    document = result.document
    on_stdout = not (output_file or output_dir) and (
        bool(formats) or not (history_dir or pushgateway)
    )
    if formats or output_file or output_dir or on_stdout:
        _emit(document, formats or ("table",), output_file, output_dir, min_severity)
    where = _publish(document, history_dir, history_keep, pushgateway)
    for run in result.errors:
        click.echo(f"gpu-audit: {run.check.id} {cell(run.reason)}", err=True)
    for warning in result.warnings:
        _note(f"gpu-audit: warning: {cell(warning)}")
    if not on_stdout:  # a job's log gets one line; a terminal already shows the report
        _note(cell(summary_line(document, where or output_file or output_dir)))
    if not result.complete:
        _exit(EXIT_INCOMPLETE, _incomplete_reason(document))
    gates = [
        (len(result.failing), f"at or above {fail_on} (--fail-on)"),
        (len(result.failing_new), f"new at or above {fail_on_new} (--fail-on-new)"),
    ]
    _exit(
        EXIT_FINDINGS if result.failed else EXIT_OK,
        "; ".join(f"{count} finding(s) {gate}" for count, gate in gates if count),
    )


FLEET_FORMATS = sorted(FLEET_RENDERERS)


def _refuse_in_a_fleet(given: Mapping[str, bool], formats: Sequence[str]) -> None:
    """The options of one cluster's scan that a fleet scan (several --context,
    --all-contexts) cannot take, and the formats it cannot give."""
    for option, is_given in given.items():
        if is_given:
            _fail(
                [
                    f"{option} cannot be used with several --context or --all-contexts (a fleet "
                    "scan reads live clusters, each named after its context): scan each "
                    "cluster on its own, or build the fleet view of saved reports with "
                    "`gpu-audit fleet`"
                ]
            )
    other = [f for f in formats if f.lower() not in FLEET_RENDERERS]
    if other:
        _fail([f"--format {other[0]}: a fleet report is one of {', '.join(FLEET_FORMATS)}"])


def _emit_fleet(
    fleet: Document,
    formats: Sequence[str],
    output_file: str | None,
    output_dir: str | None,
    min_severity: str | None,
) -> None:
    """Write the fleet document in each format; --min-severity filters each cluster's
    findings as it does a single report's (the fleet summary counts them all)."""
    floor = _severity(min_severity)
    shown = {
        **fleet,
        "clusters": [
            {**c, "report": at_or_above(c["report"], floor) if c["report"] else None}
            for c in fleet["clusters"]
        ],
    }
    extensions = {name: extension for name, (extension, _) in FLEET_RENDERERS.items()}
    for name, target in _targets(formats, extensions, output_file, output_dir, "fleet"):
        on_terminal = target is None and name == "table"
        render = FLEET_RENDERERS[name][1]
        width = _terminal_width() if on_terminal else None
        _write(render(shown, on_terminal and _use_color(), width), target)


def _fleet_exit(fleet: Document, fail_on: str | None) -> NoReturn:
    """The worst exit of the fleet's clusters: 3 when one is incomplete or failed (the line
    names them), else 1 when one has a finding at or above --fail-on, else 0."""
    lacking = [c for c in fleet["clusters"] if c["status"] != COMPLETE]
    if lacking:
        named = ", ".join(f"{c['name']} ({c['status']})" for c in lacking)
        _exit(EXIT_INCOMPLETE, f"fleet incomplete: {len(lacking)} cluster(s): {named}")
    threshold = _severity(fail_on)
    failing = {
        c["name"]: len(at_or_above(c["report"], threshold)["findings"])
        for c in fleet["clusters"]
        if threshold is not None
    }
    failing = {name: count for name, count in failing.items() if count}
    _exit(
        EXIT_FINDINGS if failing else EXIT_OK,
        f"{sum(failing.values())} finding(s) at or above {fail_on} (--fail-on) in "
        + ", ".join(f"{name} ({count})" for name, count in failing.items()),
    )


def _fleet_scan(
    options: ScanOptions,
    contexts: Sequence[str],
    all_contexts: bool,
    workers: int,
    formats: Sequence[str],
    output_file: str | None,
    output_dir: str | None,
    min_severity: str | None,
) -> NoReturn:
    """`scan` of several contexts: each cluster scanned concurrently, one fleet report."""
    connection = options.inputs.connection
    with _reading(options.inputs):
        names = fleet_contexts(connection.kubeconfig, contexts, all_contexts)
        members, results = scan_fleet(options, names, workers)
    fleet = build_fleet(members)
    _emit_fleet(fleet, formats or ("table",), output_file, output_dir, min_severity)
    for result in results:
        cluster = cell(result.document["cluster"])
        for run in result.errors:
            click.echo(f"gpu-audit: {cluster}: {run.check.id} {cell(run.reason)}", err=True)
        for warning in result.warnings:
            _note(f"gpu-audit: {cluster}: warning: {cell(warning)}")
    for entry in fleet["clusters"]:
        if entry["error"]:
            _note(f"gpu-audit: {cell(entry['name'])}: not scanned: {cell(entry['error'])}")
    _fleet_exit(fleet, options.fail_on.value if options.fail_on else None)


def _incomplete_reason(document: Document) -> str:
    """Why a scan is incomplete, in one line: the inputs not read, the checks that raised."""
    unread = [
        g["type"]
        for g in document["source"]["gaps"]
        if not CollectionGap(g["type"], g["reason"]).api_absent
    ]
    raised = [c["id"] for c in document["checks"] if c["status"] == "error"]
    parts = [
        f"{len(names)} {what} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
        for names, what in ((unread, "resource type(s) not read"), (raised, "check(s) raised"))
        if names
    ]
    return "scan incomplete: " + "; ".join(parts)


def _helm_template(chart: str) -> io.StringIO:
    """The manifests `helm template` renders from a chart directory, to be read as stdin."""
    helm = shutil.which("helm")
    if helm is None:
        _fail(
            [
                f"--helm-chart needs helm on PATH; or render the chart yourself: "
                f"`helm template {chart} | gpu-audit scan --from-file -`"
            ]
        )
    proc = subprocess.run([helm, "template", chart], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        _fail([f"--helm-chart {chart}: helm template exited {proc.returncode}: {last}"])
    return io.StringIO(proc.stdout)


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
        _note(f"gpu-audit: not collected: {gap.type}: {cell(gap.reason)}")
    failed = [gap.type for gap in snapshot.gaps if not gap.api_absent]
    _exit(
        EXIT_OK if snapshot.complete else EXIT_INCOMPLETE,
        f"snapshot incomplete: {len(failed)} resource type(s) not read ({', '.join(failed)})",
    )


@main.command()
@click.argument("report_file", metavar="REPORT.json")
@report_output_options
@click.option("--gpu-prices", metavar="FILE", help=GPU_PRICES_HELP)
def render(
    report_file: str,
    formats: tuple[str, ...],
    output_file: str | None,
    output_dir: str | None,
    min_severity: str | None,
    gpu_prices: str | None,
) -> None:
    """Re-render a saved JSON report in other formats."""
    try:
        document = load_report(report_file)
        if gpu_prices:
            document = priced(document, load_prices(gpu_prices))
    except InputError as exc:
        _fail(exc.problems)
    _emit(document, formats or ("table",), output_file, output_dir, min_severity)


FLEET_EPILOG = """\b
Exit codes:
  0  every cluster complete, no finding at or above --fail-on
  1  findings at or above --fail-on in a cluster
  2  usage error, or a file that is not a gpu-audit JSON report (the message names it)
  3  a cluster's scan is incomplete
"""


@main.command("fleet", epilog=FLEET_EPILOG)
@click.argument("report_files", metavar="REPORT.json...", nargs=-1, required=True)
@click.option(
    "-o",
    "--format",
    "formats",
    multiple=True,
    type=_choice(FLEET_FORMATS),
    help="Output format (repeat with --output-dir for several). Default: table.",
)
@click.option("--output-file", metavar="PATH", help="Write the fleet report here, not stdout.")
@click.option("--output-dir", metavar="DIR", help="Write one fleet.<ext> per --format here.")
@click.option(
    "--min-severity",
    type=_choice(SEVERITY_CHOICES),
    help="Show only findings of this severity or worse in each cluster's section; the fleet "
    "summary counts them all.",
)
@click.option(
    "--fail-on",
    type=_choice([*SEVERITY_CHOICES, "none"]),
    default="none",
    show_default=True,
    help="Exit 1 when a cluster has a finding of this severity or worse.",
)
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr but errors and the exit line.")
def fleet_command(
    report_files: tuple[str, ...],
    formats: tuple[str, ...],
    output_file: str | None,
    output_dir: str | None,
    min_severity: str | None,
    fail_on: str,
    quiet: bool,
) -> None:
    """Build the fleet view of saved JSON reports (e.g. the runs/*.json of every cluster's
    CronJob, gathered from their volumes or object storage): a fleet summary, worst cluster
    first, then each cluster's report. Of several reports of one cluster, the latest
    (`generated_at`) stands for it. A saved fleet JSON gives its clusters (to render it
    again in another format)."""
    try:
        members, superseded = load_members(report_files)
    except InputError as exc:
        _fail(exc.problems)
    if superseded:
        # Named: two clusters saved under one --cluster-name would otherwise lose one quietly.
        _note(
            f"gpu-audit: left out {len(superseded)} report(s) of a cluster that a later one "
            f"(by generated_at, then command-line order) stands for: "
            f"{cell(', '.join(superseded))}"
        )
    fleet = build_fleet(members)
    _emit_fleet(fleet, formats or ("table",), output_file, output_dir, min_severity)
    _fleet_exit(fleet, None if fail_on == "none" else fail_on)


@main.command("diff")
@click.argument("old_file", metavar="OLD.json")
@click.argument("new_file", metavar="NEW.json")
@table_or_json_option
@click.option("--output-file", metavar="PATH", help="Write the comparison here instead of stdout.")
@click.option(
    "--fail-on-new",
    type=_choice(SEVERITY_CHOICES),
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
        on_stdout = output_file is None
        text = render_diff_table(
            document, on_stdout and _use_color(), _terminal_width() if on_stdout else None
        )
    _write(text, output_file)
    failing = new_at_or_above(document, Severity(fail_on_new)) if fail_on_new else []
    _exit(
        EXIT_FINDINGS if failing else EXIT_OK,
        f"{len(failing)} new finding(s) at or above {fail_on_new} (--fail-on-new)",
    )


@main.group()
def checks() -> None:
    """Inspect the available checks."""


@checks.command("list")
@table_or_json_option
@category_option
@click.option(
    "--severity",
    "severities",
    multiple=True,
    type=_choice(SEVERITY_CHOICES),
    help="Only checks of this severity; repeat for several.",
)
@click.option("--no-plugins", is_flag=True, help="Leave out third-party checks.")
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
@table_or_json_option
@checks_dir_option
def show_check(check_id: str, fmt: str, checks_dirs: tuple[str, ...]) -> None:
    """Show a check's rationale, detection, remediation and references."""
    from gpu_audit.catalog import describe_fix

    registry = _registry(plugins=True, checks_dirs=checks_dirs)
    found = registry.get(check_id.upper())
    if found is None:
        hint = did_you_mean([check_id], registry) or " (see `gpu-audit checks list`)"
        _fail([f"unknown check id {check_id!r}{hint}"])
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
@table_or_json_option
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
@category_option
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


@main.command("admission")
@click.option("--only", multiple=True, metavar="CHECK", help="Only these check ids.")
@click.option("--skip", multiple=True, metavar="CHECK", help="Not these check ids.")
@click.option(
    "--deny",
    multiple=True,
    metavar="SEVERITIES",
    help="Deny (instead of warn about) objects failing checks of these severities, e.g. "
    "critical,high.",
)
@click.option(
    "--namespace-label",
    "namespace_labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Apply only in namespaces with this label (repeat: all of them).",
)
@click.option(
    "--exclude-namespace",
    "exclude_namespaces",
    multiple=True,
    metavar="NAME",
    help="Never apply in this namespace (repeatable, or comma-separated).",
)
@click.option("-o", "--output-file", metavar="FILE", help="Write the YAML here, not stdout.")
@click.option("--no-plugins", is_flag=True, help="Leave out third-party checks.")
@checks_dir_option
def admission_command(
    only: tuple[str, ...],
    skip: tuple[str, ...],
    deny: tuple[str, ...],
    namespace_labels: tuple[str, ...],
    exclude_namespaces: tuple[str, ...],
    output_file: str | None,
    no_plugins: bool,
    checks_dirs: tuple[str, ...],
) -> None:
    """Print ValidatingAdmissionPolicies and bindings (admissionregistration.k8s.io/v1, CEL)
    for the checks that can be decided from one object at admission: warn by default, deny
    for the --deny severities. `kubectl apply -f` the output."""
    from gpu_audit import admission

    try:
        options = admission.parse_options(deny, namespace_labels, exclude_namespaces)
        registry = _registry(plugins=not no_plugins, checks_dirs=checks_dirs)
        enabled = select_checks(registry, only=_split(only), skip=_split(skip))
        objects = admission.render_objects(enabled.values(), options, named=_split(only))
    except (ValueError, RegistryError, admission.AdmissionError) as exc:
        _fail([str(exc)])
    _write(admission.render_yaml(objects), output_file)


FIX_EPILOG = """\b
Exit codes:
  0  nothing to fix, or the diff is shown (--write: the files are changed)
  2  usage or input error (the message names the file and document)
"""


@main.command("fix", epilog=FIX_EPILOG)
@click.option(
    "--from-file",
    "from_files",
    multiple=True,
    required=True,
    metavar="PATH",
    help="Manifests to fix: a file, a directory (walked in sorted order), or - for stdin "
    "(shown, never changed). Repeat for several.",
)
@click.option("--only", multiple=True, metavar="CHECK", help="Fix only these check ids.")
@click.option("--skip", multiple=True, metavar="CHECK", help="Do not fix these check ids.")
@click.option(
    "--min-severity",
    type=_choice(SEVERITY_CHOICES),
    help="Fix only findings of this severity or worse.",
)
@click.option("--write", is_flag=True, help="Change the files instead of printing the diff.")
@click.option("--no-plugins", is_flag=True, help="Ignore third-party checks.")
@checks_dir_option
def fix_command(
    from_files: tuple[str, ...],
    only: tuple[str, ...],
    skip: tuple[str, ...],
    min_severity: str | None,
    write: bool,
    no_plugins: bool,
    checks_dirs: tuple[str, ...],
) -> None:
    """Apply the remediations of the findings to the YAML files the objects came from: a
    unified diff on stdout (--write: the files changed), and on stderr what became of each
    finding. Comments, key order, quoting and the other documents are kept; a fix is kept
    only when a second scan shows it resolves its finding, else it is a TODO; objects from
    Helm, Kustomize or stdin are not changed: the patch to make instead is shown."""
    from gpu_audit.fix import FixOptions, render_notes, run_fix

    options = FixOptions(
        files=from_files,
        only=tuple(_split(only)),
        skip=tuple(_split(skip)),
        min_severity=Severity(min_severity.lower()) if min_severity else None,
        plugins=not no_plugins,
        checks_dirs=checks_dirs,
    )
    try:
        result = run_fix(options)
    except InputError as exc:
        _fail(exc.problems)
    except RegistryError as exc:
        _fail([str(exc)])
    click.echo(block(render_notes(result)), err=True, nl=False)
    if not write:
        click.echo(result.diff(), nl=False)
        sys.exit(EXIT_OK)
    for path, _, after in result.changes:
        try:
            Path(path).write_bytes(after.encode("utf-8"))
        except OSError as exc:
            _fail([f"{path}: cannot write: {exc.strerror}"])
        click.echo(f"gpu-audit: wrote {cell(path)}", err=True)
    sys.exit(EXIT_OK)


def _diagnostic_snapshot(from_files: Sequence[str], live: dict[str, Any]) -> Snapshot:
    """The input of `inventory` and `why-pending`: files, or every namespace of the cluster
    (GPU accounting needs every pod bound to a node, whatever its namespace)."""
    from gpu_audit.diagnostics import DIAGNOSTIC_TYPES, REQUIRED_TYPES

    if live["namespace"]:
        _fail(["--namespace: the inventory counts every pod on every node; omit it"])
    inputs = _inputs(from_files, live)
    with _reading(inputs):
        snapshot = load_snapshot(inputs, DIAGNOSTIC_TYPES)
    for gap in snapshot.gaps:
        _note(f"gpu-audit: not collected: {gap.type}: {cell(gap.reason)}")
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
@table_or_json_option
@click.option("--output-file", metavar="PATH", help="Write here instead of stdout.")
@live_options
def inventory(from_files: tuple[str, ...], fmt: str, output_file: str | None, **live: Any) -> None:
    """GPUs per node pool and product: nodes, capacity, allocatable, MIG, sharing, requested,
    idle and held GPUs, and how many pods of 1, 2, 4 and 8 GPUs still fit."""
    from gpu_audit.diagnostics import build_inventory
    from gpu_audit.reports.diagnostics_table import render_inventory

    found = build_inventory(_diagnostic_snapshot(from_files, live)).as_dict()
    width = None if output_file else _terminal_width()
    _diagnostic_output({"inventory": found}, render_inventory(found, width), fmt, output_file)


@main.command("why-pending")
@click.argument(
    "target", metavar="[NAMESPACE/POD | NAMESPACE/KIND/NAME | -n NS POD]", required=False
)
@click.option("--from-file", "from_files", multiple=True, metavar="PATH", help=_FROM_FILE_HELP)
@table_or_json_option
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
    new pod. Without an argument, every Pending pod that requests GPUs is explained. With
    -n NAMESPACE, name the pod as POD (or the workload as KIND/NAME), as kubectl does; without
    an argument, -n explains the Pending GPU pods of that namespace only. Every namespace is
    read all the same: whether a pod fits depends on every pod bound to the nodes.
    """
    from gpu_audit.diagnostics import explain_targets
    from gpu_audit.reports.diagnostics_table import render_pending

    namespace = live["namespace"]
    if namespace and target:
        target = f"{namespace}/{target}"
    snapshot = _diagnostic_snapshot(from_files, {**live, "namespace": None})
    try:
        explained = [
            e.as_dict()
            for e in explain_targets(snapshot, target)
            if target or not namespace or e.pod.namespace == namespace
        ]
    except InputError as exc:
        _fail(exc.problems)
    width = None if output_file else _terminal_width()
    text = render_pending(explained, width) if explained else "No Pending pod requests a GPU.\n"
    _diagnostic_output({"pending_pods": explained}, text, fmt, output_file)
