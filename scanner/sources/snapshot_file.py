"""The snapshot file `gpu-audit collect` writes and `scan --from-file` reads back.

It is a `kind: List`-like document, so kubectl and jq read it too, plus what a file cannot
otherwise say: which types were collected (even when empty) and which could not be.
"""

from __future__ import annotations

import json
from typing import Any

from gpu_audit.redact import redact_text, redact_tree, snapshot_object
from gpu_audit.snapshot import Snapshot

API_VERSION = "gpu-audit.io/v1"
KIND = "Snapshot"


def is_snapshot_document(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and document.get("apiVersion") == API_VERSION
        and document.get("kind") == KIND
    )


def snapshot_document(snapshot: Snapshot) -> dict[str, Any]:
    """The file's content, through gpu_audit.redact: objects without credentials or the
    annotations no check reads (see snapshot_object), source details and gaps redacted."""
    source = snapshot.source
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "source": redact_tree(
            {"type": source.kind, "inputs": list(source.inputs), "details": dict(source.details)}
        ),
        "available": sorted(snapshot.available),
        "gaps": [{"type": g.type, "reason": redact_text(g.reason)} for g in snapshot.gaps],
        "items": [snapshot_object(r.raw) for r in snapshot.all()],
    }


def dumps_snapshot(snapshot: Snapshot) -> str:
    return (
        json.dumps(snapshot_document(snapshot), sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    )
