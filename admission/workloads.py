"""Which group a new pod belongs to, from what its workload already says.

The one place that answers "which group, what size, what rank".  The mutating webhook
writes the answer as the bridge's own group labels (``slurmbridge.io/group``,
``group-size``, ``group-rank``), so everything downstream keeps working on those.  The
size comes from the owner, never from whichever member arrives first.  Sources, first
match wins:

1. JobSet: the ``jobset.sigs.k8s.io`` labels its controller puts on pods; the whole
   JobSet is one group, sized from the JobSet object (replicas x parallelism summed over
   its replicated jobs).
2. LeaderWorkerSet: one group per replica (``<lws>-<group-index>``, the leader pod's
   name), sized by the ``size`` annotation the controller copies from the LWS spec; the
   rank is the worker index (leader 0).
3. Workload API: ``spec.schedulingGroup.podGroupName`` names a ``scheduling.k8s.io``
   PodGroup; a gang policy makes it a group of ``minCount`` (a basic policy is pod by pod),
   a parent CompositePodGroup a group of its child PodGroups (``workload_api.py``).
4. A batch Job annotated ``slurmbridge.io/gang: "true"``: parallelism == completions pods.
5. The bridge's own labels, as the user wrote them (nothing to resolve).

Ranks come from the workload's own index (the Job completion index, the JobSet job index,
the LWS worker index), so a replaced pod gets its predecessor's node.  Reading the owners
(API, cache, their wire shapes) is ``owners.py``'s job; the answer, ``membership.py``'s.
"""

from admission.membership import Membership, group_name, index, ranked
from admission.owners import (
    JOB,
    JOBSET,
    JobObject,
    JobSetObject,
    OwnerReader,
    WorkloadError,
    WorkloadLookupError,
    load,
)
from admission.pod import OwnerReference, PodShape
from admission.review import UserInfo
from admission.workload_api import pod_group
from bridge import keys

LWS_LEADER, LWS_WORKER = "leader", "worker"  # an LWS group's components


# --- resolution ------------------------------------------------------------------------------


async def membership(pod: PodShape, namespace: str, read: OwnerReader) -> Membership | None:
    """The group ``pod`` (being created in ``namespace``) belongs to; None: a lone pod, or
    one whose own group labels stand as written.  Raises WorkloadError, WorkloadLookupError."""
    labels = pod.metadata.labels or {}
    annotations = pod.annotations
    if keys.JOBSET_NAME in labels:
        return await _jobset(namespace, labels, annotations, read)
    if keys.LWS_NAME in labels:
        return _leader_worker_set(labels, annotations)
    group = pod.spec.scheduling_group
    if group is not None and group.pod_group_name:
        found = await pod_group(namespace, group.pod_group_name, annotations, read)
        if found is not None:
            return found
    owner = _controller(pod.metadata.owner_references or [])
    if owner is not None and (owner.api_version, owner.kind) == ("batch/v1", "Job"):
        return await _gang_job(namespace, owner, annotations, read)
    return None


# The controller that creates the pods of each owner kind a group is read from, as
# kube-controller-manager runs it (its own identity, or with --use-service-account-credentials
# the controller's ServiceAccount in kube-system); a cluster admin may act for any.
_CREATED_BY = {("batch/v1", "Job"): "job-controller",
               ("apps/v1", "StatefulSet"): "statefulset-controller"}
CONTROLLER_MANAGER = "system:kube-controller-manager"
CLUSTER_ADMINS = "system:masters"


def check_creator(pod: PodShape, namespace: str, user: UserInfo) -> None:
    """A grouped pod naming a Job (or StatefulSet) as its controller must come from that
    workload's controller: a pod of someone's own pointing at a colleague's gang Job would
    be placed in the colleague's Slurm job, on their nodes and GPUs.  Raises WorkloadError."""
    owner = _controller(pod.metadata.owner_references or [])
    controller = _CREATED_BY.get((owner.api_version, owner.kind)) if owner else None
    if owner is None or controller is None:
        return
    if user.username in (CONTROLLER_MANAGER, f"system:serviceaccount:kube-system:{controller}") \
            or CLUSTER_ADMINS in user.groups:
        return
    raise WorkloadError(
        f"the pod names {owner.kind} {namespace}/{owner.name} as its controller "
        f"(metadata.ownerReferences) but was created by {user.username or 'an unknown user'}, "
        f"not by that {owner.kind}'s controller (kube-controller-manager's {controller}): only "
        f"the {owner.kind}'s own pods join its group and its Slurm job; remove the "
        "ownerReference to run a pod of your own"
    )


def _controller(refs: list[OwnerReference]) -> OwnerReference | None:
    return next((r for r in refs if r.controller), None)


