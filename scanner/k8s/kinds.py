"""The resource types gpu-audit knows, and how an object's apiVersion/kind maps to one.

A resource type is named by its kind for the built-in API groups ("Pod", "Deployment") and by
"Kind.group" for custom resources ("ServiceMonitor.monitoring.coreos.com"), so that kinds that
exist in several groups (Volcano's Job and batch/v1 Job; two PodGroups) never mix.
"""

from __future__ import annotations

from dataclasses import dataclass

BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "node.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "admissionregistration.k8s.io",
        "resource.k8s.io",
        "discovery.k8s.io",
        "coordination.k8s.io",
        "certificates.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
    }
)


def api_group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def resource_type(api_version: str, kind: str) -> str:
    group = api_group(api_version)
    return kind if group in BUILTIN_GROUPS else f"{kind}.{group}"


@dataclass(frozen=True, slots=True)
class KindInfo:
    """How to list a resource type from the API."""

    type: str
    group: str
    versions: tuple[str, ...]  # preferred first
    plural: str
    namespaced: bool

    @property
    def kind(self) -> str:
        return self.type.split(".", 1)[0]


def _k(type_: str, group: str, versions: str, plural: str, namespaced: bool = True) -> KindInfo:
    return KindInfo(type_, group, tuple(versions.split()), plural, namespaced)


_KUEUE = "v1beta2 v1beta1"

