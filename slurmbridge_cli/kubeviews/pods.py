"""The bridge's pods as ``status`` lists them: job id, state, Slurm's reason and expected
start (as the bridge's words say them), node, GPUs."""

import re
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any, Literal

from lightkube.models.core_v1 import PodCondition
from lightkube.resources.core_v1 import Event, Pod

from bridge import keys
from bridge.jobs.components import member_part, squeue_job_text
from bridge.kube.writes import COMPONENT
from bridge.link.ownership import job_id_in
from bridge.placement.reasons import said_component, said_expected
from bridge.ports import KubePort
from slurmbridge_cli.kubeviews.clock import age, iso
from slurmbridge_cli.kubeviews.events import newest_word, read_events

State = Literal["pending", "refused", "bound", "running", "finished", "terminating"]
_JOB_ID = re.compile(r"Slurm job (?P<job>\d+)")


@dataclass(frozen=True, slots=True)
class PodRow:
    """One line of ``status``: a pod of the bridge and its Slurm job, as recorded on the pod."""

    namespace: str
    pod: str
    job_id: int | None
    state: State
    reason: str  # Slurm's reason code while pending, the refusal's, the phase once finished
    message: str  # the bridge's sentence behind the reason
    expected: str  # while pending: when Slurm's backfill expects the job to start, as said
    node: str
    slurm_node: str
    gpus: str  # Slurm's GPU indices on the node (bound pods)
    gpus_requested: int | None
    age: str
    created: str | None
    # A member of a heterogeneous job: its component's name and offset (``JOB`` 29+1), as the
    # bridge recorded it at release or said it while the job pends; left out of the data of
    # any other pod.
    component: str = ""
    offset: int | None = None

    @property
    def job(self) -> str:
        """The job as squeue names it: ``29``, or a component ``29+1``."""
        return "" if self.job_id is None else squeue_job_text(self.job_id, self.offset)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.offset is None:
            del data["component"], data["offset"]
        return data


def slurm_condition(pod: Pod) -> PodCondition | None:
    conditions = (pod.status.conditions if pod.status else None) or []
    return next((c for c in conditions if c.type == keys.POD_CONDITION_SLURM), None)


def annotations(pod: Pod) -> dict[str, str]:
    return dict((pod.metadata.annotations if pod.metadata else None) or {})


def _state(pod: Pod, condition: PodCondition | None) -> tuple[State, str, str]:
    """(state, reason, message) from the pod's phase, binding and the bridge's condition."""
    phase = pod.status.phase if pod.status else None
    reason = (condition.reason or "") if condition else ""
    message = (condition.message or "") if condition else ""
    if phase in ("Succeeded", "Failed"):
        return "finished", phase, message
    if pod.metadata and pod.metadata.deletionTimestamp:
        return "terminating", reason, message
    if pod.spec and pod.spec.nodeName:
        return ("running" if phase == "Running" else "bound"), "", message
    if message.startswith(keys.SUBMIT_REFUSED_MESSAGE):
        return "refused", reason, message
    return "pending", reason, message


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def pod_row(pod: Pod, now: datetime) -> PodRow:
    meta = pod.metadata
    assert meta is not None and meta.name is not None
    ann = annotations(pod)
    state, reason, message = _state(pod, slurm_condition(pod))
    found = _JOB_ID.search(message)
    return PodRow(
        namespace=meta.namespace or "",
        pod=meta.name,
        job_id=job_id_in(ann) or (int(found["job"]) if found else None),
        state=state,
        reason=reason,
        message=message,
        expected=said_expected(message) if state == "pending" else "",
        node=(pod.spec.nodeName if pod.spec else None) or "",
        slurm_node=ann.get(keys.SLURM_NODE, ""),
        gpus=ann.get(keys.GPU_IDS, ""),
        gpus_requested=_int(ann.get(keys.GPUS)),
        age=age(meta.creationTimestamp, now),
        created=iso(meta.creationTimestamp),
        **_component(pod, ann, message),
    )


def _component(pod: Pod, ann: dict[str, str], words: str) -> dict[str, Any]:
    """The member's component of its heterogeneous job: recorded at release, else as the
    bridge's words say it while the job pends; none for any other pod."""
    recorded = _int(ann.get(keys.JOB_COMPONENT))
    if recorded is None:
        return _said(words)
    part = member_part(pod.metadata.labels if pod.metadata else None, ann)
    return {"component": part[0] if part else "", "offset": recorded}


def _said(words: str) -> dict[str, Any]:
    part = said_component(words)
    return {"component": part[0], "offset": part[1]} if part else {}


async def read_status(kube: KubePort, namespace: str, now: datetime) -> list[PodRow]:
    """The bridge's pods of ``namespace`` (``*``: all), sorted by namespace and name.  A pod
    the bridge's gate holds carries no condition while its job pends (bridge/placement/
    notifier.py): its reason comes from the bridge's events, read once for all of them."""
    pods = [pod async for pod in kube.list(
        Pod, namespace=namespace, fields={"spec.schedulerName": keys.SCHEDULER_NAME})]
    rows = [pod_row(pod, now) for pod in pods]
    untold = {pod.metadata.uid: i for i, (pod, row) in enumerate(zip(pods, rows, strict=True))
              if pod.metadata and pod.metadata.uid and row.state == "pending" and not row.reason}
    if untold:
        said: dict[str, list[Event]] = {}
        for event in await read_events(kube, namespace, {"reportingComponent": COMPONENT}) or ():
            said.setdefault(event.involvedObject.uid or "", []).append(event)
        for uid, i in untold.items():
            rows[i] = told(rows[i], said.get(uid, []), now)
    return sorted(rows, key=lambda r: (r.namespace, r.pod))


def told(row: PodRow, events: list[Event], now: datetime) -> PodRow:
    """``row`` with the reason and sentence of the newest event about its job."""
    _, reason, words, _ = newest_word(None, events, now)
    found = _JOB_ID.search(words)
    return replace(row, reason=reason, message=words, expected=said_expected(words),
                   job_id=row.job_id or (int(found["job"]) if found else None),
                   **_said(words))
