import re
from collections.abc import Iterator, Mapping

from gpu_audit.api import (
    Category,
    FixKind,
    Resource,
    Result,
    Severity,
    Snapshot,
    active_cluster_policy,
    as_mapping,
    check,
    failed,
    gpu_nodes,
    map_selector_matches,
    passed,
    str_map,
)

NVIDIA_DRIVER = "NVIDIADriver.nvidia.com"
GPU_PRESENT = "nvidia.com/gpu.present"
PRODUCT = "nvidia.com/gpu.product"
_CONFLICT = re.compile(r"conflicts with NVIDIADriver (\S+):")


def _is_default(driver: Resource) -> bool:
    return driver.spec.get("default") is True  # a missing field is false (pre-v26 objects)


def _selector(driver: Resource) -> dict[str, str]:
    """Only a nil nodeSelector becomes gpu.present=true; an explicit {} matches every node."""
    raw = driver.spec.get("nodeSelector")
    return {GPU_PRESENT: "true"} if raw is None else str_map(raw)


def _can_share_a_gpu_node(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """The operator's own test: some GPU node could carry both sets of equality labels."""
    if any(s.get(GPU_PRESENT, "true") != "true" for s in (a, b)):
        return False
    return all(b.get(key, value) == value for key, value in a.items())


def _created(driver: Resource) -> tuple[str, str]:
    return (str(driver.metadata.get("creationTimestamp", "")), driver.ref.name)


def _patch(name: str, body: str) -> str:
    return f"kubectl patch nvidiadrivers.nvidia.com/{name} --type merge -p '{body}'"


@check(
    id="GPU-STACK-009",
    title="NVIDIADriver resources are reconciled, with one default and disjoint selectors",
    category=Category.STACK,
    severity=Severity.HIGH,
    requires=(NVIDIA_DRIVER,),
    rationale="""
        NVIDIADriver resources only take effect when the ClusterPolicy sets
        spec.driver.useNvidiaDriverCRD: true; otherwise they sit in state disabled and the
        driver the admin configured is never installed. With the flag on and no NVIDIADriver,
        no driver is installed at all. Two non-default drivers that select the same GPU node
        both go notReady (ConflictingNodeSelector), and only one resource may be the default
        fallback. Precompiled driver containers do not support GPUDirect Storage.
    """,
    detection="""
        Reads NVIDIADriver resources, the active ClusterPolicy and GPU nodes when present.
        ClusterPolicy: fails when NVIDIADrivers exist but useNvidiaDriverCRD is not true, or
        when it is true and the (listed) NVIDIADriver type is empty. Drivers: every default
        after the oldest fails, as does a default with a non-empty nodeSelector (rejected at
        admission, so an offline finding). Non-default pairs fail when a GPU node in the input
        matches both selectors (a nil selector means gpu.present=true, {} means every node),
        and at medium when their selectors could still select the same GPU node (newer
        operators reject that at admission); the newer object of a pair is the one reported.
        usePrecompiled with gds.enabled fails at medium. Not flagged: one default plus
        selector-scoped drivers (the scoped one wins on its nodes), GDRCopy with precompiled
        drivers (not documented as unsupported), and nodeAffinity (not part of the
        operator's conflict test).
    """,
    severity_evidence="""
        High when the input shows the failure: NVIDIADrivers ignored or missing for the
        ClusterPolicy's setting, a second default, a default with a selector, or two drivers
        selecting a GPU node in the input. Medium when selectors could only overlap on a node
        not in the input, and for precompiled drivers with GDS.
    """,
    remediation="""
        # $subject: $summary
        $command
    """,
    fix_kind=FixKind.COMMAND,
    remediation_generic="""
        # NVIDIADriver objects that the ClusterPolicy ignores (state disabled):
        kubectl patch clusterpolicies.nvidia.com/<cluster-policy> --type merge -p '{"spec":{"driver":{"useNvidiaDriverCRD":true}}}'
        # useNvidiaDriverCRD without any NVIDIADriver: create the default one
        helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator --reuse-values --set driver.nvidiaDriverCRD.deployDefaultCR=true
        # a second default driver: unset it, then give it a nodeSelector disjoint from the others
        kubectl patch nvidiadrivers.nvidia.com/<name> --type merge -p '{"spec":{"default":false}}'
        # the default driver with a nodeSelector, which the API rejects:
        kubectl patch nvidiadrivers.nvidia.com/<name> --type merge -p '{"spec":{"nodeSelector":null}}'
        # two drivers that select the same GPU node: split them by GPU product (its selector plus the product)
        kubectl patch nvidiadrivers.nvidia.com/<name> --type merge -p '{"spec":{"nodeSelector":{"nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"<gpu-product>"}}}'
        kubectl patch nvidiadrivers.nvidia.com/<other> --type merge -p '{"spec":{"default":true,"nodeSelector":null}}'   # when the other selects every GPU node: the catch-all becomes the default
        # precompiled drivers with GPUDirect Storage, which they do not support:
        kubectl patch nvidiadrivers.nvidia.com/<name> --type merge -p '{"spec":{"gds":{"enabled":false}}}'   # or recreate it with usePrecompiled: false (the field is immutable)
    """,
    references=(
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-driver-configuration.html",
        "https://github.com/NVIDIA/gpu-operator/blob/main/internal/validator/nvidiadriver_node_selector_conflicts.go",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/precompiled-drivers.html",
    ),
)
def nvidia_drivers_reconciled_without_conflicts(snapshot: Snapshot) -> Iterator[Result]:
    drivers = sorted(snapshot.of(NVIDIA_DRIVER), key=_created)
    policy = active_cluster_policy(snapshot)
    if policy is not None:
        yield _policy_result(policy, drivers)
    defaults = [d for d in drivers if _is_default(d)]
    scoped = [d for d in drivers if not _is_default(d)]
    nodes = gpu_nodes(snapshot)
    for driver in drivers:
        problems = list(_default_problems(driver, defaults))
        problems.extend(_overlap_problems(driver, scoped, nodes))
        problems.extend(_precompiled_problems(driver))
        if problems:
            severity = max((p[0] for p in problems), key=lambda s: s.rank)
            message, command = problems[0][1], problems[0][2]
            yield failed(
                driver,
                "; ".join(p[1] for p in problems),
                path="spec",
                severity=severity,
                fix={
                    "subject": f"NVIDIADriver {driver.ref.name}",
                    "summary": message,
                    "command": command,
                },
            )
        elif driver.ref.name not in _older_in_conflict(scoped, nodes):
            yield passed(driver, _scope(driver))


Problem = tuple[Severity, str, str]  # severity, message, fix command


def _older_in_conflict(scoped: list[Resource], nodes: tuple[Resource, ...]) -> set[str]:
    """Drivers whose conflict is reported on the newer object of the pair: not a PASS."""
    return {
        match.group(1)
        for driver in scoped
        for _, message, _ in _overlap_problems(driver, scoped, nodes)
        if (match := _CONFLICT.match(message))
    }


def _scope(driver: Resource) -> str:
    if _is_default(driver):
        return "is the single default driver"
    selector = ", ".join(f"{k}={v}" for k, v in sorted(_selector(driver).items()))
    return f"selects GPU nodes by {selector or 'nothing (all nodes)'} without overlap"


def _policy_result(policy: Resource, drivers: list[Resource]) -> Result:
    driver_spec = as_mapping(policy.spec.get("driver"))
    enabled = driver_spec.get("useNvidiaDriverCRD") is True
    subject = f"ClusterPolicy {policy.ref.name}"
    if drivers and not enabled:
        body = '{"spec":{"driver":{"useNvidiaDriverCRD":true}}}'
        summary = f"{len(drivers)} NVIDIADriver resource(s) are ignored (state disabled)"
        return failed(
            policy,
            f"does not set spec.driver.useNvidiaDriverCRD, so {summary}",
            path="spec.driver.useNvidiaDriverCRD",
            fix={
                "subject": subject,
                "summary": summary,
                "command": f"kubectl patch clusterpolicies.nvidia.com/{policy.ref.name} "
                f"--type merge -p '{body}'",
            },
        )
    if enabled and not drivers:
        return failed(
            policy,
            "delegates the driver to NVIDIADriver resources, but none exists: "
            "no driver is installed",
            path="spec.driver.useNvidiaDriverCRD",
            fix={
                "subject": subject,
                "summary": "create a default NVIDIADriver (helm: driver.nvidiaDriverCRD."
                "deployDefaultCR=true)",
                "command": "helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator "
                "--reuse-values --set driver.nvidiaDriverCRD.deployDefaultCR=true",
            },
        )
    state = "delegates to" if enabled else "manages the driver itself, with"
    return passed(policy, f"{state} {len(drivers)} NVIDIADriver resource(s)")


def _default_problems(driver: Resource, defaults: list[Resource]) -> Iterator[Problem]:
    if not _is_default(driver):
        return
    if defaults and driver is not defaults[0]:
        yield (
            Severity.HIGH,
            f"is a second default driver (NVIDIADriver {defaults[0].ref.name} is the first): "
            "multiple defaults stop reconciliation",
            _patch(driver.ref.name, '{"spec":{"default":false}}')
            + "   # then give it a nodeSelector disjoint from the others",
        )
    if str_map(driver.spec.get("nodeSelector")):
        yield (
            Severity.HIGH,
            "is the default driver but sets a nodeSelector, which the API rejects",
            _patch(driver.ref.name, '{"spec":{"nodeSelector":null}}'),
        )


def _overlap_problems(
    driver: Resource, scoped: list[Resource], nodes: tuple[Resource, ...]
) -> Iterator[Problem]:
    """Report each conflicting pair once, on the newer object (the older one was there first)."""
    if _is_default(driver):
        return
    mine = _selector(driver)
    for other in scoped:
        if _created(other) >= _created(driver):
            break
        theirs = _selector(other)
        shared = [
            n.ref.name
            for n in nodes
            if map_selector_matches(mine, n.labels) and map_selector_matches(theirs, n.labels)
        ]
        if shared:
            severity, where = Severity.HIGH, f"both select GPU node(s) {', '.join(shared)}"
        elif _can_share_a_gpu_node(mine, theirs):
            severity, where = Severity.MEDIUM, "their selectors could select the same GPU node"
        else:
            continue
        command = _patch(driver.ref.name, _disjoint_selector(mine, theirs, nodes, shared))
        if set(theirs) <= {GPU_PRESENT}:
            # The other one claims every GPU node: it is really the fallback.
            body = '{"spec":{"default":true,"nodeSelector":null}}'
            command += f"\n{_patch(other.ref.name, body)}   # the catch-all becomes the default"
        yield (
            severity,
            f"conflicts with NVIDIADriver {other.ref.name}: {where} (ConflictingNodeSelector)",
            command,
        )


def _disjoint_selector(
    mine: Mapping[str, str],
    theirs: Mapping[str, str],
    nodes: tuple[Resource, ...],
    shared: list[str],
) -> str:
    """A selector keyed on the GPU product, the usual way to split drivers."""
    products = sorted({n.labels.get(PRODUCT, "") for n in nodes if n.ref.name in shared} - {""})
    product = next((p for p in products if theirs.get(PRODUCT) != p), "REPLACE-WITH-GPU-PRODUCT")
    selector = {**mine, PRODUCT: product}
    pairs = ",".join(f'"{k}":"{v}"' for k, v in sorted(selector.items()))
    return f'{{"spec":{{"nodeSelector":{{{pairs}}}}}}}'


def _precompiled_problems(driver: Resource) -> Iterator[Problem]:
    gds = as_mapping(driver.spec.get("gds")).get("enabled") is True
    if driver.spec.get("usePrecompiled") is True and gds:
        yield (
            Severity.MEDIUM,
            "uses precompiled drivers with GPUDirect Storage, which they do not support",
            _patch(driver.ref.name, '{"spec":{"gds":{"enabled":false}}}')
            + "   # or recreate it with usePrecompiled: false (the field is immutable)",
        )
