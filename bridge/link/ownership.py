"""Which owner (``bridge.jobs.owner``: one pod, or one pod group) a pod's job has.

The owner is what the job's comment records and what the index is keyed by.
It is read from the pod's labels only until the bridge ties the pod to a job;
from then on the bridge's own ``slurmbridge.io/owner`` annotation (written with
the job id by the leader's record, and again by the Binding) is the answer, so relabelling a
running pod cannot make its job look orphaned.
"""

from collections.abc import Mapping

from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import GroupOwner, Owner, PodOwner, parse_owner


def owner_key(pod: Pod) -> Owner:
    """The recorded owner, else the one the pod's labels declare (no job yet)."""
    meta = pod.metadata
    recorded = ((meta and meta.annotations) or {}).get(keys.OWNER)
    if not recorded:
        return declared_owner(pod)
    if meta is not None and meta.uid and recorded == meta.uid:  # a lone pod: one copy of its uid
        return PodOwner(meta.uid)
    return parse_owner(recorded)


def declared_owner(pod: Pod) -> Owner:
    """The owner the labels ask for: what a job submitted now is recorded under."""
    meta = pod.metadata
    if meta is None or not meta.uid:
        raise ValueError("pod has no metadata.uid: it must come from the API server")
    group = (meta.labels or {}).get(keys.GROUP)
    if group:
        return GroupOwner(meta.namespace or "", group)
    return PodOwner(meta.uid)


def pod_ref(pod: Pod) -> str:
    meta = pod.metadata
    return f"{meta.namespace}/{meta.name}" if meta else "<unnamed pod>"


def job_id_in(annotations: Mapping[str, str]) -> int | None:
    """The job id the bridge recorded in a pod's annotations (None: none yet, or not a
    number): the one reader of ``slurmbridge.io/job-id``."""
    text = annotations.get(keys.JOB_ID, "")
    return int(text) if text.isdigit() else None


