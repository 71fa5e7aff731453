"""One B1 round, reusable (B6 calls it too): Slurm alone, the default scheduler, the bridge.

``measure_round`` runs the three systems one after another on a stack the caller has set
up (nodes sized, both kube-schedulers running with the client limits under test) and
returns one ``SystemRun`` per system: wall seconds, per-pod latency, CPU per process kind
and apiserver requests while the clock ran.

Latency is measured client-side with ``time.perf_counter`` because every server-side
timestamp involved is second-granular (``creationTimestamp``, the PodScheduled
condition's ``lastTransitionTime``, Slurm's ``submit_time``/``start_time``):
- pods: from the create request leaving this process to the watch event that first shows
  ``spec.nodeName`` (the watch is opened before the first create);
- Slurm alone: from the submit request leaving this process to the first
  ``GET /jobs/state/`` poll (every 0.2 s) whose answer shows the job RUNNING.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from benchmarks import live
from benchmarks.common import percentile
from bridge import keys
from bridge.jobs.owner import PodOwner
from bridge.jobs.translate import job_request_for_pod
from bridge.slurm import convert
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import JobState
from bridge.slurm.wire.base import JobStatesResponse
from slurmbridge_devkit.kube import ControlPlane, scheduler_config, start_scheduler, stop_scheduler
from slurmbridge_devkit.namespaces import unique_name
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, replace_scheduler

DEFAULT_PROFILE = "bench-default"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
# The load generator and whatever else shares the machine ("other: <its program>") are not
# the systems under test.
NOT_COUNTED = ("benchmark client", "other")


@dataclass
class SystemRun:
    """What one system did for ``pods`` pods (or placeholder jobs) in one repeat."""

    pods: int
    seconds: float
    latencies: list[float]  # seconds per pod, client-side
    cpu: dict[str, float]  # CPU seconds per process kind while the clock ran
    requests: dict[str, float] = field(default_factory=dict)  # apiserver "VERB resource"
    # the apiserver's timing of the creates and its webhook calls: "<what> sum"/"<what> count"
    apiserver_seconds: dict[str, float] = field(default_factory=dict)
    work: str = ""  # the bridge's /metrics deltas (bridge only)
    handshakes: float = 0.0  # TLS handshakes on the extender's protocol port (bridge only)
    webhook_handshakes: float = 0.0  # and on the webhook's port (its reviews of the pods)
    slurm_cycles: str = ""  # slurmctld's scheduler cycles while the clock ran (sdiag)
    # per pod, in the order of ``latencies``: seconds from the round's first create (submit)
    # to its own create and to its bind (RUNNING): the plots' curves
    created: list[float] = field(default_factory=list)
    bound: list[float] = field(default_factory=list)

    def curve(self) -> dict[str, list[int]]:
        """``created`` and ``bound`` in whole milliseconds, as series.json keeps them."""
        return {"created_ms": [round(t * 1000) for t in self.created],
                "bound_ms": [round(t * 1000) for t in self.bound]}

    @property
    def pods_per_s(self) -> float:
        return self.pods / self.seconds

    def latency_ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000

    @property
    def cpu_ms_per_pod(self) -> float:
        """CPU of every process under test (apiserver, etcd, schedulers, bridge, Slurm)."""
        used = sum(v for k, v in self.cpu.items() if not k.startswith(NOT_COUNTED))
        return used * 1000 / self.pods

    def cpu_ms_per_pod_of(self, kind: str) -> float:
        """One process kind's share (``slurmbridge webhook``: what admission costs)."""
        return self.cpu.get(kind, 0.0) * 1000 / self.pods

    @property
    def writes_per_pod(self) -> float:
        """apiserver writes per pod, minus this benchmark's own pod creates."""
        writes = sum(v for k, v in self.requests.items() if k.split(" ")[0] in WRITE_VERBS)
        own = min(self.requests.get("POST pods", 0.0), self.pods) if self.requests else 0.0
        return (writes - own) / self.pods


