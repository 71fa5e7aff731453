"""One slurmrestd endpoint: the data parser negotiated once, a credential per Slurm user,
bounded retries on transient failures only, and every failure mapped to one ``SlurmError``.

``SlurmClient`` (``client.py``) builds the operations on ``call``; nothing else here knows
what a job is.
"""

from datetime import timedelta
from typing import Any, TypeVar

import httpx
import structlog
from pydantic import ValidationError
from pyreqwest.client import ClientBuilder
from pyreqwest.compatibility.httpx import HttpxTransport
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
    SlurmUnavailable,
)
from bridge.slurm.wire import FAMILIES
from bridge.slurm.wire.base import Envelope, WireFamily

log = structlog.get_logger(__name__)

E = TypeVar("E", bound=Envelope)

_RETRY_STATUS = frozenset({502, 503, 504})
_AUTH_STATUS = frozenset({401, 403, 511})  # slurmrestd answers 511 to a bad JWT
_ESLURM_INVALID_JOB_ID = 2017


class _Transient(Exception):
    """Internal: worth another attempt."""


def _reqwest(settings: SlurmSettings) -> httpx.AsyncBaseTransport:
    """httpx's API over reqwest (Rust) instead of httpcore: B7 measures the client CPU per
    slurmrestd exchange, and reqwest, like httpx, reads the first of slurmrestd's two answers
    to an error where aiohttp refuses the pair (tests/unit/test_slurm_wire_quirks.py).  The
    timeouts are reqwest's, each as httpx applied ``timeout_seconds``; httpx's are off, as
    the transport would add them up into one."""
    timeout = timedelta(seconds=settings.timeout_seconds)
    client = (
        ClientBuilder().max_connections(settings.max_connections).follow_redirects(False)
        .connect_timeout(timeout).read_timeout(timeout).pool_timeout(timeout).build()
    )
    return HttpxTransport(client)


class SlurmRest:
    def __init__(
        self, settings: SlurmSettings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.settings = settings
        self._creds = credentials(
            settings.user,
            jwt_key_file=settings.jwt_key_file,
            token=settings.token.get_secret_value() if settings.token else None,
            token_file=settings.token_file,
            lifespan_seconds=settings.token_lifespan_seconds,
        )
        self.http = httpx.AsyncClient(
            base_url=settings.url,
            timeout=settings.timeout_seconds if transport else None,  # reqwest's own below
            limits=httpx.Limits(max_connections=settings.max_connections),
            transport=transport or _reqwest(settings),
        )
        self._parser: str | None = None

    async def aclose(self) -> None:
        await self.http.aclose()

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
        **kwargs: Any,
    ) -> E:
        """``path`` under the negotiated parser of ``api``, its answer as ``model``; Slurm's
        "invalid job id" about ``job_id`` is ``SlurmJobNotFound``."""
        parser = await self.connect()
        url = f"/{api}/{parser}{path}"
        resp = await self._send(method, url, op, idempotent=idempotent, user=user, **kwargs)
        try:
            parsed = model.model_validate_json(resp.content)
        except ValidationError as exc:
            if resp.status_code >= 400:
                raise SlurmRejected(op, [resp.text[:500]], resp.status_code) from exc
            raise SlurmProtocolError(f"slurmrestd {op}: unexpected answer: {exc}") from exc
        errors = [e for e in parsed.errors if e.error_number or e.description]
        if job_id is not None and any(e.error_number == _ESLURM_INVALID_JOB_ID for e in errors):
            raise SlurmJobNotFound(job_id)
        if resp.status_code >= 400 or errors:
            raise SlurmRejected(op, [e.text() for e in errors], resp.status_code)
        return parsed

    async def _send(
        self, method: str, url: str, op: str, *, idempotent: bool, user: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """One HTTP exchange as ``user`` (default: the bridge's own), with bounded retries on
        transient failures only.  A refused credential is read again once, whatever the retry
        budget (the key or token file may have rotated; slurmrestd acted on nothing)."""
        user = user or self.settings.user
        resp = await self._retried(method, url, op, idempotent, user, **kwargs)
        if resp.status_code in _AUTH_STATUS:
            self._creds.invalidate()
            resp = await self._retried(method, url, op, idempotent, user, **kwargs)
        return self._checked(resp, op, user)

    async def _retried(
        self, method: str, url: str, op: str, idempotent: bool, user: str, **kwargs: Any
    ) -> httpx.Response:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.settings.retries + 1),
            wait=wait_exponential(multiplier=self.settings.backoff_seconds, max=5),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(method, url, op, idempotent, user, **kwargs)
        except _Transient as exc:
            raise SlurmUnavailable(
                f"slurmrestd at {self.settings.url} failed {op} after "
                f"{self.settings.retries + 1} attempts: {exc.__cause__ or exc}"
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self, method: str, url: str, op: str, idempotent: bool, user: str, **kwargs: Any
    ) -> httpx.Response:
        headers = await self._creds.headers(user)
        try:
            with metrics.SLURM_REQUEST_SECONDS.labels(op).time():
                resp = await self.http.request(method, url, headers=headers, **kwargs)
        except httpx.ConnectError as exc:  # nothing was sent: always safe to retry
            metrics.SLURM_ERRORS.labels(op, "connect").inc()
            raise _Transient(str(exc)) from exc
        except httpx.TransportError as exc:
            metrics.SLURM_ERRORS.labels(op, "transport").inc()
            if idempotent:
                raise _Transient(str(exc)) from exc
            raise SlurmUnavailable(
                f"slurmrestd at {self.settings.url}: {op} may or may not have happened: {exc!r}"
            ) from exc
        if resp.status_code >= 400:
            metrics.SLURM_ERRORS.labels(op, f"http_{resp.status_code}").inc()
        if resp.status_code in _RETRY_STATUS and idempotent:
            raise _Transient(f"HTTP {resp.status_code}")
        return resp

    def _checked(self, resp: httpx.Response, op: str, user: str) -> httpx.Response:
        if resp.status_code in _AUTH_STATUS:
            raise SlurmAuthError(
                f"slurmrestd refused the credential for Slurm user {user!r} ({op}, HTTP "
                f"{resp.status_code}): {self._creds.hint(user)}"
            )
        if resp.status_code >= 500 and resp.status_code not in (500,):
            raise SlurmUnavailable(f"slurmrestd {op}: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp
