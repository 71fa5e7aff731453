"""B3: extender filter latency as kube-scheduler calls it, and throughput at 100 in flight.

kube-scheduler calls an extender's ``/filter`` once per scheduling cycle, one pod at a time
per profile, with every feasible node's name (``nodeCacheCapable: true``).  So B3 measures:

- sequential ``/filter`` calls (one in flight) with 1, 256 and 5,000 candidate node names:
  client-side p50/p99 (target p99 <= 2 ms), and the service time inside the app.  One
  candidate is the gated pipeline's call: the release narrowed the pod to Slurm's node, so
  kube-scheduler's own filters leave that node alone, and the pod cache holds the released
  pod (filter decides from memory).  256 and 5,000 are a pod that came without the gate
  (the webhook bypassed): the filter reads it from the apiserver;
- throughput with 100 requests in flight (256 candidates), as a ratio to a bare FastAPI
  handler that does nothing (target >= 0.7x).

Two servers, each in its own process and served exactly as ``slurmbridge extender`` serves
(``logs.configure("info")``, uvicorn with ``bridge.draining.SERVING``: no access log):

- ``bridge``: the real app (``create_app(bridge)``) over the dev
  kit's in-memory fakes (``benchmarks/synthetic.py``), its index holding ``jobs`` running
  placeholder jobs, one per pod, the fake apiserver holding the pods it reads;
- ``bare``: a FastAPI ``/filter`` that reads the body and returns pre-encoded bytes of
  the answer the bridge gives (one node kept, the others unresolvable): no work at all.

Both are wrapped in the same ASGI timer (service time inside the app, no HTTP parsing or
queueing) that also answers ``GET /__bench/stats``.  The client (this process) cycles over
the pods; latency is measured per request on the client.  Sides alternate within each
repeat.  ``python -m benchmarks.b3_filter_latency serve ...`` is the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

from benchmarks.common import (
    Figure,
    Outcome,
    at_least,
    at_most,
    fmt,
    free_port,
    package_of,
    percentile,
)
from benchmarks.synthetic import (
    filter_answer,
    kube_node,
    load,
    offline_bridge,
    pod,
)
from bridge import logs
from bridge.draining import SERVING
from extender.protocol import create_app

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SEQ_P99_LIMIT_MS = 2.0
RPS_RATIO_FLOOR = 0.7


@dataclass
class Config:
    repeats: int = 3
    jobs: int = 10_000
    candidates: tuple[int, ...] = (1, 256, 5_000)  # node names per filter call
    released: tuple[int, ...] = (1,)  # candidate counts whose pods are released gated pods
    throughput_at: int = 256  # candidates per call of the throughput series
    sequential: int = 2_000  # timed calls one at a time, per candidate count, side, repeat
    warmup: int = 200  # untimed calls before each timed series
    concurrency: int = 100
    requests: int = 20_000  # timed calls at `concurrency`, with the first candidate count
    profile: bool | None = None  # None: profile only where a target is missed
    profile_requests: int = 500  # sequential calls under cProfile


# -- server side ---------------------------------------------------------------------------


class Timed:
    """ASGI wrapper: service time per /filter request, and a stats endpoint."""

    def __init__(self, app: ASGIApp, extra: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self.extra = extra
        self.samples: list[float] = []
        self.gc_ms: list[float] = []  # every garbage collection's pause: the tail's suspect
        self._gc_start = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, _: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_ms.append((time.perf_counter() - self._gc_start) * 1000)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/__bench/stats":
            body = json.dumps(self.stats()).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["path"] == "/__bench/reset":
            self.samples, self.gc_ms = [], []
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        start = time.perf_counter()
        await self.app(scope, receive, send)
        if scope["path"] == "/filter":
            self.samples.append((time.perf_counter() - start) * 1000)

    def stats(self) -> dict[str, Any]:
        return {
            "served": len(self.samples),
            "service_p50_ms": percentile(self.samples, 50),
            "service_p99_ms": percentile(self.samples, 99),
            "gc_per_call": len(self.gc_ms) / max(len(self.samples), 1),
            "gc_max_ms": max(self.gc_ms, default=0.0),
            **self.extra(),
        }


def bare_app(nodes: int) -> FastAPI:
    """Does nothing: the same answer bytes as the bridge's, encoded once."""
    answer = json.dumps(filter_answer(nodes), separators=(",", ":")).encode()
    app = FastAPI(title="bare")

    @app.post("/filter")
    async def filter_(request: Request) -> Response:
        await request.body()
        return Response(answer, media_type="application/json")

    return app


