"""B1: end to end - N single-CPU pods created at once, time until all are bound.

For every size in ``pods`` and every client limit in ``limits`` (both kube-schedulers'
``clientConnection`` qps/burst), ``b1_measure.measure_round`` runs, each from an idle
Slurm and an empty namespace:

(a) Slurm alone: N placeholder jobs equal to what the bridge submits for such a pod
    (``job_request_for_pod``; comment without a pod UID so the running bridge ignores
    them), submitted through slurmrestd over 8 parallel connections; time from the first
    submit until ``GET /jobs/state/`` shows all RUNNING.  No kube-scheduler is involved,
    so (a) runs once per size and repeat and serves every client limit.
(b) the default kube-scheduler: N plain pods (profile ``bench-default``, default plugins,
    no extender) to the same Nodes; time from the first create until all have a node.
(c) the bridge: N pods with ``schedulerName: slurmbridge``, written plain as a researcher
    writes them, through the webhook (which adds the toleration and the gate), the leader's
    submit and release, kube-scheduler + extender; same clock.  Its CPU per pod is judged
    against the floor, (a) + (b) of the same round.

Pods are created by this process (lightkube, no client-side rate limit) with 50 requests
in flight, identically for (b) and (c).  Nodes: the 4 ``kube-node<k>`` of ``start_stack``,
resized to hold the largest size, and for (b) as many unmanaged twins (``live.floor_nodes``:
the API server refuses the managed toleration on pods the bridge does not place); Slurm is
restarted with as many CPUs and as much memory
per node if it has fewer (and put back afterwards).

Then B1-full (b1_full.py), at the last client limit: pods created while Slurm is full, their
cost while they wait and the time from the release of capacity until all are bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lightkube import AsyncClient

from benchmarks import b1_report, gopprof, live, pyspy
from benchmarks.b1_full import FullRun, pods_bound_when_full
from benchmarks.b1_full import summary as full_summary
from benchmarks.b1_measure import (
    Limits,
    SystemRun,
    measure_round,
    pods_bound,
    set_client_limits,
    summary,
)
from benchmarks.common import Outcome
from bridge import keys
from bridge.config import ControllerSettings, PlacementSettings
from slurmbridge_devkit.kube import ControlPlane, stop_scheduler
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack

NODES = 4
POD_MEMORY_MB = 512
# The profiled round at 500 pods takes 10-15 s: its busy part, not the idle tail.
_APISERVER_PROFILE_SECONDS = 8
# The bridge as shipped (timings, log level info): start_stack's fast test timings (1 s polls,
# a resync every 30 s) would put extra full listings of Slurm's queue into the measured window.
SHIPPED_PLACEMENT, SHIPPED_CONTROLLERS = PlacementSettings(), ControllerSettings()
SHIPPED_TIMINGS = {
    "SLURMBRIDGE_PLACEMENT__POLL_INTERVAL_SECONDS": str(SHIPPED_PLACEMENT.poll_interval_seconds),
    "SLURMBRIDGE_PLACEMENT__RESYNC_INTERVAL_SECONDS":
        str(SHIPPED_PLACEMENT.resync_interval_seconds),
    "SLURMBRIDGE_CONTROLLERS__INTERVAL_SECONDS": str(SHIPPED_CONTROLLERS.interval_seconds),
}


@dataclass
class Config:
    repeats: int = 3
    pods: tuple[int, ...] = (500, 5000)
    # repeats per size (same order as pods); empty: ``repeats`` for every size
    repeats_per_size: tuple[int, ...] = ()
    slurm_version: str = "26.05"
    # (qps, burst) of both kube-schedulers: kube-scheduler's defaults, then raised
    limits: tuple[tuple[float, int], ...] = ((50, 100), (400, 800))
    cpus_per_node: int = 128
    timeout: float = 1800
    profile: bool = True  # one extra bridge round under py-spy, after the measured ones
    full_pods: int = 500  # B1-full: pods created while a native job holds every node
    full_hold: float = 60  # seconds they wait before the holder is cancelled (0: no B1-full)

    def repeats_for(self, index: int) -> int:
        return self.repeats_per_size[index] if self.repeats_per_size else self.repeats


@dataclass
class Shape:
    """Per node, for Slurm and the Kubernetes Nodes alike: room for the largest size."""

    cpus: int
    memory_mb: int
    pods: int

    @classmethod
    def for_pods(cls, biggest: int, min_cpus: int) -> Shape:
        per_node = -(-biggest // NODES)
        cpus = max(min_cpus, per_node)
        memory_mb = max(262144, -(-(per_node * POD_MEMORY_MB * 5 // 4) // 1024) * 1024)
        return cls(cpus=cpus, memory_mb=memory_mb, pods=max(250, per_node + 50))


@dataclass
class Runs:
    """Every SystemRun, keyed (pods, qps) -> system -> one per repeat."""

    by: dict[tuple[int, float], dict[str, list[SystemRun]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    full: list[FullRun] = field(default_factory=list)  # B1-full, one per repeat
    profile: str = ""  # where the extender's CPU went (pyspy.summary)

    def add(self, pods: int, qps: float, system: str, run: SystemRun) -> None:
        self.by.setdefault((pods, qps), {}).setdefault(system, []).append(run)


def run(cfg: Config) -> Outcome:
    shape = Shape.for_pods(max(cfg.pods), cfg.cpus_per_node)
    with live.slurm_with_cpus(
        cfg.slurm_version, max(cfg.pods), shape.cpus, memory_mb=shape.memory_mb,
    ) as slurm, live.control_plane() as cp:
        runs = asyncio.run(_run(cfg, slurm, cp, shape))
    return b1_report.outcome(cfg, runs, slurm, shape)


async def _run(cfg: Config, slurm: SlurmTarget, cp: ControlPlane, shape: Shape) -> Runs:
    kube = live.kube_client(cp)
    work = Path(tempfile.mkdtemp(prefix="slurmbridge-b1-"))
    runs = Runs()
    default: str | None = None
    limits = Limits(total=cfg.timeout)
    try:
        async with live.bridge_stack(
            slurm, cp, kube, work, settings=SHIPPED_TIMINGS, log_level="info"
        ) as stack, contextlib.AsyncExitStack() as stack_exit:
            await live.resize_nodes(
                kube, list(stack.kube_nodes), cpu=str(shape.cpus),
                memory=f"{shape.memory_mb}Mi", pods=str(shape.pods),
            )
            floor = await stack_exit.enter_async_context(
                live.floor_nodes(kube, list(stack.kube_nodes)))
            print(f"  B1: the default scheduler's pods go to {', '.join(floor)}", flush=True)
            await live.wait_slurm_quiet(slurm)
            for k, (qps, burst) in enumerate(cfg.limits):
                default = await asyncio.to_thread(
                    set_client_limits, stack, work, qps, burst, default
                )
                for index, pods in enumerate(cfg.pods):
                    for rep in range(cfg.repeats_for(index)):
                        try:
                            got = await measure_round(
                                slurm, cp, kube, pods=pods, stack=stack,
                                limits=limits, alone=k == 0,
                            )
                        except (TimeoutError, OSError, RuntimeError) as exc:
                            # one failed round must not throw away the others' figures
                            runs.errors.append(f"{pods} pods, qps {qps:g}, repeat {rep + 1}: "
                                               f"{type(exc).__name__}: {str(exc)[:300]}")
                            print(f"  B1 round failed: {runs.errors[-1]}", flush=True)
                            continue
                        for system, one in got.items():
                            for q, _ in cfg.limits if system == "a" else [(qps, burst)]:
                                runs.add(pods, q, system, one)
                        _log(pods, qps, rep, cfg.repeats_for(index), got)
            if cfg.full_hold > 0:
                await _full(cfg, slurm, cp, kube, stack=stack, limits=limits, runs=runs)
            if cfg.profile:
                runs.profile = await _profiled(
                    cfg, slurm, cp, kube, stack=stack, limits=limits, runs=runs
                )
    finally:
        if default is not None:
            await asyncio.to_thread(stop_scheduler, default)
        await kube.close()
    return runs


async def _full(
    cfg: Config, slurm: SlurmTarget, cp: ControlPlane, kube: AsyncClient,
    *, stack: BridgeStack, limits: Limits, runs: Runs,
) -> None:
    """B1-full at the last client limit set, as many repeats as the first size."""
    for rep in range(cfg.repeats_for(0)):
        try:
            one = await pods_bound_when_full(
                kube, slurm, cp, cfg.full_pods, hold=cfg.full_hold,
                metrics_port=stack.health_port, lim=limits,
            )
        except (TimeoutError, OSError, RuntimeError, AssertionError) as exc:  # admin commands
            runs.errors.append(f"B1-full repeat {rep + 1}: {type(exc).__name__}: "
                               f"{str(exc)[:300]}")
            print(f"  B1-full round failed: {runs.errors[-1]}", flush=True)
            continue
        runs.full.append(one)
        print(f"  B1-full {cfg.full_pods} pods, repeat {rep + 1}: {full_summary(one)}",
              flush=True)


async def _profiled(
    cfg: Config, slurm: SlurmTarget, cp: ControlPlane, kube: AsyncClient,
    *, stack: BridgeStack, limits: Limits, runs: Runs,
) -> str:
    """An extra bridge round (not in the figures) with py-spy sampling the extender and
    kube-apiserver's own CPU profile of its first ``_APISERVER_PROFILE_SECONDS``."""
    proc = stack.extender.proc
    assert proc is not None
    raw, go_profile = stack.work / "extender.pyspy.txt", stack.work / "apiserver.pprof"
    pods, (qps, _) = cfg.pods[0], cfg.limits[-1]
    apiserver = gopprof.ApiserverProfile(cp, go_profile, _APISERVER_PROFILE_SECONDS)
    try:
        with pyspy.recording(proc.pid, raw), apiserver:
            one = await pods_bound(kube, slurm, cp, keys.SCHEDULER_NAME, pods, lim=limits)
    except (TimeoutError, OSError, RuntimeError) as exc:
        runs.errors.append(f"profiled round: {type(exc).__name__}: {str(exc)[:300]}")
        return ""
    head = (f"One extra bridge round of {pods} pods at qps {qps:g}, not in the figures, with "
            f"py-spy sampling the extender at 100 Hz and kube-apiserver's pprof over the "
            f"round's first {_APISERVER_PROFILE_SECONDS} s: {summary(one)}; CPU: "
            f"{live.format_cpu(one.cpu)}.")
    return "\n\n".join((head, pyspy.summary(raw), apiserver.summary()))


def _log(pods: int, qps: float, rep: int, repeats: int, got: dict[str, SystemRun]) -> None:
    print(f"  B1 {pods} pods, qps {qps:g}, repeat {rep + 1}/{repeats}:", flush=True)
    for system, one in got.items():
        print(f"    {system}: {summary(one)}\n      CPU: {live.format_cpu(one.cpu)}", flush=True)
        if one.requests:
            print(f"      apiserver: {live.format_counts(one.requests)}", flush=True)
        if one.apiserver_seconds:
            print(f"      apiserver's own time: {live.format_latency(one.apiserver_seconds)}",
                  flush=True)
        if one.work:
            print(f"      bridge: {one.work}", flush=True)
