from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_audit.api import (
    KSERVE_ISVC_LABEL,
    WORKLOAD_TYPES,
    Category,
    FixKind,
    PodTemplate,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    classify,
    failed,
    is_stack_pod_in_system_namespace,
    passed,
    pod_templates,
)

# Pods that use the Kubernetes API by design: KubeRay heads/workers (autoscaler), Spark
# drivers, MPI launchers (kubectl exec into workers), notebook servers. Kubeflow's notebook
# controller labels every notebook pod notebook-name=<Notebook> (generateStatefulSet in
# kubeflow/notebooks components/notebook-controller/controllers/notebook_controller.go), and
# the Jupyter web app runs notebooks as the profile's default-editor account
# (crud-web-apps/jupyter/backend/apps/default/routes/post.py) so that users drive Kubeflow
# (pipelines, kubectl) from them.
_API_USER_LABELS = ("ray.io/node-type", "spark-role", "notebook-name")
_API_USER_VALUES = {
    "training.kubeflow.org/replica-type": "launcher",
    "app.kubernetes.io/component": "jupyter",
}
_API_USER_KINDS = frozenset({"Notebook"})
# Pods whose ServiceAccount an operator creates and reconciles, with no field in the custom
# resource to opt out: NVIDIA's NIM operator runs each NIMService as ServiceAccount <name>,
# bound by a Role <name> only to `use` an OpenShift SecurityContextConstraints
# (api/apps/v1alpha1/nimservice_types.go GetServiceAccountName, GetRoleParams), and resets the
# account's automountServiceAccountToken on every reconcile (internal/utils/utils.go
# updateServiceAccount); the NIMService CRD has neither serviceAccountName nor
# automountServiceAccountToken. Its pods carry app.kubernetes.io/managed-by=k8s-nim-operator
# (GetStandardLabels).
_OPERATOR_ACCOUNT_KINDS = frozenset({"NIMService"})
_OPERATOR_ACCOUNT_LABELS = {"app.kubernetes.io/managed-by": "k8s-nim-operator"}
_SERVICE_ACCOUNT = "ServiceAccount"
_RBAC_TYPES = ("RoleBinding", "ClusterRoleBinding", "Role", "ClusterRole")
_RISKY_VERBS = {"get", "list", "watch", "*"}


