"""Push a scan's metrics to a Prometheus Pushgateway (`scan --pushgateway URL`).

One HTTP PUT of the text exposition to URL/metrics/job/gpu-audit/cluster/<name>: PUT replaces
the whole group, so a check that no longer fails leaves no stale series behind. A cluster name
that is not plain URL-safe text goes base64url-encoded with the `@base64` suffix, the only way
the Pushgateway accepts a "/" in a label value.
https://github.com/prometheus/pushgateway#url
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from gpu_audit.errors import InputError

JOB = "gpu-audit"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._~-]+")


def group_path(cluster: str) -> str:
    """The grouping-key path of this cluster's metrics."""
    if _PLAIN_VALUE.fullmatch(cluster):
        return f"/metrics/job/{JOB}/cluster/{cluster}"
    encoded = base64.urlsafe_b64encode(cluster.encode()).decode().rstrip("=") or "="
    return f"/metrics/job/{JOB}/cluster@base64/{encoded}"


def push(url: str, cluster: str, exposition: str, timeout: float = 10.0) -> str:
    """PUT the metrics; returns the URL pushed to. Raises InputError saying what went wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(
            [f"--pushgateway {url!r}: expected an http(s) URL such as http://host:9091"]
        )
    target = url.rstrip("/") + group_path(cluster)
    request = urllib.request.Request(
        target,
        data=exposition.encode("utf-8"),
        method="PUT",
        headers={"Content-Type": CONTENT_TYPE},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace").strip()[:300]
        raise InputError(
            [f"pushgateway {target} answered HTTP {exc.code}" + (f": {body}" if body else "")]
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError([f"cannot push to pushgateway {target}: {reason}"]) from None
    return target
