"""The bridge's apiserver client: lightkube's, plus the three writes made for every pod sent
bare over the same aiohttp session.

The release's JSON Patch, the Binding and an Event cost 455-539 µs of client CPU each through
lightkube (a model built, encoded, the answer decoded into one) and 214-234 µs this way in
B7 (``bridge's ... before / after``; bare aiohttp alone 181-201).  Their bodies are plain
data encoded by msgspec; nothing of a success is read (its bytes only return the connection
to the pool); a refusal's Status (code, reason, message) is decoded into a struct and raised
as lightkube's ``ApiError``, so callers handle it as before.  Server, credential and TLS are
lightkube's own from the one kubeconfig: the session is the transport's, the Authorization
header what lightkube's auth for the user sets (asked once, and again after a 401, as
lightkube asks it).
"""

import asyncio
from contextlib import suppress
from typing import Any

import httpx2
import msgspec
from lightkube import AsyncClient
from lightkube.config.client_adapter import user_auth
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError

from bridge.kube.apierrors import api_error
from bridge.kube.transport import AiohttpTransport, read, send, timeout_of

TIMEOUT = httpx2.Timeout(10.0)  # lightkube's default, for both paths
_JSON = "application/json"
_JSON_PATCH = "application/json-patch+json"
_UNAUTHORIZED = 401


class _Status(msgspec.Struct):
    """What a refusal says, of the Status the apiserver answers it with."""

    code: int = 0
    reason: str | None = None
    message: str = ""


_encode = msgspec.json.Encoder().encode
_status = msgspec.json.Decoder(_Status)


class BridgeClient(AsyncClient):
    """lightkube's client (models, lists, watches, the other writes) and the per-pod writes
    of ``bridge.ports`` (``KubePatchPod``, ``KubeBindPod``, ``KubeCreateEvent``)."""

    def __init__(
        self, config: SingleConfig, transport: AiohttpTransport, *, field_manager: str
    ) -> None:
        super().__init__(config=config, field_manager=field_manager, transport=transport,
                         timeout=TIMEOUT)
        self._transport = transport
        self._api = f"{config.cluster.server.rstrip('/')}/api/v1/namespaces/"
        self._query = f"?fieldManager={field_manager}"
        self._write_timeout = timeout_of(TIMEOUT.as_dict())  # (lightkube's is _timeout)
        self._credential = _Credential(user_auth(config.user), config.cluster.server)

    async def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        await self._write("PATCH", f"{namespace}/pods/{name}", ops, _JSON_PATCH)

    async def bind_pod(self, namespace: str, name: str, binding: dict[str, Any]) -> None:
        await self._write("POST", f"{namespace}/pods/{name}/binding", binding, _JSON)

    async def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self._write("POST", f"{namespace}/events", event, _JSON)

    async def _write(self, method: str, path: str, body: object, content_type: str) -> None:
        url, data = self._api + path + self._query, _encode(body)
        retried = False
        while True:
            credential = await self._credential.header()
            headers = {"Content-Type": content_type, "Accept": _JSON, **credential}
            resp = await send(self._transport.session(), method, url, headers=headers,
                              body=data, limits=self._write_timeout)
            answer = await read(resp)
            if resp.status != _UNAUTHORIZED or retried or not (
                await self._credential.renew(credential)
            ):
                break
            retried = True
        if resp.status >= 300:  # 2xx: written
            raise refusal(resp.status, answer)


def refusal(http_status: int, answer: bytes) -> ApiError:
    """The apiserver's refusal as lightkube raises it: its Status, or (an answer that is no
    Status, from a proxy say) the HTTP status and the start of the answer."""
    try:
        status = _status.decode(answer)
    except msgspec.DecodeError:
        return api_error(http_status, f"HTTP {http_status}: {answer[:200]!r}")
    return api_error(status.code or http_status, status.message, status.reason)


class _Credential:
    """The Authorization header lightkube's auth for the user sets: a token, a token file's
    (re-read after a 401), an exec plugin's (run again after a 401); none with a client
    certificate, which the session's TLS presents."""

    def __init__(self, auth: httpx2.Auth | None, server: str) -> None:
        self._auth = auth
        self._server = server
        self._header: dict[str, str] | None = None
        self._asking = asyncio.Lock()  # one token file read or plugin run for a burst

    async def header(self) -> dict[str, str]:
        if self._header is None:
            async with self._asking:
                if self._header is None:
                    self._header = await self._ask(after_refusal=False)
        return self._header

    async def renew(self, refused: dict[str, str]) -> bool:
        """After a 401 to ``refused``: True when there is another credential to try (one a
        write refused meanwhile already got counts)."""
        async with self._asking:
            if self._header == refused:
                self._header = await self._ask(after_refusal=True)
            return self._header != refused

    async def _ask(self, *, after_refusal: bool) -> dict[str, str]:
        if self._auth is None:
            return {}
        flow = self._auth.async_auth_flow(httpx2.Request("GET", self._server))
        request = await anext(flow)
        if after_refusal:
            with suppress(StopAsyncIteration):  # else nothing more to try: the header stays
                request = await flow.asend(httpx2.Response(_UNAUTHORIZED, request=request))
        await flow.aclose()
        value = request.headers.get("Authorization")
        return {"Authorization": value} if value else {}
