"""B8: the extender's connections as kube-scheduler makes them, per server of the protocol port.

B1 counted 0.74-0.80 TLS handshakes per bound pod on the extender: kube-scheduler's extender
client (``pkg/scheduler/extender.go`` ``makeTransport``) is a Go ``http.Transport`` through
``utilnet.SetTransportDefaults``, which offers h2 through ALPN and keeps Go's default of 2
idle connections per host.  Over HTTP/1.1 (all uvicorn speaks) parallel calls open
connections that are closed after use.  Over h2 they share one.

The client (``benchmarks/b8client``, Go, built once into ``~/.cache/slurmbridge``) builds its
transport exactly as ``makeTransport`` does (``restclient.TLSConfigFor`` with a client
certificate, then ``SetTransportDefaults``) and sends ``requests`` POSTs to ``/filter`` with
``concurrency`` in flight.  The server is the real app (``create_app`` over the dev kit's
fakes, as B3) in its own process behind each server, mutual TLS required: uvicorn as the
extender served before B8, hypercorn as it served after (h2, its handshakes counted by Python's
SNI callback) and granian as both HTTPS ports serve now (embedded in the app's process and
event loop: ``bridge.draining.DrainingServer``).
Per server and concurrency, the timed batch comes after a warm-up by the same client (its
connections open, as a long-running kube-scheduler's are): handshakes per request (the
extender's counter: TLS handshakes where the server's TLS is Python's, uvicorn's and
hypercorn's; granian's is in Rust, so there the client connections the app sees), the server
process's CPU (``/proc``, every thread) and the client's (``getrusage``) per request,
requests/s and the protocol the client got.  ``python -m benchmarks.b8_extender_conns``
prints the table; ``python -m benchmarks.run --only B8`` records it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Figure, Outcome, fmt, free_port

SERVERS = ("uvicorn", "hypercorn", "granian")
CACHE = Path.home() / ".cache" / "slurmbridge"
# hypercorn is no longer the product's dependency: installed here, for this alone.
SITE = CACHE / "b8-site"
PINS = ("hypercorn==0.18.0",)
CLIENT_SRC = REPO / "benchmarks" / "b8client"
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Config:
    repeats: int = 1
    requests: int = 2_000
    concurrency: tuple[int, ...] = (16, 64)
    warmup: int = 200
    jobs: int = 1_000
    nodes: int = 256
    servers: tuple[str, ...] = SERVERS


# -- server side ---------------------------------------------------------------------------


class Seen:
    """ASGI wrapper: requests served and the distinct client connections they came on."""

    def __init__(self, app: Any) -> None:
        self.app, self.requests, self.peers = app, 0, set[Any]()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.requests += 1
            self.peers.add(tuple(scope.get("client") or ()))
        await self.app(scope, receive, send)


def serve(kind: str, port: int, certs: Path, stats: Path, *, jobs: int, nodes: int) -> None:
    from benchmarks.b3_filter_latency import bridge_app  # noqa: PLC0415
    from bridge import logs, metrics  # noqa: PLC0415

    logs.configure("info")
    app = Seen(bridge_app(jobs, nodes, released=False)[0])

    def dump(*_: object) -> None:
        stats.write_text(json.dumps({
            "requests": app.requests, "connections": len(app.peers),
            "handshakes": metrics.EXTENDER_TLS_HANDSHAKES._value.get(),
        }))

    signal.signal(signal.SIGUSR1, dump)
    tls = {k: certs / f"{k}.pem" for k in ("cert", "key", "ca")}
    {"uvicorn": _uvicorn, "hypercorn": _hypercorn, "granian": _granian}[kind](app, port, tls)


def _uvicorn(app: Any, port: int, tls: dict[str, Path]) -> None:
    import ssl  # noqa: PLC0415

    import uvicorn  # noqa: PLC0415

    from bridge import metrics  # noqa: PLC0415
    from bridge.draining import SERVING  # noqa: PLC0415

    def _counting_handshakes(config: uvicorn.Config, default: Any) -> ssl.SSLContext:
        context: ssl.SSLContext = default()
        context.sni_callback = lambda *_: metrics.EXTENDER_TLS_HANDSHAKES.inc()
        return context

    uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=port, **SERVING, ssl_certfile=str(tls["cert"]),
        ssl_keyfile=str(tls["key"]), ssl_ca_certs=str(tls["ca"]),
        ssl_cert_reqs=ssl.CERT_REQUIRED, ssl_context_factory=_counting_handshakes,
    )).run()


def _hypercorn(app: Any, port: int, tls: dict[str, Path]) -> None:
    """As both HTTPS ports were served before granian: h2 through ALPN, each handshake counted
    by the SNI callback, no GOAWAY after 1,000 requests (its default failed Go's calls)."""
    import ssl  # noqa: PLC0415

    import hypercorn.asyncio  # noqa: PLC0415
    import hypercorn.config  # noqa: PLC0415

    from bridge import metrics  # noqa: PLC0415
    from bridge.draining import KEEP_ALIVE_SECONDS  # noqa: PLC0415

    class Counting(hypercorn.config.Config):
        def create_ssl_context(self) -> ssl.SSLContext | None:
            context: ssl.SSLContext | None = super().create_ssl_context()
            if context is not None:
                context.sni_callback = lambda *_: metrics.EXTENDER_TLS_HANDSHAKES.inc()
            return context

    config = Counting()
    config.bind = [f"127.0.0.1:{port}"]
    config.certfile, config.keyfile = str(tls["cert"]), str(tls["key"])
    config.ca_certs, config.verify_mode = str(tls["ca"]), ssl.CERT_REQUIRED
    config.keep_alive_timeout, config.keep_alive_max_requests = KEEP_ALIVE_SECONDS, 2**62
    config.accesslog = None
    asyncio.run(hypercorn.asyncio.serve(app, config, mode="asgi"))


def _granian(app: Any, port: int, tls: dict[str, Path]) -> None:
    """As ``slurmbridge extender`` serves its protocol port (extender/server.py)."""
    from bridge.config import ExtenderSettings  # noqa: PLC0415
    from bridge.draining import DrainingServer  # noqa: PLC0415
    from extender.server import api_config  # noqa: PLC0415

    settings = ExtenderSettings(host="127.0.0.1", port=port, tls_cert_file=tls["cert"],
                                tls_key_file=tls["key"], client_ca_file=tls["ca"])
    server = DrainingServer(app, api_config(settings), drain_seconds=0)

    async def main() -> None:
        server.on_signals()
        await server.serve()

    asyncio.run(main())


# -- runner --------------------------------------------------------------------------------


def ensure_site() -> None:
    if not (SITE / "hypercorn").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(SITE),
                        *PINS], check=True)


