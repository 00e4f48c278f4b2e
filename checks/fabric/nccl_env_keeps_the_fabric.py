import itertools
import re
from collections import defaultdict
from collections.abc import Iterator

from gpu_audit.api import (
    FABRIC_JOB_TYPES,
    Category,
    FixKind,
    ObjRef,
    PodTemplate,
    Result,
    Severity,
    Snapshot,
    as_list,
    check,
    env_values,
    fabric_family,
    failed,
    multi_node_templates,
    passed,
    pod_fabric,
    templates_of,
)
from gpu_audit.checks.fabric._common import on_fabric

# mpirun -x NAME=VALUE exports a variable to every rank (Open MPI), as AWS's NCCL tests do.
_MPI_EXPORT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$")


@check(
    id="GPU-FAB-003",
    title="NCCL and libfabric settings of multi-node GPU jobs do not switch the fabric off",
    category=Category.FABRIC,
    severity=Severity.MEDIUM,
    requires=(FABRIC_JOB_TYPES, "Node"),
    rationale="""
        One environment variable left over from debugging sends a multi-node job over TCP
        sockets although its pods hold the fabric: NCCL_NET=Socket forces NCCL's socket
        transport, NCCL_IB_DISABLE=1 turns off its InfiniBand/RoCE verbs transport, and
        FI_PROVIDER naming another libfabric provider (sockets, tcp) keeps the AWS OFI NCCL
        plugin off EFA. NCCL's documentation lists these as debugging settings to remove.
    """,
    detection="""
        Multi-node GPU jobs (as GPU-FAB-001 finds them) with evidence of a fabric: a GPU pod
        template that requests vpc.amazonaws.com/efa, rdma/* or networking.gke.io.networks/*,
        or whose pods run (or can only be placed) on nodes that advertise one. Every pod
        template of the job is read (an MPIJob launcher's `mpirun -x NAME=VALUE` reaches every
        rank): literal env values and -x exports. Fails on NCCL_NET=Socket (any fabric),
        NCCL_IB_DISABLE=1 (RDMA fabrics) and FI_PROVIDER other than efa (EFA). Jobs without
        fabric evidence are not judged: there, sockets are all there is.
    """,
    severity_evidence="""
        Medium: the input shows the fabric is there (requested by the pods or advertised by
        every node they land on) and the setting makes NCCL use TCP sockets instead, a
        measurable slowdown of every collective. Without fabric evidence there is no result.
    """,
    remediation="""
        # $kind $namespace/$name: $problem
        # delete $setting from $where (NCCL picks the fabric by itself), then re-submit the job:
        kubectl edit $resource $name -n $namespace
    """,
    fix_kind=FixKind.PROCEDURE,
    remediation_generic="""
        # delete NCCL_NET=Socket, NCCL_IB_DISABLE=1 or FI_PROVIDER=<not efa> from the pod
        # template's env (or from the launcher's mpirun -x list); NCCL then uses the IB verbs
        # transport or the AWS OFI NCCL plugin over EFA on its own:
        kubectl edit <kind> <name> -n <namespace>
    """,
    references=(
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
        "https://github.com/aws/aws-ofi-nccl/blob/master/doc/efa-env-var.md",
        "https://github.com/aws-samples/aws-efa-eks/blob/28b5ebf9452017ff2828b114734b13292836ab1f/examples/simple/nccl-ena-tests.yaml",
        "https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html",
    ),
)
def nccl_env_keeps_the_fabric(snapshot: Snapshot) -> Iterator[Result]:
    families: dict[ObjRef, set[str]] = defaultdict(set)
    for target in on_fabric(snapshot):
        families[target.item.template.owner.ref].update(target.shape.families)
    for item in multi_node_templates(snapshot):
        families[item.template.owner.ref].update(
            fabric_family(r) for r in pod_fabric(item.template)
        )
    owners = {
        item.template.owner.ref: item.template.owner for item in multi_node_templates(snapshot)
    }
    for ref, found in sorted(families.items(), key=lambda kv: kv[0].sort_key):
        if not found:
            continue
        owner = owners[ref]
        bad = False
        for template in templates_of(owner, snapshot):
            for setting, where, why in _settings(template, frozenset(found)):
                bad = True
                yield failed(
                    template,
                    f"sets {setting} ({where}) although its GPU pods have the "
                    f"{'/'.join(sorted(found))} fabric: {why}",
                    fix={
                        "problem": f"{setting} switches the fabric off",
                        "setting": setting,
                        "where": where,
                        "resource": owner.ref.kind_name.lower(),
                    },
                )
        if not bad:
            gpu = next(t for t in templates_of(owner, snapshot) if t.requests_gpu)
            yield passed(gpu, f"leaves NCCL free to use the {'/'.join(sorted(found))} fabric")


def _settings(template: PodTemplate, families: frozenset[str]) -> Iterator[tuple[str, str, str]]:
    for name, (value, where) in sorted(_values(template).items()):
        if name == "NCCL_NET" and value.strip().lower() == "socket":
            yield f"{name}={value}", where, "NCCL_NET=Socket forces NCCL's TCP socket transport"
        elif name == "NCCL_IB_DISABLE" and value.strip() == "1" and "RDMA" in families:
            yield (
                f"{name}={value}",
                where,
                "NCCL_IB_DISABLE=1 turns off the IB/RoCE transport, NCCL falls back to sockets",
            )
        elif name == "FI_PROVIDER" and "EFA" in families and "efa" not in value.lower():
            yield (
                f"{name}={value}",
                where,
                f"libfabric uses the {value} provider instead of EFA",
            )


def _values(template: PodTemplate) -> dict[str, tuple[str, str]]:
    """name -> (value, where it is written) from env values and mpirun -x exports."""
    out = {
        name: (value, f"env of container {container}")
        for name, (value, container) in env_values(template).items()
    }
    for container in template.containers():
        words = [str(w) for w in as_list(container.raw.get("command"))]
        words += [str(w) for w in as_list(container.raw.get("args"))]
        for flag, word in itertools.pairwise(words):
            match = _MPI_EXPORT.match(word) if flag == "-x" else None
            if match:
                out.setdefault(
                    match.group(1),
                    (match.group(2), f"mpirun -x in container {container.name}"),
                )
    return out
