"""B1-full: pods that arrive while Slurm is full, what they cost while they wait, and how
fast they are bound once capacity comes back.

A native job (root's, ``sbatch --exclusive`` on every node) holds the cluster; N bridge pods
are created and wait ``hold`` seconds while their jobs pend; then the holder is cancelled
and the clock runs until every pod is bound.  The bridge's /metrics and the apiserver's
request counters are read at the three moments, so each cost is split into "while the job
pended" and "after allocation": filter calls, apiserver writes (the benchmark's own
creates left out), slurmrestd requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from lightkube import AsyncClient

from benchmarks import live
from benchmarks.b1_measure import WRITE_VERBS, Limits, create_pods, drop_pods, watch_binds
from benchmarks.common import percentile
from bridge import keys
from slurmbridge_devkit.kube import ControlPlane
from slurmbridge_devkit.slurm import SlurmTarget

HOLDER = "b1-full-holder"
SLURM_PREFIX = "slurmbridge_slurm_request_seconds_count{operation="


@dataclass
class Costs:
    """What a window cost, in all (divide by the pods for per pod)."""

    filter_calls: float
    writes: float  # apiserver writes, the benchmark's own pod creates left out
    slurm_requests: float
    events: float  # POST events (the bridge's pending status, kube-scheduler's Scheduled)
    status_writes: float  # PATCH pods/status
    by_request: dict[str, float]  # the writes by "VERB resource", every client's


@dataclass
class FullRun:
    pods: int
    hold: float
    release_to_bound: float  # seconds from the holder's cancel to the last pod bound
    latencies: list[float]  # seconds from the holder's cancel, per pod
    waiting: Costs
    after: Costs
    bound_while_full: int  # must be 0: Slurm had no room

    def latency_ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000


def costs(
    calls: dict[str, float], bridge: dict[str, float], *, created: int
) -> Costs:
    writes = sum(v for k, v in calls.items() if k.split(" ")[0] in WRITE_VERBS)
    return Costs(
        filter_calls=bridge.get("slurmbridge_filter_seconds_count{}", 0.0),
        writes=writes - min(calls.get("POST pods", 0.0), created),
        slurm_requests=sum(v for k, v in bridge.items() if k.startswith(SLURM_PREFIX)),
        events=calls.get("POST events", 0.0),
        status_writes=calls.get("PATCH pods/status", 0.0),
        by_request={k: v for k, v in calls.items() if k.split(" ")[0] in WRITE_VERBS},
    )


async def _holder(slurm: SlurmTarget, timeout: float = 120) -> str:  # noqa: ASYNC109
    """Every node held by one native job, RUNNING before the pods come."""
    await live.wait_slurm_quiet(slurm)  # the last round's placeholders are gone
    # sinfo -N lists a node once per partition it is in
    nodes = len(set(slurm.admin("sinfo", "-h", "-N", "-o", "%N").split()))
    # --mem=0: all of each node's memory (a default per CPU times every CPU may exceed it)
    job = slurm.admin("sbatch", "--parsable", "--exclusive", f"--nodes={nodes}", "--mem=0",
                      f"--job-name={HOLDER}", "-o", "/dev/null", "--wrap", "sleep 3600").strip()
    deadline = time.monotonic() + timeout
    while slurm.admin("squeue", "-h", "-j", job, "-o", "%T", check=False).strip() != "RUNNING":
        if time.monotonic() > deadline:
            why = slurm.admin("squeue", "-h", "-j", job, "-o", "%T %r", check=False).strip()
            slurm.admin("scancel", job, check=False)
            raise TimeoutError(f"B1-full: the holder job {job} ({nodes} nodes, exclusive) did "
                               f"not start in {timeout:.0f} s: {why}")
        await asyncio.sleep(0.5)
    return job


async def pods_bound_when_full(
    kube: AsyncClient, slurm: SlurmTarget, cp: ControlPlane, n: int, *, hold: float,
    metrics_port: int, lim: Limits,
) -> FullRun:
    job = await _holder(slurm)
    ns = await live.bench_namespace(kube, "bench-b1-full", bridge=True)
    bound: dict[str, float] = {}
    watcher = asyncio.create_task(watch_binds(kube, ns, n, bound))
    try:
        pods = [live.bench_pod(f"p{i:05d}", keys.SCHEDULER_NAME, "bench-b1") for i in range(n)]
        await asyncio.sleep(1)  # the watch is open before the first create
        calls0 = (await asyncio.to_thread(live.apiserver_requests, cp))[0]
        work0 = await asyncio.to_thread(live.metric_samples, metrics_port)
        await create_pods(kube, ns, pods, lim.create_parallel)
        await asyncio.sleep(hold)
        calls1 = (await asyncio.to_thread(live.apiserver_requests, cp))[0]
        work1 = await asyncio.to_thread(live.metric_samples, metrics_port)
        bound_while_full = len(bound)
        released = time.perf_counter()
        await asyncio.to_thread(slurm.admin, "scancel", job)
        try:
            await asyncio.wait_for(asyncio.shield(watcher), lim.total)
        except TimeoutError:
            raise TimeoutError(f"B1-full: {len(bound)}/{n} pods bound in {ns}") from None
        calls2 = (await asyncio.to_thread(live.apiserver_requests, cp))[0]
        work2 = await asyncio.to_thread(live.metric_samples, metrics_port)
        return FullRun(
            pods=n, hold=hold, release_to_bound=max(bound.values()) - released,
            latencies=[max(0.0, t - released) for t in bound.values()],
            waiting=costs(live.counts_since(calls0, calls1), live.counts_since(work0, work1),
                           created=n),
            after=costs(live.counts_since(calls1, calls2), live.counts_since(work1, work2),
                         created=0),
            bound_while_full=bound_while_full,
        )
    finally:
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher
        await asyncio.to_thread(slurm.admin, "scancel", job, check=False)
        await drop_pods(kube, ns)
        await asyncio.sleep(3)
        await asyncio.to_thread(slurm.admin, "scancel", "-u", slurm.user, check=False)
        await live.wait_slurm_quiet(slurm)


def summary(run: FullRun) -> str:
    per = run.pods
    w, a = run.waiting, run.after
    return (f"held {run.hold:.0f} s, {run.bound_while_full} bound while full; release -> all "
            f"bound {run.release_to_bound:.1f} s (p50 {run.latency_ms(50):.0f} ms, p99 "
            f"{run.latency_ms(99):.0f} ms); per pod while waiting: {w.filter_calls / per:.2f} "
            f"filter, {w.writes / per:.2f} writes ({w.events / per:.2f} events, "
            f"{w.status_writes / per:.2f} status), {w.slurm_requests / per:.2f} slurmrestd; "
            f"after allocation: {a.filter_calls / per:.2f} filter, {a.writes / per:.2f} writes, "
            f"{a.slurm_requests / per:.2f} slurmrestd")
