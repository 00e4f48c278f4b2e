"""The DRA checks on what the fixtures do not show: the resource.k8s.io/v1beta1 shapes (flat
requests, devices under `basic`), claims generated for one pod, claims the input cannot resolve,
and the driver's host-managed IMEX mode."""

from __future__ import annotations

from gpu_audit.model import Outcome, Severity
from tests.builders import verdicts_of

GPU_CLASS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
"""
V1BETA1_SLICE = """
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: a-slice}
spec:
  driver: gpu.nvidia.com
  nodeName: a
  pool: {name: a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    basic:
      attributes:
        type: {string: gpu}
        productName: {string: NVIDIA L40S}
      capacity:
        memory: {value: 48Gi}
"""


def v1beta1_template(name: str, class_name: str, selector: str = "", count: int = 1) -> str:
    selectors = f"\n        selectors: [{{cel: {{expression: {selector!r}}}}}]" if selector else ""
    return f"""
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: ml}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        deviceClassName: {class_name}
        count: {count}{selectors}
"""


def docs(*parts: str) -> str:
    return "---".join(parts)


def test_v1beta1_requests_and_devices_are_read() -> None:
    found = verdicts_of(
        "GPU-SCHED-009",
        docs(
            GPU_CLASS,
            V1BETA1_SLICE,
            v1beta1_template(
                "l40s",
                "gpu.nvidia.com",
                "device.capacity['gpu.nvidia.com'].memory == quantity('48Gi')",
            ),
            v1beta1_template("two", "gpu.nvidia.com", count=2),
        ),
    )
    assert found == [
        ("ResourceClaimTemplate ml/l40s", Outcome.PASS, None),
        ("ResourceClaimTemplate ml/two", Outcome.FAIL, Severity.LOW),
    ]
    missing = verdicts_of("GPU-SCHED-008", docs(GPU_CLASS, v1beta1_template("x", "nvidia-gpu")))
    assert missing == [("ResourceClaimTemplate ml/x", Outcome.FAIL, Severity.LOW)]


GENERATED_CLAIM = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: p-gpu-x7k2q
  namespace: ml
  ownerReferences: [{apiVersion: v1, kind: Pod, name: p, uid: u1, controller: true}]
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: missing.example.com}}
"""


def test_claims_generated_for_a_pod_are_left_to_their_template() -> None:
    # The claim's class is missing, but its template is what to change (and is not in the input).
    assert verdicts_of("GPU-SCHED-008", docs(GPU_CLASS, GENERATED_CLAIM)) == []
    assert verdicts_of("GPU-SCHED-009", docs(GPU_CLASS, V1BETA1_SLICE, GENERATED_CLAIM)) == []


PLUGIN_AND_UNKNOWN_CLAIM = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: ml}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      resourceClaims: [{name: dev, resourceClaimTemplateName: not-in-input}]
      containers:
      - name: main
        image: busybox
        resources: {claims: [{name: dev}], limits: {nvidia.com/gpu: 1}}
"""


def test_a_claim_the_input_cannot_resolve_is_not_judged() -> None:
    # Whether `dev` is a GPU is unknown: no verdict rather than a guess either way.
    assert verdicts_of("GPU-SCHED-010", docs(GPU_CLASS, PLUGIN_AND_UNKNOWN_CLAIM)) == []


HOST_MANAGED = """
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata: {name: big, namespace: ml}
spec:
  numNodes: 16
  channel: {resourceClaimTemplate: {name: big-channel}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n-cd}
spec:
  driver: compute-domain.nvidia.com
  nodeName: n
  pool: {name: n, generation: 1, resourceSliceCount: 1}
  devices: [{name: channel-0, attributes: {type: {string: channel}, id: {int: 0}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: dra-driver-nvidia-gpu-controller, namespace: dra-driver-nvidia-gpu}
spec:
  selector: {matchLabels: {app: c}}
  template:
    metadata: {labels: {app: c}}
    spec:
      containers:
      - name: compute-domain
        image: registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v25.12.0
        env: [{name: IMEX_MODE, value: hostManaged}]
"""


def test_host_managed_imex_has_no_daemons_to_gather() -> None:
    assert verdicts_of("GPU-NODE-009", HOST_MANAGED) == [
        ("ComputeDomain ml/big", Outcome.PASS, None)
    ]
    driver_managed = HOST_MANAGED.replace("hostManaged", "driverManaged")
    assert verdicts_of("GPU-NODE-009", driver_managed) == [
        ("ComputeDomain ml/big", Outcome.FAIL, Severity.LOW)
    ]
