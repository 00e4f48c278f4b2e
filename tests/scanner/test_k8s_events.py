"""Events read the same way in core/v1 and events.k8s.io/v1 form (gpu_audit.k8s.events), and the
two readers that used to have their own copies (diagnose's FailedScheduling comparison and
GPU-SCHED-005) agree on which event is the newest."""

from __future__ import annotations

from typing import Any

from gpu_audit.checks.scheduling.gpu_pods_not_stuck_unschedulable import (
    gpu_pods_not_stuck_unschedulable,
)
from gpu_audit.diagnostics.pending import scheduler_messages
from gpu_audit.engine import run_check
from gpu_audit.k8s.events import event_count, event_note, event_regarding, event_time
from gpu_audit.model import ObjRef, Resource, SourceLocation
from gpu_audit.snapshot import Snapshot

_FIT = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
_NOMINATED = "Pod should schedule on: nodeName gpu-1"


def _event(name: str, api: str = "v1", ns: str = "ml", **body: Any) -> Resource:
    raw = {"apiVersion": api, "kind": "Event", "metadata": {"name": name, "namespace": ns}}
    raw.update(body)
    return Resource(ObjRef("Event", ns, name), api, raw, SourceLocation("events.yaml"))


def _pending_gpu_pod() -> Resource:
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml"},
        "spec": {
            "containers": [
                {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ]
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    return Resource(ObjRef("Pod", "ml", "train-0"), "v1", raw, SourceLocation("pods.yaml"))


def _events_k8s_io(name: str, reason: str, note: str, last: str) -> Resource:
    """An events.k8s.io/v1 Event as the API serves a legacy (kubelet-style) one: the core/v1
    lastTimestamp is deprecatedLastTimestamp, and there is no series."""
    return _event(
        name,
        api="events.k8s.io/v1",
        regarding={"kind": "Pod", "namespace": "ml", "name": "train-0"},
        reason=reason,
        note=note,
        type="Warning" if reason == "FailedScheduling" else "Normal",
        deprecatedFirstTimestamp="2024-05-01T10:00:00Z",
        deprecatedLastTimestamp=last,
        deprecatedCount=7,
    )


def test_core_v1_event_fields() -> None:
    event = _event(
        "e",
        involvedObject={"kind": "Pod", "name": "p"},
        message="hello",
        firstTimestamp="2024-05-01T10:00:00Z",
        lastTimestamp="2024-05-01T11:00:00Z",
        count=4,
    )
    assert event_regarding(event) == {"kind": "Pod", "name": "p"}
    assert event_note(event) == "hello"
    assert event_time(event) == "2024-05-01T11:00:00Z"
    assert event_count(event) == 4


def test_warning_event_with_only_deprecated_last_timestamp() -> None:
    """The drift: diagnose read series, lastTimestamp and eventTime but not
    deprecatedLastTimestamp, so such an event sorted by its creationTimestamp (or "")."""
    event = _events_k8s_io("e", "FailedScheduling", _FIT, "2024-05-01T12:00:00Z")
    event.raw["metadata"]["creationTimestamp"] = "2024-05-01T10:00:00Z"
    assert event_regarding(event)["name"] == "train-0"
    assert event_note(event) == _FIT
    assert event_time(event) == "2024-05-01T12:00:00Z"
    assert event_count(event) == 7


def test_time_of_events_k8s_io_series_and_singletons() -> None:
    series = _event(
        "s",
        api="events.k8s.io/v1",
        eventTime="2024-05-01T10:00:00.000000Z",
        series={"count": 3, "lastObservedTime": "2024-05-01T10:30:00.000000Z"},
    )
    single = _event("o", api="events.k8s.io/v1", eventTime="2024-05-01T10:00:00.000000Z")
    assert event_time(series) == "2024-05-01T10:30:00.000000Z"  # the last, not the first
    assert event_count(series) == 3
    assert event_time(single) == "2024-05-01T10:00:00.000000Z"
    assert event_count(single) == 1


def test_time_falls_back_to_first_timestamp_then_creation() -> None:
    first_only = _event("f", firstTimestamp="2024-05-01T09:00:00Z")
    created = _event("c")
    created.raw["metadata"]["creationTimestamp"] = "2024-05-01T08:00:00Z"
    assert event_time(first_only) == "2024-05-01T09:00:00Z"
    assert event_time(created) == "2024-05-01T08:00:00Z"
    assert event_time(_event("none")) == ""


def test_count_ignores_what_is_not_a_positive_integer() -> None:
    assert event_count(_event("e", count="3", series={"count": 2})) == 2
    assert event_count(_event("e", count=True)) == 1
    assert event_count(_event("e", count=0)) == 1


def test_diagnose_orders_failed_scheduling_events_by_deprecated_last_timestamp() -> None:
    """An events.k8s.io dump: the event that happened last is compared last, whatever the
    names and creation times say."""
    newer = _events_k8s_io("a-newer", "FailedScheduling", _FIT, "2024-05-01T12:00:00Z")
    older = _events_k8s_io("b-older", "FailedScheduling", _FIT, "2024-05-01T11:00:00Z")
    pod = _pending_gpu_pod()
    messages = scheduler_messages(Snapshot([pod, newer, older]), pod, 3, {})
    assert [m.source for m in messages if m.source.startswith("event")] == [
        "event b-older",
        "event a-newer",
    ]
    assert all(m.count == 7 for m in messages if m.source.startswith("event"))


def test_sched_005_sees_deprecated_last_timestamp_when_a_nomination_came_later() -> None:
    """GPU-SCHED-005 skips a pod nominated after its last FailedScheduling: it reads the time
    from deprecatedLastTimestamp, as diagnose now does."""
    pod = _pending_gpu_pod()
    failure = _events_k8s_io("a", "FailedScheduling", _FIT, "2024-05-01T11:00:00Z")
    nominated = _events_k8s_io("b", "Nominated", _NOMINATED, "2024-05-01T12:00:00Z")
    run = run_check(gpu_pods_not_stuck_unschedulable, Snapshot([pod, failure, nominated]))
    assert [r for r in run.results if r.outcome.value == "fail"] == []
    later_failure = _events_k8s_io("c", "FailedScheduling", _FIT, "2024-05-01T13:00:00Z")
    run = run_check(
        gpu_pods_not_stuck_unschedulable, Snapshot([pod, failure, nominated, later_failure])
    )
    assert [r.outcome.value for r in run.results] == ["fail"]
