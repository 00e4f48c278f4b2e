from __future__ import annotations

import ipaddress
import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_audit.api import (
    WORKLOAD_TYPES,
    Category,
    FixKind,
    ObjRef,
    PodTemplate,
    RelatedRole,
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
    relate,
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
        169.254.20.10 when NodeLocal DNSCache runs (any peer of the rule may give it). The
        finding is on the NetworkPolicy to change: the one selecting the cut-off workloads
        (when several do, the broadest: an empty podSelector first, then the one selecting the
        most GPU workloads), with those workloads related as selected-by and the other
        policies selecting them as causes; one policy cutting off many workloads is one
        finding. Pods without egress policies are not isolated and not evaluated.
        CNI-specific policies (Cilium, Calico) are not read.
    """,
    severity_evidence="""
        High when the policies allow DNS on neither protocol: every lookup of the selected GPU
        workloads fails. Medium when only TCP/53 is allowed (resolvers ask over UDP first) or
        NodeLocal DNSCache runs in the cluster and its 169.254.20.10 address is not allowed.
    """,
    remediation="""
        # $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # add an egress rule for DNS (UDP and TCP 53) to the NetworkPolicy that cuts the GPU pods off
        # (NetworkPolicies add up: a separate policy with the same podSelector works too)
        kubectl -n <namespace> patch networkpolicy <policy> --type=json -p '[{"op": "add", "path": "/spec/egress/-", "value": {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}, {"ipBlock": {"cidr": "169.254.20.10/32"}}], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}}]'
    """,
    references=(
        "https://kubernetes.io/docs/concepts/services-networking/network-policies/",
        "https://kubernetes.io/docs/tasks/administer-cluster/nodelocaldns/",
    ),
)
def egress_isolated_gpu_pods_reach_dns(snapshot: Snapshot) -> Iterator[Result]:
    dns = _find_dns(snapshot)
    policies = [p for p in snapshot.of("NetworkPolicy") if "Egress" in policy_types(p)]
    verdicts: list[_Verdict] = []
    for template in gpu_pod_templates(snapshot):
        selecting = [p for p in policies if policy_selects(p, template)]
        if selecting:  # else not egress-isolated
            verdicts.append(_verdict(template, selecting, dns))
    selected_gpu = Counter(p.ref for v in verdicts for p in v.policies)
    blamed: dict[ObjRef, list[_Verdict]] = defaultdict(list)
    for verdict in verdicts:
        if verdict.problem:
            blamed[_object_to_change(verdict.policies, selected_gpu).ref].append(verdict)
    by_ref = {p.ref: p for p in policies}
    for ref, cut_off in sorted(blamed.items(), key=lambda item: item[0].sort_key):
        yield _finding(by_ref[ref], cut_off, dns)
    broken = {p.ref for v in verdicts if v.problem for p in v.policies}
    for ref in sorted(selected_gpu.keys() - broken, key=lambda r: r.sort_key):
        count = selected_gpu[ref]
        yield passed(
            by_ref[ref],
            f"isolates egress of {count} GPU workload{'s' if count != 1 else ''}, which reach "
            "DNS on UDP and TCP",
            path="spec.egress",
        )


@dataclass(frozen=True, slots=True)
class _Verdict:
    """How DNS fares for one GPU pod template under the egress policies selecting it."""

    template: PodTemplate
    policies: tuple[Resource, ...]
    problem: str  # "" when DNS is reachable
    severity: Severity = Severity.HIGH


def _verdict(template: PodTemplate, selecting: list[Resource], dns: _Dns) -> _Verdict:
    allowed = {"UDP": False, "TCP": False}
    via_nodelocal = False
    for policy in selecting:
        for rule in map(as_mapping, as_list(policy.spec.get("egress"))):
            for proto in allowed:
                if not _ports_allow(rule.get("ports"), proto):
                    continue
                reach = _peers_reach_dns(policy, rule.get("to"), dns)
                allowed[proto] = allowed[proto] or bool(reach)
                via_nodelocal = via_nodelocal or bool(reach & {"nodelocal", "all"})
    policies = tuple(selecting)
    if not any(allowed.values()):
        problem = "allows no DNS on port 53 (neither UDP nor TCP)"
        if _local_dns_peer(selecting, dns):
            problem += (
                "; a podSelector-only peer selects kube-dns pods in the policy's own namespace, "
                "not in kube-system (put a namespaceSelector in the same peer)"
            )
        return _Verdict(template, policies, problem)
    if not allowed["UDP"]:
        problem = "allows DNS on TCP/53 only (a port's protocol defaults to TCP); add UDP/53"
        return _Verdict(template, policies, problem, Severity.MEDIUM)
    if dns.nodelocal and not via_nodelocal:
        problem = (
            "does not allow NodeLocal DNSCache, which answers on 169.254.20.10 (host network, "
            "so no pod selector matches it): add an ipBlock for it"
        )
        return _Verdict(template, policies, problem, Severity.MEDIUM)
    return _Verdict(template, policies, "")


def _object_to_change(policies: tuple[Resource, ...], selected_gpu: Counter[ObjRef]) -> Resource:
    """Of the policies cutting a workload off, the one whose change fixes the most: a
    namespace-wide one (empty podSelector), else the one selecting the most GPU workloads."""
    return min(
        policies,
        key=lambda p: (
            bool(as_mapping(p.spec.get("podSelector"))),
            -selected_gpu[p.ref],
            p.ref.name,
        ),
    )


def _finding(policy: Resource, cut_off: list[_Verdict], dns: _Dns) -> Result:
    worst = max(cut_off, key=lambda v: v.severity.rank)
    problems = list(dict.fromkeys(v.problem for v in cut_off))
    workloads = list(dict.fromkeys(str(v.template.owner.ref) for v in cut_off))
    others = sorted(
        {p.ref for v in cut_off for p in v.policies if p.ref != policy.ref},
        key=lambda r: r.sort_key,
    )
    together = f" (some also selected by {', '.join(r.name for r in others)})" if others else ""
    shown = ", ".join(workloads[:5]) + (
        f" and {len(workloads) - 5} more" if len(workloads) > 5 else ""
    )
    count = len(workloads)
    message = (
        f"isolates egress of {count} GPU workload{'s' if count != 1 else ''} ({shown})"
        f"{together} and {'; '.join(problems)}"
    )
    return failed(
        policy,
        message,
        path="spec.egress",
        severity=worst.severity,
        fix=_fix(policy, dns, f"{policy.ref}: {'; '.join(problems)}"),
        related=[
            *(relate(v.template, RelatedRole.SELECTED_BY) for v in cut_off),
            *(relate(r, RelatedRole.CAUSE) for r in others),
        ],
    )


def _fix(policy: Resource, dns: _Dns, summary: str) -> dict[str, str]:
    app = dns.pod_labels.get("k8s-app")
    pod_labels = {"k8s-app": app} if app else dict(DNS_LABELS)
    peers: list[dict[str, Any]] = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": DNS_NAMESPACE}},
            "podSelector": {"matchLabels": pod_labels},
        }
    ]
    if dns.nodelocal:
        peers.append({"ipBlock": {"cidr": f"{NODELOCAL_IP}/32"}})
    rule: dict[str, Any] = {
        "to": peers,
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    ops: list[dict[str, Any]]
    if as_list(policy.spec.get("egress")):
        ops = [{"op": "add", "path": "/spec/egress/-", "value": rule}]
    else:
        ops = [{"op": "add", "path": "/spec/egress", "value": [rule]}]
    patch = json.dumps(ops).replace("'", "'\\''")
    return {
        "summary": summary.replace("\n", " "),
        "command": f"kubectl -n {policy.ref.namespace} patch networkpolicy {policy.ref.name} "
        f"--type=json -p '{patch}'",
    }


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


def _peers_reach_dns(policy: Resource, to: object, dns: _Dns) -> set[str]:
    """How the peers of one rule reach DNS: "all" (no `to`), "pods" (the DNS pods),
    "nodelocal" (an ipBlock holding NodeLocal DNSCache's address); empty when they do not.
    Every peer counts: a rule may name the DNS pods and NodeLocal's address side by side."""
    peers = [as_mapping(p) for p in as_list(to)]
    if not peers:
        return {"all"}
    ways: set[str] = set()
    for peer in peers:
        block = as_mapping(peer.get("ipBlock"))
        if block:
            if dns.nodelocal and _cidr_contains(block, NODELOCAL_IP):
                ways.add("nodelocal")
            continue
        if "namespaceSelector" in peer:
            if not label_selector_matches(peer.get("namespaceSelector"), dns.namespace_labels):
                continue
        elif policy.ref.namespace != DNS_NAMESPACE:
            continue  # a podSelector-only peer selects pods in the policy's own namespace
        if label_selector_matches(peer.get("podSelector"), dns.pod_labels):
            ways.add("pods")
    return ways


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
