"""A whole scan as a library call: `run_scan(ScanOptions(...))` returns the finished report.

Every stage runs here, in this order: the check registry and its selection, the exemptions
file, the baseline report and the compliance frameworks (so that bad options fail before the
cluster is read), the snapshot (files, or the live cluster), the checks, the exemptions, the
diagnostics, and the report, built once with every section. Nothing here prints or exits:
problems are raised (InputError, RegistryError, LiveError) and the command line
(gpu_audit.cli) turns them, and the ScanResult, into messages, files and exit codes.

    from gpu_audit.scan import Inputs, ScanOptions, run_scan
    from gpu_audit.report import dumps

    result = run_scan(ScanOptions(Inputs(files=("manifests/",)), frameworks=("eks-aiml",)))
    print(dumps(result.document))
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from gpu_audit.declarative import load_check_dirs
from gpu_audit.diagnostics import diagnostics_section
from gpu_audit.engine import CheckRun, run_checks
from gpu_audit.errors import InputError
from gpu_audit.impact import load_prices
from gpu_audit.model import Category, Severity
from gpu_audit.postscan.diff import baseline_section, load_comparable, new_at_or_above
from gpu_audit.postscan.exemptions import apply_exemptions, evaluation_date, load_exemptions
from gpu_audit.postscan.frameworks import compliance_section, resolve_frameworks
from gpu_audit.rbac import scan_types
from gpu_audit.registry import RegistryError, load_checks, select_checks
from gpu_audit.report import (
    Document,
    build_report,
    in_namespace,
    report_entries,
    timestamp_from_epoch,
)
from gpu_audit.snapshot import Snapshot
from gpu_audit.sources.files import STDIN_NAME, load_files
from gpu_audit.sources.live import (
    ConfigError,
    Connection,
    ListOptions,
    LiveError,
    Progress,
    collect,
)

__all__ = [
    "ConfigError",
    "Connection",
    "InputError",
    "Inputs",
    "ListOptions",
    "LiveError",
    "Progress",
    "RegistryError",
    "ScanOptions",
    "ScanResult",
    "load_snapshot",
    "run_scan",
]


@dataclass(frozen=True, slots=True)
class Inputs:
    """Where a snapshot is read from: `files` (files, directories, "-" for `stdin`), or, when
    there are none, the live cluster of `connection`, listed with `listing`; `progress` is
    called as a live read goes (resource type, objects so far)."""

    files: tuple[str, ...] = ()
    stdin: IO[str] | None = None  # for "-"; None: sys.stdin
    stdin_name: str = STDIN_NAME  # what messages and the report call it
    connection: Connection = field(default_factory=Connection)
    listing: ListOptions = field(default_factory=ListOptions)
    progress: Progress | None = None


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """Everything a scan depends on; the defaults scan the current kubeconfig context with
    every check. Ids and names are given one per item (the CLI splits "a,b")."""

    inputs: Inputs = Inputs()
    # Which checks run: check ids, category names or id codes ("monitoring", "MON").
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    plugins: bool = True  # third-party checks (entry points)
    checks_dirs: tuple[str, ...] = ()  # directories of declarative checks
    # What the report adds to the checks' results.
    exemptions_file: str | None = None
    today: dt.date | None = None  # the day exemption expiry is judged on (default: see below)
    baseline: str | None = None  # a previous JSON report to compare with
    frameworks: tuple[str, ...] = ()  # shipped framework ids or framework .yaml files
    gpu_prices: str | None = None  # a price table, GPU product -> $/GPU-hour (gpu_audit.impact)
    cluster_name: str | None = None  # default: the kubeconfig context of a live scan
    record_duration: bool = False  # scan_duration_seconds (the bytes then vary run to run)
    # generated_at: SOURCE_DATE_EPOCH (whole seconds, as text) when given; else the clock when
    # `stamp_with_clock` (a scheduled run is a point in a history); else null. Exemption
    # expiry is judged on that day unless `today` says otherwise.
    source_date_epoch: str | None = None
    stamp_with_clock: bool = False
    # The gates ScanResult.failed reports: any finding at or above `fail_on`; with a baseline,
    # a new finding (not exempted) at or above `fail_on_new`.
    fail_on: Severity | None = None
    fail_on_new: Severity | None = None
    # The input's warnings (fields of a type the API server would refuse, objects given
    # twice, directory entries that cannot be read) are raised as an InputError instead.
    strict: bool = False


@dataclass(frozen=True, slots=True)
class ScanResult:
    """The finished report and what a caller decides exit codes and messages on."""

    document: Document
    runs: tuple[CheckRun, ...]
    options: ScanOptions

    @property
    def complete(self) -> bool:
        """Every input was collected and no check raised."""
        return bool(self.document["complete"])

    @property
    def errors(self) -> tuple[CheckRun, ...]:
        """The runs of the checks that raised (status `error`)."""
        return tuple(run for run in self.runs if run.error_detail)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Exemptions that expired or match nothing."""
        return tuple(self.document["exemptions"]["warnings"])

    @property
    def failing(self) -> list[dict[str, Any]]:
        """The findings at or above options.fail_on."""
        threshold = self.options.fail_on
        if threshold is None:
            return []
        return [
            f for f in self.document["findings"] if Severity(f["severity"]).rank >= threshold.rank
        ]

    @property
    def failing_new(self) -> list[dict[str, Any]]:
        """The new findings (not exempted) at or above options.fail_on_new."""
        if self.options.fail_on_new is None or self.document["baseline"] is None:
            return []
        return new_at_or_above(self.document["baseline"], self.options.fail_on_new)

    @property
    def failed(self) -> bool:
        """A gate (fail_on, fail_on_new) is crossed."""
        return bool(self.failing or self.failing_new)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector while the snapshot is built.

    Loading creates millions of small dicts and lists and no garbage cycles, and the collector
    would traverse all of them again at every generation-2 pass as they pile up: more than
    half of the load time of a 150,000-pod dump. (Not gc.freeze(): frozen objects are never
    freed, which leaks every snapshot when scans run in one process, as in tests.)
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def left_at_exit() -> Iterator[None]:
    """For a process that ends when the block does (the executables): keep the interpreter's
    exit from freeing, one by one, the objects the block left. A scan's snapshot is held in
    reference cycles (a pod template names its object, which keeps its templates), so it waits
    for the collection the interpreter runs as it exits: 2.1-2.8 s of an 18.7 s scan at
    50,000 pods. Frozen objects are not collected; the process ends and its memory goes back
    whole. The exit is otherwise the usual one: atexit handlers run (the kubernetes client
    removes the certificate files it wrote), and the standard streams are flushed."""
    try:
        yield
    finally:
        gc.freeze()


