"""The server both faces use: HTTPS with h2, which, told to stop, keeps serving a while and
lets clients close first.

The API server and kube-scheduler reach the webhook and the extender through a Service.  A
replica told to stop still gets requests: over keep-alive connections opened before (an
established connection stays with its pod) and on new ones until every node's Service rules
drop it.  Closing an idle keep-alive connection races a request the client is just writing on
it: the client sees EOF and, for a POST, does not retry (a webhook call so lost refuses the
pod).  So after SIGTERM the server goes on serving for ``drain_seconds``, every HTTP/1.1
response saying ``Connection: close`` (the client drops that connection once the response is
whole, and its next request opens one the Service routes to a live replica); then the server
sends GOAWAY to h2 clients and finishes the calls in flight.  The same race, between the
server's idle timeout and a client reusing the connection, is why the servers keep idle
connections longer than those clients do.

Both clients are Go's net/http, which offers h2 through ALPN: over HTTP/1.1 they keep few idle
connections, so their parallel calls opened and dropped one, a TLS handshake each (the
extender 0.13-0.30 per request, B8; the webhook 0.10-0.80 per bound pod, B1); over h2 they
share one.  The server is granian's, embedded in the face's own event loop: its HTTP and TLS
(rustls) run in Rust, at about half hypercorn's CPU per request (B8).  Python never sees its
handshakes, so each server counts the client connections its requests come on instead: one
handshake each.

Before it serves, a server stops on the first signal: the parts a face serves from may take
long to start (the extender waits for the apiserver's Nodes), so their start is cancelled
instead of making SIGTERM wait for it.
"""

import asyncio
import contextlib
import functools
import signal
import socket
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import Any, Protocol

import structlog
from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.http import HTTP1Settings, HTTP2Settings
from granian.log import LogLevels
from granian.server.embed import Server
from prometheus_client import Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger(__name__)

# Go's net/http, in the API server and kube-scheduler, drops a connection idle for 90 s; a
# server that keeps it longer never closes one under a request being written.
KEEP_ALIVE_SECONDS = 120
_CLOSE = (b"connection", b"close")
# What granian's stopping thread is given to finish once the server is stopped (it takes well
# under a millisecond once it holds the GIL again).
_STOPPING_THREAD_SECONDS = 0.1
_CONNECTIONS = 65_536  # bounded by the process's open files first, as under hypercorn
# How uvicorn serves in the benchmarks that compare servers (B3, B7, B8) and the extender's
# plain health port.  No access log: each review and bind is logged structured.
SERVING: dict[str, Any] = {
    "log_config": None, "access_log": False, "timeout_keep_alive": KEEP_ALIVE_SECONDS,
}
# granian's own logger, "_granian", propagates to the root logger's JSON lines (bridge/logs.py):
# its errors (an app's exception, a protocol failure); below them it narrates its start and stop.
# Its default configuration would print plain lines on stdout.
_GRANIAN_LOGGING: dict[str, Any] = {
    "handlers": {}, "formatters": {}, "loggers": {"_granian": {"propagate": True}},
}


class Parts(Protocol):
    """What a face serves from, started before it listens and stopped after its last answer
    (the extender's ``Bridge``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ServerConfig:
    """Where a face listens (``bind``: one ``host:port``) and its TLS material; each client
    connection its requests come on counted in ``connections`` (B1 reports them per pod as
    TLS handshakes)."""

    def __init__(self, connections: Counter) -> None:
        self.connections = connections
        self.bind = ["127.0.0.1:8000"]
        self.certfile: Path | None = None
        self.keyfile: Path | None = None
        self.client_ca: Path | None = None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        """The TLS material as Python's ssl reads it (None: plain HTTP), a client certificate
        required with ``client_ca``.  The server reads the files again in Rust, whose loader
        panics on one it cannot use: read here first, a bad file fails with ssl's message."""
        if self.certfile is None or self.keyfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certfile, self.keyfile)
        if self.client_ca is not None:
            context.load_verify_locations(self.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def https_config(
    bind: str, cert: Path, key: Path, *, connections: Counter, client_ca: Path | None = None
) -> ServerConfig:
    """HTTPS on ``bind`` (``host:port``); with ``client_ca``, a client certificate it signed
    is required."""
    config = ServerConfig(connections)
    config.bind = [bind]
    config.certfile, config.keyfile, config.client_ca = cert, key, client_ca
    return config


def granian_server(app: ASGIApp, config: ServerConfig) -> Server:
    """granian serving ``app`` as ``config`` says, h2 offered through ALPN beside HTTP/1.1."""
    (bind,) = config.bind
    host, port = bind.rsplit(":", 1)
    config.create_ssl_context()
    # granian binds an IP address only; a name (``localhost``) is looked up here, once.
    address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0][4][0]
    return Server(
        app, address=str(address), port=int(port), interface=Interfaces.ASGINL,
        http=HTTPModes.auto, websockets=False, backlog=1024,
        # Connections served at once: granian's default (the backlog) is a slot each idle
        # connection holds, so a client opening many would keep the API server out.
        backpressure=_CONNECTIONS,
        # hyper's header read timeout also bounds how long an idle HTTP/1.1 connection is
        # kept; h2 pings an idle client, so a vanished one is dropped.
        http1_settings=HTTP1Settings(header_read_timeout=KEEP_ALIVE_SECONDS * 1000),
        http2_settings=HTTP2Settings(keep_alive_interval=KEEP_ALIVE_SECONDS * 1000),
        log_level=LogLevels.error, log_dictconfig=_GRANIAN_LOGGING, log_access=False,
        # TLS 1.2 too, as before granian (its default: 1.3 only).
        ssl_cert=config.certfile, ssl_key=config.keyfile, ssl_ca=config.client_ca,
        ssl_client_verify=config.client_ca is not None, ssl_protocol_min=SSLProtocols.tls12,
    )


