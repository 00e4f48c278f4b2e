"""The share of an offline scan spent in gpu_audit.redact (figures for README, "Limits").

    python tests/fuzz/measure_redaction_cost.py CLUSTER.json [--rounds 3]

Runs the stages of `gpu-audit scan -o json` (benchmarks/phases.py) in fresh processes, each
round twice: as shipped, and with every entry point of the redaction layer (`sanitize` in the
loader, `redact_text` in the engine and diagnostics, `redact_tree`) replaced by the identity.
Prints CPU seconds (process time, which other processes on a shared machine disturb less than
wall time) of each, the difference, and the time measured inside the redaction functions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# One scan in a child process: `off` swaps the redaction entry points for the identity where
# they are imported; otherwise each is wrapped with a CPU-time counter.
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
import gpu_audit.diagnostics.inventory as inventory
import gpu_audit.diagnostics.pending as pending
import gpu_audit.diagnostics.shapes as shapes
import gpu_audit.engine as engine
import gpu_audit.sources.files as files
inside = [0.0]

def counted(function):
    def wrapper(*args, **kwargs):
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            inside[0] += time.process_time() - started
    return wrapper

def identity(value, *args, **kwargs):
    return value

off = sys.argv[2] == "off"
for module, name in ((files, "sanitize"), (engine, "redact_text"), (shapes, "redact_text"),
                     (inventory, "redact_tree"), (pending, "redact_tree")):
    setattr(module, name, identity if off else counted(getattr(module, name)))
from phases import measure
started = time.process_time()
result = measure(sys.argv[1], None)
print(json.dumps({"cpu": time.process_time() - started, "inside": inside[0],
                  "findings": result["findings"], "stages": result["seconds"]}))
"""


def _run(path: str, mode: str) -> dict[str, float]:
    benchmarks = str(HERE.parents[1] / "benchmarks")
    command = [sys.executable, "-c", CHILD, path, mode, benchmarks]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a cluster dump (benchmarks/generate.py --pods 10000)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    on, off, inside = [], [], []
    for _ in range(args.rounds):
        shipped, bare = _run(args.path, "on"), _run(args.path, "off")
        on.append(shipped["cpu"])
        off.append(bare["cpu"])
        inside.append(shipped["inside"])
        print(
            f"with redaction {shipped['cpu']:.2f} s CPU ({shipped['inside']:.2f} s inside it), "
            f"without {bare['cpu']:.2f} s; findings {shipped['findings']} / {bare['findings']}",
            flush=True,
        )
    best_on, best_off = min(on), min(off)
    print(
        f"best of {args.rounds}: {best_on:.2f} s with, {best_off:.2f} s without: "
        f"{(best_on - best_off) / best_on:.1%} of the scan; inside the redaction functions "
        f"{min(inside):.2f} s ({min(inside) / best_on:.1%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
