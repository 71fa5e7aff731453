"""B1: end to end - N single-CPU pods created at once, time until all are bound.

Per repeat, in this order, each from an idle Slurm and an empty namespace:

(a) Slurm alone: N placeholder jobs equal to what the bridge submits for such a pod
    (``job_request_for_pod``; comment without a pod UID so the running bridge ignores
    them), submitted through slurmrestd over 8 parallel connections; time from the first
    submit until ``GET /jobs/state/`` shows all RUNNING.
(b) the default kube-scheduler: N plain pods (profile ``bench-default``, default plugins,
    no extender) to the same Nodes; time from the first create until all have a node.
(c) the bridge: N pods with ``schedulerName: slurmbridge`` through kube-scheduler +
    extender + Slurm; same clock.

Both kube-schedulers are separate instances of the same binary started by this benchmark
with the same ``clientConnection`` (``--kube-qps``/``--kube-burst``, default 50/100 =
kube-scheduler's defaults).  Pods are created by this process (lightkube, no client-side
rate limit) with ``create_parallel`` requests in flight, identically for (b) and (c).
Pods carry the managed-taint toleration themselves: the webhook is not in the timed path.
Nodes: the 4 ``kube-node<k>`` of ``start_stack``, resized to ``cpus_per_node`` CPUs and
``pods_per_node`` pods; Slurm is restarted with that many CPUs per node if it has fewer
than N in total (and put back afterwards).
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube.models.meta_v1 import ObjectMeta

from benchmarks import live
from benchmarks.common import Figure, Outcome, at_least, fmt
from bridge import keys
from bridge.config import Settings
from bridge.jobs.owner import PodOwner
from bridge.jobs.translate import job_request_for_pod
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import JobState
from slurmbridge_devkit.kube import (
    ControlPlane,
    create_namespace,
    scheduler_config,
    start_scheduler,
    stop_scheduler,
    unique_name,
)
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import replace_scheduler

DEFAULT_PROFILE = "bench-default"
# The bridge as shipped (timings, log level info): start_stack's fast test timings (1 s polls,
# a resync every 30 s) would put extra full listings of Slurm's queue into the measured window.
SHIPPED = Settings()
SHIPPED_TIMINGS = {
    "SLURMBRIDGE_PLACEMENT__POLL_INTERVAL_SECONDS": str(SHIPPED.placement.poll_interval_seconds),
    "SLURMBRIDGE_PLACEMENT__RESYNC_INTERVAL_SECONDS":
        str(SHIPPED.placement.resync_interval_seconds),
    "SLURMBRIDGE_CONTROLLERS__INTERVAL_SECONDS": str(SHIPPED.controllers.interval_seconds),
}


@dataclass
class Config:
    repeats: int = 3
    pods: int = 500
    slurm_version: str = "26.05"
    kube_qps: float = 50
    kube_burst: int = 100
    cpus_per_node: int = 128
    pods_per_node: int = 250
    create_parallel: int = 50
    submit_parallel: int = 8
    timeout: float = 900


async def slurm_alone(slurm: SlurmTarget, cfg: Config) -> tuple[float, dict[str, float]]:
    pod = live.bench_pod("slurm-alone", keys.SCHEDULER_NAME, "bench-b1")
    pod.metadata = ObjectMeta(name="slurm-alone", namespace="bench", uid="unused")
    # an empty owner reads back as none: the job is native to the bridge
    request = dataclasses.replace(job_request_for_pod(pod), owner=PodOwner(""))
    settings = slurm.settings(max_connections=cfg.submit_parallel)
    async with SlurmClient(settings) as client:
        await client.connect()
        slots = asyncio.Semaphore(cfg.submit_parallel)

        async def submit() -> int:
            async with slots:
                return await client.submit(request)

        cpu0 = live.cpu_seconds()
        t0 = time.perf_counter()
        ids = await asyncio.gather(*(submit() for _ in range(cfg.pods)))
        try:
            deadline = t0 + cfg.timeout
            while True:
                states = await client.job_states()
                running = sum(1 for i in ids if states.get(i) is JobState.RUNNING)
                if running == len(ids):
                    return time.perf_counter() - t0, live.cpu_since(cpu0)
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"Slurm alone: {running}/{len(ids)} running")
                await asyncio.sleep(0.2)
        finally:
            await asyncio.to_thread(live.cancel_jobs, slurm, list(ids))
            await live.wait_slurm_quiet(slurm)


async def pods_bound(
    kube: Any, slurm: SlurmTarget, cp: ControlPlane, scheduler: str, cfg: Config,
    *, label: str, requests: dict[str, dict[str, float]],
) -> tuple[float, dict[str, float]]:
    """Seconds until all bound and CPU seconds per process kind; apiserver calls to requests."""
    ns = unique_name(f"bench-b1-{label}")
    await create_namespace(kube, ns)
    try:
        pods = [live.bench_pod(f"p{i:04d}", scheduler, "bench-b1") for i in range(cfg.pods)]
        calls0 = await asyncio.to_thread(live.apiserver_requests, cp)
        cpu0 = live.cpu_seconds()
        t0 = time.perf_counter()
        await live.create_pods(kube, ns, pods, cfg.create_parallel)
        print(f"  B1 {label}: {cfg.pods} pods created in {time.perf_counter() - t0:.1f} s",
              flush=True)
        took = await live.wait_all_bound(kube, ns, cfg.pods, t0, cfg.timeout)
        used = live.cpu_since(cpu0)
        calls = await asyncio.to_thread(live.apiserver_requests, cp)
        requests[label] = live.counts_since(calls0, calls)
        return took, used
    finally:
        await live.drop_namespace(kube, ns)
        if scheduler == keys.SCHEDULER_NAME:  # the lifecycle controller cancels; make sure
            await asyncio.sleep(3)
            await asyncio.to_thread(slurm.admin, "scancel", "-u", slurm.user, check=False)
            await live.wait_slurm_quiet(slurm)


def bridge_work(before: dict[str, float], after: dict[str, float]) -> str:
    """Calls and mean latency per extender verb and slurmrestd operation, between two scrapes."""
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    parts = []
    for outcome in ("allocated", "waiting", "refused"):
        n = delta(f"slurmbridge_filter_total{{outcome={outcome}}}")
        parts.append(f"filter {outcome} {n:.0f}")
    calls = delta("slurmbridge_filter_seconds_count{}")
    if calls:
        mean = delta("slurmbridge_filter_seconds_sum{}") / calls * 1000
        parts.append(f"filter mean {mean:.1f} ms")
    prefix = "slurmbridge_slurm_request_seconds_count{operation="
    for key in sorted(k for k in after if k.startswith(prefix)):
        n = delta(key)
        if n:
            op = key[len(prefix):-1]
            mean = delta(key.replace("_count{", "_sum{")) / n * 1000
            parts.append(f"slurm {op} {n:.0f} x {mean:.1f} ms")
    return "; ".join(parts)


def run(cfg: Config) -> Outcome:
    nodes = 4
    per_node = max(cfg.cpus_per_node, -(-cfg.pods // nodes))
    with live.slurm_with_cpus(cfg.slurm_version, cfg.pods, per_node) as slurm, \
            live.control_plane() as cp:
        return asyncio.run(_run(cfg, slurm, cp, per_node))


async def _run(cfg: Config, slurm: SlurmTarget, cp: ControlPlane, per_node: int) -> Outcome:
    kube = live.kube_client(cp)
    work = Path(tempfile.mkdtemp(prefix="slurmbridge-b1-"))
    alone = Figure(f"Slurm alone: {cfg.pods} jobs allocated", "pods/s")
    default = Figure(f"default kube-scheduler: {cfg.pods} pods bound", "pods/s")
    bridge = Figure(f"bridge: {cfg.pods} pods bound", "pods/s")
    r_alone = Figure("ratio bridge / Slurm alone", "x")
    r_default = Figure("ratio bridge / default scheduler", "x")
    r_slower = Figure("ratio bridge / slower of (a) and (b)", "x")
    seconds: dict[str, list[float]] = {"a": [], "b": [], "bridge": []}
    client_conn = {"qps": cfg.kube_qps, "burst": cfg.kube_burst}
    started: list[str] = []
    spent = ""
    cpu: dict[str, dict[str, float]] = {}
    requests: dict[str, dict[str, float]] = {}
    try:
        async with live.bridge_stack(
            slurm, cp, kube, work, settings=SHIPPED_TIMINGS, log_level="info"
        ) as stack:
            await live.resize_nodes(
                kube, list(stack.kube_nodes), cpu=str(per_node), memory="256Gi",
                pods=str(cfg.pods_per_node),
            )
            # Replace start_stack's scheduler by one whose client limits are explicit.
            await asyncio.to_thread(replace_scheduler, stack, clientConnection=client_conn)
            default_sched = unique_name("bench-default", max_len=30)
            await asyncio.to_thread(start_scheduler, default_sched, scheduler_config(
                DEFAULT_PROFILE, percentageOfNodesToScore=100, clientConnection=client_conn,
            ), work)
            started.append(default_sched)
            await live.wait_slurm_quiet(slurm)
            port = stack.health_port  # metrics
            for rep in range(cfg.repeats):
                a, cpu["a"] = await slurm_alone(slurm, cfg)
                b, cpu["b"] = await pods_bound(
                    kube, slurm, cp, DEFAULT_PROFILE, cfg, label="default", requests=requests
                )
                before = await asyncio.to_thread(live.metric_samples, port)
                c, cpu["bridge"] = await pods_bound(
                    kube, slurm, cp, keys.SCHEDULER_NAME, cfg, label="bridge", requests=requests
                )
                after = await asyncio.to_thread(live.metric_samples, port)
                spent = bridge_work(before, after)
                for key, value in (("a", a), ("b", b), ("bridge", c)):
                    seconds[key].append(value)
                alone.samples.append(cfg.pods / a)
                default.samples.append(cfg.pods / b)
                bridge.samples.append(cfg.pods / c)
                r_alone.samples.append(a / c)
                r_default.samples.append(b / c)
                r_slower.samples.append(max(a, b) / c)
                print(f"  B1 repeat {rep + 1}/{cfg.repeats}: Slurm alone {a:.1f} s, default "
                      f"scheduler {b:.1f} s, bridge {c:.1f} s\n    bridge: {spent}", flush=True)
                for k, v in cpu.items():
                    print(f"    CPU {k}: {live.format_cpu(v)}", flush=True)
                for k, n in requests.items():
                    print(f"    apiserver requests, {k}: {live.format_counts(n)}", flush=True)
    finally:
        for name in started:
            await asyncio.to_thread(stop_scheduler, name)
        await kube.close()
    at_least(r_slower, 0.5, ">= 0.5x")
    notes = [
        f"Slurm {slurm.version} at {slurm.url}, 4 nodes; Kubernetes Nodes kube-node1..4 "
        f"resized to {per_node} CPUs and {cfg.pods_per_node} pods each. Pods: 1 CPU, 512Mi.",
        f"Both kube-schedulers: clientConnection qps={cfg.kube_qps:g}, "
        f"burst={cfg.kube_burst} (kube-scheduler's defaults unless overridden), "
        "percentageOfNodesToScore=100, same binary. The bridge's own apiserver client "
        "(lightkube) has no client-side rate limit.",
        "Median seconds until all allocated/bound: "
        + ", ".join(f"{k} {fmt(sorted(v)[len(v) // 2])} s" for k, v in seconds.items() if v),
        "Pods are created with "
        f"{cfg.create_parallel} requests in flight; the clock starts before the first create.",
        f"What the bridge did during its last repeat (from its /metrics): {spent}.",
        "CPU seconds used by each kind of process while the clock ran (last repeat; the "
        "machine has 2 CPUs, so CPU-seconds above 2 x the wall time cannot be): "
        + "; ".join(f"{k}: {live.format_cpu(v)}" for k, v in cpu.items()),
        "apiserver requests while the clock ran (last repeat; its own counters, 10 or more): "
        + "; ".join(f"{k}: {live.format_counts(v)}" for k, v in requests.items()),
    ]
    return Outcome(
        bench="B1", title="end to end: pods bound per second",
        figures=[bridge, alone, default, r_alone, r_default, r_slower], notes=notes,
        repeats=cfg.repeats,
    )
