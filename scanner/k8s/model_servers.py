"""SRV-CLASSIFY: which model server a container runs. Used by the SRV, NET and QUOTA checks,
through `gpu_audit.api`: the one place that knows model servers by image and command line.

A heuristic on the image repository and the command line. Every classification carries the
rule that matched, so that findings can print it and users can waive a misclassification.

Images and commands, from each project's published images and documentation:
- TF Serving: tensorflow/serving, `tensorflow_model_server`
  (https://www.tensorflow.org/tfx/serving/docker); KServe's kserve-tensorflow-serving runtime
  runs the same image.
- Hugging Face TGI and TEI: ghcr.io/huggingface/text-generation-inference
  (`text-generation-launcher`) and ghcr.io/huggingface/text-embeddings-inference
  (`text-embeddings-router`), and the deep-learning containers that package them under other
  names: Google's us-docker.pkg.dev/deeplearning-platform-release/gcr.io/
  huggingface-text-generation-inference-cu124.2-4.ubuntu2204 and
  huggingface-text-embeddings-inference-cu122.1-4.ubuntu2204
  (https://github.com/huggingface/Google-Cloud-Containers), AWS's
  <account>.dkr.ecr.<region>.amazonaws.com/huggingface-pytorch-tgi-inference and tei, tei-cpu
  (https://github.com/aws/deep-learning-containers/blob/master/available_images.md).
- OpenVINO Model Server: openvino/model_server, `/ovms/bin/ovms`
  (https://docs.openvino.ai/2025/model-server/ovms_docs_deploying_server_docker.html).
- MLServer: seldonio/mlserver, `mlserver start` (https://mlserver.readthedocs.io/).
- LMDeploy: openmmlab/lmdeploy, `lmdeploy serve api_server`
  (https://lmdeploy.readthedocs.io/en/latest/llm/api_server.html).
- SGLang: lmsysorg/sglang, `python -m sglang.launch_server` (https://docs.sglang.ai/).
- NVIDIA NIM: nvcr.io/nim/<publisher>/<model> (https://docs.nvidia.com/nim/large-language-models/
  latest/getting-started.html).
- KServe: the kserve-container of a predictor pod (labelled serving.kserve.io/inferenceservice)
  or of an InferenceService's component template, when nothing more specific matches.

Not a server whatever its image: a KubeRay RayJob's submitter, which runs `ray job submit`
against the cluster's dashboard and exits (ray-project/kuberay ray-operator/controllers/ray/
common/job.go GetSubmitterTemplate; rayjob_controller.go createNewK8sJob runs it as a batch Job
whose pods are labelled ray.io/originated-from-crd=RayJob and, unlike the cluster's pods, carry
no ray.io/node-type). Its default container runs the head's Ray image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_audit.k8s.images import image_registry_and_path
from gpu_audit.k8s.kserve import INFERENCE_SERVICE as ISVC
from gpu_audit.k8s.objects import as_list
from gpu_audit.k8s.pods import Container
from gpu_audit.k8s.ray import NODE_TYPE_LABEL, ORIGINATED_FROM_CRD_LABEL, RAY_JOB

# ServerClass.name values.
TORCHSERVE = "torchserve"
TRITON = "triton"
VLLM = "vllm"
TGI = "tgi"
RAY = "ray"
SGLANG = "sglang"
OLLAMA = "ollama"
NIM = "nim"
TF_SERVING = "tf-serving"
TEI = "tei"
OVMS = "ovms"
MLSERVER = "mlserver"
LMDEPLOY = "lmdeploy"
KSERVE_RUNTIME = "kserve-runtime"

KSERVE_ISVC_LABEL = "serving.kserve.io/inferenceservice"
_RAY_SUBMITTER = "submitter"  # the RayJob template's role (gpu_audit.k8s.ray.ray_templates)

# Last path component of the image repository -> class. Suffix match on the path, so any
# registry or mirror (`myregistry/ml/tritonserver`) counts.
_REPO_NAMES: dict[str, str] = {
    "torchserve": TORCHSERVE,
    "torchserve-kfs": TORCHSERVE,
    "torchserve-nightly": TORCHSERVE,
    "tritonserver": TRITON,
    "vllm-openai": VLLM,
    "vllm": VLLM,
    "text-generation-inference": TGI,
    "ray": RAY,
    "ray-ml": RAY,
    "sglang": SGLANG,
    "ollama": OLLAMA,
    "text-embeddings-inference": TEI,
    "mlserver": MLSERVER,
    "lmdeploy": LMDEPLOY,
}
# Repository paths whose last component alone says too little (`serving`, `model_server`).
_REPO_PATHS: dict[str, str] = {
    "tensorflow/serving": TF_SERVING,
    "openvino/model_server": OVMS,
}
# The deep-learning containers of Google Cloud and AWS that package TGI and TEI under their own
# repository names (a prefix of the last path component).
_REPO_PREFIXES: tuple[tuple[str, str], ...] = (
    ("huggingface-text-generation-inference", TGI),
    ("huggingface-pytorch-tgi-inference", TGI),
    ("huggingface-text-embeddings-inference", TEI),
)
# AWS publishes TEI as `tei` and `tei-cpu` in its deep-learning-container ECR accounts.
_ECR_REPO_NAMES: dict[str, str] = {"tei": TEI, "tei-cpu": TEI}

_COMMAND_RULES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"(^|[\s/])tritonserver(\s|$)"), TRITON, "tritonserver"),
    (re.compile(r"(^|[\s/])torchserve(\s|$)"), TORCHSERVE, "torchserve"),
    (re.compile(r"(^|[\s/])vllm\s+serve(\s|$)|vllm\.entrypoints"), VLLM, "vllm serve"),
    (re.compile(r"text-generation-launcher"), TGI, "text-generation-launcher"),
    (re.compile(r"sglang\.launch_server"), SGLANG, "sglang.launch_server"),
    (re.compile(r"text-embeddings-router"), TEI, "text-embeddings-router"),
    (re.compile(r"(^|[\s/])tensorflow_model_server(\s|$)"), TF_SERVING, "tensorflow_model_server"),
    (re.compile(r"(^|[\s/])ovms(\s|$)"), OVMS, "ovms"),
    (re.compile(r"(^|[\s/])mlserver\s+start(\s|$)"), MLSERVER, "mlserver start"),
    (re.compile(r"(^|[\s/])lmdeploy\s+serve(\s|$)"), LMDEPLOY, "lmdeploy serve"),
)


@dataclass(frozen=True, slots=True)
class ServerClass:
    """A container's model-server class and the human-readable rule that decided it."""

    name: str
    rule: str

    def describe(self) -> str:
        return f"{self.name} ({self.rule})"


