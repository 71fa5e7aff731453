"""Events as ``why`` shows them: a pod's own, and the refusals of the controller behind it;
and the bridge's words about a pod's job, from its events or its condition."""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from lightkube.core.client import FieldSelector
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import PodCondition
from lightkube.resources.core_v1 import Event

from bridge.ports import KubePort
from slurmbridge_cli.kubeviews.clock import age, iso

NEVER = datetime.min.replace(tzinfo=UTC)
# The bridge's words about a job (bridge/placement/reasons.py waiting_message, placer.py,
# lifecycle.py): "Slurm job 7 (PENDING, reason R)", "Slurm job 7 ended (CANCELLED, reason R)".
_JOB_STATUS = re.compile(
    r"Slurm job (?P<job>\d+)(?: [a-z]+)* \((?P<state>[A-Z_]+), reason (?P<reason>[^)]*)\)"
)
_JOB_ALLOCATED = re.compile(r"Slurm job (?P<job>\d+) allocated \S+")  # notifier.describe
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


def bridge_words(text: str) -> str:
    """The bridge's sentence inside kube-scheduler's FailedScheduling message."""
    start = text.find("waiting for Slurm job")
    start = start if start >= 0 else max(text.find("Slurm job"), 0)
    return text[start:].split(". preemption:", maxsplit=1)[0].rstrip(".")


def newest_word(
    condition: PodCondition | None, events: Sequence[Event], now: datetime
) -> tuple[str, str, str, str]:
    """(Slurm state, reason, sentence, age) from the newest of the bridge's condition and
    the events that carry its words about the job; empty when none does."""
    said: list[tuple[datetime | None, str]] = [
        (event_time(e), bridge_words(e.message or "")) for e in events
        if _JOB_STATUS.search(e.message or "") or _JOB_ALLOCATED.search(e.message or "")
    ]
    if condition is not None and condition.message:
        said.append((condition.lastTransitionTime, condition.message))
    if not said:
        return "", "", "", ""
    when, words = max(said, key=lambda s: s[0] or NEVER)
    status = _JOB_STATUS.search(words)
    if status is not None:
        return status["state"], status["reason"], words, age(when, now)
    if _JOB_ALLOCATED.search(words):
        return "RUNNING", "", words, age(when, now)
    return "", "", words, age(when, now)
