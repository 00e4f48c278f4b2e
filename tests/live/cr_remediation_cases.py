"""Failing objects of every workload custom resource kind gpu-audit reads pod templates from,
for tests/live/test_cr_remediation_acceptance.py: each has a pod-spec problem a check reports
with a patch remediation, beside things the patch must not lose (other containers, other list
items, images, commands, tolerations)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Doc = dict[str, Any]
NS = "cr-fix"
GPU = "nvidia.com/gpu"
TORCH = "nvcr.io/nvidia/pytorch:24.08-py3"
VLLM = "vllm/vllm-openai:v0.8.5"
RAY_GPU = "rayproject/ray:2.41.0-py310-gpu"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Case:
    """`objects[0]` carries the problem; the others are what it is read with (a runtime)."""

    label: str
    check_id: str
    objects: list[Doc]
    also: tuple[str, ...] = field(default=())  # what else the case shows

    @property
    def target(self) -> Doc:
        return self.objects[0]


def meta(name: str) -> Doc:
    return {"name": name, "namespace": NS, "labels": {"team": "ml"}}


def sidecar() -> Doc:
    return {
        "name": "log-shipper",
        "image": "fluent/fluent-bit:3.1.9",
        "args": ["--config", "/etc/fluent-bit/fluent-bit.conf"],
    }


def requests_only(name: str, image: str, *, gpus: int = 1, **fields: Any) -> Doc:
    """A container that requests GPUs without a limit (GPU-WL-001)."""
    resources = {"requests": {GPU: gpus, "cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}
    return {"name": name, "image": image, "resources": resources, **fields}


def multi_gpu(name: str, image: str, *, gpus: int = 2, **fields: Any) -> Doc:
    """A container of several GPUs running torch, without /dev/shm (GPU-WL-003)."""
    return {"name": name, "image": image, "resources": {"limits": {GPU: gpus}}, **fields}


def unnamed(container: Doc) -> Doc:
    """A container without a name, as Knative Services are usually written."""
    return {k: v for k, v in container.items() if k != "name"}


def torchrun() -> Doc:
    return {"command": ["torchrun", "--nproc_per_node=2", "train.py"]}


def ray_cluster_spec() -> Doc:
    """A head, a CPU worker group and, second, a GPU worker group asking for GPUs without a
    limit, its Ray container first and a sidecar after it."""
    head = {"containers": [{"name": "ray-head", "image": RAY_GPU}]}
    cpu = {
        "groupName": "cpu-workers",
        "replicas": 1,
        "rayStartParams": {},
        "template": {"spec": {"containers": [{"name": "ray-worker", "image": RAY_GPU}]}},
    }
    gpu = {
        "groupName": "gpu-workers",
        "replicas": 2,
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [
                    requests_only("ray-worker", RAY_GPU, command=["/bin/bash", "-lc", "--"]),
                    sidecar(),
                ],
                "tolerations": [TOLERATION],
            }
        },
    }
    return {
        "rayVersion": "2.41.0",
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": head}},
        "workerGroupSpecs": [cpu, gpu],
    }


def job_template(spec: Doc) -> Doc:
    return {"spec": {"template": {"spec": spec}}}


def trainer_runtime(name: str, container: Doc) -> Doc:
    labels = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": labels},
            "spec": {"template": {"spec": {"containers": [container], "tolerations": [SPOT]}}},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [node]}},
        },
    }


def trainjob(name: str, runtime: str, trainer: Doc) -> Doc:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": meta(name),
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer},
    }


def cases() -> list[Case]:
    vllm_tp2 = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "2"]
    serving_runtime = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": meta("vllm-runtime"),
        "spec": {
            "supportedModelFormats": [{"name": "huggingface", "autoSelect": True}],
            "containers": [{"name": "kserve-container", "image": VLLM, "args": ["--port", "8080"]}],
        },
    }
    return [
        Case(
            "InferenceService (model)",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "serving.kserve.io/v1beta1",
                    "kind": "InferenceService",
                    "metadata": meta("llm-model"),
                    "spec": {
                        "predictor": {
                            "tolerations": [TOLERATION],
                            "model": {
                                "modelFormat": {"name": "huggingface"},
                                "runtime": "vllm-runtime",
                                "storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct",
                                "args": ["--max-model-len", "8192"],
                                "resources": {"requests": {GPU: 1, "cpu": "4"}},
                            },
                        }
                    },
                },
                serving_runtime,
            ],
            ("model args and storageUri",),
        ),
        Case(
            "InferenceService (containers)",
            "GPU-WL-003",
            [
                {
                    "apiVersion": "serving.kserve.io/v1beta1",
                    "kind": "InferenceService",
                    "metadata": meta("llm-custom"),
                    "spec": {
                        "predictor": {
                            "containers": [
                                multi_gpu("kserve-container", VLLM, args=vllm_tp2),
                                sidecar(),
                            ],
                            "volumes": [{"name": "cache", "emptyDir": {}}],
                        }
                    },
                }
            ],
            ("sidecar container", "existing volume"),
        ),
        Case(
            "RayCluster",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "metadata": meta("train"),
                    "spec": ray_cluster_spec(),
                }
            ],
            ("worker group 1 of 2", "sidecar", "toleration"),
        ),
        Case(
            "RayJob",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayJob",
                    "metadata": meta("batch"),
                    "spec": {"entrypoint": "python job.py", "rayClusterSpec": ray_cluster_spec()},
                }
            ],
            ("embedded rayClusterSpec",),
        ),
        Case(
            "RayService",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayService",
                    "metadata": meta("serve"),
                    "spec": {
                        "serveConfigV2": "applications: []\n",
                        "rayClusterConfig": ray_cluster_spec(),
                    },
                }
            ],
            ("embedded rayClusterConfig",),
        ),
        Case(
            "LeaderWorkerSet",
            "GPU-WL-003",
            [
                {
                    "apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet",
                    "metadata": meta("vllm"),
                    "spec": {
                        "replicas": 1,
                        "leaderWorkerTemplate": {
                            "size": 2,
                            "workerTemplate": {
                                "spec": {
                                    "containers": [
                                        multi_gpu("vllm-worker", VLLM, gpus=8, args=vllm_tp2),
                                        sidecar(),
                                    ],
                                    "tolerations": [TOLERATION],
                                }
                            },
                        },
                    },
                }
            ],
            ("sidecar", "toleration"),
        ),
        Case(
            "JobSet",
            "GPU-WL-003",
            [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "metadata": meta("pretrain"),
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "driver",
                                "replicas": 1,
                                "template": job_template(
                                    {
                                        "containers": [{"name": "driver", "image": "busybox:1.37"}],
                                        "restartPolicy": "Never",
                                    }
                                ),
                            },
                            {
                                "name": "workers",
                                "replicas": 2,
                                "template": job_template(
                                    {
                                        "containers": [
                                            sidecar(),
                                            multi_gpu("trainer", TORCH, **torchrun()),
                                        ],
                                        "restartPolicy": "Never",
                                        "volumes": [{"name": "data", "emptyDir": {}}],
                                    }
                                ),
                            },
                        ]
                    },
                }
            ],
            ("replicated job 1 of 2", "GPU container second", "existing volume"),
        ),
        Case(
            "PyTorchJob",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "metadata": meta("ddp"),
                    "spec": {
                        "pytorchReplicaSpecs": {
                            "Master": {
                                "replicas": 1,
                                "template": {
                                    "spec": {"containers": [{"name": "pytorch", "image": TORCH}]}
                                },
                            },
                            "Worker": {
                                "replicas": 2,
                                "template": {
                                    "spec": {
                                        "containers": [
                                            requests_only("pytorch", TORCH, **torchrun()),
                                            sidecar(),
                                        ]
                                    }
                                },
                            },
                        }
                    },
                }
            ],
            ("sidecar", "Master untouched"),
        ),
        Case(
            "MPIJob",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "kubeflow.org/v2beta1",
                    "kind": "MPIJob",
                    "metadata": meta("allreduce"),
                    "spec": {
                        "mpiReplicaSpecs": {
                            "Launcher": {
                                "replicas": 1,
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "launcher",
                                                "image": "mpioperator/mpi-pi:openmpi",
                                                "command": ["mpirun", "-n", "2", "/home/pi"],
                                            }
                                        ]
                                    }
                                },
                            },
                            "Worker": {
                                "replicas": 2,
                                "template": {
                                    "spec": {
                                        "containers": [
                                            requests_only("worker", "mpioperator/mpi-pi:openmpi")
                                        ]
                                    }
                                },
                            },
                        }
                    },
                }
            ],
            ("launcher command",),
        ),
        Case(
            "Volcano Job",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "metadata": meta("vc-train"),
                    "spec": {
                        "minAvailable": 3,
                        "schedulerName": "volcano",
                        "tasks": [
                            {
                                "name": "ps",
                                "replicas": 1,
                                "template": {
                                    "spec": {"containers": [{"name": "ps", "image": TORCH}]}
                                },
                            },
                            {
                                "name": "worker",
                                "replicas": 2,
                                "template": {
                                    "spec": {
                                        "containers": [
                                            sidecar(),
                                            requests_only("worker", TORCH, **torchrun()),
                                        ],
                                        "tolerations": [TOLERATION],
                                    }
                                },
                            },
                        ],
                    },
                }
            ],
            ("task 1 of 2", "GPU container second"),
        ),
        Case(
            "Notebook",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "Notebook",
                    "metadata": meta("alice"),
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    requests_only(
                                        "alice", "kubeflownotebookswg/jupyter-pytorch-cuda:v1.9.0"
                                    ),
                                    sidecar(),
                                ]
                            }
                        }
                    },
                }
            ],
            ("sidecar",),
        ),
        Case(
            "NIMService",
            "GPU-WL-001",
            [
                {
                    "apiVersion": "apps.nvidia.com/v1alpha1",
                    "kind": "NIMService",
                    "metadata": meta("llama"),
                    "spec": {
                        "image": {
                            "repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct",
                            "tag": "1.3.3",
                            "pullSecrets": ["ngc-secret"],
                        },
                        "authSecret": "ngc-api-secret",
                        "storage": {"pvc": {"name": "nim-cache"}},
                        "env": [{"name": "NIM_MAX_MODEL_LEN", "value": "8192"}],
                        "resources": {"requests": {GPU: 1}},
                        "tolerations": [TOLERATION],
                        "expose": {"service": {"type": "ClusterIP", "port": 8000}},
                    },
                }
            ],
            ("env", "image", "storage"),
        ),
        Case(
            "NIMService (probes)",
            "GPU-SRV-005",
            [
                {
                    "apiVersion": "apps.nvidia.com/v1alpha1",
                    "kind": "NIMService",
                    "metadata": meta("llama-noprobe"),
                    "spec": {
                        "image": {
                            "repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct",
                            "tag": "1.3.3",
                        },
                        "storage": {"pvc": {"name": "nim-cache"}},
                        "resources": {"limits": {GPU: 1}},
                        "startupProbe": {"enabled": False},
                        "readinessProbe": {"enabled": False},
                        "expose": {"service": {"type": "ClusterIP", "port": 8000}},
                    },
                }
            ],
            ("probes at spec.<probe>.probe",),
        ),
        Case(
            "Knative Service",
            "GPU-WL-003",
            [
                {
                    "apiVersion": "serving.knative.dev/v1",
                    "kind": "Service",
                    "metadata": meta("llama-tp2"),
                    "spec": {
                        "template": {
                            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                            "spec": {"containers": [unnamed(multi_gpu("", VLLM, args=vllm_tp2))]},
                        }
                    },
                }
            ],
            ("unnamed container (test on its image)",),
        ),
        Case(
            "SparkApplication",
            "GPU-WL-003",
            [
                {
                    "apiVersion": "sparkoperator.k8s.io/v1beta2",
                    "kind": "SparkApplication",
                    "metadata": meta("embed"),
                    "spec": {
                        "type": "Python",
                        "mode": "cluster",
                        "sparkVersion": "3.5.3",
                        "image": "ghcr.io/example/spark-pytorch:3.5.3",
                        "mainApplicationFile": "local:///opt/app/embed.py",
                        "volumes": [{"name": "data", "emptyDir": {}}],
                        "driver": {"cores": 1, "memory": "2g", "serviceAccount": "spark"},
                        "executor": {
                            "instances": 2,
                            "cores": 4,
                            "memory": "16g",
                            "gpu": {"name": GPU, "quantity": 2},
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            "tolerations": [TOLERATION],
                        },
                    },
                }
            ],
            ("spec.volumes", "executor volumeMounts"),
        ),
        Case(
            "ClusterTrainingRuntime",
            "GPU-WL-003",
            [trainer_runtime("torch-2gpu", multi_gpu("node", TORCH, **torchrun()))],
            ("toleration",),
        ),
        Case(
            "TrainJob (resourcesPerNode)",
            "GPU-WL-001",
            [
                trainjob(
                    "finetune",
                    "torch-cpu",
                    {"numNodes": 2, "resourcesPerNode": {"requests": {GPU: 2, "cpu": "8"}}},
                ),
                trainer_runtime("torch-cpu", {"name": "node", "image": TORCH, **torchrun()}),
            ],
            ("numNodes",),
        ),
        Case(
            "TrainJob (runtimePatches)",
            "GPU-WL-003",
            [
                trainjob(
                    "finetune-shm",
                    "torch-cpu-2",
                    {"numNodes": 2, "resourcesPerNode": {"limits": {GPU: 2}}},
                ),
                trainer_runtime("torch-cpu-2", {"name": "node", "image": TORCH, **torchrun()}),
            ],
            ("a new runtimePatches entry",),
        ),
    ]
