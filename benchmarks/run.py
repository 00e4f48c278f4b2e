"""`make bench`: gpu-audit's time and memory on synthetic clusters, against floors and Checkov.

Every measurement is its own process, so its peak RSS is its own (os.wait4's rusage of that
child). In one run:

* offline: for clusters of several sizes and shapes (benchmarks/generate.py: the base shape at
  every --scales size for the growth of the cost per object, then one axis at a time at
  --sweep-pods: the share of Pending GPU pods, the distinct node shapes, the namespaces; and
  the same objects as YAML at --yaml-pods), `gpu-audit scan --from-file DUMP -o json` against
  the time and peak RSS of only `json.loads` of the same objects as JSON (the floor, measured
  right before the scan: on a shared machine only such ratios compare), and the scan's stages
  (benchmarks/phases.py: load, index, checks, diagnostics, render, each with the peak RSS
  reached, and a cProfile of the largest run), and what its parts cost at least
  (benchmarks/floors.py: msgspec's parse, a bare visit of every value, the redaction alone,
  PyYAML's bare events for the YAML);
* live (--live-pods): the test control plane of tests/live loaded with a synthetic cluster,
  `gpu-audit scan` against a raw paginated list of the same kinds, and against `kubectl get`;
* Checkov (--checkov-pods): `checkov --framework kubernetes` against `gpu-audit scan` on the
  same manifest directory; Checkov is installed from PyPI into its own virtualenv.

Results are printed and written as JSON (--output) to compare across commits. There are no
assertions: goals not met are reported with their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from generate import Shape

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PYTHON = sys.executable
GPU_AUDIT = str(Path(PYTHON).with_name("gpu-audit"))
CHECKOV_VENV = Path.home() / ".cache" / "gpu-audit" / "checkov-venv"
K8S_BIN = Path.home() / ".cache" / "gpu-audit" / "k8s-bin"
STAGES = ("load", "index", "checks", "diagnostics", "render")  # of benchmarks/phases.py
BASE = Shape()  # the generator's default: no Pending pods, its pools' node shapes
TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
GOALS = {  # issue 18
    "offline_time_vs_json_loads": 1.5,
    "offline_rss_vs_json_loads": 1.3,
    "per_object_cost_growth": 1.2,
    "yaml_vs_json_scan": 2.0,
    "live_time_vs_raw_list": 1.5,
    "live_rss_vs_raw_list": 2.0,
    "checkov_vs_gpu_audit": 10.0,
}


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_rss_mib: float
    exit_code: int


def measure(
    cmd: Sequence[str],
    stdout: Path | None = None,
    env: dict[str, str] | None = None,
    ok: tuple[int, ...] = (0, 1),  # 1: findings at or above --fail-on (Checkov: failed checks)
) -> Run:
    """Wall time and peak RSS of one command. The RSS comes from GNU time when installed: a
    child forked straight from this (large) process would count the pages it shared with it
    before exec in its own peak. Without GNU time, the child's rusage from wait4 is used."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as figures:
        timed = [TIME, "-f", "%M", "-o", figures.name, *cmd] if TIME else list(cmd)
        with (stdout or Path(os.devnull)).open("wb") as out:
            started = time.perf_counter()
            child = subprocess.Popen(timed, stdout=out, stderr=subprocess.PIPE, env=env)
            assert child.stderr is not None
            errors = child.stderr.read()
            _, status, usage = os.wait4(child.pid, 0)
            seconds = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        peak_kib = int(figures.read().split()[-1]) if TIME else usage.ru_maxrss
    if code not in ok:
        tail = errors.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {code}:\n{tail}")
    return Run(round(seconds, 3), round(peak_kib / 1024, 1), code)


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else 0.0