@dataclass
class Limits:
    total: float = 900
    create_parallel: int = 50
    submit_parallel: int = 8


def set_client_limits(
    stack: BridgeStack, work: Path, qps: float, burst: int, default: str | None = None,
) -> str:
    """Both kube-schedulers (re)started with clientConnection qps/burst; the default's name.

    The bridge's scheduler is replaced in ``stack``; ``default`` (a name returned by an
    earlier call) is stopped after its successor is ready.  Blocking: call via to_thread.
    """
    conn = {"qps": qps, "burst": burst}
    replace_scheduler(stack, clientConnection=conn)
    name = unique_name("bench-default", max_len=30)
    start_scheduler(name, scheduler_config(
        DEFAULT_PROFILE, percentageOfNodesToScore=100, clientConnection=conn,
    ), work)
    if default is not None:
        stop_scheduler(default)
    return name


async def measure_round(
    slurm: SlurmTarget, cp: ControlPlane, kube: AsyncClient, *, pods: int,
    stack: BridgeStack, default_profile: str = DEFAULT_PROFILE,
    limits: Limits | None = None, alone: bool = True,
) -> dict[str, SystemRun]:
    """(a) Slurm alone (unless ``alone`` is False), (b) the default scheduler, (c) the bridge.

    The caller has started the bridge ``stack`` and a kube-scheduler with profile
    ``default_profile``; Slurm must be idle.
    """
    lim = limits or Limits()
    out: dict[str, SystemRun] = {}
    if alone:
        out["a"] = await slurm_alone(slurm, pods, lim)
    out["b"] = await pods_bound(kube, slurm, cp, default_profile, pods, lim=lim)
    before = await asyncio.to_thread(live.metric_samples, stack.health_port)
    hook_before = await asyncio.to_thread(live.webhook_samples, stack)
    out["bridge"] = await pods_bound(kube, slurm, cp, keys.SCHEDULER_NAME, pods, lim=lim)
    after = await asyncio.to_thread(live.metric_samples, stack.health_port)
    hook_after = await asyncio.to_thread(live.webhook_samples, stack)
    out["bridge"].work = "; ".join(part for part in (
        bridge_work(before, after), webhook_work(hook_before, hook_after)) if part)
    key = "slurmbridge_extender_tls_handshakes_total{}"
    out["bridge"].handshakes = after.get(key, 0.0) - before.get(key, 0.0)
    key = "slurmbridge_webhook_tls_handshakes_total{}"
    out["bridge"].webhook_handshakes = hook_after.get(key, 0.0) - hook_before.get(key, 0.0)
    return out


def scheduler_cycles(sdiag: str) -> str:
    """slurmctld's main and backfill scheduler cycles from ``sdiag`` output (microseconds
    there): how many ran, their mean and longest, in ms."""
    sections: dict[str, dict[str, float]] = {}
    current = None
    for line in sdiag.splitlines():
        if line.startswith("Main schedule statistics"):
            current = sections.setdefault("main", {})
        elif line.startswith("Backfilling stats"):
            current = sections.setdefault("backfill", {})
        elif not line.startswith((" ", "\t")):
            current = None
        elif current is not None:
            key, _, value = line.strip().partition(":")
            if key in ("Total cycles", "Mean cycle", "Max cycle") and value.strip().isdigit():
                current[key] = float(value)
    return "; ".join(
        f"{name}: {got.get('Total cycles', 0):.0f} cycles, mean "
        f"{got.get('Mean cycle', 0) / 1000:.1f} ms, max {got.get('Max cycle', 0) / 1000:.1f} ms"
        for name, got in sections.items()
    )


def _sdiag(slurm: SlurmTarget, *args: str) -> str:
    return slurm.admin("sdiag", *args, check=False)


