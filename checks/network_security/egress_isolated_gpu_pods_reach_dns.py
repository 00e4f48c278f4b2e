from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    as_list,
    as_mapping,
    check,
    failed,
    gpu_pod_templates,
    label_selector_matches,
    namespace_labels,
    passed,
    pod_templates,
)

from ._common import (
    policy_selects,
    policy_types,
)

DNS_NAMESPACE = "kube-system"
DNS_LABELS = {"k8s-app": "kube-dns"}  # CoreDNS and kube-dns on kubeadm, EKS, GKE and AKS
NODELOCAL_IP = ipaddress.ip_address("169.254.20.10")
_DNS_PORT_NAMES = {"dns": "UDP", "dns-tcp": "TCP"}


@dataclass(frozen=True, slots=True)
class _Dns:
    """Where cluster DNS answers: the DNS pods' labels, their namespace's labels, and whether
    NodeLocal DNSCache intercepts queries on its link-local address."""

    pod_labels: Mapping[str, str]
    namespace_labels: Mapping[str, str]
    nodelocal: bool


@check(
    id="GPU-NET-001",
    title="Egress-isolated GPU pods can reach cluster DNS on UDP and TCP port 53",
    category=Category.NETWORK_SECURITY,
    severity=Severity.HIGH,
    requires=("NetworkPolicy", WORKLOAD_TYPES),
    rationale="""
        A default-deny egress policy without a DNS rule breaks every name lookup: model
        downloads from the Hugging Face Hub or S3, torchrun/NCCL rendezvous by Service name,
        metrics endpoints; pods hang or crash-loop at start. The usual half-fix `port: 53`
        allows only TCP (the protocol defaults to TCP) while resolvers query over UDP first,
        and a podSelector-only peer for kube-dns selects pods in the policy's own namespace,
        never kube-system.
    """,
    detection="""
        GPU pod templates selected by at least one NetworkPolicy whose effective policyTypes
        include Egress (policyTypes, else a non-empty egress list). Port 53 is allowed for a
        protocol by a rule whose ports are empty or include 53 (or the named ports dns/dns-tcp)
        for it, TCP by default, towards all destinations (no `to`), a namespaceSelector
        (+ podSelector) matching kube-system and the DNS pods (their labels when the CoreDNS
        workload is in the input, else k8s-app=kube-dns), or an ipBlock containing
        169.254.20.10 when NodeLocal DNSCache runs. Neither protocol: high; TCP only: medium;
        NodeLocal DNSCache without an ipBlock for it: medium. Pods without egress policies are
        not isolated and not evaluated. CNI-specific policies (Cilium, Calico) are not read.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        apiVersion: networking.k8s.io/v1
        kind: NetworkPolicy
        metadata:
          name: allow-dns
          namespace: $namespace
        spec:
          podSelector: {}
          policyTypes: [Egress]
          egress:
            - to:
                - namespaceSelector:
                    matchLabels: {kubernetes.io/metadata.name: kube-system}
                  podSelector:
                    matchLabels: {k8s-app: kube-dns}
              ports:
                - {protocol: UDP, port: 53}
                - {protocol: TCP, port: 53}
            - to:
                - ipBlock: {cidr: 169.254.20.10/32}   # NodeLocal DNSCache, if used
              ports:
                - {protocol: UDP, port: 53}
                - {protocol: TCP, port: 53}
    """,
    fix_kind=FixKind.MANIFEST,
    references=(
        "https://kubernetes.io/docs/concepts/services-networking/network-policies/",
        "https://kubernetes.io/docs/tasks/administer-cluster/nodelocaldns/",
    ),
)
def egress_isolated_gpu_pods_reach_dns(snapshot: Snapshot) -> Iterator[Result]:
    dns = _find_dns(snapshot)
    policies = [p for p in snapshot.of("NetworkPolicy") if "Egress" in policy_types(p)]
    for template in gpu_pod_templates(snapshot):
        selecting = [p for p in policies if policy_selects(p, template)]
        if not selecting:
            continue  # not egress-isolated
        names = ", ".join(p.ref.name for p in selecting)
        allowed = {"UDP": False, "TCP": False}
        via_nodelocal = False
        for policy in selecting:
            for rule in map(as_mapping, as_list(policy.spec.get("egress"))):
                for proto in allowed:
                    if not _ports_allow(rule.get("ports"), proto):
                        continue
                    reach = _peers_reach_dns(policy, rule.get("to"), dns)
                    allowed[proto] = allowed[proto] or bool(reach)
                    via_nodelocal = via_nodelocal or reach in ("nodelocal", "all")
        problem = ""
        severity: Severity | None = None
        if not any(allowed.values()):
            problem = f"egress-isolated by {names} with no rule allowing DNS on port 53"
            if _local_dns_peer(selecting, dns):
                problem += (
                    " (a podSelector-only peer selects kube-dns pods in the policy's own "
                    "namespace, not in kube-system; add a namespaceSelector to the same peer)"
                )
        elif not allowed["UDP"]:
            problem = f"{names} allow DNS on TCP/53 only (protocol defaults to TCP); add UDP/53"
            severity = Severity.MEDIUM
        elif dns.nodelocal and not via_nodelocal:
            problem = (
                f"NodeLocal DNSCache answers on 169.254.20.10 (host network), which policies "
                f"{names} do not allow; pod selectors cannot match it"
            )
            severity = Severity.MEDIUM
        if problem:
            yield failed(
                template, problem, path=template.path, severity=severity, fix={"problem": problem}
            )
        else:
            yield passed(template, f"egress-isolated by {names}, with DNS allowed on UDP and TCP")


