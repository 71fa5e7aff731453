"""One slurmrestd endpoint: the data parser negotiated once, a credential per Slurm user,
bounded retries on transient failures only, and every failure mapped to one ``SlurmError``.

``SlurmClient`` (``client.py``) builds the operations on ``call``; nothing else here knows
what a job is.
"""

import json
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from bridge import metrics
from bridge.config import SlurmSettings
from bridge.slurm import negotiate
from bridge.slurm.auth import credentials
from bridge.slurm.errors import (
    SlurmAuthError,
    SlurmJobNotFound,
    SlurmProtocolError,
    SlurmRejected,
    SlurmTLSRefused,
    SlurmUnavailable,
)
from bridge.slurm.http import Answer, Broken, Exchange, Query, ReqwestExchange, Unreached
from bridge.slurm.wire import FAMILIES
from bridge.slurm.wire.base import Envelope, WireFamily

log = structlog.get_logger(__name__)

E = TypeVar("E", bound=Envelope)

_RETRY_STATUS = frozenset({502, 503, 504})
_AUTH_STATUS = frozenset({401, 403, 511})  # slurmrestd answers 511 to a bad JWT
_ESLURM_INVALID_JOB_ID = 2017


class _Transient(Exception):
    """Internal: worth another attempt."""


class Unchanged(Exception):
    """HTTP 304: nothing changed since the ``update_time`` the request named."""


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    query: Query
    body: bytes | None


class SlurmRest:
    def __init__(self, settings: SlurmSettings, exchange: Exchange | None = None) -> None:
        self.settings = settings
        self._creds = credentials(
            settings.user,
            jwt_key_file=settings.jwt_key_file,
            token=settings.token.get_secret_value() if settings.token else None,
            token_file=settings.token_file,
            lifespan_seconds=settings.token_lifespan_seconds,
        )
        self.exchange = exchange or ReqwestExchange(
            settings.url, timeout_seconds=settings.timeout_seconds,
            max_connections=settings.max_connections, tls=settings.tls,
        )
        self._parser: str | None = None

    async def aclose(self) -> None:
        await self.exchange.aclose()

    async def connect(self) -> str:
        """Negotiate the data parser once; later calls return the cached choice."""
        if self._parser is None:
            resp = await self._send("GET", "/openapi/v3", "negotiate", idempotent=True)
            try:
                offered = negotiate.offered_versions(resp.json())
            except ValueError as exc:
                raise SlurmProtocolError(f"slurmrestd /openapi/v3 is not JSON: {exc}") from exc
            self._parser = negotiate.choose(offered, set(FAMILIES), self.settings.data_parser)
            log.info("slurm.negotiated", data_parser=self._parser, offered=sorted(offered))
            metrics.build_info(data_parser=self._parser)
        return self._parser

    @property
    def family(self) -> WireFamily:
        if self._parser is None:
            raise SlurmProtocolError("SlurmClient.connect() has not been called")
        return FAMILIES[self._parser]

    async def call(
        self,
        method: str,
        path: str,
        op: str,
        model: type[E],
        *,
        job_id: int | None = None,
        idempotent: bool = True,
        api: str = "slurm",
        user: str | None = None,
        query: Query = (),
        body: Any = None,
    ) -> E:
        """``path`` under the negotiated parser of ``api`` (``body`` sent as JSON), its answer
        as ``model``; Slurm's "invalid job id" about ``job_id`` is ``SlurmJobNotFound``."""
        parser = await self.connect()
        url = f"/{api}/{parser}{path}"
        data = None if body is None else json.dumps(
            body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        resp = await self._send(method, url, op, idempotent=idempotent, user=user,
                                query=query, body=data)
        if resp.status == 304:
            raise Unchanged(op)
        try:
            parsed = model.model_validate_json(resp.content)
        except ValidationError as exc:
            if resp.status >= 400:
                raise SlurmRejected(op, [resp.text[:500]], resp.status) from exc
            raise SlurmProtocolError(f"slurmrestd {op}: unexpected answer: {exc}") from exc
        errors = [e for e in parsed.errors if e.error_number or e.description]
        if job_id is not None and any(e.error_number == _ESLURM_INVALID_JOB_ID for e in errors):
            raise SlurmJobNotFound(job_id)
        if resp.status >= 400 or errors:
            raise SlurmRejected(op, [e.text() for e in errors], resp.status)
        return parsed

    async def _send(
        self, method: str, url: str, op: str, *, idempotent: bool, user: str | None = None,
        query: Query = (), body: bytes | None = None,
    ) -> Answer:
        """One HTTP exchange as ``user`` (default: the bridge's own), with bounded retries on
        transient failures only.  A refused credential is read again once, whatever the retry
        budget (the key or token file may have rotated; slurmrestd acted on nothing)."""
        user = user or self.settings.user
        request = _Request(method, url, query, body)
        resp = await self._retried(request, op, idempotent, user)
        if resp.status in _AUTH_STATUS:
            self._creds.invalidate()
            resp = await self._retried(request, op, idempotent, user)
        return self._checked(resp, op, user)

    async def _retried(
        self, request: _Request, op: str, idempotent: bool, user: str
    ) -> Answer:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.settings.retries + 1),
            wait=wait_exponential(multiplier=self.settings.backoff_seconds, max=5),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(request, op, idempotent, user)
        except _Transient as exc:
            raise SlurmUnavailable(
                f"slurmrestd at {self.settings.url} failed {op} after "
                f"{self.settings.retries + 1} attempts: {exc.__cause__ or exc}"
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self, request: _Request, op: str, idempotent: bool, user: str
    ) -> Answer:
        headers = await self._creds.headers(user)
        if request.body is not None:
            headers = {**headers, "Content-Type": "application/json"}
        try:
            with metrics.SLURM_REQUEST_SECONDS.labels(op).time():
                resp = await self.exchange.send(request.method, request.path, headers=headers,
                                                query=request.query, body=request.body)
        except SlurmTLSRefused:  # nothing was sent, and no retry helps
            metrics.SLURM_ERRORS.labels(op, "tls").inc()
            raise
        except Unreached as exc:  # nothing was sent: always safe to retry
            metrics.SLURM_ERRORS.labels(op, "connect").inc()
            raise _Transient(str(exc)) from exc
        except Broken as exc:
            metrics.SLURM_ERRORS.labels(op, "transport").inc()
            if idempotent:
                raise _Transient(str(exc)) from exc
            raise SlurmUnavailable(
                f"slurmrestd at {self.settings.url}: {op} may or may not have happened: {exc!r}"
            ) from exc
        if resp.status >= 400:
            metrics.SLURM_ERRORS.labels(op, f"http_{resp.status}").inc()
        if resp.status in _RETRY_STATUS and idempotent:
            raise _Transient(f"HTTP {resp.status}")
        return resp

    def _checked(self, resp: Answer, op: str, user: str) -> Answer:
        if resp.status in _AUTH_STATUS:
            raise SlurmAuthError(
                f"slurmrestd refused the credential for Slurm user {user!r} ({op}, HTTP "
                f"{resp.status}): {self._creds.hint(user)}"
            )
        if resp.status >= 500 and resp.status not in (500,):
            raise SlurmUnavailable(f"slurmrestd {op}: HTTP {resp.status}: {resp.text[:300]}")
        return resp
