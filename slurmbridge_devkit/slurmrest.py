"""slurmrestd behind ``SlurmRest``'s transport seam (bridge/slurm/transport.py) for tests
and benchmarks: a handler-style fake (``fake_slurmrest(handler)``, the handler taking an
``httpx.Request`` and returning an ``httpx.Response``, as ``httpx.MockTransport`` wants) or
a real httpx client (B7 compares it with the bridge's aiohttp).

Not a path of the bridge itself: it talks to slurmrestd through aiohttp only.
"""

from collections.abc import Callable, Mapping

import httpx

from bridge.slurm.transport import ConnectFailed, ExchangeFailed, Query, Reply

Handler = Callable[[httpx.Request], httpx.Response]


class HttpxTransport:
    """The seam over an ``httpx.AsyncClient``; httpx's failures mapped as the seam says
    (``ConnectError``: nothing sent; any other transport error: maybe acted on)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def send(
        self, method: str, url: str, *, headers: Mapping[str, str], params: Query | None = None,
        content: bytes | None = None,
    ) -> Reply:
        try:
            resp = await self.http.request(
                method, url, headers=headers, params=tuple(params) if params else None,
                content=content,
            )
        except httpx.ConnectError as exc:
            raise ConnectFailed(str(exc)) from exc
        except httpx.TransportError as exc:
            raise ExchangeFailed(str(exc) or type(exc).__name__) from exc
        return Reply(resp.status_code, resp.content)

    async def aclose(self) -> None:
        await self.http.aclose()


def fake_slurmrest(handler: Handler) -> HttpxTransport:
    """A fake slurmrestd: ``handler`` answers each request in-process."""
    return HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(handler)))


def httpx_slurmrest(timeout_seconds: float = 10.0, max_connections: int = 16) -> HttpxTransport:
    """A real httpx client, configured as the bridge's httpx client was before aiohttp."""
    return HttpxTransport(httpx.AsyncClient(
        timeout=timeout_seconds, limits=httpx.Limits(max_connections=max_connections),
    ))
