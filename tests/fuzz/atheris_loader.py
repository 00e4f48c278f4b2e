"""Coverage-guided fuzzing of the loader and the checks with atheris (libFuzzer).

    python tests/fuzz/atheris_loader.py -runs=100000 -max_len=65536 CORPUS_DIR

Seeds CORPUS_DIR with the fixture files when it is empty. Any exception other than the
loader's InputError, or a check that raises, is a crash that libFuzzer reports with the input.
"""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["gpu_audit"]):
    from gpu_audit.engine import run_checks
    from gpu_audit.errors import InputError
    from gpu_audit.model import CheckStatus
    from gpu_audit.registry import load_checks
    from gpu_audit.report import build_report
    from gpu_audit.reports import RENDERERS
    from gpu_audit.sources.files import STDIN, load_files

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CHECKS = load_checks(plugins=False)


def test_one_input(data: bytes) -> None:
    try:
        snapshot = load_files([STDIN], io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    except InputError as exc:
        if not exc.problems or not all(p.startswith(("<stdin>", "... and ")) for p in exc.problems):
            raise AssertionError(f"problems that do not name the input: {exc.problems}") from None
        return
    runs = run_checks(CHECKS.values(), snapshot)
    errors = [r.error_detail for r in runs if r.status is CheckStatus.ERROR]
    if errors:
        raise AssertionError("\n".join(errors))
    RENDERERS["json"].render(build_report(snapshot, runs), False)


def _seed(corpus: Path) -> None:
    if corpus.is_dir() and not any(corpus.iterdir()):
        seeds = sorted(p for p in FIXTURES.rglob("*.yaml") if p.name != "expected.yaml")
        for index, path in enumerate(seeds):
            shutil.copyfile(path, corpus / f"seed-{index:04d}.yaml")


def main() -> None:
    for arg in sys.argv[1:]:
        if not arg.startswith("-"):
            _seed(Path(arg))
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
