"""A pod as the bridge's readers need it: a few hundred bytes instead of a whole Pod.

The pod cache (podcache.py) keeps one ``PodView`` per pod of the bridge, bound ones
included; the lifecycle controller and the extender's filter read these instead of listing
or fetching pods.  Everything a reader decides on is here, computed once per watch event.
"""

from dataclasses import dataclass
from datetime import datetime

from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.jobs.components import member_part
from bridge.jobs.owner import GroupOwner, Owner
from bridge.kube.watchcache import resource_version
from bridge.link.gate import gated, other_gates
from bridge.link.ownership import job_id_in, owner_key
from bridge.slurm.types import SlurmJob

_FINISHED = frozenset({"Succeeded", "Failed"})
DEFAULT_GRACE_SECONDS = 30  # Kubernetes' default terminationGracePeriodSeconds


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    uid: str
    resource_version: int
    owner: Owner
    node_name: str
    phase: str
    deleting: bool
    containers_stopped: bool  # no container of it can still hold the node's GPUs
    gated: bool  # held by the bridge's gate
    held: bool  # held by another gate (Kueue's, a user's)
    grace_seconds: int
    # The bridge's records about the job as fields, not a tuple of pairs (the cache and
    # SeenPods each keep a view per pod): the job id parsed once here, not per read; the
    # Slurm node's and GPUs' annotations as written (None: not on the pod).
    job_id: int | None
    recorded_node: str | None
    recorded_gpus: str | None
    created: datetime | None = None  # creationTimestamp (bind latency)
    part: tuple[str, int] | None = None  # a mixed group member's component and its offset

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        return self.uid

    @property
    def finished(self) -> bool:
        return self.phase in _FINISHED

    @property
    def releases_job(self) -> bool:
        """Finished, or deleted with nothing left running: its job may go."""
        return self.finished or (self.deleting and self.containers_stopped)

    @property
    def recorded(self) -> dict[str, str]:
        job = None if self.job_id is None else str(self.job_id)  # what job_id_in reads
        kept = ((keys.JOB_ID, job), (keys.SLURM_NODE, self.recorded_node),
                (keys.GPU_IDS, self.recorded_gpus))
        return {key: text for key, text in kept if text is not None}


def tied_to(pod: PodView, job: SlurmJob) -> bool:
    """Whether an ended ``job`` is this pod's for good.

    A lone pod's job is its own.  A group's ended job binds only the members it was
    recorded on (``slurmbridge.io/job-id``): a member that never saw it belongs to the
    group's next run (a Job resumed after suspend, a group re-created under its name).
    """
    return not isinstance(job.owner, GroupOwner) or pod.job_id == job.job_id


def view_of(pod: Pod) -> PodView:
    """Raises ValueError for a pod without name, namespace or uid (not from the API server)."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    if meta is None or not (meta.name and meta.namespace and meta.uid):
        raise ValueError("pod has no metadata.name/namespace/uid: it must come from the API")
    annotations = meta.annotations or {}
    return PodView(
        namespace=meta.namespace, name=meta.name, uid=meta.uid,
        resource_version=resource_version(pod),
        owner=owner_key(pod),
        node_name=(spec.nodeName if spec else None) or "",
        phase=(status.phase if status else None) or "",
        deleting=meta.deletionTimestamp is not None,
        containers_stopped=_containers_stopped(pod),
        gated=gated(pod), held=bool(other_gates(pod)),
        grace_seconds=grace_seconds(pod),
        job_id=job_id_in(annotations), recorded_node=annotations.get(keys.SLURM_NODE),
        recorded_gpus=annotations.get(keys.GPU_IDS),
        created=meta.creationTimestamp,
        part=member_part(meta.labels, annotations),
    )


def grace_seconds(pod: Pod) -> int:
    seconds = pod.spec.terminationGracePeriodSeconds if pod.spec else None
    return DEFAULT_GRACE_SECONDS if seconds is None else seconds


def _containers_stopped(pod: Pod) -> bool:
    phase = pod.status.phase if pod.status else None
    if phase in _FINISHED or not (pod.spec and pod.spec.nodeName):
        return True
    statuses = (pod.status.containerStatuses if pod.status else None) or []
    return bool(statuses) and all(s.state and s.state.terminated for s in statuses)
