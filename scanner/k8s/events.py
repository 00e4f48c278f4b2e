"""Events in either API: core/v1 Events and events.k8s.io/v1 Events, read the same way.

An events.k8s.io/v1 Event keeps the core/v1 fields under other names (regarding for
involvedObject, note for message, deprecatedLastTimestamp / deprecatedFirstTimestamp /
deprecatedCount for lastTimestamp / firstTimestamp / count), and a dump may hold either form
(`kubectl get events` lists core/v1, `kubectl get events.events.k8s.io` the other). Field
meanings, from the Kubernetes API reference:
https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/ (events.k8s.io)
and https://kubernetes.io/docs/reference/generated/kubernetes-api/v1.31/#event-v1-core (core/v1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_audit.k8s.objects import as_mapping
from gpu_audit.model import Resource


def event_regarding(event: Resource) -> Mapping[str, Any]:
    """The object the event is about: core/v1 involvedObject, events.k8s.io regarding."""
    raw = event.raw
    return as_mapping(raw.get("involvedObject") or raw.get("regarding"))


def event_note(event: Resource) -> str:
    """The human-readable text: core/v1 message, events.k8s.io note."""
    raw = event.raw
    return str(raw.get("message") or raw.get("note") or "")


def event_time(event: Resource) -> str:
    """When the event last happened, as RFC 3339 text (which sorts chronologically); "" when
    the event carries no time at all.

    In the order the API reference defines them:
    - lastTimestamp (core/v1), "the time at which the most recent occurrence of this event was
      recorded", is deprecatedLastTimestamp in events.k8s.io/v1 (the same value: the API server
      converts one into the other). Events from the legacy recorder (the kubelet's) set these.
    - series.lastObservedTime: "the time when last Event from the series was seen", set by the
      events.k8s.io recorder (the scheduler's) once an event repeats.
    - eventTime: "time when this Event was first observed", the only time of a singleton from
      that recorder.
    - firstTimestamp / deprecatedFirstTimestamp: "the time at which the event was first
      recorded", for a legacy event without a last time.
    - metadata.creationTimestamp: when the API server stored it, for hand-written events.
    """
    raw = event.raw
    series = as_mapping(raw.get("series"))
    for value in (
        raw.get("lastTimestamp"),
        raw.get("deprecatedLastTimestamp"),
        series.get("lastObservedTime"),
        raw.get("eventTime"),
        raw.get("firstTimestamp"),
        raw.get("deprecatedFirstTimestamp"),
        event.metadata.get("creationTimestamp"),
    ):
        if value:
            return str(value)
    return ""


def event_count(event: Resource) -> int:
    """How many times the event happened: core/v1 count (events.k8s.io deprecatedCount) from
    the legacy recorder, series.count from the events.k8s.io one; 1 when none is a positive
    integer."""
    raw = event.raw
    for value in (
        raw.get("count"),
        raw.get("deprecatedCount"),
        as_mapping(raw.get("series")).get("count"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1
