from __future__ import annotations

import json
import re
from collections.abc import Iterator

from gpu_audit.api import (
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
    passed,
    str_map,
    templates_of,
)

from ._common import probe_budget

KNATIVE_SERVICE = "Service.serving.knative.dev"
DEADLINE_ANNOTATION = "serving.knative.dev/progress-deadline"
# config-deployment's progress-deadline when neither it nor the revision sets one
# (knative.dev/docs/serving/configuration/deployment: "600s").
DEFAULT_DEADLINE_S = 600
# The deadline suggested: higher than the probe's budget, as Knative's probing guide asks.
_MARGIN_S = 60
# What the revision's status says when the deadline passed before the pods were Ready
# (pkg/reconciler/autoscaling: "Initial scale was never achieved"; the Deployment's
# ProgressDeadlineExceeded).
_FAILED_SIGNS = ("progressdeadlineexceeded", "initial scale was never achieved")
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@check(
    id="GPU-SRV-006",
    title="A Knative GPU service's progress deadline outlasts its startup probe",
    category=Category.SERVING,
    severity=Severity.HIGH,
    requires=(KNATIVE_SERVICE,),
    rationale="""
        Knative gives a revision's pods a progress deadline (600 s unless config-deployment or
        the revision's serving.knative.dev/progress-deadline annotation says otherwise) to
        become Ready; past it the revision is marked failed and scaled to zero, and a
        scale-from-zero never completes. A GPU model server pulls a large image, may wait for
        a GPU node to be added, and loads weights for many minutes: a startup probe written to
        allow for that is cut short by the deadline, so the Service never becomes Ready.
        Knative's probing guide says the deadline must be higher than the most the startup
        probe can take.
    """,
    detection="""
        Knative Services (serving.knative.dev) whose revision template requests GPUs: the
        longest startup probe of its containers (initialDelaySeconds + failureThreshold x
        periodSeconds, with the API's defaults) against the progress deadline of the revision:
        the template's serving.knative.dev/progress-deadline annotation, else config-deployment's
        progress-deadline (knative-serving namespace, when the input holds it), else 600 s; Go
        durations ("600s", "10m", "1h30m"). Not flagged: templates without a startup probe
        (GPU-SRV-005 judges those), a deadline at least the probe's budget, a deadline that is
        not a duration (Knative's webhook refuses one).
    """,
    severity_evidence="""
        High when the Service's status shows the deadline passed (ProgressDeadlineExceeded, or
        "Initial scale was never achieved"); medium otherwise: the probe the user wrote allows
        a load longer than Knative waits, but the input does not show a load that long.
    """,
    remediation="""
        kubectl -n $namespace patch services.serving.knative.dev $name --type=merge -p '$patch'
    """,
    fix_kind=FixKind.COMMAND,
    references=(
        "https://knative.dev/docs/serving/services/configure-probing/",
        "https://knative.dev/docs/serving/configuration/deployment/",
        "https://github.com/knative/docs/pull/6092",
        "https://github.com/redhat-ai-services/ai-accelerator/issues/22",
    ),
)
def knative_progress_deadline_covers_startup(snapshot: Snapshot) -> Iterator[Result]:
    configured, configured_where = _config_deadline(snapshot)
    for service in snapshot.of(KNATIVE_SERVICE):
        templates = [t for t in templates_of(service) if t.requests_gpu]
        budgets = [
            (probe_budget(as_mapping(c.raw.get("startupProbe"))), c)
            for t in templates
            for c in t.containers(include_init=False)
            if isinstance(c.raw.get("startupProbe"), dict)
        ]
        if not budgets:
            continue
        budget, container = max(budgets, key=lambda b: b[0])
        annotations = str_map(
            as_mapping(as_mapping(service.spec.get("template")).get("metadata")).get("annotations")
        )
        raw = annotations.get(DEADLINE_ANNOTATION)
        if raw is None:
            deadline, where = configured, configured_where
        else:
            deadline, where = _seconds(raw), f"its {DEADLINE_ANNOTATION} annotation, {raw}"
        if deadline is None or deadline >= budget:
            yield passed(service, f"progress deadline covers the {budget}s startup probe")
            continue
        failure = _failure(service)
        message = (
            f"the startup probe of container {container.name} allows {budget}s for the model "
            f"to load, but Knative fails the revision after {deadline:g}s ({where})"
        )
        if failure:
            message += f"; the Service's status shows it: {failure}"
        yield failed(
            service,
            message,
            path=f"spec.template.metadata.annotations[{DEADLINE_ANNOTATION}]",
            severity=Severity.HIGH if failure else Severity.MEDIUM,
            fix={
                "patch": json.dumps(
                    {
                        "spec": {
                            "template": {
                                "metadata": {
                                    "annotations": {DEADLINE_ANNOTATION: f"{budget + _MARGIN_S}s"}
                                }
                            }
                        }
                    },
                    separators=(",", ":"),
                )
            },
        )


def _config_deadline(snapshot: Snapshot) -> tuple[float | None, str]:
    """The progress deadline revisions get when they set none, in seconds (None when it is
    not a duration), and where it comes from."""
    config = snapshot.get("ConfigMap", "knative-serving", "config-deployment")
    raw = str_map(as_mapping(config.raw.get("data"))).get("progress-deadline") if config else None
    if raw is None:
        return DEFAULT_DEADLINE_S, "Knative's default progress deadline"
    return _seconds(raw), f"config-deployment's progress-deadline, {raw}"


def _seconds(duration: str) -> float | None:
    """A Go duration in seconds, None when it is not one."""
    text = duration.strip()
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def _failure(service: Resource) -> str:
    """The status condition message that shows the deadline passed, "" when none does."""
    for condition in map(as_mapping, as_list(service.status.get("conditions"))):
        text = f"{condition.get('reason', '')} {condition.get('message', '')}"
        if condition.get("status") == "False" and any(s in text.lower() for s in _FAILED_SIGNS):
            return " ".join(str(condition.get("message") or condition.get("reason")).split())[:200]
    return ""
