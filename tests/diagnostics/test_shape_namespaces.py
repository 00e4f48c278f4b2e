"""Pending pods of different namespaces share one evaluation against the nodes only where the
namespace cannot change it: a topology spread constraint counts the pods of the pod's own
namespace, so there each namespace is evaluated on its own (scanner/diagnostics/pending.py,
_shape_key)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from gpu_audit.diagnostics import explain_targets
from gpu_audit.sources.files import load_files

CASE = Path(__file__).resolve().parents[2] / "fixtures/clusters/diagnostics/topology-spread"


def _explain(tmp_path: Path, spread: bool) -> dict[str, dict[str, Any]]:
    """Every Pending GPU pod's explanation, by namespace/name, with ml/llm-2 copied into the
    namespace `other` (which holds no pod of the spread's selector)."""
    docs = [d for d in yaml.safe_load_all((CASE / "cluster.yaml").read_text()) if d]
    pending = next(d for d in docs if d["metadata"]["name"] == "llm-2")
    if not spread:
        del pending["spec"]["topologySpreadConstraints"]
    twin = copy.deepcopy(pending)
    twin["metadata"]["namespace"] = "other"
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*docs, twin]), encoding="utf-8")
    found = explain_targets(load_files([str(path)]), None)
    return {f"{e.pod.namespace}/{e.pod.name}": e.as_dict() for e in found}


def _failing(explanation: dict[str, Any]) -> dict[str, list[str]]:
    return {
        n["node"]: [p["predicate"] for p in n["predicates"] if not p["passed"]]
        for n in explanation["nodes"]
    }


def test_spread_is_counted_in_each_pods_own_namespace(tmp_path: Path) -> None:
    found = _explain(tmp_path, spread=True)
    assert _failing(found["ml/llm-2"]) == {
        "gpu-a": ["PodTopologySpread"],
        "gpu-b": ["NodeResourcesFit"],
    }
    # No pod of app=llm runs in `other`: the spread does not hold gpu-a back there.
    assert _failing(found["other/llm-2"]) == {"gpu-a": [], "gpu-b": ["NodeResourcesFit"]}


def test_without_spread_the_namespaces_get_the_same_verdicts(tmp_path: Path) -> None:
    found = _explain(tmp_path, spread=False)
    assert _failing(found["ml/llm-2"]) == {"gpu-a": [], "gpu-b": ["NodeResourcesFit"]}
    assert found["ml/llm-2"]["nodes"] == found["other/llm-2"]["nodes"]