class DrainingServer:
    """Before it serves, the first SIGTERM/SIGINT stops the start of ``parts``; once serving,
    it starts a drain of ``drain_seconds``; a second signal ends the drain at once."""

    def __init__(self, app: ASGIApp, config: ServerConfig, drain_seconds: float,
                 parts: Parts | None = None) -> None:
        self._signalled, self._stop, self.started = asyncio.Event(), asyncio.Event(), False
        seen = NewConnections(config.connections)
        self.app = close_when(app, self._signalled.is_set, seen.saw)
        self.config, self.drain_seconds, self.parts = config, drain_seconds, parts

    def handle_exit(self, sig: int) -> None:
        if not self.started or self.drain_seconds <= 0 or self._signalled.is_set():
            self._stop.set()
        else:
            log.info("draining: serving on, each connection closed after its response",
                     signal=signal.Signals(sig).name, seconds=self.drain_seconds)
        self._signalled.set()

    def on_signals(self) -> None:
        """SIGTERM and SIGINT handled by this server (the process's main one)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_exit, sig)

    async def serve(self) -> None:
        server = granian_server(self.app, self.config)  # the TLS files read before the start
        parts = self.parts
        if parts is not None and not await unless_stopped(parts.start(), self._stop.wait()):
            log.info("stopped while starting: never served")
            await parts.stop()
            return
        self.started = True
        try:
            await self._serve_until_drained(server)
        finally:
            if parts is not None:
                await parts.stop()

    async def _serve_until_drained(self, server: Server) -> None:
        serving = asyncio.ensure_future(server.serve())
        drained = asyncio.ensure_future(self._until_drained())
        log.info("serving", address=self.config.bind[0], https=self.config.certfile is not None,
                 client_certificate=self.config.client_ca is not None)
        try:
            await asyncio.wait({serving, drained}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            drained.cancel()
            # GOAWAY to h2 clients; the calls in flight finish (granian leaves it unannotated)
            server.stop()  # type: ignore[no-untyped-call]
            await serving
            # granian's stopping thread wakes this loop from a Python callback it has yet to
            # return from: a process exiting under it aborts (7 of 25 stops did).
            await asyncio.sleep(_STOPPING_THREAD_SECONDS)

    async def _until_drained(self) -> None:
        await self._signalled.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.drain_seconds)


class NewConnections:
    """Counts in ``counter`` the client connections requests come on: a client address (host,
    port) not among the last ``remember`` seen is a new connection, one TLS handshake."""

    def __init__(self, counter: Counter, remember: int = 4096) -> None:
        self.counter, self.remember = counter, remember
        self._recent: OrderedDict[Hashable, None] = OrderedDict()

    def saw(self, scope: Scope) -> None:
        client, recent = scope.get("client"), self._recent
        if client is None:
            return
        client = tuple(client)
        if client in recent:
            recent.move_to_end(client)
            return
        self.counter.inc()
        recent[client] = None
        if len(recent) > self.remember:
            recent.popitem(last=False)


async def unless_stopped(work: Awaitable[None], stop: Awaitable[object]) -> bool:
    """``work`` done (True), or cancelled because ``stop`` (a signal) came first (False)."""
    task, stopper = asyncio.ensure_future(work), asyncio.ensure_future(stop)
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()
    return True


def close_when(app: ASGIApp, draining: Callable[[], bool],
               seen: Callable[[Scope], None]) -> ASGIApp:
    """``app`` telling ``seen`` each request's scope, whose responses say ``Connection: close``
    while ``draining()`` (an h2 server drops the header: h2 drains by GOAWAY)."""

    async def send_closing(send: Send, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        await send(message)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        seen(scope)
        # Nothing added per request until the drain starts: this wraps the hot path too.
        if not draining():
            await app(scope, receive, send)
        else:
            await app(scope, receive, functools.partial(send_closing, send))

    return wrapped
