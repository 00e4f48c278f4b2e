from __future__ import annotations

import json
from collections.abc import Iterator

from gpu_audit.api import (
    KNATIVE_SERVICE,
    PROGRESS_DEADLINE_ANNOTATION,
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
    progress_deadline,
    templates_of,
)

from ._common import probe_budget

# The deadline suggested: higher than the probe's budget, as Knative's probing guide asks.
_MARGIN_S = 60
# What the revision's status says when the deadline passed before the pods were Ready
# (pkg/reconciler/autoscaling: "Initial scale was never achieved"; the Deployment's
# ProgressDeadlineExceeded).
_FAILED_SIGNS = ("progressdeadlineexceeded", "initial scale was never achieved")


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
        deadline = progress_deadline(service, snapshot)
        if deadline.seconds is None or deadline.seconds >= budget:
            yield passed(service, f"progress deadline covers the {budget}s startup probe")
            continue
        failure = _failure(service)
        message = (
            f"the startup probe of container {container.name} allows {budget}s for the model "
            f"to load, but Knative fails the revision after {deadline.seconds:g}s "
            f"({deadline.source})"
        )
        if failure:
            message += f"; the Service's status shows it: {failure}"
        yield failed(
            service,
            message,
            path=f"spec.template.metadata.annotations[{PROGRESS_DEADLINE_ANNOTATION}]",
            severity=Severity.HIGH if failure else Severity.MEDIUM,
            fix={
                "patch": json.dumps(
                    {
                        "spec": {
                            "template": {
                                "metadata": {
                                    "annotations": {
                                        PROGRESS_DEADLINE_ANNOTATION: f"{budget + _MARGIN_S}s"
                                    }
                                }
                            }
                        }
                    },
                    separators=(",", ":"),
                )
            },
        )


def _failure(service: Resource) -> str:
    """The status condition message that shows the deadline passed, "" when none does."""
    for condition in map(as_mapping, as_list(service.status.get("conditions"))):
        text = f"{condition.get('reason', '')} {condition.get('message', '')}"
        if condition.get("status") == "False" and any(s in text.lower() for s in _FAILED_SIGNS):
            return " ".join(str(condition.get("message") or condition.get("reason")).split())[:200]
    return ""