async def slurm_alone(slurm: SlurmTarget, n: int, lim: Limits) -> SystemRun:
    """N placeholder jobs as the bridge would submit them; until all are RUNNING."""
    pod = live.bench_pod("slurm-alone", keys.SCHEDULER_NAME, "bench-b1")
    pod.metadata = ObjectMeta(name="slurm-alone", namespace="bench", uid="unused")
    # an empty owner reads back as none: the job is native to the bridge, which ignores it
    request = dataclasses.replace(job_request_for_pod(pod), owner=PodOwner(""))
    async with SlurmClient(slurm.settings(max_connections=lim.submit_parallel)) as client:
        await client.connect()
        slots = asyncio.Semaphore(lim.submit_parallel)
        sent: dict[int, float] = {}

        async def submit() -> int:
            async with slots:
                t = time.perf_counter()
                job_id = await client.submit(request)
                sent[job_id] = t
                return job_id

        await asyncio.to_thread(_sdiag, slurm, "--reset")
        cpu0 = live.cpu_seconds()
        t0 = time.perf_counter()
        ids = await asyncio.gather(*(submit() for _ in range(n)))
        try:
            running: dict[int, float] = {}
            while len(running) < n:
                if time.perf_counter() - t0 > lim.total:
                    raise TimeoutError(f"Slurm alone: {len(running)}/{n} running")
                await asyncio.sleep(0.2)
                now_running = await _running(client, [i for i in ids if i not in running])
                seen = time.perf_counter()
                running.update(dict.fromkeys(now_running, seen))
            took = max(running.values()) - t0
            used = live.cpu_since(cpu0)
            cycles = scheduler_cycles(await asyncio.to_thread(_sdiag, slurm))
            return SystemRun(n, took, [running[i] - sent[i] for i in ids], used,
                             slurm_cycles=cycles, created=[sent[i] - t0 for i in ids],
                             bound=[running[i] - t0 for i in ids])
        finally:
            await asyncio.to_thread(live.cancel_jobs, slurm, list(ids))
            await live.wait_slurm_quiet(slurm)


async def _running(client: SlurmClient, ids: list[int]) -> list[int]:
    """Which of ``ids`` are RUNNING: ``GET /jobs/state/?job_id=..`` (repeated), 500 at a time.

    Asking for these jobs only: other jobs in the queue (B6's native jobs) stay out of the
    poll.
    """
    out: list[int] = []
    for k in range(0, len(ids), 500):
        params = [("job_id", str(i)) for i in ids[k : k + 500]]
        resp = await client.rest.call(
            "GET", "/jobs/state/", "bench_job_states", JobStatesResponse, query=params
        )
        out += [i for e in resp.jobs
                if (i := e.number) is not None and convert.job_state(e.state) is JobState.RUNNING]
    return out


async def pods_bound(
    kube: AsyncClient, slurm: SlurmTarget, cp: ControlPlane, scheduler: str, n: int,
    *, lim: Limits,
) -> SystemRun:
    """N pods for ``scheduler`` created at once; until all have a node."""
    bridge = scheduler == keys.SCHEDULER_NAME
    ns = await live.bench_namespace(kube, f"bench-b1-{'bridge' if bridge else 'dflt'}",
                                    bridge=bridge)
    bound: dict[str, float] = {}
    watcher = asyncio.create_task(watch_binds(kube, ns, n, bound))
    try:
        pods = [live.bench_pod(f"p{i:05d}", scheduler, "bench-b1") for i in range(n)]
        await asyncio.sleep(1)  # the watch is open before the first create
        calls0, timed0 = await asyncio.to_thread(live.apiserver_requests, cp)
        await asyncio.to_thread(_sdiag, slurm, "--reset")
        cpu0 = live.cpu_seconds()
        t0 = time.perf_counter()
        sent = await create_pods(kube, ns, pods, lim.create_parallel)
        print(f"  B1 {scheduler}: {n} pods created in {time.perf_counter() - t0:.1f} s",
              flush=True)
        try:
            await asyncio.wait_for(asyncio.shield(watcher), lim.total - (time.perf_counter() - t0))
        except TimeoutError:
            raise TimeoutError(f"{len(bound)}/{n} pods bound in {ns}") from None
        took = max(bound.values()) - t0
        used = live.cpu_since(cpu0)
        calls, timed = await asyncio.to_thread(live.apiserver_requests, cp)
        latencies = [bound[name] - sent[name] for name in sent]
        cycles = scheduler_cycles(await asyncio.to_thread(_sdiag, slurm))
        return SystemRun(n, took, latencies, used, live.counts_since(calls0, calls),
                         apiserver_seconds=live.counts_since(timed0, timed),
                         slurm_cycles=cycles, created=[sent[name] - t0 for name in sent],
                         bound=[bound[name] - t0 for name in sent])
    finally:
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher
        await drop_pods(kube, ns)
        if bridge:  # the lifecycle controller cancels; make sure
            await asyncio.sleep(3)
            await asyncio.to_thread(slurm.admin, "scancel", "-u", slurm.user, check=False)
            await live.wait_slurm_quiet(slurm)


