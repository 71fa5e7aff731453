"""What to do next about a pod, in plain words: the last line of ``why``."""

from typing import TYPE_CHECKING

from bridge import keys
from slurmbridge_cli.kubeviews.pods import PodRow

if TYPE_CHECKING:
    from slurmbridge_cli.kubeviews.why import Why

_STUCK = (  # Slurm reasons waiting does not cure (bridge/placement/reasons.py says why)
    "will not start", "asks for more", "used up", "is down", "is inactive",
)


def advice(why: "Why") -> str:
    where = f"{why.namespace}/{why.pod}"
    if not why.found:
        if why.refusals:
            return (f"No pod {where}: the API server refused to create it (above). Change what "
                    "the message names in the pod template (or ask the admin who sets the "
                    "namespace's policy); the controller retries on its own.")
        return (f"No pod {where}: it was never created, or was deleted. A pod the API server "
                "refused (the webhooks, the namespace's policy) does not exist: `kubectl "
                "apply` printed why; for pods of a Job, Deployment or StatefulSet, name the "
                "workload (`kubectl slurmbridge why <workload>`) to see its refusals.")
    if not why.bridge:
        return (f"Slurm plays no part: {where} is scheduled by {why.scheduler}. Set "
                f"spec.schedulerName: {keys.SCHEDULER_NAME}, or create it in a namespace "
                f"labelled {keys.NAMESPACE_ENROLLED}=true.")
    assert why.status is not None
    if why.status.state in ("pending", "refused"):
        return _waiting(why, why.status)
    return _placed(why, why.status)


def _job(row: PodRow) -> str:
    return f"Slurm job {row.job_id}" if row.job_id is not None else "its Slurm job"


def _placed(why: "Why", row: PodRow) -> str:
    """A pod Slurm placed: bound, running, finished or on its way out."""
    held = [f"Slurm node {row.slurm_node}"] if row.slurm_node else []
    held += [f"GPUs {row.gpus}"] if row.gpus else []
    node = row.node + (f" ({', '.join(held)})" if held else "")
    job = _job(row)
    if row.state == "running":
        return f"Nothing to do: it runs on {node} as {job}."
    if row.state == "bound":
        return f"Slurm placed it on {node} ({job}): the kubelet starts its containers."
    if row.state == "finished":
        if row.reason == "Succeeded":
            return f"Nothing to do: it finished and {job} was released."
        return (f"The pod failed (kubectl logs {why.pod} -n {why.namespace}); {job} was released. "
                "Recreate it to run again (a Job does so by itself).")
    ended = [e for e in why.events or () if e.reason in (
        keys.EventReason.PREEMPTED, keys.EventReason.JOB_ENDED)]
    if ended or row.reason == keys.REASON_PREEMPTED:
        return (f"Slurm ended or preempted {job} (above): the pod is being evicted. "
                "Recreate it (a Job, Deployment or StatefulSet does so by itself).")
    return f"The pod is being deleted; {job} is released once its containers stopped."


def _waiting(why: "Why", row: PodRow) -> str:
    """A pod not placed yet: refused, gated, not submitted, or pending in Slurm."""
    job = _job(row)
    if row.state == "refused":
        return ("Slurm refused the job as the pod asks for it (above). If the message names "
                "the pod's annotations or resources, change them and recreate the pod; if it "
                "names the namespace's tenancy or Slurm's accounts and QOS, ask your cluster "
                "admin. The bridge asks Slurm again every 30 s while the pod waits.")
    others = [g for g in why.gates if g != keys.SLURM_GATE]  # the bridge's own: Slurm decides
    if others:
        return (f"The pod has scheduling gates ({', '.join(others)}): the bridge submits its "
                "job once whoever set them (e.g. a queueing controller) removes them.")
    if row.job_id is None and not why.said:
        return ("The bridge has not submitted a job yet; it does within seconds of the pod's "
                "creation. If that lasts, look at the events above, then ask your cluster "
                "admin whether slurmbridge runs (`slurmbridge doctor`).")
    if (why.slurm_reason or row.reason) in ("JobHeldAdmin", "JobHeldUser"):
        return f"{job} is held in Slurm: a Slurm admin releases it (scontrol release {row.job_id})."
    if any(s in why.said for s in _STUCK):
        return ("It will not start as it is (the reason above says why): ask for less, or "
                "another QOS or partition, and recreate the pod; or ask a Slurm admin.")
    if "will not resubmit" in why.said:
        return f"{job} ended before the pod started: recreate the pod."
    return (f"Nothing to do: the pod starts as soon as {job} starts; the reason above says "
            "what it waits for. Check again with `kubectl slurmbridge why`, or watch "
            f"`kubectl get pod {why.pod} -n {why.namespace} -w`.")
