"""The bridge's records on Kubernetes objects as GPU map facts: a pod's ``gpu-ids`` on its
Slurm node, for its job.  Lightkube's models and the keys only: ``kubectl slurmbridge`` (the
base install) reads pods through it too."""

from collections.abc import Mapping

from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.gpumap.model import PodHold
from bridge.link.ownership import job_id_in

_ENDED = frozenset({"Succeeded", "Failed"})


def recorded_hold(
    namespace: str, name: str, annotations: Mapping[str, str], *, phase: str, kube_node: str,
    reader: str | None = None,
) -> PodHold | None:
    """The GPUs a pod holds by the bridge's record, None when it holds none (no record, or
    ended).  ``reader``: the namespace of who looks; another namespace's pod is not named."""
    node, ids = annotations.get(keys.SLURM_NODE, ""), annotations.get(keys.GPU_IDS, "")
    indices = tuple(int(i) for i in ids.split(",") if i.strip().isdigit())
    if not (node and indices) or phase in _ENDED:
        return None
    shown = reader is None or reader == namespace
    return PodHold(node, f"{namespace}/{name}" if shown else "", namespace if shown else "",
                   job_id_in(annotations), indices,
                   shared=bool(annotations.get(keys.GPU_SHARDS)), kube_node=kube_node)


def pod_hold(pod: Pod, reader: str | None = None) -> PodHold | None:
    meta, spec, status = pod.metadata, pod.spec, pod.status
    if meta is None or not (meta.name and meta.namespace):
        return None
    return recorded_hold(meta.namespace, meta.name, meta.annotations or {},
                         phase=(status.phase if status else None) or "",
                         kube_node=(spec.nodeName if spec else None) or "", reader=reader)
