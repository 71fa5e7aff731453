"""lightkube's requests sent over aiohttp: an httpx2 transport.

lightkube keeps everything it does (URLs, auth, decoding, ``ApiError``, watch restarts);
only the exchange changes hands.  httpx2's own transport (httpcore2, h11, anyio, TLS in
Python through ``SSLObject``) cost 1.0-1.4 ms of client CPU per apiserver exchange in B7,
aiohttp (its C parser, the event loop's TLS) 0.2-0.3 ms; the bridge makes one release
PATCH and one Binding per pod and reads several watch events per pod.  The per-pod writes
skip lightkube too (podwrites.py) but share this session, and its failures as httpx2's.
"""

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping

import aiohttp
import httpx2

# Left to aiohttp (it sets Host and the length itself); no compression asked for: on
# loopback or a LAN, gzip costs both ends more CPU than the bytes it saves.
_DROPPED = frozenset({b"host", b"content-length", b"accept-encoding", b"transfer-encoding"})
CONNECTIONS = 100  # httpx2's default pool size, which lightkube used


def _sum(*limits: float | None) -> float | None:
    return None if any(x is None for x in limits) else sum(x for x in limits if x is not None)


class _Body(httpx2.AsyncByteStream):
    """The answer's bytes as they come (a watch streams for minutes)."""

    def __init__(self, resp: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._resp = resp
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except TimeoutError as exc:
            raise httpx2.ReadTimeout(str(exc), request=self._request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(repr(exc), request=self._request) from exc

    async def aclose(self) -> None:
        self._resp.release()


def timeout_of(limits: Mapping[str, float | None]) -> aiohttp.ClientTimeout:
    """httpx2's four limits as aiohttp's; its "pool" bounds the wait for a free connection,
    which aiohttp's "connect" covers (with the connect itself): without it a request waits
    for a connection forever."""
    return aiohttp.ClientTimeout(
        total=None, connect=_sum(limits.get("pool"), limits.get("connect")),
        sock_connect=limits.get("connect"), sock_read=limits.get("read"),
    )


async def send(
    session: aiohttp.ClientSession, method: str, url: str, *,
    headers: Mapping[str, str] | list[tuple[str, str]], body: bytes | None,
    limits: aiohttp.ClientTimeout, request: httpx2.Request | None = None,
) -> aiohttp.ClientResponse:
    """One request; aiohttp's failures raised as httpx2's, which lightkube's callers know."""
    try:
        return await session.request(method, url, headers=headers, data=body,
                                     timeout=limits, allow_redirects=False)
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx2.ConnectTimeout(str(exc), request=request) from exc
    except TimeoutError as exc:
        raise httpx2.ReadTimeout(str(exc), request=request) from exc
    except aiohttp.ClientConnectorError as exc:  # nothing was sent
        raise httpx2.ConnectError(str(exc), request=request) from exc
    except aiohttp.ClientError as exc:
        raise httpx2.ReadError(repr(exc), request=request) from exc


async def read(resp: aiohttp.ClientResponse) -> bytes:
    """The whole answer, the connection back in the pool; failures as httpx2's."""
    try:
        return await resp.read()
    except TimeoutError as exc:
        raise httpx2.ReadTimeout(str(exc)) from exc
    except aiohttp.ClientError as exc:
        raise httpx2.ReadError(repr(exc)) from exc
    finally:
        resp.release()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    def __init__(self, ssl_context: ssl.SSLContext) -> None:
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        """Made on first use: a session belongs to the running event loop."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=CONNECTIONS),
                auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        headers = [(k.decode("latin-1"), v.decode("latin-1"))
                   for k, v in request.headers.raw if k.lower() not in _DROPPED]
        body = await request.aread()
        resp = await send(
            self.session(), request.method, str(request.url), headers=headers,
            body=body or None, limits=timeout_of(request.extensions.get("timeout", {})),
            request=request,
        )
        return httpx2.Response(
            resp.status, headers=list(resp.raw_headers), stream=_Body(resp, request),
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            await asyncio.sleep(0)  # let the connector close its sockets
