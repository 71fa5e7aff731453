"""B5 (B2 merged in): the bridge's Slurm poll when Slurm's queue is mostly other people's jobs.

Issue 15's B2/B5 bullet: requests and bytes per poll cycle, and requests/s when nothing
changes, with the bridge owning ``own`` (10) live jobs while Slurm holds 100, 1,000 and
10,000 other jobs.  Targets: bytes and requests per cycle within 20% of each other across
the sizes (largest / smallest <= 1.2), at most 2 requests/s when nothing changes.

Setup (Slurm 26.05, ``MaxJobCount=100000``): ``own`` placeholder jobs of the bridge (its
user, its comment marker, 1 CPU) submitted through slurmrestd and RUNNING; then jobs that
look native (the same user, no marker, named ``native-b5-<i>``, held so that slurmctld does
not schedule them: PENDING, reason JobHeldUser) added up to each size.  At each size,
``repeats`` times, through a ``SlurmClient`` whose transport counts requests and bytes:

- requests/s when nothing changes: ``Poller.run()`` as the extender runs it (interval 2 s,
  resync 300 s), counted over ``window`` seconds after its first cycle;
- then ``cycles`` calls of ``Poller.poll_once()``: requests and bytes per cycle (median);
- the resync (at start, then every 300 s): the first one after a start reads every job
  once, a later one only the state list and what changed (it never asks for ``GET /jobs/``,
  whose size is shown for contrast, as is ``GET /jobs/state/`` of every job, which each
  cycle fetched before issue 15).

Last, the bridge's jobs are replaced by ``own`` held (pending) ones and the idle rate is
counted once more at the largest size: pending reasons are re-read round-robin, each at most
every ``placement.reason_refresh_seconds``, the one cost of an idle cycle beyond the state
query.  Jobs are
cancelled afterwards (scancel in the chroot); Slurm keeps ended jobs listed for MinJobAge
(600 s), so full listings of a run within 10 minutes count them too.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass, field

import httpx

from benchmarks import live
from benchmarks.common import Figure, Outcome, at_most, fmt
from bridge.controllers.poller import Poller
from bridge.jobs.owner import PodOwner
from bridge.placement.index import JobIndex
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import JobState
from bridge.slurm.wire.base import Envelope, JobStatesResponse
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.slurm_http import HttpxExchange

WITHIN = 1.2  # "within 20% of each other": largest / smallest
IDLE_RATE = 2.0  # requests/s when nothing changes


@dataclass
class Config:
    repeats: int = 3
    sizes: tuple[int, ...] = (100, 1_000, 10_000)
    own: int = 10
    cycles: int = 5
    window: float = 20.0
    slurm_version: str = "26.05"
    submit_parallel: int = 8


@dataclass
class CountingTransport(httpx.AsyncBaseTransport):
    """Wraps the real transport; records (path, bytes received) of every exchange."""

    inner: httpx.AsyncHTTPTransport = field(
        default_factory=lambda: httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=16))
    )
    log: list[tuple[str, int]] = field(default_factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.inner.handle_async_request(request)
        body = await resp.aread()
        self.log.append((request.url.path, resp.num_bytes_downloaded))
        headers = [(k, v) for k, v in resp.headers.items()
                   if k.lower() not in ("content-encoding", "transfer-encoding", "content-length")]
        return httpx.Response(resp.status_code, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def since(self, mark: int) -> tuple[int, int]:
        """(requests, bytes) recorded after ``mark`` (a previous ``len(log)``)."""
        later = self.log[mark:]
        return len(later), sum(b for _, b in later)


async def submit_many(slurm: SlurmTarget, cfg: Config, names: list[str],
                      owners: list[PodOwner | None], *, hold: bool) -> list[int]:
    async with SlurmClient(slurm.settings(max_connections=cfg.submit_parallel)) as client:
        await client.connect()
        slots = asyncio.Semaphore(cfg.submit_parallel)

        async def one(name: str, owner: PodOwner | None) -> int:
            async with slots:
                return await live.submit_job(client, name, owner, hold=hold)

        return list(await asyncio.gather(*map(one, names, owners)))


async def own_jobs(slurm: SlurmTarget, cfg: Config, *, hold: bool) -> list[int]:
    """The bridge's ``own`` placeholders; RUNNING before this returns unless ``hold``."""
    tag = uuid.uuid4().hex[:8]
    ids = await submit_many(
        slurm, cfg, [f"k8s:bench/b5-{i}" for i in range(cfg.own)],
        [PodOwner(f"bench-b5-{tag}-{i}") for i in range(cfg.own)], hold=hold,
    )
    want = JobState.PENDING if hold else JobState.RUNNING
    async with SlurmClient(slurm.settings()) as client:
        for _ in range(240):
            states = await client.job_states(ids)
            if all(states.get(i) is want for i in ids):
                return ids
            await asyncio.sleep(0.5)
    raise TimeoutError(f"the bridge's {cfg.own} jobs did not reach {want}")