KNOWN_KINDS: dict[str, KindInfo] = {
    info.type: info
    for info in (
        _k("Node", "", "v1", "nodes", namespaced=False),
        _k("Namespace", "", "v1", "namespaces", namespaced=False),
        _k("Pod", "", "v1", "pods"),
        _k("Service", "", "v1", "services"),
        _k("ConfigMap", "", "v1", "configmaps"),
        _k("Secret", "", "v1", "secrets"),
        _k("ServiceAccount", "", "v1", "serviceaccounts"),
        _k("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims"),
        _k("PersistentVolume", "", "v1", "persistentvolumes", namespaced=False),
        _k("ResourceQuota", "", "v1", "resourcequotas"),
        _k("LimitRange", "", "v1", "limitranges"),
        _k("Event", "", "v1", "events"),
        _k("ReplicationController", "", "v1", "replicationcontrollers"),
        _k("Deployment", "apps", "v1", "deployments"),
        _k("StatefulSet", "apps", "v1", "statefulsets"),
        _k("DaemonSet", "apps", "v1", "daemonsets"),
        _k("ReplicaSet", "apps", "v1", "replicasets"),
        _k("Job", "batch", "v1", "jobs"),
        _k("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets"),
        _k("CronJob", "batch", "v1", "cronjobs"),
        _k("HorizontalPodAutoscaler", "autoscaling", "v2", "horizontalpodautoscalers"),
        _k("NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies"),
        _k("StorageClass", "storage.k8s.io", "v1", "storageclasses", namespaced=False),
        _k("CSIDriver", "storage.k8s.io", "v1", "csidrivers", namespaced=False),
        _k("Ingress", "networking.k8s.io", "v1", "ingresses"),
        _k("Role", "rbac.authorization.k8s.io", "v1", "roles"),
        _k("RoleBinding", "rbac.authorization.k8s.io", "v1", "rolebindings"),
        _k("ClusterRole", "rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False),
        _k(
            "ClusterRoleBinding",
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            namespaced=False,
        ),
        _k("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False),
        _k("RuntimeClass", "node.k8s.io", "v1", "runtimeclasses", namespaced=False),
        _k("ResourceSlice", "resource.k8s.io", "v1 v1beta2 v1beta1", "resourceslices", False),
        _k("DeviceClass", "resource.k8s.io", "v1 v1beta2 v1beta1", "deviceclasses", False),
        _k("ResourceClaim", "resource.k8s.io", "v1 v1beta2 v1beta1", "resourceclaims"),
        _k(
            "ResourceClaimTemplate",
            "resource.k8s.io",
            "v1 v1beta2 v1beta1",
            "resourceclaimtemplates",
        ),
        _k(
            "ComputeDomain.resource.nvidia.com",
            "resource.nvidia.com",
            "v1beta1",
            "computedomains",
        ),
        _k("APIService", "apiregistration.k8s.io", "v1", "apiservices", namespaced=False),
        _k(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            namespaced=False,
        ),
        _k("ClusterPolicy.nvidia.com", "nvidia.com", "v1", "clusterpolicies", namespaced=False),
        _k("NVIDIADriver.nvidia.com", "nvidia.com", "v1alpha1", "nvidiadrivers", namespaced=False),
        _k(
            "ServiceMonitor.monitoring.coreos.com", "monitoring.coreos.com", "v1", "servicemonitors"
        ),
        _k("PodMonitor.monitoring.coreos.com", "monitoring.coreos.com", "v1", "podmonitors"),
        _k("Prometheus.monitoring.coreos.com", "monitoring.coreos.com", "v1", "prometheuses"),
        _k(
            "PrometheusAgent.monitoring.coreos.com",
            "monitoring.coreos.com",
            "v1alpha1",
            "prometheusagents",
        ),
        _k("ScaledObject.keda.sh", "keda.sh", "v1alpha1", "scaledobjects"),
        _k("Job.batch.volcano.sh", "batch.volcano.sh", "v1alpha1", "jobs"),
        _k("PodGroup.scheduling.volcano.sh", "scheduling.volcano.sh", "v1beta1", "podgroups"),
        _k("Queue.scheduling.volcano.sh", "scheduling.volcano.sh", "v1beta1", "queues", False),
        _k("PodGroup.scheduling.x-k8s.io", "scheduling.x-k8s.io", "v1alpha1", "podgroups"),
        # Kueue's CRDs serve v1beta2 (the storage version) and v1beta1.
        _k("ClusterQueue.kueue.x-k8s.io", "kueue.x-k8s.io", _KUEUE, "clusterqueues", False),
        _k("LocalQueue.kueue.x-k8s.io", "kueue.x-k8s.io", _KUEUE, "localqueues"),
        _k("ResourceFlavor.kueue.x-k8s.io", "kueue.x-k8s.io", _KUEUE, "resourceflavors", False),
        _k("Workload.kueue.x-k8s.io", "kueue.x-k8s.io", _KUEUE, "workloads"),
        _k(
            "WorkloadPriorityClass.kueue.x-k8s.io",
            "kueue.x-k8s.io",
            _KUEUE,
            "workloadpriorityclasses",
            namespaced=False,
        ),
        _k("Cohort.kueue.x-k8s.io", "kueue.x-k8s.io", _KUEUE, "cohorts", namespaced=False),
        _k("PyTorchJob.kubeflow.org", "kubeflow.org", "v1", "pytorchjobs"),
        _k("JobSet.jobset.x-k8s.io", "jobset.x-k8s.io", "v1alpha2", "jobsets"),
        _k(
            "LeaderWorkerSet.leaderworkerset.x-k8s.io",
            "leaderworkerset.x-k8s.io",
            "v1",
            "leaderworkersets",
        ),
        _k("MPIJob.kubeflow.org", "kubeflow.org", "v2beta1", "mpijobs"),
        _k("TFJob.kubeflow.org", "kubeflow.org", "v1", "tfjobs"),
        _k("TrainJob.trainer.kubeflow.org", "trainer.kubeflow.org", "v1alpha1", "trainjobs"),
        _k(
            "ClusterTrainingRuntime.trainer.kubeflow.org",
            "trainer.kubeflow.org",
            "v1alpha1",
            "clustertrainingruntimes",
            namespaced=False,
        ),
        _k(
            "TrainingRuntime.trainer.kubeflow.org",
            "trainer.kubeflow.org",
            "v1alpha1",
            "trainingruntimes",
        ),
        _k("Service.serving.knative.dev", "serving.knative.dev", "v1", "services"),
        _k(
            "SparkApplication.sparkoperator.k8s.io",
            "sparkoperator.k8s.io",
            "v1beta2",
            "sparkapplications",
        ),
        _k(
            "InferenceService.serving.kserve.io",
            "serving.kserve.io",
            "v1beta1",
            "inferenceservices",
        ),
        _k("ServingRuntime.serving.kserve.io", "serving.kserve.io", "v1alpha1", "servingruntimes"),
        _k(
            "ClusterServingRuntime.serving.kserve.io",
            "serving.kserve.io",
            "v1alpha1",
            "clusterservingruntimes",
            namespaced=False,
        ),
        # KubeRay: v1 served and stored, v1alpha1 still served (ray.io_*.yaml).
        _k("RayCluster.ray.io", "ray.io", "v1 v1alpha1", "rayclusters"),
        _k("RayJob.ray.io", "ray.io", "v1 v1alpha1", "rayjobs"),
        _k("RayService.ray.io", "ray.io", "v1 v1alpha1", "rayservices"),
        # Kubeflow Notebooks: v1 stored; v1beta1 and v1alpha1 served (kubeflow.org_notebooks.yaml).
        _k("Notebook.kubeflow.org", "kubeflow.org", "v1 v1beta1 v1alpha1", "notebooks"),
        _k("NIMService.apps.nvidia.com", "apps.nvidia.com", "v1alpha1", "nimservices"),
        # AppWrapper (project-codeflare/appwrapper): Kueue's workload.codeflare.dev/appwrapper
        # integration imports awv1beta2 (kueue pkg/controller/jobs/appwrapper).
        _k("AppWrapper.workload.codeflare.dev", "workload.codeflare.dev", "v1beta2", "appwrappers"),
        _k("NodePool.karpenter.sh", "karpenter.sh", "v1", "nodepools", namespaced=False),
        _k("NodeClaim.karpenter.sh", "karpenter.sh", "v1", "nodeclaims", namespaced=False),
    )
}
