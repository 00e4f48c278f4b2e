"""A directory of past scans: `scan --history-dir DIR --history-keep N`.

    DIR/runs/<UTC time>-<cluster>.json   the report of each run, and its .html rendering
    DIR/latest.json, DIR/latest.html     copies of the newest run (not symlinks: PVCs and some
                                         CSI drivers mishandle them)
    DIR/index.html                       every kept run, newest first, with the score trend

The index is rebuilt from the kept runs' JSON each time, so the directory holds no other state
that could drift. Every file is written to a temporary name and renamed, so a reader (a web
server on the same volume) never sees half a file.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import html
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpu_audit.errors import InputError

RUNS = "runs"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_SEVERITIES = ("critical", "high", "medium", "low", "info")


@dataclass(frozen=True, slots=True)
class Run:
    """One kept run, as the index shows it: read from the run's saved report."""

    stem: str  # file name without extension, under runs/
    cluster: str | None
    score: float | None
    grade: str | None
    findings: int
    by_severity: Mapping[str, int]
    coverage: float | None
    complete: bool


@dataclass(frozen=True, slots=True)
class Recorded:
    run: Path  # the run's JSON report
    removed: tuple[str, ...]  # stems dropped by retention
    unreadable: tuple[str, ...]  # kept runs whose JSON could not be read (left out of the index)


def run_stem(when: dt.datetime, cluster: str | None) -> str:
    """`20250601T030000Z-prod-a100`: the UTC time first, so names sort in time order."""
    name = _UNSAFE_IN_NAME.sub("_", cluster or "").strip("._") or "unnamed"
    return f"{when.astimezone(dt.UTC).strftime(STAMP_FORMAT)}-{name}"


def run_time(document: Mapping[str, Any], now: dt.datetime) -> dt.datetime:
    """The report's own time when it is stamped (SOURCE_DATE_EPOCH), else the clock's."""
    stamped = document.get("generated_at")
    if isinstance(stamped, str) and stamped:
        return dt.datetime.fromisoformat(stamped.replace("Z", "+00:00"))
    return now


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _free_stem(runs_dir: Path, stem: str) -> str:
    """Two runs in the same second (a manual run beside the CronJob) must not overwrite."""
    candidate, n = stem, 1
    while (runs_dir / f"{candidate}.json").exists():
        time_part, _, cluster = stem.partition("-")
        candidate = f"{time_part}.{n}-{cluster}"
        n += 1
    return candidate


def _read_run(path: Path) -> Run:
    document = json.loads(path.read_text(encoding="utf-8"))
    score, summary, coverage = document["score"], document["summary"], document["coverage"]
    return Run(
        stem=path.stem,
        cluster=document.get("cluster"),
        score=score["overall"],
        grade=score["grade"],
        findings=int(summary["findings"]),
        by_severity={s: int(summary["by_severity"].get(s, 0)) for s in _SEVERITIES},
        coverage=coverage["ratio"],
        complete=bool(document["complete"]),
    )


def record(
    directory: str | Path,
    document: Mapping[str, Any],
    rendered: Mapping[str, str],
    *,
    keep: int,
    now: dt.datetime,
) -> Recorded:
    """Add a run (`rendered` holds its "json" and "html" texts), apply retention, rebuild the
    index and the latest copies. Raises InputError naming the directory when it is unusable."""
    if keep < 1:
        raise InputError([f"--history-keep must be at least 1, not {keep}"])
    root = Path(directory)
    runs_dir = root / RUNS
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        stem = _free_stem(runs_dir, run_stem(run_time(document, now), document.get("cluster")))
        _write_atomic(runs_dir / f"{stem}.json", rendered["json"])
        _write_atomic(runs_dir / f"{stem}.html", rendered["html"])
        removed = _apply_retention(runs_dir, keep)
        kept, unreadable = _kept_runs(runs_dir)
        _write_atomic(root / "latest.json", rendered["json"])
        _write_atomic(root / "latest.html", rendered["html"])
        _write_atomic(root / "index.html", render_index(kept))
    except OSError as exc:
        raise InputError([f"{root}: cannot write the history: {exc.strerror or exc}"]) from None
    return Recorded(runs_dir / f"{stem}.json", removed, unreadable)


def _stems(runs_dir: Path) -> list[str]:
    return sorted(p.stem for p in runs_dir.glob("*.json") if not p.name.startswith("."))


def _apply_retention(runs_dir: Path, keep: int) -> tuple[str, ...]:
    stems = _stems(runs_dir)
    dropped = tuple(stems[: max(0, len(stems) - keep)])
    for stem in dropped:
        for suffix in (".json", ".html"):
            (runs_dir / f"{stem}{suffix}").unlink(missing_ok=True)
    return dropped


def _kept_runs(runs_dir: Path) -> tuple[list[Run], tuple[str, ...]]:
    kept: list[Run] = []
    unreadable: list[str] = []
    for stem in _stems(runs_dir):
        try:
            kept.append(_read_run(runs_dir / f"{stem}.json"))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            unreadable.append(stem)
    return kept, tuple(unreadable)


# --- the index page -------------------------------------------------------------------------

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem;color:#1f2328;max-width:70rem}
h1{font-size:1.4rem;margin:0 0 .2rem}
.meta{color:#57606a;margin:0 0 1rem}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #d0d7de;white-space:nowrap}
td.num,th.num{text-align:right}
.up{color:#1a7f37}.down{color:#cf222e}
svg{display:block;margin:1rem 0;max-width:100%;height:auto}
svg .axis{stroke:#d0d7de}svg .line{fill:none;stroke:#0969da;stroke-width:2}
svg .dot{fill:#0969da}svg text{font-size:11px;fill:#57606a}
""".strip()
_CSP = (
    "default-src 'none'; style-src 'sha256-"
    + base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
    + "'"
)
_W, _H, _PAD = 640, 180, 32


def _stamp_text(stem: str) -> str:
    time_part = stem.split("-", 1)[0].split(".", 1)[0]
    try:
        when = dt.datetime.strptime(time_part, STAMP_FORMAT)
    except ValueError:
        return time_part
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt_score(score: float | None) -> str:
    return "-" if score is None else f"{score:.1f}"


def _trend_svg(runs: Sequence[Run]) -> str:
    """Score (0-100) of each run left to right, oldest first; runs without a score are gaps."""
    scored = [(i, r.score) for i, r in enumerate(runs) if r.score is not None]
    if not scored:
        return "<p>No run has a score yet.</p>"
    span = max(1, len(runs) - 1)

    def x(i: int) -> float:
        return _PAD + (_W - 2 * _PAD) * (i / span if len(runs) > 1 else 0.5)

    def y(score: float) -> float:
        return _H - _PAD - (_H - 2 * _PAD) * score / 100

    parts = [
        f'<svg viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
        f'aria-label="Score of each run, oldest first">',
    ]
    parts.extend(
        f'<line class="axis" x1="{_PAD}" y1="{y(level):.1f}" x2="{_W - _PAD}" '
        f'y2="{y(level):.1f}"/><text x="4" y="{y(level) + 4:.1f}">{level}</text>'
        for level in (0, 50, 100)
    )
    segments: list[list[tuple[int, float]]] = [[]]
    for i, run in enumerate(runs):
        if run.score is None:
            segments.append([])
        else:
            segments[-1].append((i, run.score))
    for segment in segments:
        if len(segment) > 1:
            points = " ".join(f"{x(i):.1f},{y(s):.1f}" for i, s in segment)
            parts.append(f'<polyline class="line" points="{points}"/>')
    for i, score in scored:
        label = html.escape(f"{_stamp_text(runs[i].stem)}: {score:.1f}")
        parts.append(
            f'<circle class="dot" cx="{x(i):.1f}" cy="{y(score):.1f}" r="3">'
            f"<title>{label}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _delta(current: float | None, previous: float | None) -> str:
    if current is None or previous is None:
        return "<td class=num></td>"
    change = round(current - previous, 1)
    if change == 0:
        return "<td class=num>±0.0</td>"
    css = "up" if change > 0 else "down"
    return f"<td class='num {css}'>{change:+.1f}</td>"


def render_index(runs: Sequence[Run]) -> str:
    """The index page of the kept runs (`runs` oldest first, as the directory sorts them)."""
    clusters = sorted({r.cluster for r in runs if r.cluster})
    title = "gpu-audit history" + (f": {', '.join(clusters)}" if clusters else "")
    rows = []
    for i in range(len(runs) - 1, -1, -1):  # newest first
        run = runs[i]
        previous = runs[i - 1].score if i > 0 else None
        link = quote(f"{RUNS}/{run.stem}")
        counts = "".join(f"<td class=num>{run.by_severity[s]}</td>" for s in _SEVERITIES)
        coverage = "-" if run.coverage is None else f"{run.coverage * 100:.0f}%"
        rows.append(
            f"<tr><td>{html.escape(_stamp_text(run.stem))}</td>"
            f"<td>{html.escape(run.cluster or '')}</td>"
            f"<td class=num>{_fmt_score(run.score)}</td>{_delta(run.score, previous)}"
            f"<td>{html.escape(run.grade or '-')}</td>"
            f"<td class=num>{run.findings}</td>{counts}"
            f"<td class=num>{coverage}</td><td>{'yes' if run.complete else 'no'}</td>"
            f'<td><a href="{link}.html">html</a> · <a href="{link}.json">json</a></td></tr>'
        )
    severity_heads = "".join(f"<th class=num>{s}</th>" for s in _SEVERITIES)
    newest = (
        f'<a href="latest.html">latest report</a> ({html.escape(_stamp_text(runs[-1].stem))}'
        f", score {_fmt_score(runs[-1].score)})"
        if runs
        else "no runs yet"
    )
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>"
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="meta">{len(runs)} run{"s" if len(runs) != 1 else ""} kept · {newest}</p>'
        f"<h2>Score trend</h2>{_trend_svg(runs)}"
        "<h2>Runs</h2><table><thead><tr><th>time</th><th>cluster</th><th class=num>score</th>"
        "<th class=num>change</th><th>grade</th><th class=num>findings</th>"
        f"{severity_heads}<th class=num>coverage</th><th>complete</th><th>report</th></tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table>\n</body></html>\n"
    )


def summary_line(document: Mapping[str, Any], report: str | None = None) -> str:
    """`gpu-audit: cluster prod score 64.7 (D), 29 findings (2 critical, 5 high), coverage 81%,
    report DIR/runs/....html`: what a CronJob's log shows of a run."""
    score, summary, coverage = document["score"], document["summary"], document["coverage"]
    cluster = document.get("cluster") or "unnamed"
    rated = "no score" if score["overall"] is None else f"score {score['overall']:.1f}"
    if score["grade"]:
        rated += f" ({score['grade']})"
    counts = [f"{summary['by_severity'].get(s, 0)} {s}" for s in _SEVERITIES]
    nonzero = [c for c in counts if not c.startswith("0 ")]
    found = f"{summary['findings']} finding{'s' if summary['findings'] != 1 else ''}"
    if nonzero:
        found += f" ({', '.join(nonzero)})"
    ratio = coverage["ratio"]
    parts = [f"gpu-audit: cluster {cluster} {rated}", found]
    parts.append("coverage n/a" if ratio is None else f"coverage {ratio * 100:.0f}%")
    if not document["complete"]:
        parts.append("incomplete")
    if report:
        parts.append(f"report {report}")
    return ", ".join(parts)
