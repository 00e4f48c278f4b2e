"""The wheel installs everything under gpu_audit: no generic top-level names."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_only_the_gpu_audit_namespace(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("gpu_audit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"gpu_audit"}
    assert "gpu_audit/checks/workloads/gpu_quantities_whole_and_in_limits.py" in names
    assert "gpu_audit/reports/templates/report.html.j2" in names
    assert "gpu_audit/schema/report.schema.json" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "gpu-audit = gpu_audit.cli:run" in scripts
    # kubectl runs kubectl-gpu_audit for `kubectl gpu-audit` (the kubectl plugin).
    assert "kubectl-gpu_audit = gpu_audit.cli:kubectl_plugin" in scripts