def generate(
    work: Path, pods: int, seed: int, shape: Shape = BASE, yaml_format: bool = False
) -> tuple[Path, dict[str, Any]]:
    """The dump of `pods` pods of `shape` (benchmarks/generate.py), written once per work dir."""
    suffix = "yaml" if yaml_format else "json"
    path = work / (
        f"cluster-{pods}-seed{seed}-pending{shape.pending_pods:g}-classes{shape.node_classes}"
        f"-ns{shape.namespaces}.{suffix}"
    )
    meta = Path(f"{path}.meta.json")
    if not (path.exists() and meta.exists()):
        subprocess.run(
            [
                PYTHON,
                str(HERE / "generate.py"),
                *("--pods", str(pods), "--seed", str(seed), "--format", suffix),
                *("--pending-pods", str(shape.pending_pods)),
                *("--node-classes", str(shape.node_classes)),
                *("--namespaces", str(shape.namespaces)),
                *("--output", str(path)),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return path, json.loads(meta.read_text())


@dataclass(frozen=True)
class Case:
    """One offline measurement: a cluster size and shape, read as JSON or YAML."""

    label: str
    pods: int
    shape: Shape
    yaml_format: bool = False


def offline_cases(
    scales: Sequence[int],
    sweep_pods: int,
    yaml_pods: int,
    pending: Sequence[float],
    classes: Sequence[int],
    namespaces: Sequence[int],
) -> list[Case]:
    """The base shape (the middle value of each axis, namespaces as the generator sets them)
    at every scale, then at `sweep_pods` each other value of one axis at a time, then YAML."""
    base = Shape(pending[len(pending) // 2], classes[len(classes) // 2], 0)
    cases = [Case(f"{pods} pods, base shape", pods, base) for pods in scales]
    cases.extend(
        Case(f"pending {share:.2%} of pods", sweep_pods, replace(base, pending_pods=share))
        for share in pending
        if share != base.pending_pods
    )
    cases.extend(
        Case(f"{count} node classes", sweep_pods, replace(base, node_classes=count))
        for count in classes
        if count != base.node_classes
    )
    cases.extend(
        Case(f"{count} namespaces", sweep_pods, replace(base, namespaces=count))
        for count in namespaces
    )
    if yaml_pods:
        cases.append(Case(f"{yaml_pods} pods, YAML", yaml_pods, base, yaml_format=True))
    return cases


def _stages(dump: Path, profile: Path | None = None) -> tuple[Run, dict[str, Any]]:
    """benchmarks/phases.py on the dump: seconds and peak RSS per stage, in its own process."""
    report = dump.with_suffix(".phases.json")
    cmd = [PYTHON, str(HERE / "phases.py"), str(dump)]
    run = measure([*cmd, *(("--profile", str(profile)) if profile else ())], stdout=report)
    return run, json.loads(report.read_text())


def offline_case(work: Path, case: Case, seed: int) -> dict[str, Any]:
    """json.loads of the JSON dump (the floor), `gpu-audit scan` of the case's dump, and the
    scan's stages; a YAML case is compared with the scan of the same objects as JSON too."""
    dump, meta = generate(work, case.pods, seed, case.shape, case.yaml_format)
    as_json, _ = generate(work, case.pods, seed, case.shape) if case.yaml_format else (dump, meta)
    floor = measure([PYTHON, "-c", f"import json; json.loads(open({str(as_json)!r}, 'rb').read())"])
    report = work / f"report-{dump.stem}.json"
    scan = measure(
        [GPU_AUDIT, "scan", "--from-file", str(dump), "-o", "json", "--output-file", str(report)]
    )
    stages_run, stages = _stages(dump)
    row: dict[str, Any] = {
        "case": case.label,
        "format": "yaml" if case.yaml_format else "json",
        "pods": meta["pods"],
        "nodes": meta["nodes"],
        "namespaces": meta["namespaces"],
        "node_classes": case.shape.node_classes,
        "pending_pods": meta["pending_pods"],
        "objects": meta["objects"],
        "file_mib": round(meta["bytes"] / 2**20, 1),
        "misconfigured_gpu_workloads": meta["misconfigured_gpu_workloads"],
        "json_loads": asdict(floor),
        "scan": asdict(scan),
        "time_ratio": _ratio(scan.seconds, floor.seconds),
        "rss_ratio": _ratio(scan.peak_rss_mib, floor.peak_rss_mib),
        "scan_ms_per_1k_objects": round(1000 * scan.seconds / meta["objects"] * 1000, 1),
        "stages": stages["seconds"],
        "stage_peak_rss_mib": stages["peak_rss_mib"],
        "stages_process": asdict(stages_run),
        "stage_ratios": {k: _ratio(v, floor.seconds) for k, v in stages["seconds"].items()},
        "findings": len(json.loads(report.read_text())["findings"]),
    }
    if case.yaml_format:
        json_scan = measure([GPU_AUDIT, "scan", "--from-file", str(as_json), "-o", "json"])
        row["json_scan"] = asdict(json_scan)
        row["time_ratio_vs_json_scan"] = _ratio(scan.seconds, json_scan.seconds)
        row["floors"] = floors(as_json, dump)
        # PyYAML's events alone, against the whole JSON scan: the least a YAML reader adds.
        row["yaml_events_vs_json_scan"] = _ratio(row["floors"]["yaml_events"], json_scan.seconds)
    return row


def floors(dump: Path, yaml_dump: Path | None = None) -> dict[str, Any]:
    """benchmarks/floors.py on the dump (and its YAML twin), in its own process."""
    cmd = [PYTHON, str(HERE / "floors.py"), str(dump), *((str(yaml_dump),) if yaml_dump else ())]
    found: dict[str, Any] = json.loads(
        subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    )
    return found


def offline(
    work: Path, cases: Sequence[Case], scales: Sequence[int], seed: int, profile_top: int
) -> dict[str, Any]:
    rows = [offline_case(work, case, seed) for case in cases]
    largest = next(c for c in cases if c.pods == max(scales) and not c.yaml_format)
    profile = work / "phases.prof"
    largest_dump = generate(work, largest.pods, seed, largest.shape)[0]
    _, phases = _stages(largest_dump, profile)
    phases["profile_top"] = _profile_top(profile, profile_top)
    growth = [r for r in rows if r["pods"] and r["case"].endswith("base shape")]
    first, last = growth[0], growth[-1]
    phases["pods"] = last["pods"]
    per_object = _ratio(last["scan_ms_per_1k_objects"], first["scan_ms_per_1k_objects"])
    # The floors beside the unprofiled stages and json.loads of the same dump's case.
    row = next(r for r in rows if r["case"] == largest.label)
    found = floors(largest_dump)
    found["after_load"] = round(sum(v for k, v in row["stages"].items() if k != "load"), 3)
    found["case_json_loads"] = row["json_loads"]["seconds"]
    return {
        "cases": rows,
        "phases": phases,
        "per_object_cost_growth": per_object,
        "floors": found,
    }


def _profile_top(path: Path, count: int) -> list[dict[str, Any]]:
    """The functions with the most cumulative time under the scan's stages."""
    stats = pstats.Stats(str(path))
    rows = []
    for (file, line, name), (_, calls, _tt, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if file.endswith("phases.py") or not ("/work/" in file or "site-packages" in file):
            continue  # the harness's own frames, and the standard library
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({name})",
                "calls": calls,
                "cumulative_seconds": round(cumulative, 3),
            }
        )
    rows.sort(key=lambda r: (-r["cumulative_seconds"], r["function"]))
    return rows[:count]


# --------------------------------------------------------------------------- live


def _live_types() -> list[str]:
    """The resource types `gpu-audit scan` lists: what the checks read, plus the diagnostics'."""
    from gpu_audit.diagnostics import SCAN_TYPES
    from gpu_audit.registry import load_checks

    checks = load_checks(plugins=False).values()
    return sorted({t for c in checks for t in c.required_types} | set(SCAN_TYPES))


def _collection_paths(types: Sequence[str]) -> list[str]:
    from gpu_audit.k8s.kinds import KNOWN_KINDS

    paths = []
    for type_ in types:
        info = KNOWN_KINDS.get(type_)
        if info is None or type_ == "Secret":
            continue
        version = info.versions[0]
        prefix = f"/api/{version}" if not info.group else f"/apis/{info.group}/{version}"
        paths.append(f"{prefix}/{info.plural}")
    return paths


def _bin_dir() -> Path | None:
    env = os.environ.get("GPU_AUDIT_K8S_BIN")
    if env:
        return Path(env)
    found = sorted(p for p in K8S_BIN.glob("*/") if (p / "kube-apiserver").is_file())
    return found[-1] if found else None


def live(work: Path, pods: int, seed: int) -> dict[str, Any]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        return {
            "skipped": f"no kube-apiserver/etcd under {K8S_BIN} (scripts/build-control-plane.sh)"
        }
    sys.path.insert(0, str(HERE))
    import live_cluster

    dump, meta = generate(work, pods, seed)
    objects = json.loads(dump.read_text())["items"]
    plane = work / "control-plane"
    shutil.rmtree(plane, ignore_errors=True)
    plane.mkdir()
    with live_cluster.control_plane(bin_dir, plane) as cluster:
        started = time.perf_counter()
        loaded = live_cluster.load(cluster, objects)
        load_seconds = round(time.perf_counter() - started, 1)
        del objects
        token_file = plane / "bench.token"
        token_file.write_text(cluster.token)
        paths = _collection_paths(_live_types())
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig}
        scan = measure(
            [
                GPU_AUDIT,
                "scan",
                "--kubeconfig",
                cluster.kubeconfig,
                "-q",
                "-o",
                "json",
                "--output-file",
                str(work / "report-live.json"),
            ],
            env=env,
        )
        listed = work / "raw-list.json"
        raw = measure(
            [
                PYTHON,
                str(HERE / "raw_list.py"),
                cluster.server,
                cluster.ca_file,
                str(token_file),
                *paths,
            ],
            stdout=listed,
        )
        served = json.loads(listed.read_text())["served"]
        # kubectl stops at a type the server does not serve: give it the served ones only.
        kubectl = _kubectl(cluster.kubeconfig, served, env)
        report = json.loads((work / "report-live.json").read_text())
    result: dict[str, Any] = {
        "pods": meta["pods"],
        "objects_created": sum(loaded["created"].values()),
        "created": loaded["created"],
        "refused_by_the_api_server": loaded["refused"],
        "load_seconds": load_seconds,
        "kinds_listed": len(paths),
        "kinds_served": len(served),
        "scan": asdict(scan),
        "scan_complete": report["complete"],
        "raw_list": asdict(raw),
        "time_ratio_vs_raw_list": _ratio(scan.seconds, raw.seconds),
        "rss_ratio_vs_raw_list": _ratio(scan.peak_rss_mib, raw.peak_rss_mib),
    }
    if kubectl is not None:
        result["kubectl_get"] = asdict(kubectl)
        result["time_ratio_vs_kubectl"] = _ratio(scan.seconds, kubectl.seconds)
    return result


def _kubectl(kubeconfig: str, paths: Sequence[str], env: dict[str, str]) -> Run | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    # kubectl names a resource plural.group; core ones by plural alone.
    names = []
    for path in paths:
        parts = path.strip("/").split("/")
        names.append(parts[-1] if parts[0] == "api" else f"{parts[-1]}.{parts[1]}")
    return measure(
        [
            kubectl,
            "--kubeconfig",
            kubeconfig,
            "get",
            ",".join(names),
            "-A",
            "-o",
            "json",
            "--chunk-size=500",
        ],
        env=env,
        ok=(0,),
    )


# --------------------------------------------------------------------------- Checkov


def _checkov() -> tuple[str | None, str]:
    """The checkov executable in its own virtualenv (installed from PyPI on first use), and
    its version or why it could not be had."""
    exe = CHECKOV_VENV / "bin" / "checkov"
    if not exe.exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(CHECKOV_VENV)], check=True)
            subprocess.run(
                [str(CHECKOV_VENV / "bin" / "pip"), "install", "--quiet", "checkov"],
                check=True,
                capture_output=True,
                text=True,
                timeout=1800,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            return None, f"pip install checkov failed: {str(detail).strip()[-500:]}"
    version = subprocess.run(
        [str(exe), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return str(exe), version


def manifest_dir(work: Path, pods: int, seed: int) -> Path:
    """The synthetic cluster as manifests: one multi-document YAML file per namespace."""
    target = work / f"manifests-{pods}"
    if target.exists():
        return target
    dump, _ = generate(work, pods, seed)
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for obj in json.loads(dump.read_text())["items"]:
        namespace = obj["metadata"].get("namespace") or "_cluster"
        by_namespace.setdefault(namespace, []).append(obj)
    partial = Path(tempfile.mkdtemp(dir=work))
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    for namespace, objects in sorted(by_namespace.items()):
        with (partial / f"{namespace}.yaml").open("w") as out:
            yaml.dump_all(objects, out, Dumper=dumper, sort_keys=False)
    partial.rename(target)
    return target


def checkov(work: Path, pods: int, seed: int) -> dict[str, Any]:
    exe, version = _checkov()
    if exe is None:
        return {"skipped": version}
    directory = manifest_dir(work, pods, seed)
    files = sorted(directory.glob("*.yaml"))
    _, meta = generate(work, pods, seed)
    ours = measure(
        [
            GPU_AUDIT,
            "scan",
            "--from-file",
            str(directory),
            "-o",
            "json",
            "--output-file",
            str(work / "report-checkov-dir.json"),
        ]
    )
    theirs = measure(
        [
            exe,
            "-d",
            str(directory),
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "-o",
            "json",
            "--skip-download",
        ],
        stdout=work / "checkov.json",
    )
    return {
        "checkov_version": version,
        "pods": pods,
        "files": len(files),
        "objects": meta["objects"],
        "gpu_audit": asdict(ours),
        "checkov": asdict(theirs),
        "checkov_time_vs_gpu_audit": _ratio(theirs.seconds, ours.seconds),
    }


# --------------------------------------------------------------------------- report


def _commit() -> str:
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def summary(results: dict[str, Any]) -> list[str]:
    lines = [f"gpu-audit benchmark, commit {results['commit']}, {results['machine']}"]
    off = results["offline"]
    lines.append(
        "offline scan (gpu-audit scan --from-file DUMP -o json) vs json.loads of the same "
        "objects as JSON, measured back to back; stages (s) from benchmarks/phases.py:"
    )
    lines.append(
        f"  {'case':<26} {'pods':>7} {'nodes':>5} {'pend':>5} {'objects':>7} {'MiB':>6} | "
        f"{'loads s':>7} {'MiB':>6} | {'scan s':>7} {'MiB':>6} | {'time x':>6} {'RSS x':>5} | "
        f"{'ms/1k':>6} | load index checks diagnostics render"
    )
    for row in off["cases"]:
        stages = " ".join(f"{row['stages'][stage]:g}" for stage in STAGES)
        lines.append(
            f"  {row['case']:<26} {row['pods']:>7} {row['nodes']:>5} {row['pending_pods']:>5} "
            f"{row['objects']:>7} {row['file_mib']:>6} | {row['json_loads']['seconds']:>7} "
            f"{row['json_loads']['peak_rss_mib']:>6} | {row['scan']['seconds']:>7} "
            f"{row['scan']['peak_rss_mib']:>6} | {row['time_ratio']:>6} {row['rss_ratio']:>5} | "
            f"{row['scan_ms_per_1k_objects']:>6} | {stages}"
            + (
                f" (YAML x{row['time_ratio_vs_json_scan']} the JSON scan)"
                if "time_ratio_vs_json_scan" in row
                else ""
            )
        )
    phases = off["phases"]
    lines.append(
        f"  stages at the largest scale (s): {phases['seconds']}, peak RSS (MiB) "
        f"{phases['peak_rss_mib']}; check engine share {phases['check_engine_share']:.0%}; "
        f"slowest checks {phases['slowest_checks']}"
    )
    lines.append(f"  per-object cost, largest vs smallest scale: x{off['per_object_cost_growth']}")
    lines.extend(_floor_lines(off["floors"]))
    lines.extend(
        f"  YAML: PyYAML's events alone {row['floors']['yaml_events']} s, "
        f"x{row['yaml_events_vs_json_scan']} the whole JSON scan of the same objects"
        for row in off["cases"]
        if "yaml_events_vs_json_scan" in row
    )
    lines.append("  profile (cumulative s) of the largest scan:")
    lines.extend(
        f"    {p['cumulative_seconds']:>8}  {p['calls']:>9}  {p['function']}"
        for p in phases["profile_top"]
    )
    lv = results.get("live")
    if lv is not None:
        if "skipped" in lv:
            lines.append(f"live: skipped ({lv['skipped']})")
        else:
            lines.append(
                f"live scan, {lv['pods']} pods ({lv['objects_created']} objects, loaded in "
                f"{lv['load_seconds']} s), {lv['kinds_listed']} kinds ({lv['kinds_served']} "
                "served): gpu-audit "
                f"{lv['scan']['seconds']} s / {lv['scan']['peak_rss_mib']} MiB, raw list "
                f"{lv['raw_list']['seconds']} s / {lv['raw_list']['peak_rss_mib']} MiB "
                f"(x{lv['time_ratio_vs_raw_list']} time, x{lv['rss_ratio_vs_raw_list']} RSS)"
                + (
                    f", kubectl get {lv['kubectl_get']['seconds']} s / "
                    f"{lv['kubectl_get']['peak_rss_mib']} MiB (x{lv['time_ratio_vs_kubectl']})"
                    if "kubectl_get" in lv
                    else ""
                )
            )
    ck = results.get("checkov")
    if ck is not None:
        if "skipped" in ck:
            lines.append(f"checkov: skipped ({ck['skipped']})")
        else:
            lines.append(
                f"checkov {ck['checkov_version']} vs gpu-audit on {ck['files']} manifest files "
                f"({ck['pods']} pods): checkov {ck['checkov']['seconds']} s / "
                f"{ck['checkov']['peak_rss_mib']} MiB, gpu-audit {ck['gpu_audit']['seconds']} s / "
                f"{ck['gpu_audit']['peak_rss_mib']} MiB: gpu-audit x{ck['checkov_time_vs_gpu_audit']} faster"
            )
    lines.append("goals (measured / goal):")
    for name, measured, goal, better_low in _goals(results):
        met = measured <= goal if better_low else measured >= goal
        lines.append(
            f"  {name}: {measured} / {'<=' if better_low else '>='} {goal}: {'met' if met else 'NOT met'}"
        )
    return lines


def _floor_lines(found: dict[str, Any]) -> list[str]:
    """What the largest scan costs at least (benchmarks/floors.py): its parse and redaction as
    fast as Python does them, plus its stages after the load as they are, against the
    json.loads its case is judged by."""
    loads = found["case_json_loads"]
    least = round(found["msgspec_decode"] + found["redaction"] + found["after_load"], 2)
    return [
        f"  floors at the largest scale (s): msgspec decode {found['msgspec_decode']}, a bare "
        f"visit of its {found['values']} values {found['visit_every_value']}, redaction alone "
        f"{found['redaction']}; the stages after the load {found['after_load']}; decode + "
        f"redaction + after the load {least} = x{_ratio(least, loads)} json.loads ({loads})"
    ]


def _goals(results: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    off = results["offline"]
    json_cases = [r for r in off["cases"] if r["format"] == "json"]
    largest = max(r["pods"] for r in json_cases)
    goals = [
        (
            f"offline time / json.loads time, worst at {largest} pods",
            max(r["time_ratio"] for r in json_cases if r["pods"] == largest),
            GOALS["offline_time_vs_json_loads"],
            True,
        ),
        (
            f"offline peak RSS / json.loads peak, worst at {largest} pods",
            max(r["rss_ratio"] for r in json_cases if r["pods"] == largest),
            GOALS["offline_rss_vs_json_loads"],
            True,
        ),
        (
            "cost per object, largest / smallest scale",
            off["per_object_cost_growth"],
            GOALS["per_object_cost_growth"],
            True,
        ),
    ]
    goals.extend(
        ("YAML scan / JSON scan", r["time_ratio_vs_json_scan"], GOALS["yaml_vs_json_scan"], True)
        for r in off["cases"]
        if "time_ratio_vs_json_scan" in r
    )
    lv = results.get("live") or {}
    if "time_ratio_vs_raw_list" in lv:
        goals.extend(
            (name, lv[measured], GOALS[goal], True)
            for name, measured, goal in (
                ("live time / raw list time", "time_ratio_vs_raw_list", "live_time_vs_raw_list"),
                ("live peak RSS / raw list's", "rss_ratio_vs_raw_list", "live_rss_vs_raw_list"),
            )
        )
    ck = results.get("checkov") or {}
    if "checkov_time_vs_gpu_audit" in ck:
        goals.append(
            (
                "Checkov time / gpu-audit time",
                ck["checkov_time_vs_gpu_audit"],
                GOALS["checkov_vs_gpu_audit"],
                False,
            )
        )
    return goals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="10000,50000,150000", help="pods per offline dump")
    parser.add_argument("--live-pods", type=int, default=20000, help="0: no live benchmark")
    parser.add_argument("--checkov-pods", type=int, default=1000, help="0: no Checkov run")
    parser.add_argument("--sweep-pods", type=int, default=150000, help="pods of the shape sweep")
    parser.add_argument("--yaml-pods", type=int, default=50000, help="0: no YAML measurement")
    parser.add_argument(
        "--pending-shares", default="0,0.0025,0.02", help="shares of pods that are Pending GPU pods"
    )
    parser.add_argument("--node-classes", default="5,50,500", help="distinct node shapes")
    parser.add_argument("--namespaces", default="10,2000", help="namespace counts")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "gpu-audit-bench"
    )
    parser.add_argument("--output", type=Path, default=REPO / "bench-results.json")
    parser.add_argument("--profile-top", type=int, default=15)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    scales = sorted(int(s) for s in args.scales.split(","))
    cases = offline_cases(
        scales,
        args.sweep_pods,
        args.yaml_pods,
        [float(v) for v in args.pending_shares.split(",")],
        [int(v) for v in args.node_classes.split(",")],
        [int(v) for v in args.namespaces.split(",")],
    )
    results: dict[str, Any] = {
        "commit": _commit(),
        "machine": f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}",
        "goals": GOALS,
        "offline": offline(args.work, cases, scales, args.seed, args.profile_top),
    }
    if args.live_pods:
        results["live"] = live(args.work, args.live_pods, args.seed)
    if args.checkov_pods:
        results["checkov"] = checkov(args.work, args.checkov_pods, args.seed)
    args.output.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print("\n".join(summary(results)))
    print(f"results: {args.output}")


if __name__ == "__main__":
    main()
