"""Serve the extender: the protocol over mutual TLS, health and metrics over plain HTTP.

Whoever can call filter makes the bridge submit Slurm jobs, so the protocol port
accepts only callers presenting a client certificate signed by ``client_ca_file``
(kube-scheduler's extender ``tlsConfig``).  Probes and Prometheus get a second,
plain port that serves nothing that acts.

Granian (Rust: hyper, rustls) serves both, embedded in the bridge's own event loop.  It
speaks HTTP/2, which kube-scheduler's extender client prefers (ALPN): its binds run in
parallel, and over HTTP/1.1 Go keeps at most 2 idle connections per host, so each burst
of binds opened and closed TLS connections, a full mutual-TLS handshake each, in the
bridge's process.  Over HTTP/2 they share one connection.
"""

import asyncio
import signal
from pathlib import Path
from typing import Any

import uvloop
from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.errors import FatalError
from granian.log import LogLevels
from granian.server.embed import Server

from bridge.config import ExtenderSettings
from bridge.runtime import Bridge
from extender.app import create_app, create_health_app


class TLSConfigError(ValueError):
    """The extender was asked to start without its TLS material."""


def _tls_files(settings: ExtenderSettings) -> tuple[Path, Path, Path]:
    """Certificate, key and client CA; refuses to go without them."""
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
    cert, key, ca = files.values()
    assert cert is not None and key is not None and ca is not None
    return cert, key, ca


# Granian's errors (a failed startup, a worker gone) go to the bridge's log handlers; its
# warnings (one per start: "embedded server is experimental") do not.
_LOGS: dict[str, Any] = {"loggers": {"_granian": {"handlers": [], "propagate": True}}}


def _server(app: Any, host: str, port: int, **options: Any) -> Server:
    return Server(app, address=host, port=port, log_level=LogLevels.error,
                  log_dictconfig=_LOGS, **options)


def stop(server: Server) -> None:
    """Ask ``server`` to finish its requests and return from ``serve``."""
    server.stop()  # type: ignore[no-untyped-call]  # granian declares no types here


def plain_server(app: Any, host: str, port: int) -> Server:
    """Plain HTTP/1.1, no lifespan: the health port (the benchmarks serve apps this way)."""
    return _server(app, host, port, interface=Interfaces.ASGINL, http=HTTPModes.http1)


def api_server(bridge: Bridge, settings: ExtenderSettings) -> Server:
    """The protocol server: HTTPS (HTTP/2 or 1.1), client certificate required; it runs the
    app's lifespan, which starts and stops the bridge."""
    cert, key, ca = _tls_files(settings)
    return _server(
        create_app(bridge), settings.host, settings.port,
        interface=Interfaces.ASGI, http=HTTPModes.auto,
        ssl_cert=cert, ssl_key=key, ssl_ca=ca, ssl_client_verify=True,
        ssl_protocol_min=SSLProtocols.tls12,
    )


def run(main: Server, *companions: Server) -> None:
    """Serve on uvloop until SIGTERM/SIGINT or until ``main`` stops; the companions stop
    with it."""

    async def together() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, main)
        beside = [asyncio.create_task(c.serve()) for c in companions]
        try:
            await main.serve()
        except FatalError as exc:  # the app did not start (granian logged why)
            raise SystemExit(f"the server stopped ({exc}): the log above says why") from None
        finally:
            for companion in companions:
                stop(companion)
            await asyncio.gather(*beside)
        if main.interrupt_children:  # the server's worker died (granian logged why)
            raise SystemExit("the server stopped: the log above says why")

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(together())


def serve(bridge: Bridge, settings: ExtenderSettings) -> None:
    """Both servers; the protocol server owns the bridge's lifecycle."""
    run(api_server(bridge, settings),
        plain_server(create_health_app(bridge), settings.host, settings.health_port))
