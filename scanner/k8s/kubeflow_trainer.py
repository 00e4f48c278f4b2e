"""Kubeflow Trainer v2: the pods of a TrainJob, built from its runtime the way the trainer does.

A TrainJob (trainer.kubeflow.org/v1alpha1) names a ClusterTrainingRuntime or TrainingRuntime in
`spec.runtimeRef`; the runtime's `spec.template` is a JobSet template whose replicated jobs
(`node`, `launcher`, `dataset-initializer`, `model-initializer`...) carry the pod templates.
The trainer controller builds the JobSet it creates from the runtime and the TrainJob, in this
order (kubeflow/trainer at commit 8c0f5059bd51, the version of the CRDs in use):

1. `spec.runtimePatches`, each a strategic merge patch of the JobSet spec, applied in order,
   replicated jobs merged by name and their order kept (pkg/runtime/core/trainingruntime.go,
   mergeRuntimePatches): pod labels and annotations, affinity, nodeSelector, tolerations,
   volumes, securityContext, serviceAccountName, imagePullSecrets..., and the env,
   volumeMounts and securityContext of named containers (the CRD allows no more);
2. `spec.trainer.resourcesPerNode`, merged per resource over the `node` container's resources
   of the replicated job labelled trainer.kubeflow.org/trainjob-ancestor-step: trainer (and of
   the `node` job of an MPI runtime with runLauncherAsNode), when the runtime has an mlPolicy
   (newRuntimeInfo; pkg/util/trainingruntime/trainingruntime.go, MergeResourceRequirements);
3. the JobSet builder (pkg/runtime/framework/plugins/jobset/builder.go): `spec.trainer.image`,
   `command` and `args` replace the `node` container's in the trainer job, `spec.trainer.env`
   is upserted into it by name (Trainer); `spec.initializer.dataset` / `.model` set
   STORAGE_URI, upsert their env and add their secretRef as envFrom in the
   dataset-initializer / model-initializer containers (Initializer).

What the ML plugins add beyond that (PET_* and OpenMPI variables, the 29400 port, the MPI SSH
and hostfile volumes; pkg/runtime/framework/plugins/torch, mpi) concerns no pod-spec check
and is not modelled: no /dev/shm, toleration, runtime class or GPU limit comes from them.

A runtime's own templates are what every TrainJob that names it gets: they are read on the
runtime (`ClusterTrainingRuntime torch-distributed (node)`), used or not. A TrainJob's
templates are the runtime's with the TrainJob's changes, each derived from the runtime's
template of the same replicated job (PodTemplate.base): a problem the runtime's template has
too comes from the runtime and is reported there, once, with the TrainJob as a symptom; one
only the TrainJob's template has comes from its fields and is reported on the TrainJob. The
TrainJob's fixes are written where it can change its pods: the `node` container of the trainer
job at `spec.trainer` (image, command, args, env; resources at resourcesPerNode), the
initializers at `spec.initializer.dataset|model`, pod-level fields in a runtimePatches entry.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpu_audit.k8s.objects import as_list, as_mapping, str_map
from gpu_audit.k8s.operator_templates import OperatorTemplate
from gpu_audit.model import Resource
from gpu_audit.snapshot import Snapshot

GROUP = "trainer.kubeflow.org"
TRAIN_JOB = f"TrainJob.{GROUP}"
CLUSTER_TRAINING_RUNTIME = f"ClusterTrainingRuntime.{GROUP}"
TRAINING_RUNTIME = f"TrainingRuntime.{GROUP}"
RUNTIME_TYPES = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)
ANCESTOR_LABEL = f"{GROUP}/trainjob-ancestor-step"  # constants.LabelTrainJobAncestor
TRAINER = "trainer"  # constants.AncestorTrainer
NODE = "node"  # constants.Node: the trainer's job and container
INITIALIZERS = {"dataset-initializer": "dataset", "model-initializer": "model"}
STORAGE_URI = "STORAGE_URI"  # jobsetplgconsts.InitializerEnvStorageUri
_POD_PATH = "template.spec.template.spec"  # in a replicated job

# Lists the strategic merge patch of a JobSet spec merges item by item, by their patchMergeKey
# (jobset v1alpha2 ReplicatedJobs; corev1 PodSpec and Container); other lists are replaced.
_MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def referenced_runtime(snapshot: Snapshot, trainjob: Resource) -> Resource | None:
    """The (Cluster)TrainingRuntime `spec.runtimeRef` names, when the input holds it (kind
    defaults to ClusterTrainingRuntime, apiGroup to trainer.kubeflow.org)."""
    ref = as_mapping(trainjob.spec.get("runtimeRef"))
    if str(ref.get("apiGroup") or GROUP) != GROUP:
        return None
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    name = str(ref.get("name") or "")
    if kind == "ClusterTrainingRuntime":
        return snapshot.get(CLUSTER_TRAINING_RUNTIME, "", name)
    if kind == "TrainingRuntime":
        return snapshot.get(TRAINING_RUNTIME, trainjob.ref.namespace, name)
    return None


def replicated_job_pods(snapshot: Snapshot, owner: Resource, role: str) -> int:
    """How many pods the replicated job `role` of a TrainJob or training runtime runs at once,
    one per node: for the trainer's job (labelled trainjob-ancestor-step: trainer) of a runtime
    with an mlPolicy, the TrainJob's spec.trainer.numNodes, else the runtime's
    mlPolicy.numNodes, else 1; for any other job its parallelism (the trainer supports no
    replicas > 1 yet; pkg/runtime/core/trainingruntime.go newRuntimeInfo, and the torch, jax
    and flux plugins that set the trainer's count from numNodes). 0 when `owner` is neither
    or its runtime is not in the input. spec.trainer.resourcesPerNode is what each of these
    pods gets, not the job's total."""
    if owner.ref.kind == TRAIN_JOB:
        runtime = referenced_runtime(snapshot, owner)
        trainer = as_mapping(owner.spec.get("trainer"))
    elif owner.ref.kind in RUNTIME_TYPES:
        runtime, trainer = owner, {}
    else:
        return 0
    if runtime is None:
        return 0
    ml_policy = runtime.spec.get("mlPolicy")
    for job in _replicated_jobs(runtime.spec):
        if _name(job) != role:
            continue
        if _ancestor(job) == TRAINER and isinstance(ml_policy, Mapping):
            return _positive(trainer.get("numNodes"), _positive(ml_policy.get("numNodes"), 1))
        job_spec = as_mapping(as_mapping(job.get("template")).get("spec"))
        return _positive(job_spec.get("parallelism"), 1)
    return 0


def _positive(value: object, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


def runtime_templates(runtime: Resource) -> tuple[OperatorTemplate, ...]:
    """One template per replicated job of the runtime's JobSet template, named by the job."""
    return _templates(_replicated_jobs(runtime.spec), "spec.template.spec.replicatedJobs", {})


def trainjob_templates(
    trainjob: Resource, runtime: Resource
) -> tuple[tuple[OperatorTemplate, OperatorTemplate], ...]:
    """The TrainJob's templates, each with the runtime template it is derived from."""
    jobs = _patched(trainjob, _replicated_jobs(runtime.spec))
    ml_policy = runtime.spec.get("mlPolicy")
    if isinstance(ml_policy, Mapping):
        _apply_resources_per_node(trainjob, ml_policy, jobs)
    _apply_trainer(trainjob, ml_policy, jobs)
    _apply_initializers(trainjob, jobs)
    paths = {name: _patch_path(trainjob, name) for name in (_name(j) for j in jobs)}
    derived = _templates(jobs, "", paths)
    bases = {t.role: t for t in runtime_templates(runtime)}
    return tuple((t, bases[t.role]) for t in derived if t.role in bases)


def _replicated_jobs(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    jobset = as_mapping(as_mapping(spec.get("template")).get("spec"))
    return [copy.deepcopy(dict(j)) for j in as_list(jobset.get("replicatedJobs")) if _is_job(j)]


def _is_job(value: object) -> bool:
    return isinstance(value, Mapping) and bool(value.get("name"))


def _name(job: Mapping[str, Any]) -> str:
    return str(job.get("name"))


def _ancestor(job: Mapping[str, Any]) -> str:
    labels = str_map(as_mapping(as_mapping(job.get("template")).get("metadata")).get("labels"))
    return labels.get(ANCESTOR_LABEL, "")


def _pod(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod template of a replicated job (its JobTemplateSpec's template), None when missing;
    the mutable one of a job this module copied."""
    node: Any = job
    for key in ("template", "spec", "template"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and isinstance(node.get("spec"), dict) else None


def _templates(
    jobs: list[dict[str, Any]], base: str, paths: Mapping[str, tuple[str, dict[str, str]]]
) -> tuple[OperatorTemplate, ...]:
    """OperatorTemplates of replicated jobs: at `base`[i] in the runtime, or, for a TrainJob, at the
    path `paths` gives for the job (the runtimePatches entry), with its container paths."""
    out = []
    for index, job in enumerate(jobs):
        pod = _pod(job)
        if pod is None:
            continue
        name = _name(job)
        if name in paths:
            path, containers = paths[name]
            names = [
                str(as_mapping(c).get("name", "")) for c in as_list(pod["spec"].get("containers"))
            ]
            container_paths = _trainjob_container_paths(job, names, containers)
        else:
            path, container_paths = f"{base}[{index}].{_POD_PATH}", ()
        metadata = as_mapping(pod.get("metadata"))
        out.append(OperatorTemplate(name, path, pod["spec"], metadata, container_paths))
    return tuple(out)


def _trainjob_container_paths(
    job: Mapping[str, Any], names: list[str], patched: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    """Where the TrainJob writes each container's fields: the trainer's node container at
    spec.trainer, an initializer at spec.initializer.<kind>, a container a runtime patch names
    in that patch."""
    out = dict(patched)
    if _ancestor(job) == TRAINER and NODE in names:
        out[NODE] = "spec.trainer"
    kind = INITIALIZERS.get(_ancestor(job))
    if kind and _ancestor(job) in names:
        out[_ancestor(job)] = f"spec.initializer.{kind}"
    return tuple((n, out[n]) for n in names if n in out)


def _patch_path(trainjob: Resource, job: str) -> tuple[str, dict[str, str]]:
    """The pod spec of `job` in the TrainJob's runtimePatches: the first entry that patches it,
    else a new entry; and the containers that entry names."""
    patches = as_list(trainjob.spec.get("runtimePatches"))
    for index, patch in enumerate(map(as_mapping, patches)):
        jobs = _patch_jobs(patch)
        for position, entry in enumerate(jobs):
            if entry.get("name") != job:
                continue
            path = (
                f"spec.runtimePatches[{index}].trainingRuntimeSpec.template.spec."
                f"replicatedJobs[{position}].{_POD_PATH}"
            )
            pod_spec = as_mapping(
                as_mapping(
                    as_mapping(as_mapping(entry.get("template")).get("spec")).get("template")
                ).get("spec")
            )
            named = {
                str(as_mapping(c).get("name")): f"{path}.containers[{i}]"
                for i, c in enumerate(as_list(pod_spec.get("containers")))
            }
            return path, named
    new = (
        f"spec.runtimePatches[{len(patches)}].trainingRuntimeSpec.template.spec."
        f"replicatedJobs[0].{_POD_PATH}"
    )
    return new, {}


def _patch_jobs(patch: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = as_mapping(
        as_mapping(as_mapping(patch.get("trainingRuntimeSpec")).get("template")).get("spec")
    )
    return [as_mapping(j) for j in as_list(spec.get("replicatedJobs"))]


# --------------------------------------------------------------------------- the trainer's steps


def _patched(trainjob: Resource, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """mergeRuntimePatches: each patch merged in turn, the runtime's job order kept."""
    order = {_name(j): i for i, j in enumerate(jobs)}
    merged: Any = {"replicatedJobs": jobs}
    for patch in map(as_mapping, as_list(trainjob.spec.get("runtimePatches"))):
        spec = as_mapping(
            as_mapping(as_mapping(patch.get("trainingRuntimeSpec")).get("template")).get("spec")
        )
        if spec:
            merged = _merge(merged, spec, "")
    out = [j for j in as_list(as_mapping(merged).get("replicatedJobs")) if _is_job(j)]
    return sorted(out, key=lambda j: order.get(_name(j), len(order)))


def _merge(base: Any, patch: Any, key: str) -> Any:
    """A strategic merge patch: maps merge (null deletes), lists of _MERGE_KEYS merge item by
    item (a volume is replaced whole: retainKeys), other lists and values are replaced."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for field, value in patch.items():
            if value is None:
                out.pop(field, None)
            else:
                out[field] = _merge(base.get(field), value, str(field))
        return out
    merge_key = _MERGE_KEYS.get(key)
    if merge_key and isinstance(base, list) and isinstance(patch, list):
        items = list(base)
        for item in patch:
            wanted = as_mapping(item).get(merge_key)
            at = next(
                (i for i, old in enumerate(items) if as_mapping(old).get(merge_key) == wanted),
                None,
            )
            if at is None:
                items.append(copy.deepcopy(item))
            else:
                items[at] = copy.deepcopy(item) if key == "volumes" else _merge(items[at], item, "")
        return items
    return copy.deepcopy(patch)


def _containers(job: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    pod = _pod(job)
    if pod is None:
        return []
    return [
        c
        for c in as_list(pod["spec"].get("containers"))
        if isinstance(c, dict) and c.get("name") == name
    ]


def _upsert(container: dict[str, Any], field: str, entries: list[Any], key: str) -> None:
    """apply.Upsert*: each entry replaces the item with the same key, else is appended."""
    items = list(as_list(container.get(field)))
    for entry in entries:
        wanted = as_mapping(entry).get(key)
        at = next((i for i, old in enumerate(items) if as_mapping(old).get(key) == wanted), None)
        if at is None:
            items.append(entry)
        else:
            items[at] = entry
    if items:
        container[field] = items


def _launcher_as_node(ml_policy: object, job: Mapping[str, Any]) -> bool:
    mpi = as_mapping(as_mapping(ml_policy).get("mpi"))
    return mpi.get("runLauncherAsNode") is True and _name(job) == NODE


def _apply_resources_per_node(
    trainjob: Resource, ml_policy: Mapping[str, Any], jobs: list[dict[str, Any]]
) -> None:
    per_node = as_mapping(as_mapping(trainjob.spec.get("trainer")).get("resourcesPerNode"))
    if not per_node:
        return
    for job in jobs:
        if _ancestor(job) != TRAINER and not _launcher_as_node(ml_policy, job):
            continue
        for container in _containers(job, NODE)[:1]:
            resources = dict(as_mapping(container.get("resources")))
            for kind in ("limits", "requests"):
                merged = {**as_mapping(resources.get(kind)), **as_mapping(per_node.get(kind))}
                if merged:
                    resources[kind] = merged
            claims = list(as_list(resources.get("claims")))
            for claim in as_list(per_node.get("claims")):
                claims = [
                    c for c in claims if as_mapping(c).get("name") != as_mapping(claim).get("name")
                ]
                claims.append(claim)
            if claims:
                resources["claims"] = claims
            container["resources"] = resources


def _apply_trainer(trainjob: Resource, ml_policy: object, jobs: list[dict[str, Any]]) -> None:
    """Builder.Trainer: image, command and args of the trainer's node container; its env,
    and that of the node job an MPI launcher runs as."""
    trainer = trainjob.spec.get("trainer")
    if not isinstance(trainer, Mapping):
        return
    for job in jobs:
        trainer_job = _ancestor(job) == TRAINER
        if not trainer_job and not _launcher_as_node(ml_policy, job):
            continue
        for container in _containers(job, NODE):
            if trainer_job:
                if trainer.get("image"):
                    container["image"] = trainer["image"]
                for field in ("command", "args"):
                    if isinstance(trainer.get(field), list):
                        container[field] = list(trainer[field])
            _upsert(container, "env", as_list(trainer.get("env")), "name")


def _apply_initializers(trainjob: Resource, jobs: list[dict[str, Any]]) -> None:
    """Builder.Initializer: STORAGE_URI, env and secretRef of spec.initializer.dataset|model."""
    initializer = as_mapping(trainjob.spec.get("initializer"))
    for job in jobs:
        name = _ancestor(job)
        config = initializer.get(INITIALIZERS.get(name, ""))
        if not isinstance(config, Mapping):
            continue
        for container in _containers(job, name):
            if config.get("storageUri"):
                entry = {"name": STORAGE_URI, "value": str(config["storageUri"])}
                _upsert(container, "env", [entry], "name")
            _upsert(container, "env", as_list(config.get("env")), "name")
            secret = as_mapping(config.get("secretRef")).get("name")
            if secret:
                container["envFrom"] = [
                    *as_list(container.get("envFrom")),
                    {"secretRef": {"name": str(secret)}},
                ]
