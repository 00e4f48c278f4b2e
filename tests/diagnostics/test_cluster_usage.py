"""cluster_usage sums each distinct set of containers' resources once (replicas request
alike): every pod's request must still be the one effective_pod_request gives it alone,
whatever in its spec that request reads differs (overhead, a native sidecar)."""

from __future__ import annotations

import io

import yaml

from gpu_audit.diagnostics.fit import cluster_usage, pod_request
from gpu_audit.sources.files import STDIN, load_files
from tests.builders import container, pod, pod_spec

CPU = {"resources": {"requests": {"cpu": "1"}}}
# A native sidecar runs beside this container (2 CPUs); a plain init container before it (1).
MAIN = container(gpus=None, resources={"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1"}})


def test_each_pod_gets_its_own_effective_request() -> None:
    init = {"name": "warm", "image": "busybox:1.36", **CPU}
    pods = [
        pod("a", pod_spec(container(gpus=1))),
        pod("b", pod_spec(container(gpus=1))),
        pod("with-overhead", pod_spec(container(gpus=1), overhead={"cpu": "250m"})),
        pod(
            "sidecar",
            pod_spec(MAIN, initContainers=[init | {"restartPolicy": "Always"}]),
        ),
        pod("init", pod_spec(MAIN, initContainers=[init])),
    ]
    text = yaml.safe_dump_all(pods)
    snapshot = load_files([STDIN], stdin=io.StringIO(text))
    usage = cluster_usage(snapshot)
    got = {p.ref.name: dict(usage.request_of(p)) for p in snapshot.of("Pod")}
    assert got == {p.ref.name: pod_request(p) for p in snapshot.of("Pod")}
    assert got["a"] == got["b"]
    assert (
        len({str(sorted(r.items())) for r in got.values()}) == 4
    )  # a and b, overhead, sidecar, init
