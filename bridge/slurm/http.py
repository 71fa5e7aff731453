"""One HTTP exchange with slurmrestd: the only module that knows the HTTP client.

reqwest (Rust, through pyreqwest) carries the bytes.  B7 measured the client CPU per
slurmrestd exchange at 60-64 µs for bare pyreqwest, 84-98 µs for aiohttp and 640-720 µs for
httpx, which the bridge used before (most of it httpx's URL and model layers).  Like httpx,
reqwest reads the first of the two answers slurmrestd 26.05 writes for an error and ignores
the second, where aiohttp refuses the pair and loses Slurm's status and words
(tests/unit/test_slurm_wire_quirks.py).  ``Exchange`` is the seam: the dev kit's
``HttpxExchange`` puts the tests' ``httpx.MockTransport`` handlers behind it.  Over https,
``tls.py`` says what to trust and present, and what a refused handshake means.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from pyreqwest.client import ClientBuilder
from pyreqwest.exceptions import (
    ConnectError,
    ConnectTimeoutError,
    PoolTimeoutError,
    TransportError,
)

from bridge.slurm.tls import TlsMaterial, material, refusal
from bridge.tls_settings import SlurmTlsSettings

Query = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class Unreached(Exception):
    """Nothing was sent (no connection): always safe to try again."""


class Broken(Exception):
    """The exchange failed once the request may have reached slurmrestd."""


class Exchange(Protocol):
    async def send(
        self, method: str, path: str, *, headers: Mapping[str, str], query: Query = (),
        body: bytes | None = None,
    ) -> Answer: ...

    async def aclose(self) -> None: ...


class ReqwestExchange:
    """slurmrestd at ``base_url`` (paths appended to it), at most ``max_connections`` open;
    ``timeout_seconds`` bounds the connect, each read and the wait for a pooled connection,
    as httpx applied it.  ``tls``: slurm.tls (CA bundle, client certificate, server name)."""

    def __init__(self, base_url: str, *, timeout_seconds: float, max_connections: int,
                 tls: SlurmTlsSettings | None = None) -> None:
        timeout = timedelta(seconds=timeout_seconds)
        self._url, self._tls = base_url, tls or SlurmTlsSettings()
        given = material(base_url, self._tls)
        self._base = given.base_url.rstrip("/")
        builder = (
            ClientBuilder().max_connections(max_connections).follow_redirects(False)
            .connect_timeout(timeout).read_timeout(timeout).pool_timeout(timeout)
        )
        self._client = _secured(builder, given).build()

    async def send(
        self, method: str, path: str, *, headers: Mapping[str, str], query: Query = (),
        body: bytes | None = None,
    ) -> Answer:
        request = self._client.request(method, self._base + path).headers(headers)
        if query:
            request = request.query(list(query))
        if body is not None:
            request = request.body_bytes(body)
        try:
            response = await request.build().send()
            content = (await response.bytes()).to_bytes()
        except (ConnectError, ConnectTimeoutError, PoolTimeoutError) as exc:
            self._raise_refusal(exc)
            raise Unreached(f"{method} {path}: {_cause(exc)}") from exc
        except TransportError as exc:
            self._raise_refusal(exc)
            raise Broken(f"{method} {path}: {_cause(exc)}") from exc
        return Answer(response.status, content)

    def _raise_refusal(self, exc: TransportError) -> None:
        """A failed handshake (nothing sent): its own error, naming the setting to change."""
        refused = refusal(_cause(exc), self._url, self._tls)
        if refused is not None:
            raise refused from exc

    async def aclose(self) -> None:
        await self._client.close()


def _secured(builder: ClientBuilder, given: TlsMaterial) -> ClientBuilder:
    for root in given.roots:
        builder = builder.add_root_certificate_pem(root)
    if given.identity is not None:
        builder = builder.identity_pem(given.identity)
    if given.pin is not None:
        builder = builder.resolve(*given.pin)
    return builder


def _cause(exc: TransportError) -> str:
    """The innermost of reqwest's causes (the TLS library's or the socket's words): its own
    message is only "connection error"."""
    causes = exc.details.get("causes") or []
    return causes[-1]["message"] if causes else exc.message
