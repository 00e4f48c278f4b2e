"""What must never leave the snapshot: Secret values, and fields no check reads."""

from __future__ import annotations

from typing import Any

REDACTED = "<redacted>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def sanitize(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop managedFields everywhere; keep only the key names of a Secret's data.

    Mutates and returns `obj` (the loader owns the freshly parsed dict). A Secret's
    last-applied annotation is dropped too: it holds a full copy of the data.
    """
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    if obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1":
        for section in ("data", "stringData"):
            values = obj.get(section)
            if isinstance(values, dict):
                obj[section] = dict.fromkeys(values, REDACTED)
            elif values is not None:
                obj[section] = REDACTED
        if isinstance(metadata, dict) and isinstance(metadata.get("annotations"), dict):
            annotations = metadata["annotations"]
            if LAST_APPLIED in annotations:
                annotations[LAST_APPLIED] = REDACTED
    return obj
