"""The gpu-audit executable leaves the objects of a scan to the operating system at exit
(gpu_audit.cli.run freezes them, so the interpreter does not collect them one by one), and
its exit is otherwise the usual one: the kubernetes client's atexit handler still removes the
certificate file it wrote for a kubeconfig that embeds its CA."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.live.harness import ControlPlane


def _kubeconfig_with_embedded_ca(path: Path, control_plane: ControlPlane) -> Path:
    ca = base64.b64encode(Path(control_plane.ca_file).read_bytes()).decode()
    cluster = {"server": control_plane.server, "certificate-authority-data": ca}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "live", "cluster": cluster}],
                "users": [{"name": "admin", "user": {"token": control_plane.admin_token}}],
                "contexts": [{"name": "live", "context": {"cluster": "live", "user": "admin"}}],
                "current-context": "live",
            }
        )
    )
    path.chmod(0o600)
    return path


def _files_the_client_writes(kubeconfig: Path, temp_dir: Path) -> list[Path]:
    """What the kubernetes client writes into the temporary directory as it loads the
    kubeconfig (in a process of its own, so that its atexit handler is not run here)."""
    probe = (
        "import sys, tempfile; tempfile.tempdir = sys.argv[2]; "
        "from kubernetes import client, config; "
        "config.load_kube_config(config_file=sys.argv[1], "
        "client_configuration=client.Configuration()); "
        "import os; os._exit(0)"  # skips atexit: the files stay for the caller to see
    )
    subprocess.run([sys.executable, "-c", probe, str(kubeconfig), str(temp_dir)], check=True)
    return sorted(temp_dir.iterdir())


def test_a_live_scan_by_the_executable_removes_the_client_s_certificate_files(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = _kubeconfig_with_embedded_ca(tmp_path / "embedded.kubeconfig", control_plane)
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    written = _files_the_client_writes(kubeconfig, probe_dir)
    assert [f.read_bytes() for f in written] == [Path(control_plane.ca_file).read_bytes()]

    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    report = tmp_path / "report.json"
    gpu_audit = Path(sys.executable).with_name("gpu-audit")
    done = subprocess.run(
        [
            str(gpu_audit),
            "scan",
            "--kubeconfig",
            str(kubeconfig),
            "--no-plugins",
            "--fail-on",
            "none",
            "-q",
            "-o",
            "json",
            "--output-file",
            str(report),
        ],
        env={**os.environ, "TMPDIR": str(temp_dir)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    source = json.loads(report.read_text())["source"]
    assert (source["type"], source["details"]["server"]) == ("live", control_plane.server)
    assert list(temp_dir.iterdir()) == []


def test_the_executable_freezes_what_is_left_and_runs_the_atexit_handlers(
    tmp_path: Path,
) -> None:
    # An atexit handler registered before the command runs after it: it sees the objects the
    # command left frozen (not collected at exit), and that it was run at all.
    program = (
        "import atexit, gc, sys; "
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0)); "
        "from gpu_audit.cli import run; sys.argv = ['gpu-audit', 'version']; run()"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "frozen at exit: True"
    assert done.stdout.startswith("gpu-audit, version ")