def client_binary() -> Path:
    """The Go client, rebuilt when its sources change (the first build fetches client-go)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(CLIENT_SRC.iterdir())))
    binary = CACHE / f"b8client-{digest.hexdigest()[:12]}"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=CLIENT_SRC,
                       check=True, env={**os.environ, "CGO_ENABLED": "0"})
    return binary


def make_certs(out: Path) -> None:
    import trustme  # noqa: PLC0415

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(out / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(out / "key.pem"))
    server.cert_chain_pems[0].write_to_path(str(out / "cert.pem"))
    client = ca.issue_cert("kube-scheduler")
    client.private_key_pem.write_to_path(str(out / "client-key.pem"))
    client.cert_chain_pems[0].write_to_path(str(out / "client.pem"))


def write_body(out: Path, jobs: int, nodes: int) -> Path:
    from benchmarks.synthetic import kube_node, pod  # noqa: PLC0415

    path = out / "body.json"
    path.write_text(json.dumps({"Pod": pod(jobs // 2, nodes),
                                "NodeNames": [kube_node(k) for k in range(1, nodes + 1)]}))
    return path


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime: every thread


@contextmanager
def server(kind: str, cfg: Config, work: Path) -> Iterator[tuple[int, int, Path]]:
    port, stats = free_port(), work / f"stats-{kind}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(SITE)])}
    log = (work / f"server-{kind}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.b8_extender_conns", "serve", kind, "--port",
         str(port), "--certs", str(work), "--stats", str(stats), "--jobs", str(cfg.jobs),
         "--nodes", str(cfg.nodes)], stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} exited: {(work / f'server-{kind}.log').read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} not listening after 120 s")
            time.sleep(0.2)
        yield port, proc.pid, stats
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def server_stats(pid: int, stats: Path) -> dict[str, Any]:
    stats.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not stats.exists() or not stats.read_text():
        if time.monotonic() > deadline:
            raise RuntimeError("the server wrote no stats")
        time.sleep(0.05)
    return {**json.loads(stats.read_text()), "cpu": cpu_seconds(pid)}


def measure(kind: str, cfg: Config, binary: Path, work: Path) -> dict[int, dict[str, Any]]:
    """Per concurrency: a client warms up (its connections open, as kube-scheduler's are),
    then the timed batch runs between two reads of the server's counts."""
    rows: dict[int, dict[str, Any]] = {}
    with server(kind, cfg, work) as (port, pid, stats):
        for concurrency in cfg.concurrency:
            client = subprocess.Popen(
                [str(binary), "-url", f"https://127.0.0.1:{port}/filter", "-cert",
                 str(work / "client.pem"), "-key", str(work / "client-key.pem"), "-ca",
                 str(work / "ca.pem"), "-body", str(work / "body.json"), "-n",
                 str(cfg.requests), "-warmup", str(cfg.warmup), "-concurrency",
                 str(concurrency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert client.stdin is not None and client.stdout is not None
            if client.stdout.readline().strip() != "warm":
                raise RuntimeError(f"the client failed warming up against {kind}")
            before = server_stats(pid, stats)
            out, _ = client.communicate("go\n", timeout=300)
            after = server_stats(pid, stats)
            got = json.loads(out)
            if got["failed"]:
                raise RuntimeError(f"{got['failed']} requests failed: {got['first_error']}")
            rows[concurrency] = row(cfg.requests, before, after, got)
    return rows


def row(n: int, before: dict[str, Any], after: dict[str, Any], got: dict[str, Any]
        ) -> dict[str, Any]:
    conns = after["connections"] - before["connections"]
    return {
        "handshakes": (after["handshakes"] - before["handshakes"]) / n, "connections": conns / n,
        "server_ms": 1000 * (after["cpu"] - before["cpu"]) / n,
        "client_ms": 1000 * got["cpu_seconds"] / n, "rps": n / got["seconds"],
        "protocol": ",".join(sorted(got["protocols"])),
    }


FIGURES = (("handshakes", "TLS handshakes per request", ""),
           ("server_ms", "server CPU per request", "ms"),
           ("client_ms", "client CPU per request (Go)", "ms"),
           ("total_ms", "server + client CPU per request", "ms"),
           ("rps", "requests/s", "req/s"))


def run(cfg: Config) -> Outcome:
    ensure_site()
    binary = client_binary()
    figs: dict[str, Figure] = {}
    protocols: dict[str, str] = {}
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="slurmbridge-b8-") as tmp:
        work = Path(tmp)
        make_certs(work)
        write_body(work, cfg.jobs, cfg.nodes)
        for rep in range(cfg.repeats):
            for kind in cfg.servers:
                try:
                    rows = measure(kind, cfg, binary, work)
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    errors.append(f"{kind}: {exc}"[:600])
                    continue
                for c, row in rows.items():
                    row["total_ms"] = row["server_ms"] + row["client_ms"]
                    protocols[f"{kind}, {c} in flight"] = row["protocol"]
                    for key, name, unit in FIGURES:
                        figs.setdefault(f"{kind}.{c}.{key}", Figure(
                            f"{name}, {c} in flight ({kind})", unit)).samples.append(row[key])
                    print(f"  B8 {rep + 1}/{cfg.repeats} {kind} {c} in flight: "
                          + ", ".join(f"{k} {fmt(v) if isinstance(v, float) else v}"
                                      for k, v in row.items()), flush=True)
    notes = verdict(figs, cfg) + [f"Protocol the Go client got: {k}: {v}."
             for k, v in protocols.items()] + [f"Could not measure {e}" for e in errors]
    return Outcome(
        "B8", "the extender's connections as kube-scheduler makes them, per server",
        figures=list(figs.values()), notes=notes, repeats=cfg.repeats,
        command=f"python -m benchmarks.run --only B8 --repeats {cfg.repeats}",
    )


def verdict(figs: dict[str, Figure], cfg: Config) -> list[str]:
    """Issue 42's rule: a server that removes the churn (no handshake after warm-up) at no more
    server + client CPU per request than uvicorn's, at every concurrency."""
    def med(kind: str, c: int, key: str) -> float:
        fig = figs.get(f"{kind}.{c}.{key}")
        return fig.median if fig else float("nan")

    out = []
    for kind in (k for k in cfg.servers if k != "uvicorn"):
        ok = all(med(kind, c, "handshakes") == 0
                 and med(kind, c, "total_ms") <= med("uvicorn", c, "total_ms")
                 for c in cfg.concurrency)
        ratios = ", ".join(f"{fmt(med(kind, c, 'total_ms') / med('uvicorn', c, 'total_ms'))}x "
                           f"at {c}" for c in cfg.concurrency)
        out.append(f"{kind}: {'removes' if ok else 'does not remove'} the churn at no more "
                   f"CPU than uvicorn (server + client CPU per request against uvicorn's: "
                   f"{ratios}).")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("kind", choices=SERVERS)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--certs", type=Path, required=True)
    s.add_argument("--stats", type=Path, required=True)
    s.add_argument("--jobs", type=int, default=1_000)
    s.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--concurrency", default="16,64")
    parser.add_argument("--servers", default=",".join(SERVERS))
    args = parser.parse_args()
    if args.cmd == "serve":
        serve(args.kind, args.port, args.certs, args.stats, jobs=args.jobs, nodes=args.nodes)
        return
    outcome = run(Config(requests=args.requests, servers=tuple(args.servers.split(",")),
                         concurrency=tuple(int(c) for c in args.concurrency.split(","))))
    for f in outcome.figures:
        print(f"{f.name:60s} {fmt(f.median):>10s} {f.unit}")
    print("\n".join(outcome.notes))


if __name__ == "__main__":
    main()
