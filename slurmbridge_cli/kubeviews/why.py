"""``why POD``: the pod's job, Slurm's state and reason as the bridge last told them, what the
pod asked for, its last events, and what to do next (advice.py)."""

import dataclasses
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.jobs.components import member_part
from bridge.kube.apierrors import is_not_found
from bridge.ports import KubePort
from slurmbridge_cli.kubeviews.advice import advice
from slurmbridge_cli.kubeviews.events import (
    EventLine,
    event_line,
    newest_word,
    read_events,
    refusals,
)
from slurmbridge_cli.kubeviews.pods import (
    PodRow,
    annotations,
    pod_row,
    slurm_condition,
    told,
)

EVENTS_SHOWN = 5

@dataclass(frozen=True, slots=True)
class Why:
    """Everything ``why`` says about one pod."""

    namespace: str
    pod: str
    found: bool
    scheduler: str = ""
    status: PodRow | None = None
    slurm_state: str = ""  # Slurm's job state as the bridge last reported it
    slurm_reason: str = ""
    said: str = ""  # the bridge's newest sentence about the job
    said_age: str = ""
    asked: dict[str, str] = field(default_factory=dict)  # the pod's Slurm annotations
    recorded: dict[str, str] = field(default_factory=dict)  # the bridge's own annotations
    group: str = ""
    gates: list[str] = field(default_factory=list)
    events: list[EventLine] | None = None  # None: the user may not list events
    refusals: list[EventLine] = field(default_factory=list)
    next: str = ""

    @property
    def bridge(self) -> bool:
        return self.found and self.scheduler == keys.SCHEDULER_NAME

    @property
    def placed(self) -> bool:
        """Slurm placed the pod and nothing went wrong since: bound, running or succeeded."""
        row = self.status
        if not self.bridge or row is None:
            return False
        return row.state in ("bound", "running") or (
            row.state == "finished" and row.reason == "Succeeded"
        )

    def as_dict(self) -> dict[str, Any]:
        status = self.status.as_dict() if self.status else None
        return {**asdict(self), "status": status, "bridge": self.bridge, "placed": self.placed}


def _group(pod: Pod) -> str:
    labels: dict[str, str] = (pod.metadata.labels if pod.metadata else None) or {}
    name = labels.get(keys.GROUP)
    if not name:
        return ""
    size, rank = labels.get(keys.GROUP_SIZE), labels.get(keys.GROUP_RANK)
    part = member_part(labels, pod.metadata.annotations if pod.metadata else None)
    return name + (f" ({size} pods" if size else " (") + (f", rank {rank}" if rank else "") + (
        f", component {part[0]} (+{part[1]}))" if part else ")")


def _short(values: dict[str, str], wanted: Iterable[str]) -> dict[str, str]:
    return {k.removeprefix(keys.PREFIX): values[k] for k in wanted if values.get(k)}


async def read_why(
    kube: KubePort, namespace: str, name: str, now: datetime, *, shown: int = EVENTS_SHOWN
) -> Why:
    """What the bridge recorded about pod ``namespace/name``, and what to do next."""
    try:
        pod = await kube.get(Pod, name, namespace=namespace)
    except ApiError as exc:
        if not is_not_found(exc):
            raise
        refused = await refusals(kube, namespace, name, now)
        return _with_next(Why(namespace, name, found=False, refusals=refused[-shown:]))
    scheduler = (pod.spec.schedulerName if pod.spec else None) or "default-scheduler"
    if scheduler != keys.SCHEDULER_NAME:
        return _with_next(Why(namespace, name, found=True, scheduler=scheduler))
    uid = pod.metadata.uid if pod.metadata else None
    events = await read_events(kube, namespace, {"involvedObject.name": name})
    mine = [e for e in events or () if e.involvedObject.uid in (None, "", uid)]
    ann = annotations(pod)
    row = pod_row(pod, now)
    if row.state == "pending" and not row.reason:  # gated: only the events say it
        row = told(row, mine, now)
    state, reason, said, said_age = newest_word(slurm_condition(pod), mine, now)
    if row.state in ("bound", "running") and row.job_id is not None:
        state, reason = "RUNNING", ""  # a bound pod's job runs where it was bound (lifecycle)
    gates = [g.name for g in (pod.spec.schedulingGates if pod.spec else None) or []]
    why = Why(
        namespace, name, found=True, scheduler=scheduler, status=row,
        slurm_state=state, slurm_reason=reason, said=said, said_age=said_age,
        asked=_short(ann, (*keys.USER_ANNOTATIONS, keys.GPUS)),
        # Not the submit claim: a replica's name and clock, nothing about the job.
        recorded=_short(ann, keys.BRIDGE_OWNED_ANNOTATIONS),
        group=_group(pod), gates=gates,
        events=None if events is None else [event_line(e, now) for e in mine[-shown:]],
    )
    return _with_next(why)


def _with_next(why: Why) -> Why:
    return dataclasses.replace(why, next=advice(why))