def bridge_app(
    jobs: int, nodes: int, released: bool
) -> tuple[ASGIApp, Callable[[], dict[str, Any]]]:

    bridge, kube = offline_bridge()
    load(bridge, kube, jobs, nodes, pods=True, released=released)
    app = create_app(bridge)

    def extra() -> dict[str, Any]:
        return {"indexed_jobs": len(bridge.index.jobs()), "apiserver_writes": kube.writes}

    return app, extra


def serve(
    kind: str, port: int, jobs: int, nodes: int, *, released: bool, profile_to: str | None
) -> None:
    logs.configure("info")  # what `slurmbridge extender` does with its default --log-level
    if kind == "bridge":
        app, extra = bridge_app(jobs, nodes, released)
    else:
        app, extra = bare_app(nodes), dict
    timed = Timed(app, extra)
    profiler = cProfile.Profile() if profile_to else None
    if profiler is not None:
        profiler.enable()
    try:
        uvicorn.run(timed, host="127.0.0.1", port=port, **SERVING)
    finally:
        if profiler is not None and profile_to:
            profiler.disable()
            profiler.dump_stats(profile_to)


@contextlib.contextmanager
def server(
    kind: str, cfg: Config, nodes: int, workdir: Path, profile_to: Path | None = None
) -> Any:
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.b3_filter_latency", "serve", kind,
           "--port", str(port), "--jobs", str(cfg.jobs), "--nodes", str(nodes)]
    if nodes in cfg.released:
        cmd.append("--released")
    if profile_to is not None:
        cmd += ["--profile-to", str(profile_to)]
    log_path = workdir / f"server-{kind}-{nodes}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(Path(__file__).parents[1])
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} server exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/__bench/stats", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} server not ready after 120 s ({log_path})")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # uvicorn shuts down cleanly; the profile is saved
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- client side ---------------------------------------------------------------------------


@dataclass
class Run:
    latencies_ms: list[float]
    seconds: float

    @property
    def throughput(self) -> float:
        return len(self.latencies_ms) / self.seconds


async def drive(url: str, body: Callable[[int], bytes], total: int, concurrency: int) -> Run:
    """``concurrency`` workers, each on its own keep-alive connection, until ``total`` answers.

    A minimal HTTP/1.1 client on asyncio streams (as wrk would be): httpx itself tops out
    near 250 requests/s with 100 connections on this kind of machine, which would measure
    the client, not the server.
    """
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    issued = 0
    head = (
        f"POST /filter HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/json\r\nContent-Length: "
    ).encode()

    async def worker() -> None:
        nonlocal issued
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while issued < total:
                payload = body(issued)
                issued += 1
                start = time.perf_counter()
                writer.write(head + str(len(payload)).encode() + b"\r\n\r\n" + payload)
                status, answer = await _read_response(reader)
                latencies.append((time.perf_counter() - start) * 1000)
                if status != 200 or b'"NodeNames":["kube-node' not in answer:
                    raise RuntimeError(f"unexpected filter answer {status}: {answer[:300]!r}")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    begin = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Run(latencies, time.perf_counter() - begin)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    header = await reader.readuntil(b"\r\n\r\n")
    lines = header.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value)
        elif key == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, b"".join(parts)
        parts.append(chunk[:-2])


def stats(url: str) -> dict[str, Any]:
    result: dict[str, Any] = httpx.get(f"{url}/__bench/stats", timeout=10).json()
    return result


def reset(url: str) -> None:
    httpx.post(f"{url}/__bench/reset", timeout=10)


@dataclass
class Seq:
    """One side's sequential series (and, at the first candidate count, its throughput)."""

    p50: float
    p99: float
    service_p50: float
    service_p99: float
    gc_per_call: float
    gc_max_ms: float
    rps: float | None
    apiserver_writes: int


def bodies(cfg: Config, nodes: int) -> Callable[[int], bytes]:
    """ExtenderArgs for call ``i``: pod ``i % jobs`` with ``nodes`` candidate names (the
    names are encoded once: 5,000 names x 10,000 pods would not fit in memory)."""
    pods = [json.dumps(pod(i, nodes), separators=(",", ":")).encode() for i in range(cfg.jobs)]
    names = json.dumps([kube_node(k) for k in range(1, nodes + 1)]).encode()
    return lambda i: b'{"Pod":' + pods[i % len(pods)] + b',"NodeNames":' + names + b"}"