def argv(container: Container) -> list[str]:
    """The container's command followed by its args, as strings."""
    return [
        str(a) for a in as_list(container.raw.get("command")) + as_list(container.raw.get("args"))
    ]


def classify(container: Container) -> ServerClass | None:
    """The model server `container` runs, or None for anything else (sidecars, training)."""
    known = container.server_class_cache
    if known is None:
        known = (_classify(container),)
        object.__setattr__(container, "server_class_cache", known)
    server: ServerClass | None = known[0]
    return server


def _classify(container: Container) -> ServerClass | None:
    if _ray_job_submitter(container):
        return None
    image = container.image
    host, repo = image_registry_and_path(image)
    if host == "nvcr.io" and repo.startswith("nim/"):
        return ServerClass(NIM, f"image {image} matches nvcr.io/nim/*")
    name = repo.rsplit("/", 1)[-1]
    if name in _REPO_NAMES:
        return ServerClass(_REPO_NAMES[name], f"image {image} matches */{name}")
    for path, server in _REPO_PATHS.items():
        if repo == path or repo.endswith(f"/{path}"):
            return ServerClass(server, f"image {image} matches */{path}")
    for prefix, server in _REPO_PREFIXES:
        if name.startswith(prefix):
            return ServerClass(server, f"image {image} matches */{prefix}*")
    if ".dkr.ecr." in host and name in _ECR_REPO_NAMES:
        return ServerClass(_ECR_REPO_NAMES[name], f"image {image} matches an AWS DLC */{name}")
    if "kuberay" in repo:
        return ServerClass(RAY, f"image {image} matches */kuberay*")
    command = " ".join(argv(container))
    for pattern, server, shown in _COMMAND_RULES:
        if pattern.search(command):
            return ServerClass(server, f"command line runs {shown}")
    labels = container.template.labels
    if labels.get(NODE_TYPE_LABEL) == "head" and not container.init:
        return ServerClass(RAY, f"pod labelled {NODE_TYPE_LABEL}=head")
    if container.name == "kserve-container" and KSERVE_ISVC_LABEL in labels:
        return ServerClass(
            KSERVE_RUNTIME, f"kserve-container in a pod labelled {KSERVE_ISVC_LABEL}"
        )
    if container.name == "kserve-container" and container.template.owner.ref.kind == ISVC:
        role = container.template.replica_type or "component"
        return ServerClass(KSERVE_RUNTIME, f"kserve-container of the InferenceService's {role}")
    return None


def _ray_job_submitter(container: Container) -> bool:
    """A RayJob's submitter pod: its template in the RayJob, or the pod of the Job KubeRay
    runs it in."""
    template = container.template
    if template.owner.ref.kind == RAY_JOB:
        return template.replica_type == _RAY_SUBMITTER
    labels = template.labels
    return labels.get(ORIGINATED_FROM_CRD_LABEL) == "RayJob" and NODE_TYPE_LABEL not in labels
