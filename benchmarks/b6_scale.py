"""B6: B1's round at site scale - 256 Slurm nodes, 256 Kubernetes Nodes, a 10,000-job queue.

Setup (b6_setup): Slurm restarted with 256 nodes (one ``slurmd -N`` per node in the chroot,
64 CPUs and 8 GPUs each), ``kube-node1..256`` mirroring them, and 10,000 plain native jobs
of site users in the same queue: 1,000 running (8 CPUs each) and 9,000 pending (held or
starting tomorrow, so they hold nothing back), all there before the bridge starts, whose
first resync (each native job read once) ends before any round.  Then, per client limit,
B1's own round (``b1_measure.measure_round``: Slurm alone, the default kube-scheduler, the
bridge, each from an idle Slurm as far as user ``slurm`` goes) with N pods, and the
extender's filter latency with all 256 nodes as candidates (b6_filter).  Last, on the same
site, the leader's failover (b6_failover): a second replica, the leader SIGKILLed while plain
pods arrive; seconds until the new leader releases one (target <= 15 s).

Verdict: the bridge / default-scheduler ratio within 20% of B1's at the same qps (read from
benchmarks/results.json), i.e. at least 0.8x B1's ratio; better is better.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from lightkube import AsyncClient

from benchmarks import b1_measure, b6_failover, b6_filter, live
from benchmarks.b1_end_to_end import SHIPPED_TIMINGS
from benchmarks.b1_measure import Limits, SystemRun
from benchmarks.b1_report import combo_notes, curves
from benchmarks.b6_setup import (
    Shape,
    ensure_pid_room,
    mirror,
    mirror_nodes,
    native_queue,
    scale_slurm,
)
from benchmarks.common import BENCH_DIR, Figure, Outcome, at_least, fmt, percentile
from benchmarks.report import load
from slurmbridge_devkit.kube import ControlPlane, stop_scheduler
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack

SYSTEMS = {"a": "Slurm alone", "b": "default kube-scheduler", "bridge": "bridge"}
TOLERANCE = 0.8  # "within 20% of B1's ratio"


@dataclass
class Config:
    repeats: int = 1
    pods: int = 5_000
    slurm_version: str = "26.05"
    limits: tuple[tuple[float, int], ...] = ((50, 100), (400, 800))
    shape: Shape = field(default_factory=Shape)
    probe_calls: int = 500
    timeout: float = 1800
    failovers: int = 3  # the leader SIGKILLed while plain pods arrive, after the rounds


@dataclass
class Series:
    """The figures of one client limit."""

    qps: float
    figures: dict[str, Figure] = field(default_factory=dict)
    runs: dict[str, list[SystemRun]] = field(default_factory=dict)  # per system, per repeat

    def add(self, key: str, name: str, unit: str, value: float) -> None:
        fig = self.figures.setdefault(key, Figure(f"{name} (qps {self.qps:g})", unit))
        fig.samples.append(value)


def b1_ratio(qps: float, pods: int) -> tuple[float, str] | None:
    """B1's stored bridge / default ratio at ``qps`` (at ``pods`` pods if B1 has that size)."""
    stored = load(BENCH_DIR / "results.json").get("B1")
    if stored is None:
        return None
    found = [f for f in stored.figures if "ratio bridge / default" in f.name
             and (f"qps {qps:g}" in f.name or (qps == 50 and "qps" not in f.name))]
    sized = [f for f in found if f"{pods:,}" in f.name or f"{pods} " in f.name]
    if not (sized or found):
        return None
    pick = (sized or found)[0]
    return pick.median, f"{pick.name} = {fmt(pick.median)}"


def record(series: Series, runs: dict[str, SystemRun]) -> None:
    for key, run in runs.items():
        label = SYSTEMS[key]
        series.add(f"{key}/rate", f"{label}: pods/s", "pods/s", run.pods_per_s)
        series.add(f"{key}/p50", f"{label}: latency p50", "ms", run.latency_ms(50))
        series.add(f"{key}/p99", f"{label}: latency p99", "ms", run.latency_ms(99))
        series.add(f"{key}/cpu", f"{label}: CPU per pod", "CPU-ms", run.cpu_ms_per_pod)
        if key != "a":
            series.add(f"{key}/writes", f"{label}: apiserver writes per pod", "writes",
                       run.writes_per_pod)
    bridge, default = runs["bridge"].seconds, runs["b"].seconds
    series.add("ratio", "ratio bridge / default scheduler", "x", default / bridge)
    slower = max(default, runs["a"].seconds) if "a" in runs else default
    series.add("ratio_slower", "ratio bridge / slower of Slurm alone and default", "x",
               slower / bridge)


