"""One HTTP exchange with slurmrestd: the only module that knows the HTTP client.

reqwest (Rust, through pyreqwest) carries the bytes.  B7 measured the client CPU per
slurmrestd exchange at 60-64 µs for bare pyreqwest, 84-98 µs for aiohttp and 640-720 µs for
httpx, which the bridge used before (most of it httpx's URL and model layers).  Like httpx,
reqwest reads the first of the two answers slurmrestd 26.05 writes for an error and ignores
the second, where aiohttp refuses the pair and loses Slurm's status and words
(tests/unit/test_slurm_wire_quirks.py).  ``Exchange`` is the seam: the dev kit's
``HttpxExchange`` puts the tests' ``httpx.MockTransport`` handlers behind it.
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
    as httpx applied it."""

    def __init__(self, base_url: str, *, timeout_seconds: float, max_connections: int) -> None:
        timeout = timedelta(seconds=timeout_seconds)
        self._base = base_url.rstrip("/")
        self._client = (
            ClientBuilder().max_connections(max_connections).follow_redirects(False)
            .connect_timeout(timeout).read_timeout(timeout).pool_timeout(timeout).build()
        )

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
            raise Unreached(f"{method} {path}: {exc}") from exc
        except TransportError as exc:
            raise Broken(f"{method} {path}: {exc}") from exc
        return Answer(response.status, content)

    async def aclose(self) -> None:
        await self._client.close()
