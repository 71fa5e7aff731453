"""The Slurm client's HTTP seam (``bridge.slurm.http.Exchange``) over an httpx transport:
tests answer with ``httpx.MockTransport`` handlers, B5 counts the bytes of real exchanges.
A test double, not the bridge's own client (that is reqwest, ``ReqwestExchange``)."""

from collections.abc import Callable, Mapping

import httpx

from bridge.slurm.http import Answer, Broken, Query, Unreached

# What the Slurm settings of a test answered by a mock name (slurm.url is required).
MOCK_SLURM_URL = "http://slurmrestd"


class HttpxExchange:
    def __init__(
        self, transport: httpx.AsyncBaseTransport, base_url: str = MOCK_SLURM_URL
    ) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, transport=transport)

    @classmethod
    def mock(cls, handler: Callable[[httpx.Request], httpx.Response]) -> "HttpxExchange":
        """Every request answered by ``handler`` (``httpx.MockTransport``)."""
        return cls(httpx.MockTransport(handler))

    async def send(
        self, method: str, path: str, *, headers: Mapping[str, str], query: Query = (),
        body: bytes | None = None,
    ) -> Answer:
        try:
            resp = await self._http.request(method, path, headers=headers,
                                            params=list(query) or None, content=body)
        except httpx.ConnectError as exc:
            raise Unreached(str(exc)) from exc
        except httpx.TransportError as exc:
            raise Broken(str(exc)) from exc
        return Answer(resp.status_code, resp.content)

    async def aclose(self) -> None:
        await self._http.aclose()
