"""The harness plays the kubelet (the chroot setup has none; docs/control-plane.md): a bound
pod starts Running, exits by itself when its lifetime is up, and a deleted pod's containers
stop ``STOP_SECONDS`` later (terminal status written, then the pod object removed with grace
0, as the kubelet's status manager does).  Finished pods are removed ``KEEP_SECONDS`` later,
as a Job's TTL would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from benchmarks.soak.invariants import TERMINAL_PHASES
from slurmbridge_devkit.kubelet import set_pod_phase

STOP_SECONDS = 2.0
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # on the pods of a batch Job
KEEP_SECONDS = 5.0


@dataclass
class Kubelet:
    kube: AsyncClient
    namespace: str
    lifetimes: dict[str, float] = field(default_factory=dict)  # pod name -> seconds it runs
    started: dict[str, float] = field(default_factory=dict)
    stopping: dict[str, float] = field(default_factory=dict)  # first seen deleting
    finished: dict[str, float] = field(default_factory=dict)
    placed: set[str] = field(default_factory=set)  # uids ever bound
    completed: int = 0  # pods that exited by themselves

    async def step(self) -> None:
        """One pass over the namespace's pods."""
        now = time.time()
        async for pod in self.kube.list(Pod, namespace=self.namespace):
            try:
                await self._one(pod, now)
            except ApiError as exc:
                if exc.status.code not in (404, 409, 422):
                    raise

    async def _one(self, pod: Pod, now: float) -> None:
        meta, spec = pod.metadata, pod.spec
        assert meta is not None and spec is not None and meta.name is not None
        name, phase = meta.name, (pod.status.phase if pod.status else None) or "Pending"
        if spec.nodeName and meta.uid:
            self.placed.add(meta.uid)
        if meta.deletionTimestamp is not None:
            first = self.stopping.setdefault(name, now)
            if now - first < STOP_SECONDS:
                return
            if spec.nodeName and phase not in TERMINAL_PHASES:
                await set_pod_phase(self.kube, pod, "Failed", exit_code=137)
            await self.kube.delete(Pod, name, namespace=self.namespace, grace_period=0)
            return
        if phase in TERMINAL_PHASES:
            if now - self.finished.setdefault(name, now) >= KEEP_SECONDS:
                await self.kube.delete(Pod, name, namespace=self.namespace)
            return
        if not spec.nodeName:
            return
        if phase == "Pending":
            await set_pod_phase(self.kube, pod, "Running")
            self.started[name] = now
            return
        workload = (meta.labels or {}).get(JOB_NAME_LABEL, name)  # a Job's pods share one
        lifetime = self.lifetimes.get(name, self.lifetimes.get(workload))
        if lifetime is not None and now - self.started.setdefault(name, now) >= lifetime:
            await set_pod_phase(self.kube, pod, "Succeeded")
            self.completed += 1
