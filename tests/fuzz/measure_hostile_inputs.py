"""Time and peak memory of `gpu-audit scan` on hostile input sizes (figures for README, Limits).

    python tests/fuzz/measure_hostile_inputs.py [--dir /tmp/gpu-audit-hostile]

Generates the inputs under --dir (never in the repository): a 1 GiB file, the same on stdin,
a million tiny documents, Pod dumps of growing size, a 10,000-pod cluster of
benchmarks/generate.py as `kubectl get -o json` and `-o yaml` print it, 10 and 40 MiB of
`a: b` lines, and the shapes that cost the most memory per byte; runs each scan in its own
process and prints exit code, seconds, peak RSS and peak RSS per MiB of input. Several GB of
disk, a few minutes.
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
    cases.extend(_cluster_dumps(directory))
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


def _cluster_dumps(directory: Path) -> list[tuple[str, Path, bool]]:
    """The 10,000-pod cluster of benchmarks/generate.py as JSON, and the same as block YAML
    (the layout of `kubectl get -o yaml`). Both are written by child processes: a scan forked
    from a process that once held the dump would inherit its peak RSS (ru_maxrss survives
    fork and exec)."""
    as_json, as_yaml = directory / "cluster-10k.json", directory / "cluster-10k.yaml"
    if not as_yaml.exists():
        generate = Path(__file__).resolve().parents[2] / "benchmarks" / "generate.py"
        command = [sys.executable, str(generate), "--pods", "10000", "--output", str(as_json)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        convert = (
            "import json, sys, yaml\n"
            "with open(sys.argv[2], 'w') as out:\n"
            "    yaml.dump(json.load(open(sys.argv[1])), out, Dumper=yaml.CSafeDumper)\n"
        )
        subprocess.run([sys.executable, "-c", convert, str(as_json), str(as_yaml)], check=True)
    return [("10,000-pod cluster, JSON", as_json, False), ("the same as YAML", as_yaml, False)]


def _run(path: Path, stdin: bool) -> tuple[int, float, float, str]:
    """Exit code, seconds, peak RSS in MiB, last stderr line of one scan in a fresh process."""
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
    return os.waitstatus_to_exitcode(status), elapsed, usage.ru_maxrss / 1024, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/gpu-audit-hostile"))
    args = parser.parse_args()
    for label, path, stdin in _generate(args.dir):
        code, seconds, rss, last = _run(path, stdin)
        size = path.stat().st_size / 1024**2
        print(
            f"{label:28} {size:8.0f} MiB  exit {code}  {seconds:6.1f} s  {rss:7.0f} MiB RSS"
            f"  {rss / size:5.1f} per MiB"
        )
        if last:
            print(f"{'':30}{last[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
