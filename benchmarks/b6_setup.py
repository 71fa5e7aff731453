"""B6's site: a Slurm of many nodes, the Kubernetes Nodes mirroring them, a native queue.

* ``scale_slurm``: the local Slurm restarted with ``NODES`` slurmd (``cluster.sh up`` with
  NODES/CPUS/GPUS: one ``slurmd -N node<k>`` per node in the same chroot); the default
  4-node shape is put back afterwards, because the test suite expects it.
* ``mirror_nodes``: ``kube-node<k>`` for every Slurm ``node<k>`` (label
  ``node-restriction.kubernetes.io/slurmbridge-slurm-node``, the managed taint, the same CPUs
  and GPUs), as ``start_stack`` makes its four; the extra ones are deleted afterwards.
* ``native_queue``: plain batch jobs with no bridge marker from site users (alice runs, bob
  waits), submitted through slurmrestd before the bridge starts, so its first resync reads
  each once as at a site it joins.  They are not user ``slurm``, whose jobs the benchmarks
  cancel between rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from benchmarks import live
from bridge import keys
from bridge.slurm.client import SlurmClient
from slurmbridge_devkit.kubelet import create_node, delete_node, node_status
from slurmbridge_devkit.slurm import CLUSTER_SH, SlurmTarget

PID_MAX = Path("/proc/sys/kernel/pid_max")
PIDS_PER_RUNNING_JOB = 12  # slurmstepd (9 threads) + job script + sleep, with room
RUNNER, WAITER = "alice", "bob"  # site users with their own accounts (recipe.sh accounts)
NATIVE_SECONDS = 86_400  # native jobs outlive the benchmark; it cancels them


@dataclass(frozen=True)
class Shape:
    """Slurm's nodes and the native queue sharing them with the bridge."""

    nodes: int = 256
    cpus: int = 64
    gpus: int = 8
    native_running: int = 1_000
    native_pending: int = 9_000
    native_cpus: int = 8  # CPUs per running native job


def ensure_pid_room(running_jobs: int) -> str:
    """Raise kernel.pid_max if the jobs' processes would not fit (32,768 on many kernels).

    Every running batch job is a slurmstepd with 9 threads plus its script: 5,000 pods and
    1,000 native jobs need ~70,000 pids.  Returns what was done, for the notes.
    """
    need = running_jobs * PIDS_PER_RUNNING_JOB + 30_000
    have = int(PID_MAX.read_text())
    if have >= need:
        return f"kernel.pid_max {have}"
    PID_MAX.write_text(str(need))
    return f"kernel.pid_max raised from {have} to {need} (running jobs need ~10 pids each)"