def _find_dns(snapshot: Snapshot) -> _Dns:
    pod_labels: Mapping[str, str] = DNS_LABELS
    for template in pod_templates(snapshot):
        if template.owner.ref.namespace == DNS_NAMESPACE and template.labels.get("k8s-app") in (
            "kube-dns",
            "coredns",
        ):
            pod_labels = template.labels
            break
    nodelocal = any(d.ref.name == "node-local-dns" for d in snapshot.of("DaemonSet"))
    return _Dns(pod_labels, namespace_labels(snapshot, DNS_NAMESPACE), nodelocal)


def _local_dns_peer(policies: list[Resource], dns: _Dns) -> bool:
    return any(
        "namespaceSelector" not in peer
        and "podSelector" in peer
        and label_selector_matches(peer.get("podSelector"), dns.pod_labels)
        for policy in policies
        if policy.ref.namespace != DNS_NAMESPACE
        for rule in map(as_mapping, as_list(policy.spec.get("egress")))
        for peer in map(as_mapping, as_list(rule.get("to")))
    )


def _ports_allow(ports: object, proto: str) -> bool:
    entries = [as_mapping(p) for p in as_list(ports)]
    if not entries:
        return True  # no ports: every port
    for entry in entries:
        if str(entry.get("protocol") or "TCP").upper() != proto:
            continue
        port = entry.get("port")
        if port is None:
            return True
        if isinstance(port, str) and port.isascii() and port.isdigit():
            number = int(port)
        elif isinstance(port, int) and not isinstance(port, bool):
            number = port
        else:  # a named port, or a value the API server would refuse
            if _DNS_PORT_NAMES.get(str(port)) == proto:
                return True
            continue
        end = entry.get("endPort")
        if number == 53 or (isinstance(end, int) and number <= 53 <= end):
            return True
    return False


def _peers_reach_dns(policy: Resource, to: object, dns: _Dns) -> str:
    """ "all", "pods", "nodelocal" (how DNS is reached), or "" when it is not."""
    peers = [as_mapping(p) for p in as_list(to)]
    if not peers:
        return "all"
    for peer in peers:
        block = as_mapping(peer.get("ipBlock"))
        if block:
            if dns.nodelocal and _cidr_contains(block, NODELOCAL_IP):
                return "nodelocal"
            continue
        if "namespaceSelector" in peer:
            if not label_selector_matches(peer.get("namespaceSelector"), dns.namespace_labels):
                continue
        elif policy.ref.namespace != DNS_NAMESPACE:
            continue  # a podSelector-only peer selects pods in the policy's own namespace
        if label_selector_matches(peer.get("podSelector"), dns.pod_labels):
            return "pods"
    return ""


def _cidr_contains(
    block: Mapping[str, Any], address: ipaddress.IPv4Address | ipaddress.IPv6Address
) -> bool:
    try:
        network = ipaddress.ip_network(str(block.get("cidr", "")), strict=False)
        if address not in network:
            return False
        return not any(
            address in ipaddress.ip_network(str(e), strict=False)
            for e in as_list(block.get("except"))
        )
    except ValueError:
        return False