@contextlib.contextmanager
def frozen_snapshot(inputs: Inputs, types: Iterable[str]) -> Iterator[Snapshot]:
    """load_snapshot, kept out of the cyclic garbage collector's sight while the caller (the
    checks, diagnostics and report) reads it.

    Every collection would traverse the snapshot again (the objects made while the collector
    was paused wait in the youngest generation, then move up one pass at a time): at 60,000
    pods, 13-19 s of a 40-60 s scan after the load, and 1.3 s frozen (benchmarks/phases.py,
    load average 3-5). gc.freeze() moves the objects to a permanent generation that
    collections skip, before the collector runs again: re-enabled first, it would traverse
    every object of the load at its next pass (0.5 s of a 20,000-pod live scan).
    gc.unfreeze() returns them at the end, so that a later collection frees them as usual
    (scans run one after another in one process do not leak). Objects made meanwhile are
    collected as usual.
    """
    with _gc_paused():
        snapshot = load_snapshot(inputs, types)
        gc.freeze()
    try:
        yield snapshot
    finally:
        gc.unfreeze()


def load_snapshot(inputs: Inputs, types: Iterable[str]) -> Snapshot:
    """The snapshot of `inputs`: every object of its files, or the resource `types` listed
    from the live cluster (of `inputs.listing.namespace` only, when given, for the namespaced
    types). Raises InputError (files) or LiveError (the cluster cannot be read at all)."""
    with _gc_paused():
        if inputs.files:
            return load_files(inputs.files, inputs.stdin, stdin_name=inputs.stdin_name)
        return collect(types, inputs.connection, inputs.listing, inputs.progress)


def _generated_at(options: ScanOptions) -> str | None:
    epoch = options.source_date_epoch
    if epoch is None and options.stamp_with_clock:
        epoch = str(int(time.time()))
    return timestamp_from_epoch(epoch)


def run_scan(options: ScanOptions) -> ScanResult:
    """Run a whole scan and build its report. Raises InputError (bad input, options or
    files), RegistryError (a plugin or check selection) or LiveError (the cluster cannot be
    read at all); a check that raises is reported as `error`, not raised."""
    try:
        categories = [Category.parse(c) for c in options.categories]
    except ValueError as exc:
        raise InputError([str(exc)]) from None
    registry = load_checks(plugins=options.plugins, extra=load_check_dirs(options.checks_dirs))
    enabled = select_checks(registry, only=options.only, skip=options.skip, categories=categories)
    if options.fail_on_new is not None and not options.baseline:
        raise InputError(["--fail-on-new needs --baseline"])
    generated_at = _generated_at(options)
    rules = load_exemptions(options.exemptions_file, registry) if options.exemptions_file else None
    old = load_comparable(options.baseline) if options.baseline else None
    chosen = resolve_frameworks(options.frameworks, registry)
    prices = load_prices(options.gpu_prices) if options.gpu_prices else None
    # --namespace: every check runs on what was read (files: every object, for node-level
    # checks need the pods of every namespace; live: that namespace's objects, see
    # gpu_audit.engine.unlisted_namespaces), and only that namespace's findings are shown.
    namespace = options.inputs.listing.namespace
    started = time.monotonic()
    with frozen_snapshot(options.inputs, scan_types(enabled.values())) as snapshot:
        if options.strict and snapshot.source.warnings:
            raise InputError(snapshot.source.warnings)
        day = evaluation_date(options.today, generated_at)
        runs, exempted = apply_exemptions(
            run_checks(enabled.values(), snapshot), snapshot, registry, rules, day
        )
        duration = round(time.monotonic() - started, 3) if options.record_duration else None
        entries = report_entries(snapshot, runs, prices)
        document = build_report(
            snapshot,
            runs,
            entries=entries,
            generated_at=generated_at,
            scan_duration_seconds=duration,
            exemptions=exempted,
            diagnostics=diagnostics_section(snapshot),
            baseline=(
                baseline_section(
                    in_namespace(old, namespace), options.baseline, in_namespace(entries, namespace)
                )
                if old is not None and options.baseline
                else None
            ),
            compliance=compliance_section(chosen, entries["checks"]),
            cluster=options.cluster_name or snapshot.source.details.get("context") or None,
        )
        return ScanResult(in_namespace(document, namespace), runs, options)
