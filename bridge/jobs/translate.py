"""Pod → JobRequest: everything the bridge asks Slurm for on behalf of a pod."""

from lightkube.models.core_v1 import Pod
from lightkube.models.meta_v1 import ObjectMeta

from bridge import keys
from bridge.jobs.components import group_components
from bridge.jobs.gpus import gpu_ask
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.names import placeholder_job_name
from bridge.jobs.options import pod_group, slurm_options
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest, TopologyAsk
from bridge.jobs.resources import pod_resources
from bridge.jobs.timelimit import MAX_MINUTES


def job_request_for_pod(pod: Pod) -> JobRequest:
    """The placeholder job for a pod, or for its whole group (one node per pod); a member
    of a mixed group asks for its component's nodes (jobs/components.py).

    Raises InvalidPodRequest, naming the field and the accepted form, for anything
    Slurm could not be asked for.
    """
    return _translated(pod, through_the_webhook=True)


def member_ask(pod: Pod) -> JobRequest:
    """What a group member asks Slurm for, released or not: its job request, owned by nobody
    (a released member no longer carries the gate its DRA claims were checked with).  A
    group's job (each part's, for a mixed group) is built from one member, so every member of
    it must ask the same."""
    return _translated(pod, through_the_webhook=False)


def _translated(pod: Pod, *, through_the_webhook: bool) -> JobRequest:
    meta = pod.metadata or ObjectMeta()
    uid = _required(meta.uid, "metadata.uid")
    namespace = _required(meta.namespace, "metadata.namespace")
    name = _required(meta.name, "metadata.name")
    options = slurm_options(meta.annotations)
    group = pod_group(meta.labels)
    if through_the_webhook:
        _claims_through_the_webhook(pod, options.gpus)
    resources = pod_resources(pod)
    gpu = gpu_ask(options, resources.gpus)
    components = group_components(meta.labels, meta.annotations)
    if components is None:  # a mixed group's job is checked whole: placement/hetjob.py
        check_segment(options.placement.topology, group.size if group else 1)
    nodes = components.own.size if components else group.size if group else 1
    return JobRequest(
        name=placeholder_job_name(namespace, options.job_name or (group.name if group else name)),
        owner=PodOwner(uid if through_the_webhook else ""),
        cpus=resources.cpus,
        memory_mb=resources.memory_mb,
        gpus=gpu.gpus,
        gpu_type=gpu.gpu_type,
        gpu_shards=gpu.shards,
        nodes=nodes,
        time_limit_minutes=options.time_limit_minutes or _deadline_minutes(pod),
        placement=options.placement,
    )


def _claims_through_the_webhook(pod: Pod, claimed_gpus: int | None) -> None:
    """A pod's DRA claims (``spec.resourceClaims``) are Slurm's to allocate: the webhook reads
    them and writes what they ask for (``slurmbridge.io/gpus``), and holds the pod with the
    bridge's gate until the bridge has written the claims' allocation from Slurm's GPUs.  A
    pod that came without either would have kube-scheduler pick devices Slurm does not know
    of (possibly the GPU Slurm gives a native job)."""
    claims = pod.spec.resourceClaims if pod.spec else None
    gates = [g.name for g in (pod.spec.schedulingGates if pod.spec else None) or []]
    if claims and (claimed_gpus is None or keys.SLURM_GATE not in gates):
        raise InvalidPodRequest(
            "spec.resourceClaims", ", ".join(c.name for c in claims),
            "claims read by the slurmbridge webhook (it asks Slurm for their devices and holds "
            f"the pod until Slurm allocated them; the pod came without its {keys.GPUS} "
            f"annotation or its {keys.SLURM_GATE} gate): create the pod in an enrolled "
            f"namespace, or ask with resource {keys.GPU_RESOURCE}",
        )


def check_segment(topology: TopologyAsk | None, nodes: int, component: str | None = None) -> None:
    """Slurm refuses a job whose node count is not a multiple of its segment size; a
    heterogeneous job's ``component`` takes its own segment, on its own nodes."""
    segment = topology.segment if topology else None
    if segment is not None and nodes % segment:
        whose = (f"component {component}'s {nodes} node(s), one per pod of that part of the "
                 "group (Slurm applies a heterogeneous job's segment to each component)"
                 if component else f"the job's {nodes} node(s), one per pod of the group")
        accepted = (f"a divisor of {whose}: Slurm places the nodes in segments of this many, "
                    "each segment within one block")
        raise InvalidPodRequest(keys.SEGMENT, str(segment), accepted, kind="annotation")


def _required(value: str | None, field: str) -> str:
    """Identity fields only the API server fills in; the job is useless without them."""
    if not value:
        raise InvalidPodRequest(field, None, "a pod as stored by the API server")
    return value


def _deadline_minutes(pod: Pod) -> int | None:
    """``activeDeadlineSeconds`` as a Slurm time limit: the pod may not outlive its job."""
    seconds = pod.spec.activeDeadlineSeconds if pod.spec else None
    if seconds is None:
        return None
    if seconds <= 0:
        raise InvalidPodRequest(
            "spec.activeDeadlineSeconds", str(seconds), "a positive number of seconds"
        )
    return min(-(-seconds // 60), MAX_MINUTES)