def measure(url: str, body: Callable[[int], bytes], cfg: Config, loaded: bool) -> Seq:
    asyncio.run(drive(url, body, cfg.warmup, 1))
    reset(url)
    seq = asyncio.run(drive(url, body, cfg.sequential, 1))
    served = stats(url)
    rps = None
    if loaded:
        asyncio.run(drive(url, body, cfg.warmup * 5, cfg.concurrency))
        rps = asyncio.run(drive(url, body, cfg.requests, cfg.concurrency)).throughput
    return Seq(
        p50=percentile(seq.latencies_ms, 50),
        p99=percentile(seq.latencies_ms, 99),
        service_p50=served["service_p50_ms"],
        service_p99=served["service_p99_ms"],
        gc_per_call=served["gc_per_call"],
        gc_max_ms=served["gc_max_ms"],
        rps=rps,
        apiserver_writes=int(stats(url).get("apiserver_writes", 0)),
    )


def profile_summary(path: Path, calls: int, top: int = 10) -> str:
    """Where the bridge server's CPU time goes: by package, the steps of one filter, and
    the ``top`` functions by own time."""
    st = pstats.Stats(str(path))
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = st.stats  # type: ignore[attr-defined]
    idle = sum(v[2] for (f, _, fn), v in raw.items() if _idle(f, fn))
    raw = {k: v for k, v in raw.items() if not _idle(k[0], k[2])}
    total = sum(v[2] for v in raw.values()) or 1.0
    groups: dict[str, float] = {}
    for (filename, _, func), (_, _, tt, _, _) in raw.items():
        groups[package_of(filename, func)] = groups.get(package_of(filename, func), 0.0) + tt
    lines = [f"Time in the bridge server process over {calls:,} sequential filters "
             f"(cProfile wall clock, {total:.2f} s busy; {idle:.2f} s idle in the event loop "
             "waiting for the next request, excluded), own time per package:"]
    for name, tt in sorted(groups.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * tt / total:5.1f} %  {name}")
    lines.append("")
    lines.append("Cumulative time of the steps, per filter call (an async function's "
                 "calls count each resumption):")
    wanted = {
        ("extender/protocol.py", "filter_"): "extender filter_ (whole handler body)",
        ("extender/protocol.py", "_pod"): "  Pod.from_dict (lightkube model of the body's pod)",
        ("bridge/placement/eligibility.py", "pod_from_api"):
            "  read the pod from the (fake) apiserver",
        ("bridge/placement/placer.py", "filter"): "  Placer.filter (index lookup, verdict)",
        ("fastapi/routing.py", "serialize_response"): "  FastAPI response serialization",
        ("fastapi/routing.py", "run_endpoint_function"): "  FastAPI endpoint call",
        ("fastapi/routing.py", "request_body_to_args"): "  FastAPI body -> ExtenderArgs",
        ("uvicorn/protocols/http/httptools_impl.py", "run_asgi"): "uvicorn request in total",
        ("logging/__init__.py", "callHandlers"): "logging handlers (access log)",
    }
    found: dict[str, tuple[float, int]] = {}
    for (filename, _, func), (_, nc, _, ct, _) in raw.items():
        for (suffix, name), label in wanted.items():
            if (func == name and filename.endswith(suffix) and nc
                    and ct / calls > found.get(label, (0.0, 0))[0]):
                found[label] = (ct / calls, nc)
    for label in wanted.values():
        if label in found:
            per_call, nc = found[label]
            lines.append(f"  {1000 * per_call:7.3f} ms x {nc:>7,}  {label}")
    lines += ["", f"Top {top} functions by own time (per filter call):"]
    heaviest = sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]
    for (filename, line, func), (_, nc, tt, _, _) in heaviest:
        where = package_of(filename, func)
        site = f"{Path(filename).name}:{line} " if filename.startswith("/") else ""
        lines.append(f"  {1000 * tt / calls:7.3f} ms  {nc / calls:8.1f} calls  "
                     f"{site}{func[:60]}  [{where}]")
    return "\n".join(lines)


def _idle(filename: str, func: str) -> bool:
    """The frame that calls into the (uvloop) event loop: its own time is the wait in epoll."""
    return filename.endswith("asyncio/runners.py") and func == "run"


