"""The NVIDIA GPU Operator's asset templates: manifests the operator fills in and creates itself.

The operator ships one directory of manifests per operand (assets/state-driver,
assets/state-device-plugin, ...). At run time it reads every file of a state's directory
(controllers/resource_manager.go, addResourcesControls), then writes its own namespace into
each object (controllers/object_controls.go: `obj.Namespace = n.operatorNamespace`), the
images and settings of the ClusterPolicy into the pod templates, and creates the objects. The
files hold the placeholder "FILLED BY THE OPERATOR" (or "FILLED_BY_THE_OPERATOR",
"FILLED_BY_OPERATOR") where those values go. Nobody applies such a file as written: read from
a checkout of the operator, it is a template, and the objects it becomes are the operator's
operands in its own namespace (https://github.com/NVIDIA/gpu-operator/tree/main/assets).
"""

from __future__ import annotations

import re

from gpu_audit.model import Resource

OPERATOR_PLACEHOLDER = re.compile(r"FILLED[ _]BY[ _](THE[ _])?OPERATOR", re.IGNORECASE)


def is_operator_asset_template(resource: Resource) -> bool:
    """Whether the object is one of the GPU Operator's asset templates: its namespace (or, for
    a cluster-scoped object, its name) is the operator's placeholder, which the operator
    replaces before it creates the object."""
    metadata = resource.metadata
    return any(
        OPERATOR_PLACEHOLDER.fullmatch(str(metadata.get(key) or "").strip())
        for key in ("namespace", "name")
    )