@check(
    id="GPU-SEC-004",
    title="GPU and inference pods that do not call the Kubernetes API do not mount a token",
    category=Category.NETWORK_SECURITY,
    severity=Severity.LOW,
    # ServiceAccounts decide the default (without them the check is not assessed); the RBAC
    # objects only raise the severity, so any of them or the ServiceAccounts is enough.
    requires=(WORKLOAD_TYPES, (_SERVICE_ACCOUNT,), (_SERVICE_ACCOUNT, *_RBAC_TYPES)),
    rationale="""
        Model servers parse untrusted input (prompts, uploaded media, pickled or .mar models);
        an automounted ServiceAccount token turns any code execution in them into a foothold
        on the API server, with whatever the ServiceAccount is bound to. Most GPU workloads
        never call the API, so the token is pure risk; NVIDIA's own dcgm-exporter manifest
        opts out.
    """,
    detection="""
        GPU pod templates and model-server templates (SRV-CLASSIFY), except the GPU/network
        stack, pods that use the API by design (KubeRay, Spark, MPI launchers, Kubeflow
        Notebooks and pods labelled notebook-name, Knative revisions) and pods whose account
        an operator creates and reconciles with no opt-out in the custom resource (NIMService):
        the effective automountServiceAccountToken, the pod's field, else its
        ServiceAccount's. Not assessed without ServiceAccounts in the input; a pod that sets
        no field and whose ServiceAccount is not in the input is not judged.
    """,
    severity_evidence="""
        Low: a mounted token is a foothold only if the account can do something. Medium when
        RoleBindings or ClusterRoleBindings in the input bind the ServiceAccount to rules that
        read Secrets, create pods/exec, or use wildcards.
    """,
    remediation="""
        # $kind $namespace/$name uses ServiceAccount $service_account: $where
        $change
    """,
    remediation_generic="""
        # The pod leaves the token to its ServiceAccount, and no pod of the input that uses
        # the API runs as it: the ServiceAccount opts out.
        apiVersion: v1
        kind: ServiceAccount
        metadata:
          name: <service-account>
          namespace: <namespace>
        automountServiceAccountToken: false
        # The pod sets automountServiceAccountToken: true (the pod's field wins over the
        # ServiceAccount's, so the ServiceAccount cannot opt it out), or the account is shared
        # with a pod that uses the API: the pod template opts out, a patch of the object
        #   spec:
        #     template:
        #       spec:
        #         automountServiceAccountToken: false
        # (a custom resource: a JSON patch of its pod template's path, whose test operation
        # fails the patch if the field has changed)
        #   kubectl patch <kind> <name> -n <namespace> --type=json -p '[{"op": "test", "path": "<pod spec path>/automountServiceAccountToken", "value": true}, {"op": "replace", "path": "<pod spec path>/automountServiceAccountToken", "value": false}]'
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://kubernetes.io/docs/tasks/configure-pod-container/configure-service-account/#opt-out-of-api-credential-automounting",
        "https://kubernetes.io/docs/reference/kubernetes-api/authentication-resources/service-account-v1/",
        "https://github.com/NVIDIA/dcgm-exporter/blob/main/deployment/examples/dcgm-exporter.yaml",
        "https://github.com/kubeflow/notebooks/blob/notebooks-v1/components/notebook-controller/controllers/notebook_controller.go",
        "https://github.com/NVIDIA/k8s-nim-operator/blob/main/api/apps/v1alpha1/nimservice_types.go",
    ),
)
def gpu_pods_do_not_automount_api_tokens(snapshot: Snapshot) -> Iterator[Result]:
    for template in pod_templates(snapshot):
        if (
            is_stack_pod_in_system_namespace(template)
            or _uses_api(template)
            or _operator_account(template)
        ):
            continue
        serving = KSERVE_ISVC_LABEL in template.labels or any(
            classify(c) for c in template.containers()
        )
        if not serving and not template.requests_gpu:
            continue
        result = _evaluate(snapshot, template)
        if result is not None:
            yield result


def _uses_api(template: PodTemplate) -> bool:
    labels = template.labels
    if template.owner.ref.kind_name in _API_USER_KINDS:
        return True
    if any(key in labels for key in _API_USER_LABELS):
        return True
    if any(key.startswith("serving.knative.dev/") for key in labels):
        return True
    if template.replica_type.lower() == "launcher":
        return True
    return any(labels.get(k, "").lower() == v for k, v in _API_USER_VALUES.items())


def _operator_account(template: PodTemplate) -> bool:
    if template.owner.ref.kind_name in _OPERATOR_ACCOUNT_KINDS:
        return True
    labels = template.labels
    return any(labels.get(k) == v for k, v in _OPERATOR_ACCOUNT_LABELS.items())


def _evaluate(snapshot: Snapshot, template: PodTemplate) -> Result | None:
    """The verdict, or None when the input cannot tell: the pod leaves it to a ServiceAccount
    that is not in the input."""
    namespace = template.owner.ref.namespace
    name = str(template.spec.get("serviceAccountName") or "default")
    account = snapshot.get(_SERVICE_ACCOUNT, namespace, name)
    decided = _effective_automount(template.spec, account)
    if decided is None:
        return None
    mounted, source = decided
    path = f"{template.path}.automountServiceAccountToken"
    if not mounted:
        return passed(template, f"does not mount the token of ServiceAccount {name} ({source})")
    risky = _risky_grants(snapshot, namespace, name)
    message = f"mounts the API token of ServiceAccount {name} ({source})"
    if risky:
        message += f"; it is bound to {', '.join(risky)}"
    return failed(
        template,
        message,
        path=path,
        severity=Severity.MEDIUM if risky else None,
        fix={"service_account": name, **_fix(snapshot, template, name, account)},
    )


def _fix(
    snapshot: Snapshot, template: PodTemplate, name: str, account: Resource | None
) -> dict[str, str]:
    """Where the opt-out goes. The pod's automountServiceAccountToken wins over the
    ServiceAccount's (https://kubernetes.io/docs/tasks/configure-pod-container/configure-
    service-account/#opt-out-of-api-credential-automounting: "If both the ServiceAccount and
    the Pod's .spec specify a value for automountServiceAccountToken, the Pod spec takes
    precedence"): a pod that sets it true is fixed in its own template. One that leaves it
    to the account is fixed in the ServiceAccount, unless a pod of the input that uses the
    API by design runs as the same account (it would lose its token): then in the template
    too. A pod-template field the object does not hold itself (inherited from a runtime, or
    built by an operator) is named, not patched."""
    field = "automountServiceAccountToken"
    sets = template.spec.get(field) is True
    shared = _api_users_of(snapshot, template, name)
    if not sets and not shared and account is not None:
        manifest = (
            f"apiVersion: v1\nkind: {_SERVICE_ACCOUNT}\nmetadata:\n  name: {name}\n"
            f"  namespace: {template.owner.ref.namespace}\n{field}: false"
        )
        where = "the pod leaves the token to the ServiceAccount, which opts out"
        return {"where": where, "change": manifest}
    where = (
        "the pod's own automountServiceAccountToken (true) wins over the ServiceAccount's"
        if sets
        else f"{', '.join(shared)} uses the API as the same ServiceAccount"
    ) + ": the pod template opts out"
    pointer = "/" + template.path.replace("[", ".").replace("]", "").replace(".", "/")
    pointer += f"/{field}"
    if _literal(template, field) is not sets:
        return {"where": where, "change": f"# set {field}: false in the pod spec at {pointer}"}
    ref = template.owner.ref
    if "." not in ref.kind:  # a built-in kind: a strategic merge patch of the object
        keys = template.path.split(".")
        lines = [f"{'  ' * depth}{key}:" for depth, key in enumerate(keys)]
        return {"where": where, "change": "\n".join([*lines, f"{'  ' * len(keys)}{field}: false"])}
    guard = {"op": "test", "path": pointer, "value": True}
    operations = [guard, {"op": "replace", "path": pointer, "value": False}] if sets else []
    if not sets:
        operations = [{"op": "add", "path": pointer, "value": False}]
    command = (
        f"kubectl patch {ref.kind.lower()} {ref.name}"
        + (f" -n {ref.namespace}" if ref.namespace else "")
        + f" --type=json -p '{json.dumps(operations)}'"
    )
    return {"where": where, "change": command}


def _literal(template: PodTemplate, field: str) -> bool | None:
    """Whether the object holds the pod spec at the template's path itself, with `field`
    true (True), without it (False); None when the path is not the object's own."""
    node: Any = template.owner.raw
    for part in template.path.replace("]", "").replace("[", ".").split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    if not isinstance(node, Mapping):
        return None
    return node.get(field) is True if field in node else False


def _api_users_of(snapshot: Snapshot, template: PodTemplate, name: str) -> list[str]:
    """The pod templates of the input, other than `template`, that use the API by design and
    run as ServiceAccount `name` of its namespace without a field of their own."""
    namespace = template.owner.ref.namespace
    return sorted(
        {
            str(other.owner.ref)
            for other in pod_templates(snapshot)
            if other.owner.ref.namespace == namespace
            and str(other.spec.get("serviceAccountName") or "default") == name
            and "automountServiceAccountToken" not in other.spec
            and (_uses_api(other) or _operator_account(other))
            and (other.owner.ref, other.path) != (template.owner.ref, template.path)
        }
    )


def _effective_automount(
    spec: Mapping[str, Any], account: Resource | None
) -> tuple[bool, str] | None:
    if isinstance(spec.get("automountServiceAccountToken"), bool):
        value = bool(spec["automountServiceAccountToken"])
        return value, f"pod sets automountServiceAccountToken: {str(value).lower()}"
    if account is None:
        return None
    if isinstance(account.raw.get("automountServiceAccountToken"), bool):
        value = bool(account.raw["automountServiceAccountToken"])
        return value, f"ServiceAccount sets automountServiceAccountToken: {str(value).lower()}"
    return True, "neither the pod nor the ServiceAccount opts out"


def _risky_grants(snapshot: Snapshot, namespace: str, account: str) -> list[str]:
    found: list[str] = []
    for binding in snapshot.of("RoleBinding", "ClusterRoleBinding"):
        if binding.ref.kind == "RoleBinding" and binding.ref.namespace != namespace:
            continue
        if not any(
            _is_subject(s, namespace, account) for s in as_list(binding.raw.get("subjects"))
        ):
            continue
        role_ref = as_mapping(binding.raw.get("roleRef"))
        kind, role_name = str(role_ref.get("kind", "")), str(role_ref.get("name", ""))
        role = snapshot.get(kind, namespace if kind == "Role" else "", role_name)
        if role is not None and any(_risky(as_mapping(r)) for r in as_list(role.raw.get("rules"))):
            found.append(f"{kind} {role_name} (secrets, pods/exec or wildcards)")
    return sorted(set(found))


def _is_subject(subject: object, namespace: str, account: str) -> bool:
    s = as_mapping(subject)
    return (
        s.get("kind") == "ServiceAccount"
        and s.get("name") == account
        and (s.get("namespace") or namespace) == namespace
    )


def _risky(rule: Mapping[str, Any]) -> bool:
    resources = {str(r) for r in as_list(rule.get("resources"))}
    verbs = {str(v) for v in as_list(rule.get("verbs"))}
    if "*" in resources or ("*" in verbs and resources):
        return True
    if "secrets" in resources and verbs & _RISKY_VERBS:
        return True
    return "pods/exec" in resources and bool(verbs & {"create", "get", "*"})
