"""Serve the extender: the protocol over mutual TLS, health and metrics over plain HTTP.

Whoever can call filter makes the bridge submit Slurm jobs, so the protocol port
accepts only callers presenting a client certificate signed by ``client_ca_file``
(kube-scheduler's extender ``tlsConfig``).  Probes and Prometheus get a second,
plain port that serves nothing that acts.
"""

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterator

import uvicorn

from bridge import metrics
from bridge.config import ExtenderSettings
from bridge.draining import SERVING, DrainingServer
from bridge.runtime import Bridge
from extender.protocol import create_app, create_health_app


class TLSConfigError(ValueError):
    """The extender was asked to start without its TLS material."""


class _Companion(uvicorn.Server):
    """A server running beside the main one: it stops when the main one does."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the main server owns SIGTERM/SIGINT


def api_config(bridge: Bridge, settings: ExtenderSettings) -> uvicorn.Config:
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
    return uvicorn.Config(
        create_app(bridge), host=settings.host, port=settings.port, **SERVING,
        ssl_certfile=str(settings.tls_cert_file), ssl_keyfile=str(settings.tls_key_file),
        ssl_ca_certs=str(settings.client_ca_file), ssl_cert_reqs=ssl.CERT_REQUIRED,
        ssl_context_factory=_counting_handshakes,
    )


def _counting_handshakes(
    config: uvicorn.Config, default: Callable[[], ssl.SSLContext]
) -> ssl.SSLContext:
    """uvicorn's context, counting each handshake (OpenSSL asks the SNI callback once per
    ClientHello, with or without a name): B1 reports them per bound pod."""
    context = default()
    context.sni_callback = _handshake
    return context


def _handshake(sock: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
    metrics.EXTENDER_TLS_HANDSHAKES.inc()


def serve(bridge: Bridge, settings: ExtenderSettings) -> None:
    """Run both servers until SIGTERM/SIGINT; the protocol server starts and stops the bridge."""
    api = DrainingServer(api_config(bridge, settings), settings.drain_seconds, parts=bridge)
    health = _Companion(uvicorn.Config(
        create_health_app(bridge), host=settings.host, port=settings.health_port,
        log_config=None, lifespan="off", access_log=False,  # a line per probe and scrape
    ))

    async def both() -> None:
        companion = asyncio.create_task(health.serve())
        try:
            await api.serve()
        finally:
            health.should_exit = True
            await companion

    with asyncio.Runner(loop_factory=api.config.get_loop_factory()) as runner:
        runner.run(both())
