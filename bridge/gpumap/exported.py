"""The GPU map as metrics: what the bridge's own jobs and pods hold, per node and index.

Every replica draws it from what it already keeps (the job index's live placeholders, the pod
cache), so exporting costs no request.  Labels stay bounded: node, index, holder kind and the
pods' namespace, never a pod's name.  A pod whose job the index does not hold is left out (its
job may not have been read yet); ``slurmbridge gpus`` reads Slurm and Kubernetes whole."""

import asyncio
from collections.abc import Callable, Iterable

import structlog

from bridge import metrics
from bridge.gpumap.kube_facts import recorded_hold
from bridge.gpumap.model import Facts, GpuMap, Problem, build
from bridge.gpumap.slurm_facts import job_holds
from bridge.link.views import PodView
from bridge.slurm.types import SlurmJob

log = structlog.get_logger(__name__)

EXPORT_INTERVAL_SECONDS = 5.0


def bridge_map(jobs: Iterable[SlurmJob], pods: Iterable[PodView]) -> GpuMap:
    """The map of the bridge's placeholders (the index believed them) and their pods."""
    live = {job.job_id: job for job in jobs}
    holds = [hold for view in pods if view.job_id in live
             and (hold := recorded_hold(view.namespace, view.name, view.recorded,
                                        phase=view.phase, kube_node=view.node_name))]
    return build(Facts(jobs=job_holds(live.values(), lambda _job: True), pods=holds))


def export(gpu_map: GpuMap) -> None:
    """Replace the exported samples with ``gpu_map``'s."""
    metrics.GPU_HELD.clear()
    for node in gpu_map.nodes:
        for gpu in node.gpus:
            for holder in gpu.holders:
                metrics.GPU_HELD.labels(node.node, str(gpu.index), str(holder.kind),
                                        holder.namespace).set(1)
    found = gpu_map.disagreements
    for problem in Problem:
        metrics.GPU_DISAGREEMENTS.labels(str(problem)).set(
            sum(1 for d in found if d.problem is problem))


async def export_forever(
    jobs: Callable[[], Iterable[SlurmJob]], pods: Callable[[], Iterable[PodView]],
    interval: float = EXPORT_INTERVAL_SECONDS,
) -> None:
    """Redraw every ``interval`` (a scrape's pace, not the poller's: one pass over the pods)."""
    while True:
        try:
            export(bridge_map(jobs(), pods()))
        except Exception as exc:  # the metrics go stale; placement carries on
            log.warning("gpumap.export_failed", error=repr(exc),
                        hint="slurmbridge_gpu_* keep their last values; a bug: report it")
        await asyncio.sleep(interval)