# -- the benchmark --------------------------------------------------------------------------


def run(cfg: Config) -> Outcome:
    figs: dict[str, Figure] = {}

    def fig(key: str, name: str, unit: str) -> Figure:
        return figs.setdefault(key, Figure(name, unit))

    first = cfg.throughput_at
    writes = 0
    with tempfile.TemporaryDirectory(prefix="slurmbridge-b3-") as tmp:
        workdir = Path(tmp)
        for rep in range(cfg.repeats):
            order = ("bridge", "bare") if rep % 2 == 0 else ("bare", "bridge")
            for nodes in cfg.candidates:
                body = bodies(cfg, nodes)
                got: dict[str, Seq] = {}
                for side in order:
                    with server(side, cfg, nodes, workdir) as url:
                        got[side] = measure(url, body, cfg, loaded=nodes == first)
                    s = got[side]
                    for key, name, value in (
                        ("p50", "filter p50, one at a time", s.p50),
                        ("p99", "filter p99, one at a time", s.p99),
                        ("service_p50", "service time in the app p50", s.service_p50),
                        ("service_p99", "service time in the app p99", s.service_p99),
                        ("gc_max", "longest GC pause in the series", s.gc_max_ms),
                    ):
                        fig(f"{side}.{nodes}.{key}", f"{name}, {where(cfg, nodes)} ({side})",
                            "ms").samples.append(value)
                    fig(f"{side}.{nodes}.gc_per_call", f"GC collections per 1,000 calls, "
                        f"{where(cfg, nodes)} ({side})", "").samples.append(1000 * s.gc_per_call)
                    if s.rps is not None:
                        fig(f"{side}.rps", f"throughput at {cfg.concurrency} in flight, "
                            f"{first:,} nodes ({side})", "req/s").samples.append(s.rps)
                    print(f"  B3 repeat {rep + 1}/{cfg.repeats} {nodes} nodes {side}: "
                          f"p50 {fmt(s.p50)} ms, p99 {fmt(s.p99)} ms"
                          + (f", {fmt(s.rps)} req/s" if s.rps is not None else ""), flush=True)
                writes += got["bridge"].apiserver_writes
                fig(f"ratio.{nodes}.p99", f"p99 ratio bridge / bare, one at a time, "
                    f"{where(cfg, nodes)}", "x").samples.append(got["bridge"].p99 / got["bare"].p99)
                rps_b, rps_0 = got["bridge"].rps, got["bare"].rps
                if rps_b is not None and rps_0 is not None:
                    fig("ratio.rps", f"throughput ratio bridge / bare at {cfg.concurrency} in "
                        "flight", "x").samples.append(rps_b / rps_0)
        missed: list[int] = []
        for nodes in cfg.candidates:
            at_most(figs[f"bridge.{nodes}.p99"], SEQ_P99_LIMIT_MS, f"≤ {SEQ_P99_LIMIT_MS:g} ms")
            if not figs[f"bridge.{nodes}.p99"].met or cfg.profile:
                missed.append(nodes)
        if "ratio.rps" in figs:  # --candidates without the throughput series' count
            at_least(figs["ratio.rps"], RPS_RATIO_FLOOR, f"≥ {RPS_RATIO_FLOOR:g}x")
        if cfg.profile is False:
            missed = []
        profiles = [profile_one(cfg, nodes, workdir) for nodes in missed]
    order_keys = [k for nodes in cfg.candidates for k in (
        f"bridge.{nodes}.p50", f"bridge.{nodes}.p99", f"bare.{nodes}.p50", f"bare.{nodes}.p99",
        f"ratio.{nodes}.p99")] + [k for k in ("bridge.rps", "bare.rps", "ratio.rps")
                                  if k in figs] + [
        f"{side}.{nodes}.{key}" for nodes in cfg.candidates for side in ("bridge", "bare")
        for key in ("service_p50", "service_p99", "gc_max", "gc_per_call")]
    return Outcome(
        bench="B3", title="extender filter latency as kube-scheduler calls it",
        figures=[figs[k] for k in order_keys], notes=notes(cfg, writes),
        profile="\n\n".join(profiles), repeats=cfg.repeats,
    )


def where(cfg: Config, nodes: int) -> str:
    """A series' name: its candidate count, and a released pod's path."""
    if nodes in cfg.released:
        return f"{nodes:,} node{'s' if nodes > 1 else ''}, released pod"
    return f"{nodes:,} nodes"


