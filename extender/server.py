"""Serve the extender: the protocol over mutual TLS, health and metrics over plain HTTP.

Whoever can call filter makes the bridge submit Slurm jobs, so the protocol port
accepts only callers presenting a client certificate signed by ``client_ca_file``
(kube-scheduler's extender ``tlsConfig``).  Probes and Prometheus get a second,
plain port that serves nothing that acts.

The protocol port speaks h2 (hypercorn): kube-scheduler's extender client offers it through
ALPN and keeps only 2 idle HTTP/1.1 connections, so over HTTP/1.1 its parallel calls opened
and dropped a connection, a TLS handshake each (0.13-0.30 per request, B8); over h2 they
share one, at less CPU at 16 calls in flight and about the same at 64 (B8,
benchmarks/RESULTS.md).
"""

import asyncio
import contextlib
import logging
import signal
import ssl
from collections.abc import Iterator
from typing import cast

import hypercorn.asyncio
import hypercorn.config
import structlog
import uvicorn
from hypercorn.typing import ASGIFramework
from starlette.types import ASGIApp

from bridge import metrics
from bridge.config import ExtenderSettings
from bridge.draining import KEEP_ALIVE_SECONDS, Parts, close_when, unless_stopped
from bridge.runtime import Bridge
from extender.protocol import create_app, create_health_app

log = structlog.get_logger(__name__)


class TLSConfigError(ValueError):
    """The extender was asked to start without its TLS material."""


class _Companion(uvicorn.Server):
    """A server running beside the main one: it stops when the main one does."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the main server owns SIGTERM/SIGINT


class ProtocolConfig(hypercorn.config.Config):
    """hypercorn's settings, counting each TLS handshake (OpenSSL asks the SNI callback once
    per ClientHello, with or without a name): B1 reports them per bound pod."""

    def create_ssl_context(self) -> ssl.SSLContext | None:
        context: ssl.SSLContext | None = super().create_ssl_context()
        if context is not None:
            context.sni_callback = _handshake
        return context


def _handshake(sock: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
    metrics.EXTENDER_TLS_HANDSHAKES.inc()


def api_config(settings: ExtenderSettings) -> ProtocolConfig:
    """The protocol server: HTTPS, client certificate required; refuses to go without TLS."""
    files = {
        "SLURMBRIDGE_EXTENDER__TLS_CERT_FILE": settings.tls_cert_file,
        "SLURMBRIDGE_EXTENDER__TLS_KEY_FILE": settings.tls_key_file,
        "SLURMBRIDGE_EXTENDER__CLIENT_CA_FILE": settings.client_ca_file,
    }
    unset = [name for name, path in files.items() if path is None]
    if unset:
        raise TLSConfigError(
            "the extender serves kube-scheduler over mutual TLS only (anyone reaching filter "
            f"could submit Slurm jobs): set {', '.join(unset)}"
        )
    missing = [str(p) for p in files.values() if p is not None and not p.is_file()]
    if missing:
        raise TLSConfigError(f"TLS file(s) not found: {', '.join(missing)}")
    config = ProtocolConfig()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.certfile, config.keyfile = str(settings.tls_cert_file), str(settings.tls_key_file)
    config.ca_certs, config.verify_mode = str(settings.client_ca_file), ssl.CERT_REQUIRED
    config.keep_alive_timeout = KEEP_ALIVE_SECONDS
    # Its default (1,000) ends a connection with GOAWAY under the calls in flight, which
    # kube-scheduler's client then fails (B8).
    config.keep_alive_max_requests = 2**62
    config.accesslog = None  # each bind is logged structured, each filter at debug
    config.errorlog = logging.getLogger("hypercorn.error")  # through bridge.logs: JSON lines
    return config


class ProtocolServer:
    """The protocol port.  Before it serves, the first SIGTERM/SIGINT stops the start of
    ``parts``; once serving, it starts a drain of ``drain_seconds`` (HTTP/1.1 answers say
    ``Connection: close``), then hypercorn sends GOAWAY and finishes the calls in flight; a
    second signal ends the drain at once (bridge/draining.py says why a drain)."""

    def __init__(self, app: ASGIApp, config: ProtocolConfig, drain_seconds: float,
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
            if self.parts is not None:
                await self.parts.stop()

    async def _until_drained(self) -> None:
        await self._signalled.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.drain_seconds)


def serve(bridge: Bridge, settings: ExtenderSettings) -> None:
    """Run both servers until SIGTERM/SIGINT; the protocol server starts and stops the bridge."""
    api = ProtocolServer(create_app(bridge), api_config(settings), settings.drain_seconds,
                         parts=bridge)
    health_config = uvicorn.Config(
        create_health_app(bridge), host=settings.host, port=settings.health_port,
        log_config=None, lifespan="off", access_log=False,  # a line per probe and scrape
    )
    health = _Companion(health_config)

    async def both() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, api.handle_exit, sig)
        companion = asyncio.create_task(health.serve())
        try:
            await api.serve()
        finally:
            health.should_exit = True
            await companion

    with asyncio.Runner(loop_factory=health_config.get_loop_factory()) as runner:
        runner.run(both())
