"""Serve the extender: the protocol over mutual TLS, health and metrics over plain HTTP.

Whoever can call filter makes the bridge submit Slurm jobs, so the protocol port
accepts only callers presenting a client certificate signed by ``client_ca_file``
(kube-scheduler's extender ``tlsConfig``).  Probes and Prometheus get a second,
plain port that serves nothing that acts.

The protocol port speaks h2 as the webhook's does (bridge/draining.py says why): over it
kube-scheduler's parallel calls share one connection, at about half the server CPU per call
of uvicorn's HTTP/1.1 at 16 calls in flight and 0.7x at 64 (B8, benchmarks/RESULTS.md).
"""

import asyncio
import contextlib
from collections.abc import Iterator

import structlog
import uvicorn

from bridge import metrics
from bridge.config import ExtenderSettings
from bridge.draining import DrainingServer, ServerConfig, https_config
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


def api_config(settings: ExtenderSettings) -> ServerConfig:
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
    assert settings.tls_cert_file and settings.tls_key_file and settings.client_ca_file
    return https_config(f"{settings.host}:{settings.port}", settings.tls_cert_file,
                        settings.tls_key_file, client_ca=settings.client_ca_file,
                        connections=metrics.EXTENDER_TLS_HANDSHAKES)


def serve(bridge: Bridge, settings: ExtenderSettings) -> None:
    """Run both servers until SIGTERM/SIGINT; the protocol server starts and stops the bridge."""
    api = DrainingServer(create_app(bridge), api_config(settings), settings.drain_seconds,
                         parts=bridge)
    health_config = uvicorn.Config(
        create_health_app(bridge), host=settings.host, port=settings.health_port,
        log_config=None, lifespan="off", access_log=False,  # a line per probe and scrape
    )
    health = _Companion(health_config)

    async def both() -> None:
        api.on_signals()
        companion = asyncio.create_task(health.serve())
        try:
            await api.serve()
        finally:
            health.should_exit = True
            await companion

    with asyncio.Runner(loop_factory=health_config.get_loop_factory()) as runner:
        runner.run(both())
