"""Reaching the servers the tests start: once they listen, and with connections as a client
that keeps some alive opens them (the TLS handshake counters, which B1 reports per bound pod,
must count one per connection, not per request)."""

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from aiohttp import web

# A refused handshake, as the client meets it: httpx maps the TLS alert to TransportError when
# the handshake itself fails, but in TLS 1.3 the server's alert may come after the client's
# side is done, and over HTTP/2 httpx then lets the ssl.SSLError through (CI runs met it,
# in the unit tier and in e2e).
REFUSED = (httpx.TransportError, ssl.SSLError)


async def requests_on_four_connections(url: str, verify: ssl.SSLContext) -> int:
    """Three GETs of ``url`` on a connection each, then three on one kept alive; returns the
    connections opened (4)."""
    for _ in range(3):
        async with httpx.AsyncClient(verify=verify) as http:
            await http.get(url)
    async with httpx.AsyncClient(verify=verify) as http:
        for _ in range(3):
            await http.get(url)
    return 4


async def listening(port: int, served: "asyncio.Future[None]") -> None:
    """Once 127.0.0.1:``port`` accepts connections; fails if ``served`` ended first."""
    while True:
        assert not served.done(), "the server stopped before it listened"
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def aiohttp_served(app: web.Application) -> AsyncIterator[str]:
    """``app`` served on a free local port, plain HTTP: its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def kubeconfig_for(path: Path, server: str, user: dict[str, str]) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return path