def profile_one(cfg: Config, nodes: int, workdir: Path) -> str:
    """cProfile of the bridge server over ``profile_requests`` sequential filters."""
    prof = workdir / f"bridge-{nodes}.prof"
    body = bodies(cfg, nodes)
    with server("bridge", cfg, nodes, workdir, profile_to=prof) as url:
        asyncio.run(drive(url, body, cfg.profile_requests, 1))
    for _ in range(100):
        if prof.exists():
            break
        time.sleep(0.1)
    if not prof.exists():
        return f"{where(cfg, nodes)}: (profile not written)"
    return f"--- {where(cfg, nodes)} ---\n" + profile_summary(prof, cfg.profile_requests)


def notes(cfg: Config, writes: int) -> list[str]:
    first = cfg.throughput_at
    sizes = ", ".join(f"{n:,}" for n in cfg.candidates)
    released = ", ".join(f"{n:,}" for n in cfg.released if n in cfg.candidates) or "none"
    return [
        f"Sequential: {cfg.sequential:,} timed `/filter` calls one at a time (after "
        f"{cfg.warmup:,} untimed) per side, candidate count and repeat, with {sizes} "
        "candidate NodeNames (nodeCacheCapable: true): what one kube-scheduler profile "
        "sends, one pod per scheduling cycle. The pod's Slurm node is among the candidates; "
        "the answer keeps it and lists every other candidate as unresolvable. Series with "
        f"{released} candidate(s) are the gated pipeline's call: the pod was released to "
        "Slurm's node (its node recorded on it; the release's node affinity leaves "
        "kube-scheduler that node alone) and the pod cache holds it, as its watch would, "
        "so filter decides from memory; the others are pods that came without the gate "
        "(webhook bypassed), their job recorded by the leader, read from the apiserver.",
        f"Throughput: {cfg.requests:,} timed calls with {cfg.concurrency} keep-alive "
        f"connections busy, {first:,} candidates, after {cfg.warmup * 5:,} untimed; the "
        "ratio is bridge / bare per repeat. At 100 in flight on one event loop the latency "
        "is queueing (≈ in flight ÷ throughput), so only throughput is reported there.",
        f"{cfg.jobs:,} running placeholder jobs indexed (`JobIndex.record`), one per pod, "
        "the calls cycling over those pods. Slurm and the apiserver are the dev kit's "
        "in-memory fakes (slurmbridge_devkit/fakes.py): for an ungated pod the filter reads "
        "the pod from the fake apiserver (a deep copy), as it reads the real one, and it "
        "never calls Slurm. Each pod carries the leader's record of its job (job id, owner, "
        "Slurm node) and the notifier has seen its job once, so `PodNotifier.job_known` "
        "returns without writing. Apiserver "
        f"writes counted by the fake over all bridge runs: {writes} (must be 0).",
        "Bare: a FastAPI `/filter` that reads the body and returns pre-encoded bytes of the "
        "same answer (no validation, no model, no serialization): the floor of FastAPI + "
        "uvicorn on this machine for these bodies.",
        "Client: a minimal asyncio HTTP/1.1 client in the runner process (httpx itself "
        "saturates near 250 req/s here); latency is per call on the client. Server: its own "
        "process, uvicorn as `slurmbridge extender` runs it (info log, no access log, "
        "stderr to a file). `service time in the app` is measured by an ASGI wrapper "
        "around the app (routing, body validation, handler, serialization; no HTTP "
        "parsing). Client and server share this machine's 2 CPUs; bridge and bare are "
        "measured back to back, the order alternating per repeat.",
        "Each figure's command: the one above reproduces all of them; "
        "`--candidates 256` or `--candidates 5000` alone, `--requests`, `--concurrency` "
        "and `--profile always` change one part (see `python -m benchmarks.run --help`).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="B3 server (used by the runner)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("kind", choices=["bridge", "bare"])
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--jobs", type=int, default=10_000)
    s.add_argument("--nodes", type=int, default=16)
    s.add_argument("--released", action="store_true",
                   help="the pods are released gated pods held in the pod cache")
    s.add_argument("--profile-to")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    serve(args.kind, args.port, args.jobs, args.nodes, released=args.released,
          profile_to=args.profile_to)


if __name__ == "__main__":
    main()
