"""Events as ``why`` shows them: a pod's own, and the refusals of the controller behind it."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from lightkube.core.client import FieldSelector
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event

from bridge.ports import KubePort
from slurmbridge_cli.kubeviews.pods import age, iso

NEVER = datetime.min.replace(tzinfo=UTC)
FAILED_CREATE = "FailedCreate"  # the reason controllers give a pod creation the API refused


@dataclass(frozen=True, slots=True)
class EventLine:
    object: str  # Kind/name of the object the event is about
    type: str
    reason: str
    source: str
    message: str
    count: int
    age: str
    time: str | None


def event_time(event: Event) -> datetime | None:
    """When it last happened: core/v1 events and events.k8s.io ones (kube-scheduler's) alike."""
    series = event.series.lastObservedTime if event.series else None
    created = event.metadata.creationTimestamp if event.metadata else None
    return series or event.lastTimestamp or event.eventTime or event.firstTimestamp or created


def event_line(event: Event, now: datetime) -> EventLine:
    involved = event.involvedObject
    source = event.reportingComponent or (event.source.component if event.source else None)
    when = event_time(event)
    return EventLine(
        object=f"{involved.kind or '?'}/{involved.name or '?'}",
        type=event.type or "",
        reason=event.reason or "",
        source=source or "",
        message=event.message or "",
        count=(event.series.count if event.series else None) or event.count or 1,
        age=age(when, now),
        time=iso(when),
    )


def _sorted(events: Iterable[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (event_time(e) or NEVER,
                                         e.metadata.name if e.metadata else ""))


async def read_events(
    kube: KubePort, namespace: str, fields: FieldSelector
) -> list[Event] | None:
    """The events selected, oldest first; None when the user may not list events."""
    try:
        return _sorted([e async for e in kube.list(Event, namespace=namespace, fields=fields)])
    except ApiError as exc:
        if exc.status.code == 403:
            return None
        raise


def related(name: str, other: str) -> bool:
    """A pod name and a controller's: the same, or one the other's prefix up to a dash
    (Job ``train`` → pod ``train-x7k2p``; Deployment ``web`` → ReplicaSet ``web-5d9c7``)."""
    return name == other or name.startswith(other + "-") or other.startswith(name + "-")


async def refusals(
    kube: KubePort, namespace: str, name: str, now: datetime
) -> list[EventLine]:
    """Pod creations the API server refused to the controllers related to ``name``."""
    failed = await read_events(kube, namespace, {"reason": FAILED_CREATE}) or []
    return [event_line(e, now) for e in failed if related(name, e.involvedObject.name or "")]
