"""The steady mixed load, from its own seeded stream (so the fault schedule does not depend
on it): single pods, GPU pods, 2- and 4-pod groups (the bridge's group labels), mixed groups (a
CPU launcher beside two GPU workers: one heterogeneous job, issue 43), 2-pod gang
Jobs (``slurmbridge.io/gang``, the Job controller makes the pods), pods that exit by
themselves (a lifetime the harness's kubelet honours), workloads deleted at random, and
native ``sbatch`` GPU jobs of the Slurm user alice.  Bounded: at most ``max_pods`` pods and
``max_native`` native jobs at once.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from lightkube import AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType

from benchmarks.soak.kubelet import JOB_NAME_LABEL, Kubelet
from bridge import keys
from bridge.jobs.components import component_text
from slurmbridge_devkit.e2e import create_pod, pod_manifest
from slurmbridge_devkit.slurm import SlurmTarget

NATIVE_USER = "alice"  # a site user with her own account (deploy/slurm/recipe.sh)
NATIVE_NAME = "soak-native"
ACTIONS = {  # action -> weight
    "single": 3, "gpu": 3, "group2": 2, "group4": 1, "mixed": 1, "gang": 1, "native": 2,
    "delete": 2,
}
MIXED = (("launcher", 1), ("workers", 2))  # a mixed group's components, in rank order

LIFETIME_SECONDS = (30.0, 240.0)
TICK_SECONDS = (1.0, 4.0)


@dataclass
class Load:
    kube: AsyncClient
    slurm: SlurmTarget
    namespace: str
    kubelet: Kubelet
    seed: int
    max_pods: int = 24
    max_native: int = 4
    counts: Counter[str] = field(default_factory=Counter)
    _n: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(f"soak-load-{self.seed}")

    async def run(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline:
            action = self.rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
            try:
                await asyncio.wait_for(self.act(action), 60)
            except Exception as exc:  # a fault may take the apiserver or Slurm away: go on
                self.counts[f"{action} refused or failed"] += 1
                print(f"  load: {action} failed: {str(exc)[:160]}", flush=True)
            await asyncio.sleep(self.rng.uniform(*TICK_SECONDS))

    async def act(self, action: str) -> None:
        live = await self._live_pods()
        if action == "delete":
            await self._delete_one(live)
        elif action == "native":
            await asyncio.to_thread(self._native)
        elif action == "gang":
            if len(live) + 2 <= self.max_pods:
                await self._gang_job()
        elif action == "mixed":
            if len(live) + sum(size for _, size in MIXED) <= self.max_pods:
                await self._mixed()
        else:
            size = {"group2": 2, "group4": 4}.get(action, 1)
            if len(live) + size <= self.max_pods:
                await self._create(action, size)

    async def _live_pods(self) -> list[Pod]:
        return [p async for p in self.kube.list(Pod, namespace=self.namespace)
                if p.metadata and not p.metadata.deletionTimestamp]

    async def _create(self, action: str, size: int) -> None:
        self._n += 1
        name = f"{action}-{self._n}"
        gpus = self.rng.choice([1, 2]) if action == "gpu" else self.rng.choice([0, 0, 1])
        if size == 1 and action == "single":
            gpus = 0
        labels = {keys.GROUP: name, keys.GROUP_SIZE: str(size)} if size > 1 else {}
        lifetime = self.rng.uniform(*LIFETIME_SECONDS)
        for i in range(size):
            pod = f"{name}-{i}" if size > 1 else name
            self.kubelet.lifetimes[pod] = lifetime
            await create_pod(self.kube, self.namespace,
                             pod_manifest(pod, cpu="1", memory="512Mi", gpus=gpus, labels=labels))
            self.counts[f"pods created ({action})"] += 1

    async def _mixed(self) -> None:
        """A CPU launcher and GPU workers in one group, each part a component of its own."""
        self._n += 1
        name, size = f"mixed-{self._n}", sum(size for _, size in MIXED)
        gpus = {"launcher": 0, "workers": self.rng.choice([1, 2])}
        lifetime = self.rng.uniform(*LIFETIME_SECONDS)
        annotations = {keys.GROUP_COMPONENTS: component_text(MIXED)}
        ranks = [part for part, n in MIXED for _ in range(n)]
        for rank, part in enumerate(ranks):
            pod = f"{name}-{rank}"
            self.kubelet.lifetimes[pod] = lifetime
            labels = {keys.GROUP: name, keys.GROUP_SIZE: str(size),
                      keys.GROUP_RANK: str(rank), keys.GROUP_COMPONENT: part}
            await create_pod(self.kube, self.namespace, pod_manifest(
                pod, cpu="1", memory="512Mi", gpus=gpus[part], labels=labels,
                annotations=annotations))
            self.counts["pods created (mixed)"] += 1

    async def _gang_job(self) -> None:
        """A 2-pod gang Job (Indexed, no retries: an evicted member fails the Job)."""
        self._n += 1
        name = f"gang-{self._n}"
        self.kubelet.lifetimes[name] = self.rng.uniform(*LIFETIME_SECONDS)
        pod = pod_manifest(name, cpu="1", memory="512Mi")
        assert pod.spec is not None
        template = {"spec": {**pod.spec.to_dict(), "restartPolicy": "Never"}}
        await self.kube.create(cast(Job, Job.from_dict({
            "metadata": {"name": name, "namespace": self.namespace,
                         "annotations": {keys.GANG: "true"}},
            "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                     "backoffLimit": 0, "template": template},
        })))
        self.counts["gang Jobs created (2 pods)"] += 1

    async def _delete_one(self, live: list[Pod]) -> None:
        """A whole workload deleted as a user would: a group's members together, a gang Job
        through its Job (the garbage collector deletes its pods)."""
        workloads: dict[str, list[str]] = {}
        for pod in live:
            assert pod.metadata is not None and pod.metadata.name is not None
            labels = pod.metadata.labels or {}
            key = (f"job:{labels[JOB_NAME_LABEL]}" if JOB_NAME_LABEL in labels
                   else labels.get(keys.GROUP, pod.metadata.name))
            workloads.setdefault(key, []).append(pod.metadata.name)
        if not workloads:
            return
        victim = sorted(workloads)[self.rng.randrange(len(workloads))]
        if victim.startswith("job:"):
            await delete_job(self.kube, self.namespace, victim.removeprefix("job:"))
            self.counts["gang Jobs deleted at random"] += 1
            return
        for name in workloads[victim]:
            await self.kube.delete(Pod, name, namespace=self.namespace)
            self.counts["pods deleted at random"] += 1

    def _native(self) -> None:
        live = self.slurm.admin("squeue", "-h", "-u", NATIVE_USER, "-o", "%i").split()
        if len(live) >= self.max_native:
            return
        gpus, seconds = self.rng.choice([1, 2]), int(self.rng.uniform(30, 150))
        self.slurm.admin(
            "runuser", "-u", NATIVE_USER, "--", "sbatch", "--parsable", "-J", NATIVE_NAME,
            f"--gres=gpu:{gpus}", "-c", "1", "--mem=256", "-t", "5", "-o", "/dev/null",
            "--wrap", f"sleep {seconds}", timeout=30,
        )
        self.counts["native GPU jobs submitted"] += 1


async def delete_job(kube: AsyncClient, namespace: str, name: str) -> None:
    """A Job and, through the garbage collector, its pods (gracefully: the kubelet stops them)."""
    await kube.delete(Job, name, namespace=namespace, cascade=CascadeType.BACKGROUND)