@dataclass
class Sample:
    idle_rate: float  # requests/s while Poller.run() found nothing changed
    cycle_requests: float
    cycle_kb: float
    all_states_kb: float  # GET /jobs/state/ without job_id: every job (the poll before)
    listing_mb: float  # GET /jobs/, which no resync asks for any more (contrast)
    first_resync: tuple[int, int]  # requests, bytes: the start's resync and first cycle
    later_resync: tuple[int, int]  # requests, bytes: one more resync
    listed: int  # jobs in the state list
    tracked: int  # live jobs the index tracks


async def measure(slurm: SlurmTarget, cfg: Config) -> Sample:
    counting = CountingTransport()
    settings = slurm.settings()
    exchange = HttpxExchange(counting, settings.url)  # its bytes counted; B7 measures CPU
    async with SlurmClient(settings, exchange=exchange) as client:
        await client.connect()
        index = JobIndex(client)
        poller = Poller(client, index, interval=2.0, resync_interval=300.0)
        mark = len(counting.log)
        task = asyncio.create_task(poller.run())
        for _ in range(3000):  # the first resync and cycle (5 min at most)
            if poller.read_within(60) or task.done():
                break
            await asyncio.sleep(0.1)
        if not poller.read_within(60):
            task.cancel()
            raise RuntimeError("the poller did not complete its first cycle in 5 minutes")
        first = counting.since(mark)
        mark, t0 = len(counting.log), time.monotonic()
        await asyncio.sleep(cfg.window)
        idle = counting.since(mark)[0] / (time.monotonic() - t0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cycles = []
        for _ in range(cfg.cycles):
            mark = len(counting.log)
            await poller.poll_once()
            cycles.append(counting.since(mark))
            await asyncio.sleep(0.5)
        mark = len(counting.log)
        await poller.resync()
        later = counting.since(mark)
        mark = len(counting.log)
        every = await client.rest.call("GET", "/jobs/state/", "all_states", JobStatesResponse)
        all_states = counting.since(mark)[1]
        mark = len(counting.log)
        await client.rest.call("GET", "/jobs/", "full_listing", Envelope)
        listing = counting.since(mark)[1]
    return Sample(
        idle, statistics.median(n for n, _ in cycles),
        statistics.median(b for _, b in cycles) / 1e3, all_states / 1e3, listing / 1e6,
        first, later, len(every.jobs), len([j for j in index.jobs() if j.state.is_live]),
    )


_IDLE = (  # per size: key prefix, what, unit
    ("req", "requests per idle cycle", "req"),
    ("kb", "bytes per idle cycle", "kB"),
    ("rate", "requests/s when nothing changes", "req/s"),
)
_RESYNC = (
    ("old", "before: GET /jobs/state/ of every job", "kB"),
    ("list", "GET /jobs/ (asked by no resync now)", "MB"),
    ("firstreq", "first resync after a start + first cycle: requests", "req"),
    ("firstmb", "first resync after a start + first cycle: bytes", "MB"),
    ("resyncreq", "later resync (every 300 s): requests", "req"),
    ("resynckb", "later resync (every 300 s): bytes", "kB"),
)


def _figures(cfg: Config) -> dict[str, Figure]:
    figs = {f"{key}{n}": Figure(f"{what}, {n:,} other jobs", unit)
            for table in (_IDLE, _RESYNC) for n in cfg.sizes for key, what, unit in table}
    span = f"{cfg.sizes[-1]:,} / {cfg.sizes[0]:,} other jobs"
    figs["req_ratio"] = Figure(f"requests per cycle: largest / smallest ({span})", "x")
    figs["kb_ratio"] = Figure(f"bytes per cycle: largest / smallest ({span})", "x")
    figs["pending"] = Figure(
        f"requests/s when nothing changes, {cfg.own} PENDING bridge jobs, "
        f"{cfg.sizes[-1]:,} other jobs", "req/s")
    return figs


def run(cfg: Config) -> Outcome:
    slurm = live.slurm_target(cfg.slurm_version)
    return asyncio.run(_run(cfg, slurm))


async def _run(cfg: Config, slurm: SlurmTarget) -> Outcome:
    figs = _figures(cfg)
    await live.wait_slurm_quiet(slurm)
    ids = await own_jobs(slurm, cfg, hold=False)
    facts: dict[int, Sample] = {}
    native: list[int] = []
    try:
        for n in cfg.sizes:
            names = [f"native-b5-{i}" for i in range(len(native), n)]
            t0 = time.perf_counter()
            native += await submit_many(slurm, cfg, names, [None] * len(names), hold=True)
            print(f"  B5: {n:,} other jobs ({len(names):,} submitted in "
                  f"{time.perf_counter() - t0:.1f} s)", flush=True)
            per_size = [await measure(slurm, cfg) for _ in range(cfg.repeats)]
            for rep, s in enumerate(per_size):
                figs[f"req{n}"].samples.append(s.cycle_requests)
                figs[f"kb{n}"].samples.append(s.cycle_kb)
                figs[f"rate{n}"].samples.append(s.idle_rate)
                figs[f"old{n}"].samples.append(s.all_states_kb)
                figs[f"list{n}"].samples.append(s.listing_mb)
                figs[f"firstreq{n}"].samples.append(s.first_resync[0])
                figs[f"firstmb{n}"].samples.append(s.first_resync[1] / 1e6)
                figs[f"resyncreq{n}"].samples.append(s.later_resync[0])
                figs[f"resynckb{n}"].samples.append(s.later_resync[1] / 1e3)
                print(f"  B5 {n:,} repeat {rep + 1}/{cfg.repeats}: {fmt(s.cycle_requests)} req "
                      f"{fmt(s.cycle_kb)} kB per cycle, {fmt(s.idle_rate)} req/s idle (before: "
                      f"{fmt(s.all_states_kb)} kB per cycle)", flush=True)
            facts[n] = per_size[-1]
        _ratios(cfg, figs)
        await asyncio.to_thread(live.cancel_jobs, slurm, ids)
        ids += await own_jobs(slurm, cfg, hold=True)
        for _ in range(cfg.repeats):
            figs["pending"].samples.append((await measure(slurm, cfg)).idle_rate)
    finally:
        await asyncio.to_thread(live.cancel_jobs, slurm, ids + native)
    _judge(cfg, figs)
    return Outcome(bench="B5", title="Slurm poll cost with a queue of other jobs",
                   figures=list(figs.values()), notes=_notes(cfg, slurm, facts, figs),
                   repeats=cfg.repeats)


def _ratios(cfg: Config, figs: dict[str, Figure]) -> None:
    """Per repeat: the largest over the smallest of the sizes' per-cycle figures."""
    for key in ("req", "kb"):
        for rep in range(cfg.repeats):
            values = [figs[f"{key}{n}"].samples[rep] for n in cfg.sizes]
            figs[f"{key}_ratio"].samples.append(max(values) / min(values))


def _judge(cfg: Config, figs: dict[str, Figure]) -> None:
    at_most(figs["req_ratio"], WITHIN, f"within 20% (<= {WITHIN:g}x)")
    at_most(figs["kb_ratio"], WITHIN, f"within 20% (<= {WITHIN:g}x)")
    for n in cfg.sizes:
        at_most(figs[f"rate{n}"], IDLE_RATE, f"<= {IDLE_RATE:g} req/s")
    at_most(figs["pending"], IDLE_RATE, f"<= {IDLE_RATE:g} req/s")


def _notes(cfg: Config, slurm: SlurmTarget, facts: dict[int, Sample],
           figs: dict[str, Figure]) -> list[str]:
    big = cfg.sizes[-1]
    return [
        f"Slurm {slurm.version}; the bridge's {cfg.own} placeholders RUNNING (1 CPU each); "
        "other jobs: the same Slurm user, no bridge marker, held (PENDING JobHeldUser). "
        "Jobs in Slurm's state list / live jobs the poller tracked, per size: " + "; ".join(
            f"{n:,}: {s.listed:,} / {s.tracked}" for n, s in facts.items()) +
        " (the list also holds jobs ended within MinJobAge = 600 s).",
        f"Per repeat: Poller.run() (interval 2 s, resync 300 s) counted over {cfg.window:g} s "
        f"after its first cycle, then {cfg.cycles} Poller.poll_once() (median); bytes are "
        "those received on the wire (httpx num_bytes_downloaded).",
        "A cycle asks `GET /jobs/state/?job_id=..` for the tracked jobs only (400 ids a "
        "request; with none tracked, one `GET /ping/`); before issue 15 it fetched the "
        f"state of every job: {fmt(figs[f'old{big}'].median)} kB at {big:,} other jobs.",
        "Still growing with the queue: the resync's state list (`GET /jobs/state/` of every "
        "job, every `placement.resync_interval_seconds` = 300 s): "
        f"{fmt(figs[f'resynckb{big}'].median)} kB at {big:,} other jobs; the first resync "
        "after a start reads every job once (`GET /job/<id>`, 8 in flight): "
        f"{fmt(figs[f'firstreq{big}'].median)} requests, "
        f"{fmt(figs[f'firstmb{big}'].median)} MB. The full listing `GET /jobs/` the resync "
        f"asked for before effb11b: {fmt(figs[f'list{big}'].median)} MB at {big:,} (held, "
        "pending jobs: no per-core allocation; running ones are 28-46 kB each).",
        f"With {cfg.own} PENDING bridge jobs idle cycles also re-read pending reasons, one "
        "`GET /job/<id>` each (slurmrestd reads no reasons in bulk: `GET /jobs/` ignores "
        "`job_id`), each job at most every `placement.reason_refresh_seconds` (10 s) and at "
        "most `placement.reasons_per_cycle` (5) a cycle: a cost of the bridge's own pending "
        "jobs, not of the queue (1 + 5 requests every cycle before the pacing).",
    ]
