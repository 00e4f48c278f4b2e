"""Terminal rendering of the diagnostics section: the GPU inventory and the Pending explanations.

Reads only the JSON-shaped dicts of the report's `diagnostics` section (or of `gpu-audit
inventory --format json` / `why-pending --format json`, which have the same shape). Names,
labels and the scheduler's messages come from the cluster: each goes through
gpu_audit.reports.terminal before any layout is added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_audit.reports.base import humanise, quantity
from gpu_audit.reports.terminal import block, cell, table, wrap_lines

MAX_NODE_ROWS = 30
# NODES, READY, CORDONED and CAPACITY to HELD are numbers; the other columns stay as written.
_INVENTORY_NUMBERS = (2, 3, 4, 8, 9, 10, 11, 12)
_FIT_SIZES = ("1", "2", "4", "8")


def _fits(counts: Mapping[str, Any]) -> str:
    return "/".join(str(counts["fits"].get(size, 0)) for size in _FIT_SIZES)


def _mode(pool: Mapping[str, Any]) -> str:
    sharing = pool["sharing"]
    if sharing["mode"] in ("", "none"):
        return "none"
    replicas = f" x{sharing['replicas']}" if sharing["replicas"] else ""
    return cell(f"{sharing['mode']}{replicas}")


def _mig(pool: Mapping[str, Any]) -> str:
    mig = pool["mig"]
    profiles = ", ".join(f"{name} x{count}" for name, count in sorted(mig["profiles"].items()))
    return cell(f"{mig['strategy']}: {profiles}" if profiles else mig["strategy"])


def render_inventory(inventory: Mapping[str, Any], width: int | None = None) -> str:
    """One row per pool, GPU product and GPU resource, then the cluster totals; with `width`,
    laid out to that many columns (a record per row when the table is wider)."""
    headers = [
        "POOL",
        "PRODUCT",
        "NODES",
        "READY",
        "CORDONED",
        "MIG",
        "SHARING",
        "RESOURCE",
        "CAPACITY",
        "ALLOCATABLE",
        "REQUESTED",
        "IDLE",
        "HELD",
        "FIT 1/2/4/8",
    ]
    rows: list[list[Any]] = []
    for pool in inventory["pools"]:
        head = [
            cell(pool["pool"]),
            cell(pool["product"]),
            len(pool["nodes"]),
            pool["ready"],
            pool["cordoned"],
            _mig(pool),
            _mode(pool),
        ]
        if not pool["resources"]:
            rows.append([*head, "(none advertised)", 0, 0, 0, 0, 0, "0/0/0/0"])
        rows.extend([*head, *_counts_row(res)] for res in pool["resources"])
    rows.extend(
        ["(all pools)", "", "", "", "", "", "", *_counts_row(r)] for r in inventory["totals"]
    )
    lines = ["GPU inventory", ""]
    if rows:
        lines.append(table(rows, headers, numbers=_INVENTORY_NUMBERS, width=width))
    else:
        lines.append("No GPU nodes in the input.")
    lines += [
        "",
        "REQUESTED: by bound pods that have not finished. IDLE: allocatable minus requested. "
        "HELD: requested by running pods whose GPU containers have all exited. FIT: how many "
        "more pods of 1/2/4/8 units fit on ready, uncordoned nodes.",
    ]
    fabric = [_fabric_line(pool) for pool in inventory["pools"]]
    if any(pool.get("fabric") for pool in inventory["pools"]):
        lines += ["", "Fabric devices per node (EFA, RDMA, GKE networks):", *fabric]
    if inventory["finished_gpu_pods"]:
        lines.append(
            "Succeeded/Failed pods that requested GPUs (they hold none): "
            + cell(", ".join(inventory["finished_gpu_pods"]))
        )
    return _fit("\n".join(lines), width) + "\n"


def _fabric_line(pool: Mapping[str, Any]) -> str:
    devices = ", ".join(f"{count} {name}" for name, count in pool.get("fabric", {}).items())
    return f"  {cell(pool['pool'])} ({cell(pool['product'])}): " + cell(devices or "none")


def _fit(text: str, width: int | None) -> str:
    return text if width is None else wrap_lines(text, width)


def _counts_row(res: Mapping[str, Any]) -> list[Any]:
    return [
        cell(res["resource"]),
        res["capacity"],
        res["allocatable"],
        res["requested"],
        res["idle"],
        res["held_by_finished"],
        _fits(res),
    ]


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _message_line(message: Mapping[str, Any]) -> str:
    count = f" (x{message['count']})" if message["count"] > 1 else ""
    if message["agrees"] is None:
        verdict = "not in the default scheduler's format, not compared"
    elif message["agrees"]:
        verdict = "agrees with the evaluation above"
    else:
        verdict = "DISAGREES: " + cell("; ".join(message["differences"]))
    text = cell(humanise(message["message"]))
    return f"  {cell(message['source'])}{count}: {text}\n    -> {verdict}"


def _node_rows(nodes: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for node in nodes[:MAX_NODE_ROWS]:
        failed = [p for p in node["predicates"] if not p["passed"]]
        rows.append(
            [
                cell(node["node"]),
                "yes" if node["gpu_node"] else "no",
                "FITS" if node["fits"] else cell(", ".join(node["scheduler_reasons"])),
                cell(
                    "; ".join(
                        f"{p['predicate']}: {humanise(p['detail'])}" for p in failed if p["detail"]
                    )
                ),
            ]
        )
    return rows


def render_explanation(explanation: Mapping[str, Any], width: int | None = None) -> str:
    pod = explanation["pod"]
    origin = explanation["template"]
    title = (
        f"{origin['kind']} {origin['namespace']}/{origin['name']} ({origin['path']}), as a new pod"
        if origin
        else f"Pod {pod['namespace']}/{pod['name']} ({explanation['phase']})"
    )
    request = ", ".join(
        f"{name} {quantity(value, name)}" for name, value in explanation["request"].items()
    )
    lines = [
        cell(f"{title}, scheduler {explanation['scheduler']}"),
        f"  requests: {cell(request or 'nothing')}",
        f"  {cell(humanise(explanation['summary']))}",
    ]
    lines.extend(_message_line(m) for m in explanation["scheduler_messages"])
    for check in explanation["pod_checks"]:
        mark = "ok  " if check["passed"] else "FAIL"
        detail = cell(humanise(check["detail"]))
        lines.append(f"  [{mark}] {cell(check['predicate'])}: {detail}")
    rows = _node_rows(explanation["nodes"])
    if rows:
        nodes = table(
            rows,
            ["NODE", "GPU", "SCHEDULER SAYS", "WHY"],
            [None, None, 50, 70],
            width=None if width is None else width - 2,
        )
        lines += ["", _indent(nodes, "  ")]
        hidden = explanation.get("nodes_evaluated", len(explanation["nodes"])) - len(rows)
        if hidden > 0:
            where = (
                f"gpu-audit why-pending {cell(explanation['pod']['namespace'])}/"
                f"{cell(explanation['pod']['name'])} lists them"
                if "nodes_evaluated" in explanation
                else "see --format json"
            )
            lines.append(f"  ... and {hidden} more nodes ({where})")
    text = _fit("\n".join(lines), width)
    if explanation["fixes"]:  # YAML to copy: only its comments are wrapped
        fixes = "\n".join(_indent(block(fix)) for fix in explanation["fixes"])
        text += "\n\n  Fix:\n" + (fixes if width is None else wrap_lines(fixes, width, yaml=True))
    return text + "\n"


def render_pending(explanations: Sequence[Mapping[str, Any]], width: int | None = None) -> str:
    return "\n".join(render_explanation(e, width) for e in explanations)


def diagnostics_lines(
    diagnostics: Mapping[str, Any] | None,
    width: int | None = None,
    namespace: str | None = None,
    listed: str | None = None,
) -> list[str]:
    """The scan report's diagnostics section (absent from reports of older versions): with
    `namespace` (scan --namespace), its Pending pods are that namespace's (the report's
    `in_namespace` left the others out); with `listed`, a live scan listed only that
    namespace's pods, which the node usage and each node's verdict then count alone."""
    if not diagnostics:
        return []
    lines = []
    if listed and (diagnostics["inventory"] is not None or diagnostics["pending_pods"]):
        lines += [
            _fit(
                f"Only the pods of namespace {cell(listed)} were listed: the GPU usage below "
                "(REQUESTED, IDLE, HELD, FIT) and each node's verdict on a Pending pod count "
                "them alone, not the pods of other namespaces on the same nodes.",
                width,
            ),
            "",
        ]
    if diagnostics["inventory"] is not None:
        lines += [render_inventory(diagnostics["inventory"], width)]
    pending = diagnostics["pending_pods"]
    if pending:
        which = f" of namespace {cell(namespace)}" if namespace else ""
        lines += [f"Pending GPU pods{which} ({len(pending)}):", "", render_pending(pending, width)]
    return lines