async def create_pods(
    kube: AsyncClient, ns: str, pods: list[Pod], parallel: int
) -> dict[str, float]:
    slots = asyncio.Semaphore(parallel)
    sent: dict[str, float] = {}

    async def one(pod: Pod) -> None:
        async with slots:
            assert pod.metadata is not None and pod.metadata.name is not None
            sent[pod.metadata.name] = time.perf_counter()
            await kube.create(pod, namespace=ns)  # type: ignore[call-overload]  # lightkube overloads

    await asyncio.gather(*(one(p) for p in pods))
    return sent


async def watch_binds(kube: AsyncClient, ns: str, n: int, bound: dict[str, float]) -> None:
    """Fill ``bound`` (pod name -> perf_counter of the first event with a node) up to n."""
    async for _, pod in kube.watch(Pod, namespace=ns):
        if pod.spec is not None and pod.spec.nodeName and pod.metadata is not None:
            bound.setdefault(str(pod.metadata.name), time.perf_counter())
            if len(bound) >= n:
                return


async def drop_pods(kube: AsyncClient, ns: str) -> None:
    """All pods at once (one DELETE collection, grace 0), then the namespace, until it is
    gone: the next round (another system's) must not pay for this one's clean-up."""
    with contextlib.suppress(Exception):
        await kube.deletecollection(Pod, namespace=ns, grace_period=0)
    await live.drop_namespace(kube, ns)
    await live.namespace_gone(kube, ns)


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


def webhook_work(before: dict[str, float], after: dict[str, float]) -> str:
    """Reviews and their mean time per webhook as the webhook's app times them (the apiserver's
    own timing of each call, transport included, is in ``SystemRun.apiserver_seconds``)."""
    parts = []
    for hook in ("admit", "mutate", "validate"):
        key = f"slurmbridge_webhook_request_seconds_count{{webhook={hook}}}"
        n = after.get(key, 0.0) - before.get(key, 0.0)
        if n:
            key = key.replace("_count{", "_sum{")
            mean = (after.get(key, 0.0) - before.get(key, 0.0)) / n * 1000
            parts.append(f"webhook {hook} {n:.0f} x {mean:.1f} ms (in the app)")
    return "; ".join(parts)


def summary(run: SystemRun) -> str:
    """One line for the log."""
    return (f"{run.seconds:.1f} s, {run.pods_per_s:.1f} pods/s, p50 {run.latency_ms(50):.0f} ms"
            f" p99 {run.latency_ms(99):.0f} ms, {run.cpu_ms_per_pod:.1f} CPU-ms/pod, "
            f"{run.writes_per_pod:.2f} writes/pod")


def as_dict(run: SystemRun) -> dict[str, Any]:
    return {**dataclasses.asdict(run), "pods_per_s": run.pods_per_s,
            "cpu_ms_per_pod": run.cpu_ms_per_pod, "writes_per_pod": run.writes_per_pod}