async def _gang_job(
    namespace: str, owner: OwnerReference, annotations: dict[str, str], read: OwnerReader
) -> Membership | None:
    ref = f"Job {namespace}/{owner.name}"
    job = await load(read, JOB, JobObject, namespace, owner.name)
    if job.metadata.annotations.get(keys.GANG, "").strip().lower() != "true":
        return None
    if job.metadata.uid and job.metadata.uid != owner.uid:
        raise WorkloadLookupError(f"{ref} was recreated while its pod was being created")
    parallelism, completions = job.spec.parallelism or 1, job.spec.completions
    if completions != parallelism:
        raise WorkloadError(
            f"{ref} has {keys.GANG}=true, so its pods run together as one Slurm job: set "
            f"spec.completions equal to spec.parallelism (now {completions} and {parallelism})"
        )
    rank = index(annotations, keys.JOB_COMPLETION_INDEX, "pod annotation")
    return Membership(group_name(owner.name), parallelism, ranked(rank, parallelism), ref)


def _exclusive(ref: str, values: dict[str, str], name: str, cannot: str) -> None:
    """JobSet's and LWS's one-domain-per-part placement: what of it a Slurm job cannot give
    (``cannot``) is refused, naming what Slurm does give."""
    if values.get(name, "").strip():
        raise WorkloadError(
            f"{ref} asks {name}={values[name]!r}: Slurm cannot give {cannot}; it keeps one "
            f"Slurm job within one switch or block ({keys.SWITCHES}: \"1\" or {keys.SEGMENT} "
            "on the pod template): ask that instead and remove the annotation"
        )


def _leader_worker_set(labels: dict[str, str], annotations: dict[str, str]) -> Membership:
    lws = labels[keys.LWS_NAME]
    ref = f"LeaderWorkerSet {lws}"
    _exclusive(ref, annotations, keys.LWS_EXCLUSIVE_TOPOLOGY,
               "a domain no other group shares (each group is one Slurm job)")
    _exclusive(ref, annotations, keys.LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY,
               "each subgroup a domain of its own (the group's pods are one Slurm job)")
    group = index(labels, keys.LWS_GROUP_INDEX, "pod label")
    size = index(annotations, keys.LWS_SIZE, "pod annotation")
    if group is None or not size:
        raise WorkloadError(
            f"pod of {ref} lacks label {keys.LWS_GROUP_INDEX} or annotation {keys.LWS_SIZE} "
            "(its controller sets both)"
        )
    rank = ranked(index(labels, keys.LWS_WORKER_INDEX, "pod label"), size)
    if rank is None or size < 2:
        return Membership(group_name(f"{lws}-{group}"), size, rank, ref)
    # The leader (worker index 0) and the workers: two templates, two components.
    return Membership(group_name(f"{lws}-{group}"), size, rank, ref,
                      components=((LWS_LEADER, 1), (LWS_WORKER, size - 1)),
                      component=LWS_LEADER if rank == 0 else LWS_WORKER)


async def _jobset(
    namespace: str, labels: dict[str, str], annotations: dict[str, str], read: OwnerReader
) -> Membership:
    name = labels[keys.JOBSET_NAME]
    ref = f"JobSet {namespace}/{name}"
    jobset = await load(read, JOBSET, JobSetObject, namespace, name)
    _exclusive(ref, jobset.metadata.annotations, keys.JOBSET_EXCLUSIVE_TOPOLOGY,
               "each child Job a domain of its own (the JobSet's pods are one Slurm job)")
    size, offset = 0, None
    replicated = labels.get(keys.JOBSET_REPLICATED_JOB)
    job_index = index(labels, keys.JOBSET_JOB_INDEX, "pod label")
    completion = index(annotations, keys.JOB_COMPLETION_INDEX, "pod annotation")
    parts = []
    for rj in jobset.spec.replicated_jobs:
        per_job = rj.template.spec.parallelism or 1
        if rj.name == replicated:  # members of earlier replicated jobs rank first
            offset = _jobset_rank(size, per_job, rj.replicas, job_index, completion)
        size += rj.replicas * per_job
        parts.append((rj.name, rj.replicas * per_job))
    if size < 1:
        raise WorkloadError(f"{ref} has no replicated jobs")
    if len(parts) < 2 or replicated not in dict(parts):
        return Membership(group_name(name), size, offset, ref)
    # Each replicated job its own template: one component each.
    return Membership(group_name(name), size, offset, ref, components=tuple(parts),
                      component=replicated)


def _jobset_rank(
    before: int, per_job: int, replicas: int, job_index: int | None, completion: int | None
) -> int | None:
    if job_index is None or completion is None or job_index >= replicas or completion >= per_job:
        return None
    return before + job_index * per_job + completion
