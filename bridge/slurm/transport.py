"""The one HTTP seam of the Slurm side: a request out, a status and the body's bytes back.

``SlurmRest`` (``rest.py``) owns everything above it: negotiation, credentials, retries,
error mapping, metrics.  A transport only moves bytes and says how an exchange failed:
``ConnectFailed`` when nothing was sent (always safe to retry), ``ExchangeFailed`` when the
request may have reached slurmrestd (a timeout, a dropped connection).

``AiohttpTransport`` is the bridge's: B7 (benchmarks/RESULTS.md) measured aiohttp at 5-9x
less client CPU per exchange than httpx on the same requests.  Tests put a fake behind the
same seam (``slurmbridge_devkit.slurmrest``).
"""

import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from bridge.config import SlurmSettings

Query = Sequence[tuple[str, str]]


class ConnectFailed(Exception):
    """No connection to slurmrestd: nothing was sent."""


class ExchangeFailed(Exception):
    """The exchange broke after the connection was made: the request may have been acted on."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class SlurmTransport(Protocol):
    async def send(
        self, method: str, url: str, *, headers: Mapping[str, str], params: Query | None = None,
        content: bytes | None = None,
    ) -> Reply:
        """One exchange with ``url`` (absolute); the whole body read."""
        ...

    async def aclose(self) -> None: ...


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``, ``NO_PROXY``, ...), read
    once as httpx did: the bridge talks to one slurmrestd."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.hostname is None or urllib.request.proxy_bypass(parsed.hostname):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parsed.scheme) or proxies.get("all")


class AiohttpTransport:
    """aiohttp, keep-alive, at most ``max_connections`` open; ``timeout_seconds`` for the
    connection (pool wait included) and for each read.  The session is made on first use,
    inside the event loop that uses it; redirects are not followed.  aiohttp itself sends an
    idempotent request (GET, DELETE) once more, at once, when its connection drops (RFC 9112
    9.3.1: a keep-alive connection the server closed); a POST never."""

    def __init__(self, base_url: str, *, timeout_seconds: float, max_connections: int) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_seconds, sock_connect=timeout_seconds,
            sock_read=timeout_seconds,
        )
        self._max_connections = max_connections
        self._proxy = env_proxy(base_url)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def for_settings(cls, settings: SlurmSettings) -> "AiohttpTransport":
        return cls(settings.url, timeout_seconds=settings.timeout_seconds,
                   max_connections=settings.max_connections)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            # keep-alive connections idle for 5 s are closed, as httpx's pool did
            connector = aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=5.0)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, proxy=self._proxy,
            )
        return self._session

    async def send(
        self, method: str, url: str, *, headers: Mapping[str, str], params: Query | None = None,
        content: bytes | None = None,
    ) -> Reply:
        try:
            async with self._open().request(
                method, url, headers=headers, params=params, data=content,
                allow_redirects=False,
            ) as resp:
                return Reply(resp.status, await resp.read())
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(str(exc)) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ExchangeFailed(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
