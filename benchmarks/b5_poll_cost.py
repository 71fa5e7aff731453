"""B5: bytes and time per Slurm poll cycle with 10,000 jobs in Slurm: full vs incremental.

Setup: ``jobs`` placeholder jobs (1 CPU each, the bridge's comment marker with a made-up
pod UID) submitted through slurmrestd over 8 connections; as many run as the nodes hold,
the rest pend.  No bridge runs meanwhile (an orphan-cancelling lifecycle would interfere).
Measured, ``samples`` times per repeat, through a ``SlurmClient`` whose transport counts the
bytes received and the time of each HTTP exchange:

- full listing: ``GET /jobs/`` (``list_jobs()``), what peers do every cycle;
- ``GET /jobs/?update_time=T`` right after a listing (a raw request: the client does not offer it);
- state list: ``GET /jobs/state/`` (``job_states()``);
- the bridge's poll cycle: ``Poller.poll_once()`` with all jobs tracked (its index rebuilt
  by one ``resync``): one state list + one ``GET /job/<id>`` per changed job + up to 5
  pending reasons.

Jobs are cancelled afterwards (Slurm keeps them listed for MinJobAge = 600 s: run B5 last).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

import httpx

from benchmarks import live
from benchmarks.common import Figure, Outcome, fmt
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.placement.index import JobIndex
from bridge.placement.poller import Poller
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import SlurmJob
from slurmbridge_devkit.slurm import SlurmTarget


@dataclass
class Config:
    repeats: int = 3
    jobs: int = 10_000
    samples: int = 5
    slurm_version: str = "26.05"
    submit_parallel: int = 8


@dataclass
class Exchange:
    method: str
    path: str
    bytes: int
    seconds: float


@dataclass
class CountingTransport(httpx.AsyncBaseTransport):
    """Wraps the real transport; records bytes on the wire and time of every exchange."""

    inner: httpx.AsyncHTTPTransport = field(
        default_factory=lambda: httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=16))
    )
    log: list[Exchange] = field(default_factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        resp = await self.inner.handle_async_request(request)
        body = await resp.aread()
        self.log.append(Exchange(
            request.method, request.url.path, resp.num_bytes_downloaded,
            time.perf_counter() - start,
        ))
        headers = [(k, v) for k, v in resp.headers.items()
                   if k.lower() not in ("content-encoding", "transfer-encoding", "content-length")]
        return httpx.Response(resp.status_code, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def since(self, mark: int) -> tuple[int, int]:
        """(requests, bytes) recorded after ``mark`` (a previous ``len(log)``)."""
        later = self.log[mark:]
        return len(later), sum(e.bytes for e in later)


async def submit_all(slurm: SlurmTarget, cfg: Config) -> list[int]:
    tag = uuid.uuid4().hex[:8]
    async with SlurmClient(slurm.settings(max_connections=cfg.submit_parallel)) as client:
        await client.connect()
        slots = asyncio.Semaphore(cfg.submit_parallel)

        async def one(i: int) -> int:
            async with slots:
                return await client.submit(JobRequest(
                    name=f"k8s:bench/b5-{i}", owner=PodOwner(f"bench-b5-{tag}-{i}"), cpus=1,
                    memory_mb=256,
                ))

        return list(await asyncio.gather(*(one(i) for i in range(cfg.jobs))))


async def _noop(before: SlurmJob, after: SlurmJob) -> None:
    del before, after


async def measure(slurm: SlurmTarget, cfg: Config, figs: dict[str, Figure]) -> dict[str, int]:
    counting = CountingTransport()
    # ``?update_time=`` through the same transport: the client does not use it (why: this).
    raw = httpx.AsyncClient(base_url=slurm.url, transport=counting, headers={
        "X-SLURM-USER-NAME": slurm.user,
        "X-SLURM-USER-TOKEN": slurm.token_file.read_text().strip(),
    })
    async with SlurmClient(slurm.settings(), transport=counting) as client:
        parser = await client.connect()
        index = JobIndex(client)
        await index.resync()
        poller = Poller(client, index, _noop, reasons_per_cycle=5)
        await poller.poll_once()  # first cycle refreshes every job not yet seen: not typical
        sizes: dict[str, list[float]] = {k: [] for k in figs}
        requests: list[int] = []
        listed = 0
        for _ in range(cfg.samples):
            mark = len(counting.log)
            listed_at = int(time.time())
            t0 = time.perf_counter()
            listing = await client.list_jobs()
            sizes["full_s"].append(time.perf_counter() - t0)
            sizes["full_mb"].append(counting.since(mark)[1] / 1e6)
            listed = len(listing)
            mark = len(counting.log)
            t0 = time.perf_counter()
            await raw.get(f"/slurm/{parser}/jobs/", params={"update_time": str(listed_at)})
            sizes["since_ms"].append((time.perf_counter() - t0) * 1000)
            sizes["since_kb"].append(counting.since(mark)[1] / 1e3)
            mark = len(counting.log)
            t0 = time.perf_counter()
            await client.job_states()
            sizes["state_ms"].append((time.perf_counter() - t0) * 1000)
            sizes["state_kb"].append(counting.since(mark)[1] / 1e3)
            mark = len(counting.log)
            t0 = time.perf_counter()
            await poller.poll_once()
            sizes["cycle_ms"].append((time.perf_counter() - t0) * 1000)
            n, b = counting.since(mark)
            sizes["cycle_kb"].append(b / 1e3)
            requests.append(n)
            await asyncio.sleep(1)
        for key, values in sizes.items():
            if values:  # "ratio" is derived below, not sampled
                figs[key].samples.append(sorted(values)[len(values) // 2])
        figs["ratio"].samples.append(
            (sorted(sizes["full_mb"])[cfg.samples // 2] * 1e3)
            / sorted(sizes["cycle_kb"])[cfg.samples // 2]
        )
        return {"tracked": len(index.jobs()), "listed": listed,
                "requests_per_cycle": sorted(requests)[len(requests) // 2]}


def run(cfg: Config) -> Outcome:
    slurm = live.slurm_target(cfg.slurm_version)
    return asyncio.run(_run(cfg, slurm))


async def _run(cfg: Config, slurm: SlurmTarget) -> Outcome:
    figs = {
        "full_mb": Figure("full listing GET /jobs/: size", "MB"),
        "full_s": Figure("full listing GET /jobs/: time", "s"),
        "since_kb": Figure("GET /jobs/?update_time=<last>: size", "kB"),
        "since_ms": Figure("GET /jobs/?update_time=<last>: time", "ms"),
        "state_kb": Figure("state list GET /jobs/state/: size", "kB"),
        "state_ms": Figure("state list GET /jobs/state/: time", "ms"),
        "cycle_kb": Figure("bridge poll cycle (Poller.poll_once): bytes", "kB"),
        "cycle_ms": Figure("bridge poll cycle (Poller.poll_once): time", "ms"),
        "ratio": Figure("bytes: full listing / bridge poll cycle", "x"),
    }
    await live.wait_slurm_quiet(slurm)
    t0 = time.perf_counter()
    ids = await submit_all(slurm, cfg)
    submit_s = time.perf_counter() - t0
    facts: dict[str, int] = {}
    try:
        await asyncio.sleep(10)  # let the main and backfill schedulers start what fits
        for rep in range(cfg.repeats):
            facts = await measure(slurm, cfg, figs)
            print(f"  B5 repeat {rep + 1}/{cfg.repeats}: full {fmt(figs['full_mb'].samples[-1])} "
                  f"MB in {fmt(figs['full_s'].samples[-1])} s; poll cycle "
                  f"{fmt(figs['cycle_kb'].samples[-1])} kB in "
                  f"{fmt(figs['cycle_ms'].samples[-1])} ms", flush=True)
    finally:
        await asyncio.to_thread(live.cancel_jobs, slurm, ids)
    running = await asyncio.to_thread(
        slurm.admin, "squeue", "-h", "-t", "RUNNING", "-o", "%i", check=False
    )
    notes = [
        f"Slurm {slurm.version}: {cfg.jobs:,} jobs submitted in {submit_s:.1f} s; "
        f"{facts.get('listed', 0):,} jobs in the listing, {facts.get('tracked', 0):,} tracked "
        f"by the index; {facts.get('requests_per_cycle', 0)} HTTP requests per poll cycle "
        f"(median). Jobs running at the end: {len(running.split())} (the rest pending).",
        f"Each repeat takes {cfg.samples} samples of each call 1 s apart (median per repeat); "
        "bytes are those received on the wire (httpx num_bytes_downloaded).",
        "`update_time` answers in full as soon as any job changed (architecture.md): with "
        "jobs starting or pending reasons updating, it is not an incremental poll.",
    ]
    return Outcome(
        bench="B5", title="cost of one Slurm poll cycle",
        figures=list(figs.values()), notes=notes, repeats=cfg.repeats,
    )
