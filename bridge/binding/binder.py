"""Bind a pod where Slurm put it, and nowhere else.

The annotations (job id, Slurm node, GPU indices and CUDA's numbering of them) travel in
the Binding, which the apiserver applies in one write with the node name, so a container
that starts on the node always finds its GPU indices through the downward API.
"""

from datetime import UTC, datetime
from typing import Protocol

import structlog
from lightkube.resources.core_v1 import Pod

from bridge import metrics
from bridge.kube import writes
from bridge.link.bound import CudaNumbering, bound, cuda_visible_devices
from bridge.placement.outcomes import Placement
from bridge.placement.placer import Placer
from bridge.ports import KubeBindPod, KubeGet

log = structlog.get_logger(__name__)


class BindError(Exception):
    """Refused or failed bind; the message goes back to kube-scheduler and the pod's events."""


class BinderKube(KubeBindPod, KubeGet, Protocol):
    """The Binding created, the pod read when filter's memory does not know it."""


class Binder:
    def __init__(
        self, kube: BinderKube, placer: Placer, *, cuda_numbering: CudaNumbering = "renumbered"
    ) -> None:
        self._kube = kube
        self._placer = placer
        self._cuda_numbering = cuda_numbering

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        known = self._placer.known_placement(uid)  # filter just saw the pod: no read needed
        placement = known or await self._placement_read(namespace, name, uid, node)
        if placement is None:
            return  # bound to this node already
        if placement.kube_node != node:
            raise BindError(
                f"refusing to bind {namespace}/{name} to {node}: Slurm job "
                f"{placement.job_id} holds {placement.kube_node} for it"
            )
        try:
            cuda = cuda_visible_devices(placement.gpu_ids, self._cuda_numbering)
            recorded = bound(
                placement.job_id, placement.owner, placement.slurm_node, placement.gpu_ids, cuda
            )
            await writes.bind(self._kube, namespace, name, uid, node, annotations=recorded)
        except writes.AlreadyBound:  # bound meanwhile, or recreated (the UID precondition)
            current = await self._kube.get(Pod, name, namespace=namespace)
            if current.metadata is None or current.metadata.uid != uid:
                raise BindError(f"pod {namespace}/{name} was recreated") from None
            if not (current.spec and current.spec.nodeName == node):
                raise BindError(f"pod {namespace}/{name} was bound elsewhere meanwhile") from None
        self._placer.bound(uid)
        metrics.PODS_BOUND.inc()
        created = self._placer.created_at(uid)
        if created is not None:
            metrics.POD_TO_BIND_SECONDS.observe((datetime.now(UTC) - created).total_seconds())
        log.info(
            "bind.done", pod=f"{namespace}/{name}", node=node,
            job_id=placement.job_id, gpu_ids=placement.gpu_ids,
        )

    async def _placement_read(
        self, namespace: str, name: str, uid: str, node: str
    ) -> Placement | None:
        """The placement from a fresh read of the pod (after a restart, or another replica's
        filter); None when it is bound to ``node`` already."""
        pod = await self._kube.get(Pod, name, namespace=namespace)
        assert pod.metadata is not None
        if pod.metadata.uid != uid:
            raise BindError(f"pod {namespace}/{name} was recreated (uid {pod.metadata.uid})")
        if pod.spec and pod.spec.nodeName:
            if pod.spec.nodeName == node:
                return None
            raise BindError(f"pod {namespace}/{name} is already bound to {pod.spec.nodeName}")
        return await self._placer.placement_for(pod)
