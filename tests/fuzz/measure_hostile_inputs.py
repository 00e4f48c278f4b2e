"""Time and peak memory of `gpu-audit scan` on hostile input sizes (figures for README, Limits).

    python tests/fuzz/measure_hostile_inputs.py [--dir /tmp/gpu-audit-hostile] [--load-only]

Generates the inputs under --dir (never in the repository): a 1 GiB file, the same on stdin,
a million tiny documents, Pod dumps of growing size, the 10,000- and 50,000-pod clusters of
benchmarks/generate.py as `kubectl get -o json` and `-o yaml` print them, 10 and 40 MiB of
`a: b` lines, and the shapes that cost the most memory per byte; runs each scan in its own
process and prints exit code, wall and CPU seconds (on a shared machine the CPU time is the
steadier figure), peak RSS and peak RSS per MiB of input. With
--load-only, each process only calls `load_files` (the loader's own figures: README,
"Limits"); PYTHONPATH pointing at an older tree's packages measures that tree's loader. Several
GB of disk, a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

GIB = 1024**3


def _pod(index: int) -> dict[str, object]:
    container = {
        "name": "train",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(10)],
        "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{index}",
            "namespace": f"team-{index % 50}",
            "labels": {"app": "train", "job": f"job-{index // 8}"},
        },
        "spec": {"containers": [container], "nodeSelector": {"nvidia.com/gpu.present": "true"}},
        "status": {"phase": "Running"},
    }


def _write_pods(path: Path, count: int, fmt: str) -> None:
    with path.open("w") as out:
        if fmt == "json":
            out.write('{"apiVersion": "v1", "kind": "List", "items": [\n')
            out.write(",\n".join(json.dumps(_pod(i)) for i in range(count)))
            out.write("]}\n")
        else:
            for i in range(count):
                out.write("---\n" + json.dumps(_pod(i)) + "\n")  # JSON is YAML, flow style


def _generate(directory: Path) -> list[tuple[str, Path, bool]]:
    directory.mkdir(parents=True, exist_ok=True)
    huge = directory / "huge.yaml"
    if not huge.exists() or huge.stat().st_size < GIB:
        line = b"# " + b"x" * 1021 + b"\n"  # 1 KiB
        with huge.open("wb") as out:
            for _ in range(GIB // len(line)):
                out.write(line)
    tiny = directory / "million-tiny.yaml"
    if not tiny.exists():
        with tiny.open("w") as out:
            for i in range(1_000_000):
                out.write(f"---\n{{apiVersion: v1, kind: ConfigMap, metadata: {{name: c{i}}}}}\n")
    cases = [("1 GiB file", huge, False), ("1 GiB on stdin", huge, True)]
    cases.append(("1,000,000 tiny documents", tiny, False))
    for count in (10_000, 50_000):
        for fmt in ("yaml", "json"):
            path = directory / f"pods-{count}.{fmt}"
            if not path.exists():
                _write_pods(path, count, fmt)
            cases.append((f"{count} Pods as {fmt}", path, False))
    for count in (10_000, 50_000):
        cases.extend(_cluster_dumps(directory, count))
    # One line repeated: (label, file, line, MiB). The last three cost the most per byte.
    repeated = [
        ("`a: b` lines", "ab-10.yaml", "a: b\n", 10),
        ("`a: b` lines", "ab-40.yaml", "a: b\n", 40),
        ("YAML `- {}` lines", "maps-10.yaml", "- {}\n", 10),
        ("JSON `[{}, ...]`", "maps-10.json", "{},", 10),
        ("JSON `[[], ...]`", "lists-10.json", "[],", 10),
    ]
    for label, name, repeated_line, mib in repeated:
        path = directory / name
        if not path.exists():
            text = repeated_line * (mib * 1024**2 // len(repeated_line))
            path.write_text(f"[{text[:-1]}]" if name.endswith(".json") else text)
        cases.append((f"{mib} MiB of {label}", path, False))
    return cases


def _cluster_dumps(directory: Path, pods: int) -> list[tuple[str, Path, bool]]:
    """The cluster of `pods` pods of benchmarks/generate.py as JSON, and the same as block YAML
    (the layout of `kubectl get -o yaml`). Both are written by child processes: a scan forked
    from a process that once held the dump would inherit its peak RSS (ru_maxrss survives
    fork and exec)."""
    stem = f"cluster-{pods // 1000}k"
    as_json, as_yaml = directory / f"{stem}.json", directory / f"{stem}.yaml"
    if not as_yaml.exists():
        generate = Path(__file__).resolve().parents[2] / "benchmarks" / "generate.py"
        command = [sys.executable, str(generate), "--pods", str(pods), "--output", str(as_json)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        convert = (
            "import json, sys, yaml\n"
            "with open(sys.argv[2], 'w') as out:\n"
            "    yaml.dump(json.load(open(sys.argv[1])), out, Dumper=yaml.CSafeDumper)\n"
        )
        subprocess.run([sys.executable, "-c", convert, str(as_json), str(as_yaml)], check=True)
    label = f"{pods:,}-pod cluster"
    return [(f"{label}, JSON", as_json, False), (f"{label}, YAML", as_yaml, False)]


# The loader alone: an InputError is exit 2, as in a scan.
LOAD_ONLY = (
    "import sys\n"
    "from gpu_audit.errors import InputError\n"
    "from gpu_audit.sources.files import load_files\n"
    "try:\n"
    "    load_files([sys.argv[1]])\n"
    "except InputError as exc:\n"
    "    print(exc.problems[0], file=sys.stderr)\n"
    "    sys.exit(2)\n"
)


def _run(path: Path, stdin: bool, load_only: bool) -> tuple[int, float, float, float, str]:
    """Exit code, wall and CPU seconds, peak RSS in MiB, last stderr line of one scan (or of
    the loader alone) in a fresh process."""
    if load_only:
        command = [sys.executable, "-c", LOAD_ONLY, "-" if stdin else str(path)]
    else:
        command = [sys.executable, "-m", "gpu_audit", "scan", "--no-plugins", "-o", "json"]
        command += ["--output-file", os.devnull, "--from-file", "-" if stdin else str(path)]
    started = time.monotonic()
    with path.open("rb") as source:
        proc = subprocess.Popen(
            command,
            stdin=source if stdin else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        err = proc.stderr.read().decode(errors="replace")
        _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - started
    last = err.strip().splitlines()[-1] if err.strip() else ""
    cpu = usage.ru_utime + usage.ru_stime
    return os.waitstatus_to_exitcode(status), elapsed, cpu, usage.ru_maxrss / 1024, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/gpu-audit-hostile"))
    parser.add_argument("--load-only", action="store_true", help="time load_files alone")
    parser.add_argument("--only", help="the cases whose label holds this text")
    args = parser.parse_args()
    for label, path, stdin in _generate(args.dir):
        if args.only and args.only not in label:
            continue
        code, seconds, cpu, rss, last = _run(path, stdin, args.load_only)
        size = path.stat().st_size / 1024**2
        print(
            f"{label:28} {size:8.0f} MiB  exit {code}  {seconds:6.1f} s ({cpu:6.1f} s CPU)"
            f"  {rss:7.0f} MiB RSS  {rss / size:5.1f} per MiB",
            flush=True,
        )
        if last:
            print(f"{'':30}{last[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
