"""The krew plugin manifest (plugins/gpu-audit.yaml) against krew's own rules, and its release
archive installed the way krew installs it (issue 19, item 5).

The rules are those of krew's ValidatePlugin (pkg/index/validation/validate.go at commit
1ec2910867a3c9cdca23893b0a82ae10816262b7 of kubernetes-sigs/krew), its constants
(pkg/constants/constants.go: apiVersion krew.googlecontainertools.github.com/v1alpha2, kind
Plugin) and its semver.Parse (internal/installation/semver/version.go: a leading "v", then
k8s.io/apimachinery's ParseSemantic), plus what the plugin-manifest guide
(site/content/docs/developer-guide/plugin-manifest.md) requires: the file named after the
plugin, a description, a .zip or .tar.gz archive.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "plugins" / "gpu-audit.yaml"

API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
SAFE_NAME = re.compile(r"^[\w-]+$")
WINDOWS_FORBIDDEN = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10))} | {
    f"lpt{i}" for i in range(1, 10)
}
SHA256 = re.compile(r"^[a-f0-9]{64}$")
# k8s.io/apimachinery/pkg/util/version ParseSemantic: three numeric parts, then optional
# pre-release and build metadata; krew adds the required leading "v".
SEMVER = re.compile(
    r"^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
)


def krew_problems(manifest: dict[str, Any], file_stem: str) -> list[str]:
    """Why krew would refuse this manifest (empty: it would not)."""
    problems = []
    if manifest.get("apiVersion") != API_VERSION:
        problems.append("apiVersion")
    if manifest.get("kind") != "Plugin":
        problems.append("kind")
    name = str((manifest.get("metadata") or {}).get("name", ""))
    if not SAFE_NAME.match(name) or name.lower() in WINDOWS_FORBIDDEN:
        problems.append("unsafe name")
    if name != file_stem:
        problems.append("name is not the file's")
    spec = manifest.get("spec") or {}
    problems.extend(
        f"no {field}"
        for field in ("shortDescription", "description")
        if not str(spec.get(field, "")).strip()
    )
    if not SEMVER.match(str(spec.get("version", ""))):
        problems.append("version")
    platforms = spec.get("platforms") or []
    if not platforms:
        problems.append("no platforms")
    for index, platform in enumerate(platforms):
        problems.extend(f"platforms[{index}]: {p}" for p in _platform_problems(platform))
    return problems


def _platform_problems(platform: dict[str, Any]) -> list[str]:
    problems = []
    uri = str(platform.get("uri", ""))
    if not uri:
        problems.append("no uri")
    elif not uri.endswith((".zip", ".tar.gz")):
        problems.append("uri is not a .zip or .tar.gz archive")
    if not SHA256.match(str(platform.get("sha256", ""))):
        problems.append("sha256")
    if not platform.get("bin"):
        problems.append("no bin")
    if not platform.get("files"):
        problems.append("no files")
    selector = platform.get("selector")
    if not isinstance(selector, dict):
        return [*problems, "no selector"]
    labels, expressions = selector.get("matchLabels"), selector.get("matchExpressions")
    if labels is None and not expressions:
        problems.append("empty selector")
    keys = [*(labels or {}), *(e.get("key") for e in expressions or [])]
    problems.extend(f"selector key {k!r}" for k in keys if k not in ("os", "arch"))
    if labels is not None and not labels:
        problems.append("matchLabels empty")
    if expressions is not None and not expressions:
        problems.append("matchExpressions empty")
    return problems


def load() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    return manifest


def test_the_manifest_follows_krews_rules() -> None:
    manifest = load()
    assert krew_problems(manifest, MANIFEST.stem) == []
    spec = manifest["spec"]
    assert spec["homepage"].startswith("https://")
    assert spec["version"] == f"v{_version()}"
    for platform in spec["platforms"]:
        assert platform["bin"] == "kubectl-gpu_audit"  # what kubectl runs for `kubectl gpu-audit`
        assert spec["version"] in platform["uri"]


def _mutated(path: str, value: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(load())
    target: Any = manifest
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    target[last] = value
    return manifest


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("apiVersion", "krew.googlecontainertools.github.com/v1alpha1", "apiVersion"),
        ("metadata.name", "gpu_audit!", "unsafe name"),
        ("metadata.name", "gpu-audit2", "name is not the file's"),
        ("spec.version", "0.1.0", "version"),
        ("spec.shortDescription", "", "no shortDescription"),
        ("spec.platforms.0.sha256", "B" * 64, "platforms[0]: sha256"),
        ("spec.platforms.0.files", [], "platforms[0]: no files"),
        ("spec.platforms.0.selector", {"matchLabels": {"distro": "ubuntu"}}, "selector key"),
        ("spec.platforms.0.selector", {}, "platforms[0]: empty selector"),
        ("spec.platforms.0.uri", "https://example.com/gpu-audit.rpm", "archive"),
    ],
)
def test_the_rules_refuse_what_krew_refuses(path: str, value: Any, problem: str) -> None:
    problems = krew_problems(_mutated(path, value), MANIFEST.stem)
    assert any(problem in p for p in problems), problems


def _version() -> str:
    from gpu_audit import __version__

    return __version__


def krew_install(archive: Path, platform: dict[str, Any], store: Path) -> Path:
    """Unpack the archive and apply the platform's `files` operations into the store, as
    krew does (pkg/installation); the path of the installed `bin`."""
    unpacked = store.parent / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    store.mkdir(parents=True)
    for operation in platform["files"]:
        matches = [p for p in unpacked.iterdir() if fnmatch.fnmatch(p.name, operation["from"])]
        assert matches, operation
        for match in matches:
            shutil.copy2(match, store / match.name)
    return store / str(platform["bin"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_the_release_archive_installs_as_krew_installs_it(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "builder", ROOT / "plugins" / "build_krew_archive.py"
    )
    assert spec and spec.loader
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    archive, rendered_path = builder.build(tmp_path / "dist")
    rendered = yaml.safe_load(rendered_path.read_text(encoding="utf-8"))
    assert krew_problems(rendered, rendered_path.stem) == []
    (platform,) = rendered["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/v{_version()}/{archive.name}")
    # The committed manifest differs from the release one in uri and sha256 only.
    committed = load()
    for item in (committed, rendered):
        for p in item["spec"]["platforms"]:
            p.pop("sha256")
    assert rendered == committed

    # Installed as krew does: the files in the store, a link named kubectl-gpu_audit on PATH.
    binary = krew_install(archive, platform, tmp_path / "store" / "gpu-audit" / "v0.1.0")
    assert os.access(binary, os.X_OK)
    bin_dir = tmp_path / "krew-bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl-gpu_audit").symlink_to(binary)
    kubectl = shutil.which("kubectl")
    assert kubectl
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    # Without Python 3.11 the launcher says so, once, and installs nothing.
    refused = subprocess.run(
        [kubectl, "gpu-audit", "version"],
        capture_output=True,
        text=True,
        env={**env, "GPU_AUDIT_PYTHON": "false"},
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith("gpu-audit: error: the kubectl plugin needs Python 3.11")
    assert not (binary.parent / "venv").exists()
    # The first run's install (pip from the package index) is stood in for by this checkout's
    # environment; the launcher then runs gpu-audit through kubectl's plugin lookup.
    venv_bin = binary.parent / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "kubectl-gpu_audit").symlink_to(Path(sys.executable).parent / "kubectl-gpu_audit")
    (binary.parent / "venv" / ".gpu-audit-installed").touch()
    ran = subprocess.run(
        [kubectl, "gpu-audit", "version"], capture_output=True, text=True, env=env, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"gpu-audit, version {_version()}\n"
