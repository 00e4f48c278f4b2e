"""Shared by the network and security checks: NetworkPolicy types and selection. Namespace
labels and recognising the GPU/network stack's own pods come from `gpu_audit.api`."""

from __future__ import annotations

from gpu_audit.api import PodTemplate, Resource, as_list, label_selector_matches


def policy_types(policy: Resource) -> set[str]:
    """Effective policyTypes: as written, else Ingress plus Egress when spec.egress is a
    non-empty list (`egress: []` alone isolates nothing for egress)."""
    written = {str(t) for t in as_list(policy.spec.get("policyTypes"))}
    if written:
        return written
    return {"Ingress", "Egress"} if as_list(policy.spec.get("egress")) else {"Ingress"}


def policy_selects(policy: Resource, template: PodTemplate) -> bool:
    return policy.ref.namespace == template.owner.ref.namespace and label_selector_matches(
        policy.spec.get("podSelector"), template.labels
    )
