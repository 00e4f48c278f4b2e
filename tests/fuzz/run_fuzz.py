"""`make fuzz`: atheris on the loader and the checks, then the properties of test_fuzz.py.

    python tests/fuzz/run_fuzz.py --examples 50000 --atheris-runs 100000

Runs in one process at a time (the machine is shared); prints cases run per property and the
time taken, and exits non-zero on the first failure (hypothesis prints the shrunk example).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _load_properties(examples: int) -> Any:
    # The example count is read when the module defines its settings, so it is set first.
    os.environ["GPU_AUDIT_FUZZ_EXAMPLES"] = str(examples)
    spec = importlib.util.spec_from_file_location("fuzz_properties", HERE / "test_fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=50_000, help="per hypothesis property")
    parser.add_argument("--atheris-runs", type=int, default=100_000, help="0: no atheris stage")
    args = parser.parse_args()

    total = 0
    if args.atheris_runs:
        if importlib.util.find_spec("atheris") is None:
            print("atheris is not installed: its stage is skipped (pip install atheris)")
        else:
            started = time.monotonic()
            corpus = Path(os.environ.get("TMPDIR", "/tmp")) / "gpu-audit-fuzz-corpus"
            corpus.mkdir(exist_ok=True)
            command = [
                sys.executable,
                str(HERE / "atheris_loader.py"),
                f"-runs={args.atheris_runs}",
                "-max_len=65536",
                str(corpus),
            ]
            if subprocess.run(command, check=False).returncode != 0:
                return 1
            total += args.atheris_runs
            print(f"atheris loader: {args.atheris_runs} runs in {time.monotonic() - started:.0f} s")
    properties = _load_properties(args.examples)
    for name in sorted(vars(properties)):
        if not name.startswith("test_"):
            continue
        started = time.monotonic()
        getattr(properties, name)()
        counts = dict(properties.CASES)
        properties.CASES.clear()
        cases = sum(counts.values())
        total += cases
        print(f"hypothesis {name}: {cases} cases in {time.monotonic() - started:.0f} s", flush=True)

    print(f"fuzz: {total} cases, no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
