"""The server both faces use: HTTPS with h2, which, told to stop, keeps serving a while and
lets clients close first.

The API server and kube-scheduler reach the webhook and the extender through a Service.  A
replica told to stop still gets requests: over keep-alive connections opened before (an
established connection stays with its pod) and on new ones until every node's Service rules
drop it.  Closing an idle keep-alive connection races a request the client is just writing on
it: the client sees EOF and, for a POST, does not retry (a webhook call so lost refuses the
pod).  So after SIGTERM the server goes on serving for ``drain_seconds``, every HTTP/1.1
response saying ``Connection: close`` (the client drops that connection once the response is
whole, and its next request opens one the Service routes to a live replica); then hypercorn
sends GOAWAY to h2 clients and finishes the calls in flight.  The same race, between the
server's idle timeout and a client reusing the connection, is why the servers keep idle
connections longer than those clients do.

Both clients are Go's net/http, which offers h2 through ALPN: over HTTP/1.1 they keep few idle
connections, so their parallel calls opened and dropped one, a TLS handshake each (the
extender 0.13-0.30 per request, B8; the webhook 0.10-0.80 per bound pod, B1); over h2 they
share one.  Each server counts its handshakes.

Before it serves, a server stops on the first signal: the parts a face serves from may take
long to start (the extender waits for the apiserver's Nodes), so their start is cancelled
instead of making SIGTERM wait for it.
"""

import asyncio
import contextlib
import functools
import logging
import signal
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, cast

import hypercorn.asyncio
import hypercorn.config
import structlog
from hypercorn.typing import ASGIFramework
from prometheus_client import Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger(__name__)

# Go's net/http, in the API server and kube-scheduler, drops a connection idle for 90 s; a
# server that keeps it longer never closes one under a request being written.
KEEP_ALIVE_SECONDS = 120
_CLOSE = (b"connection", b"close")
# How uvicorn serves in the benchmarks that compare servers (B3, B7, B8) and the extender's
# plain health port.  No access log: each review and bind is logged structured.
SERVING: dict[str, Any] = {
    "log_config": None, "access_log": False, "timeout_keep_alive": KEEP_ALIVE_SECONDS,
}


class Parts(Protocol):
    """What a face serves from, started before it listens and stopped after its last answer
    (the extender's ``Bridge``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ServerConfig(hypercorn.config.Config):
    """hypercorn's settings, counting each TLS handshake in ``handshakes`` (OpenSSL asks the
    SNI callback once per ClientHello, with or without a name): B1 reports them per pod."""

    def __init__(self, handshakes: Counter) -> None:
        super().__init__()
        self.handshakes = handshakes

    def create_ssl_context(self) -> ssl.SSLContext | None:
        context: ssl.SSLContext | None = super().create_ssl_context()
        if context is not None:
            context.sni_callback = self._handshake
        return context

    def _handshake(self, sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        self.handshakes.inc()


def https_config(
    bind: str, cert: Path, key: Path, *, handshakes: Counter, client_ca: Path | None = None
) -> ServerConfig:
    """HTTPS on ``bind`` (``host:port``); with ``client_ca``, a client certificate it signed
    is required."""
    config = ServerConfig(handshakes)
    config.bind = [bind]
    config.certfile, config.keyfile = str(cert), str(key)
    if client_ca is not None:
        config.ca_certs, config.verify_mode = str(client_ca), ssl.CERT_REQUIRED
    config.keep_alive_timeout = KEEP_ALIVE_SECONDS
    # Its default (1,000) ends a connection with GOAWAY under the calls in flight, which Go's
    # clients then fail (B8).
    config.keep_alive_max_requests = 2**62
    config.accesslog = None  # each review and bind is logged structured, each filter at debug
    config.errorlog = logging.getLogger("hypercorn.error")  # through bridge.logs: JSON lines
    return config


class DrainingServer:
    """Before it serves, the first SIGTERM/SIGINT stops the start of ``parts``; once serving,
    it starts a drain of ``drain_seconds``; a second signal ends the drain at once."""

    def __init__(self, app: ASGIApp, config: ServerConfig, drain_seconds: float,
                 parts: Parts | None = None) -> None:
        self._signalled, self._stop, self.started = asyncio.Event(), asyncio.Event(), False
        self.app = close_when(app, self._signalled.is_set)
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
        parts = self.parts
        if parts is not None and not await unless_stopped(parts.start(), self._stop.wait()):
            log.info("stopped while starting: never served")
            await parts.stop()
            return
        self.started = True
        try:
            await hypercorn.asyncio.serve(cast(ASGIFramework, self.app), self.config, mode="asgi",
                                          shutdown_trigger=self._until_drained)
        finally:
            if parts is not None:
                await parts.stop()

    async def _until_drained(self) -> None:
        await self._signalled.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.drain_seconds)


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


def close_when(app: ASGIApp, draining: Callable[[], bool]) -> ASGIApp:
    """``app`` whose responses say ``Connection: close`` while ``draining()`` (an h2 server
    drops the header: h2 drains by GOAWAY)."""

    async def send_closing(send: Send, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        await send(message)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        # Nothing added per request until the drain starts: this wraps the hot path too.
        if scope["type"] != "http" or not draining():
            await app(scope, receive, send)
        else:
            await app(scope, receive, functools.partial(send_closing, send))

    return wrapped
