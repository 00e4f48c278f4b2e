"""Build the release archive the krew manifest installs, and the manifest for it.

    .venv/bin/python plugins/build_krew_archive.py [--out dist/krew]

writes dist/krew/gpu-audit-vVERSION.tar.gz (the kubectl-gpu_audit launcher and the gpu-audit
wheel; see plugins/kubectl-gpu_audit) and dist/krew/gpu-audit.yaml: plugins/gpu-audit.yaml
with this version, the archive's release URL and its sha256. Upload the archive to the
release vVERSION, then copy the manifest over plugins/gpu-audit.yaml (and into a pull request
to krew-index). The wheel is built from this checkout as `pip wheel` builds it (its build
backend from the package index, as tests/test_packaging.py does).

The archive is reproducible: entries in a fixed order with fixed owners, modes and times
(SOURCE_DATE_EPOCH, else 0), gzip without a timestamp, so its sha256 depends only on the
launcher and the wheel.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MANIFEST = HERE / "gpu-audit.yaml"
LAUNCHER = HERE / "kubectl-gpu_audit"
RELEASES = "https://github.com/gpu-audit/gpu-audit/releases/download"


def version() -> str:
    namespace: dict[str, Any] = {}
    exec((ROOT / "scanner" / "__init__.py").read_text(encoding="utf-8"), namespace)
    return str(namespace["__version__"])


def build_wheel(into: Path) -> Path:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(into),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
        # The wheel's entries dated 1980-01-01 unless SOURCE_DATE_EPOCH says otherwise.
        env={**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "315532800")},
    )
    if proc.returncode != 0:
        sys.exit(f"pip wheel failed:\n{proc.stderr}")
    (wheel,) = into.glob("gpu_audit-*.whl")
    return wheel


def archive(members: list[tuple[str, bytes, int]]) -> bytes:
    """A .tar.gz of (name, data, mode), the same bytes for the same members."""
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def manifest_for(template: dict[str, Any], tag: str, uri: str, sha256: str) -> dict[str, Any]:
    spec = {**template["spec"], "version": tag}
    spec["platforms"] = [{**p, "uri": uri, "sha256": sha256} for p in spec["platforms"]]
    return {**template, "spec": spec}


def build(out: Path) -> tuple[Path, Path]:
    """The archive and the manifest for it, in `out`."""
    tag = f"v{version()}"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp))
        data = archive(
            [
                (LAUNCHER.name, LAUNCHER.read_bytes(), 0o755),
                (wheel.name, wheel.read_bytes(), 0o644),
            ]
        )
    target = out / f"gpu-audit-{tag}.tar.gz"
    target.write_bytes(data)
    template = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    uri = f"{RELEASES}/{tag}/{target.name}"
    rendered = manifest_for(template, tag, uri, hashlib.sha256(data).hexdigest())
    manifest = out / MANIFEST.name
    manifest.write_text(yaml.safe_dump(rendered, sort_keys=False), encoding="utf-8")
    return target, manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "krew")
    target, manifest = build(parser.parse_args().out)
    print(f"wrote {target} and {manifest}")


if __name__ == "__main__":
    main()