def _cluster(*args: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        ["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=1800,
        check=False, env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise live.SetupError(f"cluster.sh {' '.join(args)} failed: {done.stderr[-2000:]}")


@contextlib.contextmanager
def scale_slurm(version: str, shape: Shape) -> Iterator[SlurmTarget]:
    """The local Slurm with ``shape.nodes`` nodes; the default shape is restored afterwards."""
    env = {"NODES": str(shape.nodes), "CPUS": str(shape.cpus), "GPUS": str(shape.gpus)}
    print(f"  B6: restarting Slurm {version} with {shape.nodes} nodes x {shape.cpus} CPUs, "
          f"{shape.gpus} GPUs (the default shape is restored afterwards)", flush=True)
    t0 = time.monotonic()
    try:
        _cluster("up", version, env=env)
        print(f"  B6: Slurm up with {shape.nodes} nodes in {time.monotonic() - t0:.0f} s",
              flush=True)
        yield live.slurm_target(version)
    finally:
        _cluster("down", version)
        _cluster("up", version)


async def _mirror_one(kube: AsyncClient, k: int, shape: Shape, pods: str) -> None:
    name = f"kube-node{k}"
    status = node_status(str(shape.cpus), "256Gi", shape.gpus, pods=pods)
    try:
        await kube.patch(Node.Status, name, {"status": status}, patch_type=PatchType.MERGE)
    except ApiError as exc:
        if exc.status.code != 404:
            raise
        await create_node(
            kube, name, cpu=str(shape.cpus), memory="256Gi", gpus=shape.gpus,
            labels={keys.NODE_SLURM_NODE: f"node{k}"},
            taints=[{"key": keys.MANAGED_TAINT, "effect": "NoSchedule"}],
        )
        await kube.patch(Node.Status, name, {"status": status}, patch_type=PatchType.MERGE)


async def mirror(
    kube: AsyncClient, shape: Shape, ks: range, *, pods: str = "110", parallel: int = 16
) -> list[str]:
    """``kube-node<k>`` for each k in ``ks``, standing for Slurm's ``node<k>`` (made or resized)."""
    slots = asyncio.Semaphore(parallel)

    async def one(k: int) -> None:
        async with slots:
            await _mirror_one(kube, k, shape, pods)

    await asyncio.gather(*(one(k) for k in ks))
    return [f"kube-node{k}" for k in ks]


@contextlib.asynccontextmanager
async def mirror_nodes(
    kube: AsyncClient, shape: Shape, *, keep: int = 4, parallel: int = 16
) -> AsyncIterator[list[str]]:
    """All ``shape.nodes`` mirrored; those past ``keep`` are deleted afterwards.

    ``kube-node1..keep`` belong to ``start_stack``, which recreates them with its own shape:
    call ``mirror`` on them again once the stack runs.
    """
    names = [f"kube-node{k}" for k in range(1, shape.nodes + 1)]
    try:
        yield await mirror(kube, shape, range(1, shape.nodes + 1), parallel=parallel)
    finally:
        slots = asyncio.Semaphore(parallel)

        async def drop(name: str) -> None:
            async with slots:
                await delete_node(kube, name)

        await asyncio.gather(*(drop(n) for n in names[keep:]))


async def _submit_native(
    slurm: SlurmTarget, user: str, jobs: int, cpus: int, *, hold: bool = False,
    fields: dict[str, object] | None = None, parallel: int = 8,
) -> None:
    """``jobs`` plain jobs with no bridge marker through slurmrestd as ``user``, ``parallel``
    in flight.  Not arrays: Slurm lists array tasks as ``"4_7"``, which the bridge never
    reads, so only plain jobs cost its resync what a site's queue costs.  Described as the
    bridge's own (``EXTERNAL_JOB`` on Slurm 25.05+): here all 256 nodes share this machine's
    2 CPUs, where 1,000 running batch jobs' slurmstepd would eat about a CPU."""
    slots = asyncio.Semaphore(parallel)
    async with SlurmClient(slurm.settings(max_connections=parallel)) as client:
        await client.connect()

        async def one() -> None:
            async with slots:
                await live.submit_job(
                    client, "b6-native", cpus=cpus, hold=hold, user=user, fields=fields
                )

        await asyncio.gather(*(one() for _ in range(jobs)))


def count_jobs(slurm: SlurmTarget, user: str, states: str) -> int:
    out = slurm.admin("squeue", "-h", "-r", "-u", user, "-t", states, "-o", "%i")
    return len(out.split())


async def _wait_running(slurm: SlurmTarget, want: int, timeout: float) -> float:  # noqa: ASYNC109
    t0 = time.monotonic()
    while True:
        running = await asyncio.to_thread(count_jobs, slurm, RUNNER, "RUNNING")
        if running >= want:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise live.SetupError(f"native jobs: {running}/{want} running after {timeout:.0f} s")
        await asyncio.sleep(2)


def cancel_native(slurm: SlurmTarget) -> None:
    for user in (RUNNER, WAITER):
        slurm.admin("scancel", "-u", user, check=False, timeout=600)  # 10,000 jobs


@contextlib.asynccontextmanager
async def native_queue(
    slurm: SlurmTarget, shape: Shape, timeout: float = 600  # noqa: ASYNC109
) -> AsyncIterator[str]:
    """The native jobs, submitted and (the running share) started; cancelled afterwards.

    Pending ones wait for a reason that does not hold back other jobs (held, or a start
    time tomorrow), so the bridge's and Slurm alone's jobs compete only for what the
    running ones leave free; the queue still holds every one of them.
    """
    t0 = time.monotonic()
    try:
        await _submit_native(slurm, RUNNER, shape.native_running, shape.native_cpus)
        half = shape.native_pending // 2
        await _submit_native(slurm, WAITER, half, 1, hold=True)
        tomorrow = int(time.time()) + NATIVE_SECONDS
        await _submit_native(slurm, WAITER, shape.native_pending - half, 1,
                             fields={"begin_time": {"set": True, "number": tomorrow}})
        submitted = time.monotonic() - t0
        started = await _wait_running(slurm, shape.native_running, timeout)
        settled = await live.wait_cpu_idle()
        pending = await asyncio.to_thread(count_jobs, slurm, WAITER, "PENDING")
        yield (f"{shape.native_running:,} native jobs running ({shape.native_cpus} CPUs each, "
               f"user {RUNNER}) and {pending:,} pending (user {WAITER}: half held, half "
               f"a start time tomorrow), submitted one by one through slurmrestd in "
               f"{submitted:.0f} s, all running after {started:.0f} s more; the machine idle "
               f"again {settled:.0f} s later")
    finally:
        await asyncio.to_thread(cancel_native, slurm)