def verdict(series: Series, pods: int) -> str:
    ratio = series.figures["ratio"]
    ref = b1_ratio(series.qps, pods)
    if ref is None:
        ratio.target, ratio.verdict = f">= {TOLERANCE}x B1's ratio", "no B1 ratio stored"
        return f"qps {series.qps:g}: no B1 ratio in results.json to compare with"
    relative = Figure(f"B6 ratio / B1 ratio (qps {series.qps:g})", "x",
                      [s / ref[0] for s in ratio.samples])
    at_least(relative, TOLERANCE, f">= {TOLERANCE} (within 20% of B1's)")
    series.figures["relative"] = relative
    return f"qps {series.qps:g}: compared with B1's {ref[1]}"


def run(cfg: Config) -> Outcome:
    pid_note = ensure_pid_room(cfg.pods + cfg.shape.native_running)
    with scale_slurm(cfg.slurm_version, cfg.shape) as slurm, live.control_plane() as cp:
        return asyncio.run(_run(cfg, slurm, cp, pid_note))


async def _run(cfg: Config, slurm: SlurmTarget, cp: ControlPlane, pid_note: str) -> Outcome:
    kube = live.kube_client(cp)
    work = Path(tempfile.mkdtemp(prefix="slurmbridge-b6-"))
    all_series: list[Series] = []
    failover: list[Figure] = []
    notes = [pid_note]
    default: str | None = None
    try:
        # The native queue and the Nodes exist before the bridge starts: its first resync
        # reads every native job once and its first Node listing holds all of them, as at
        # a site it joins.
        async with native_queue(slurm, cfg.shape) as queue_note, mirror_nodes(
            kube, cfg.shape
        ) as names, live.bridge_stack(
            slurm, cp, kube, work, settings={**SHIPPED_TIMINGS, **b6_failover.SHIPPED_LEASE},
            log_level="info",
        ) as stack, contextlib.AsyncExitStack() as stack_exit:
            await mirror(kube, cfg.shape, range(1, len(stack.kube_nodes) + 1))
            await stack_exit.enter_async_context(live.floor_nodes(kube, names))
            notes.append(queue_note)
            notes.append(f"{len(names)} Kubernetes Nodes kube-node1..{len(names)} mirror "
                         f"Slurm's node1..{cfg.shape.nodes}: {cfg.shape.cpus} CPUs, "
                         f"{cfg.shape.gpus} GPUs, 110 pods each, the managed taint")
            notes.append(await _resync_note(stack))
            for qps, burst in cfg.limits:
                default = await asyncio.to_thread(
                    b1_measure.set_client_limits, stack, work, qps, burst, default
                )
                series = Series(qps)
                all_series.append(series)
                notes.extend(await _rounds(cfg, slurm, cp, kube, stack=stack, series=series))
                seconds = await b6_filter.probe(stack, kube, names, cfg.probe_calls)
                series.add("probe50", f"filter, {len(names)} candidates, one at a "
                           "time: p50", "ms", percentile(seconds, 50) * 1000)
                series.add("probe99", f"filter, {len(names)} candidates, one at a "
                           "time: p99", "ms", percentile(seconds, 99) * 1000)
            if cfg.failovers > 0:
                failover, more = await _failover(cfg, slurm, kube, stack)
                notes.extend(more)
    finally:
        if default is not None:
            await asyncio.to_thread(stop_scheduler, default)
        await kube.close()
    notes.extend(verdict(s, cfg.pods) for s in all_series)
    return _outcome(cfg, all_series, notes, failover)


async def _failover(
    cfg: Config, slurm: SlurmTarget, kube: AsyncClient, stack: BridgeStack
) -> tuple[list[Figure], list[str]]:
    """The failover's figures and note; a failure is a note, not the rounds' loss."""
    try:
        return await b6_failover.measure(slurm, kube, stack, repeats=cfg.failovers)
    except (Exception, live.HarnessFailure) as exc:
        print(f"  B6 failover not measured: {exc!r}", flush=True)
        return [], [f"failover not measured: {type(exc).__name__}: {str(exc)[:300]}"]


async def _resync_note(stack: BridgeStack, timeout: float = 900) -> str:  # noqa: ASYNC109
    """Until the bridge is ready (its first resync done: it reads every job it has not
    classified once), so no round measures that; what the resync cost."""
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=10) as http:
        while (await http.get(f"http://127.0.0.1:{stack.health_port}/readyz")).status_code != 200:
            if time.monotonic() - t0 > timeout:
                raise live.SetupError(f"the bridge is not ready after {timeout:.0f} s")
            await asyncio.sleep(1)
    waited = time.monotonic() - t0
    samples = await asyncio.to_thread(live.metric_samples, stack.health_port)

    def op(name: str) -> tuple[float, float]:
        def get(kind: str) -> float:
            return samples.get(f"slurmbridge_slurm_request_seconds_{kind}{{operation={name}}}", 0)

        return get("count"), get("sum")

    (states, states_s), (reads, reads_s) = op("every_job_state"), op("get_job")
    return (f"the bridge, started on this queue, ready {waited:.0f} s after it answered "
            f"/healthz: {states:.0f} x GET /jobs/state/ ({states_s:.1f} s), {reads:.0f} x "
            f"GET /job/<id> ({reads_s:.1f} s summed, 8 in flight): its first resync read each "
            "native job once")


async def _rounds(
    cfg: Config, slurm: SlurmTarget, cp: ControlPlane, kube: AsyncClient,
    *, stack: BridgeStack, series: Series,
) -> list[str]:
    notes = []
    for rep in range(cfg.repeats):
        before = await asyncio.to_thread(b6_filter.filter_buckets, stack.health_port)
        runs = await b1_measure.measure_round(
            slurm, cp, kube, pods=cfg.pods, stack=stack,
            limits=Limits(total=cfg.timeout),
        )
        after = await asyncio.to_thread(b6_filter.filter_buckets, stack.health_port)
        record(series, runs)
        for key, one in runs.items():
            series.runs.setdefault(key, []).append(one)
        calls, (p50, p99) = b6_filter.round_quantiles(before, after)
        series.add("round50", "filter during the bridge round (histogram): p50", "ms",
                   p50 * 1000)
        series.add("round99", "filter during the bridge round (histogram): p99", "ms",
                   p99 * 1000)
        print(f"  B6 qps {series.qps:g} repeat {rep + 1}/{cfg.repeats}:", flush=True)
        for key, run in runs.items():
            print(f"    {SYSTEMS[key]}: {b1_measure.summary(run)}", flush=True)
        print(f"    filter calls in the bridge round: {calls}", flush=True)
        notes.append(
            f"qps {series.qps:g}, repeat {rep + 1}: "
            + "; ".join(f"{SYSTEMS[k]} {b1_measure.summary(r)}" for k, r in runs.items())
            + f"; {calls} filter calls in the bridge round"
        )
    # Where the time, CPU and writes went, as B1 reports it (per process kind, apiserver
    # requests, slurmctld's scheduler cycles, the bridge's own work).
    return [*notes, *combo_notes(cfg.pods, series.qps, series.runs)]


def _outcome(
    cfg: Config, all_series: list[Series], notes: list[str], failover: list[Figure]
) -> Outcome:
    figures = [f for s in all_series for f in s.figures.values()] + failover
    head = (f"{cfg.pods:,} pods per system per round, 1 CPU and 512Mi each; both "
            "kube-schedulers at the client limits named per figure, "
            "percentageOfNodesToScore=100; the bridge as shipped (timings, log level info). "
            "Filter latency: the probe times /filter over mutual TLS from this process "
            f"({cfg.probe_calls} calls after 50 warm-up, for a pod Slurm placed); the round "
            "figure interpolates the extender's histogram (buckets 1, 2.5, 5, 10, 25 ms...).")
    return Outcome(
        bench="B6", title=f"site scale: B1 with {cfg.shape.nodes:,} nodes and "
        f"{cfg.shape.native_running + cfg.shape.native_pending:,} native jobs, the leader's "
        "failover",
        figures=figures, notes=[head, *notes], repeats=cfg.repeats,
        series=curves({(cfg.pods, s.qps): s.runs for s in all_series if s.runs}),
    )
