"""Async slurmrestd client: negotiation, auth, bounded retries, typed results.

Every operation goes through ``_call``, which owns retries and error mapping,
so a caller sees either a result in the core's types or one ``SlurmError``.
"""

from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
import structlog
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from bridge import keys, metrics
from bridge.config import SlurmSettings
from bridge.jobs.request import JobRequest
from bridge.slurm import convert, negotiate
from bridge.slurm.auth import credentials
from bridge.slurm.errors import (
    SlurmAuthError,
    SlurmError,
    SlurmJobNotFound,
    SlurmProtocolError,
    SlurmRejected,
    SlurmUnavailable,
)
from bridge.slurm.types import Accounting, JobState, SlurmJob, SlurmNode
from bridge.slurm.wire import FAMILIES
from bridge.slurm.wire.base import (
    Envelope,
    JobInfo,
    JobsResponse,
    JobStatesResponse,
    NodesResponse,
    NodeUpdate,
    SubmitResponse,
    WireFamily,
)
from bridge.slurm.wire.slurmdb import AccountsResponse, AssociationsResponse, QosResponse

log = structlog.get_logger(__name__)

E = TypeVar("E", bound=Envelope)

_RETRY_STATUS = frozenset({502, 503, 504})
_AUTH_STATUS = frozenset({401, 403, 511})  # slurmrestd answers 511 to a bad JWT
_ESLURM_INVALID_JOB_ID = 2017


PlaceholderTrust = Callable[[str, str], bool]
"""``(slurm_user, job_name) -> bool``: may a job of this user with this name be one of the
bridge's placeholders?  The bridge's own user always may; the tenancy answers for the users it
maps namespaces to (a name ``k8s:<namespace>/...`` of a namespace mapped to that user)."""


class _Transient(Exception):
    """Internal: worth another attempt."""


class SlurmClient:
    def __init__(
        self,
        settings: SlurmSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        trust: PlaceholderTrust | None = None,
    ) -> None:
        self._settings = settings
        self._creds = credentials(
            settings.user,
            jwt_key_file=settings.jwt_key_file,
            token=settings.token.get_secret_value() if settings.token else None,
            token_file=settings.token_file,
            lifespan_seconds=settings.token_lifespan_seconds,
        )
        self.trust: PlaceholderTrust = trust or (lambda _user, _name: False)
        self._http = httpx.AsyncClient(
            base_url=settings.url,
            timeout=settings.timeout_seconds,
            limits=httpx.Limits(max_connections=settings.max_connections),
            transport=transport,
        )
        self._parser: str | None = None
        self._foreign_markers: set[int] = set()  # warned about once each

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- negotiation -------------------------------------------------------

    async def connect(self) -> str:
        """Negotiate the data parser once; later calls return the cached choice."""
        if self._parser is None:
            resp = await self._send("GET", "/openapi/v3", "negotiate", idempotent=True)
            try:
                offered = negotiate.offered_versions(resp.json())
            except ValueError as exc:
                raise SlurmProtocolError(f"slurmrestd /openapi/v3 is not JSON: {exc}") from exc
            self._parser = negotiate.choose(
                offered, set(FAMILIES), self._settings.data_parser
            )
            log.info("slurm.negotiated", data_parser=self._parser, offered=sorted(offered))
        return self._parser

    @property
    def family(self) -> WireFamily:
        if self._parser is None:
            raise SlurmProtocolError("SlurmClient.connect() has not been called")
        return FAMILIES[self._parser]

    # -- operations ----------------------------------------------------------

    async def submit(self, req: JobRequest) -> int:
        """Submit a placeholder as ``req.user`` (default: the bridge's own user); not retried
        once sent (callers dedupe by pod UID)."""
        await self.connect()
        body = {"job": self.family.describe(req, convert.comment_for(req.pod_uid)).model_dump(
            exclude_none=True
        )}
        resp = await self._call(
            "POST", "/job/submit", "submit", SubmitResponse, json=body, idempotent=False,
            user=req.user,
        )
        if resp.job_id is None:
            raise SlurmRejected("submit", [e.text() for e in resp.errors], 200)
        log.info(
            "slurm.submitted", job_id=resp.job_id, job_name=req.name, pod_uid=req.pod_uid,
            user=req.user or self._settings.user, account=req.account, qos=req.qos,
        )
        return resp.job_id

    async def get_job(self, job_id: int) -> SlurmJob:
        resp = await self._call("GET", f"/job/{job_id}", "get_job", JobsResponse, job_id=job_id)
        if not resp.jobs:
            raise SlurmJobNotFound(job_id)
        return self._job(resp.jobs[0])

    async def list_jobs(self) -> list[SlurmJob]:
        """Every job (the big answer): callers poll ``job_states`` and use this only to
        (re)build their index.  Not ``?update_time=``: Slurm answers it with every job as
        soon as any changed (B5 in benchmarks/RESULTS.md)."""
        resp = await self._call("GET", "/jobs/", "list_jobs", JobsResponse)
        return [job for info in resp.jobs if (job := self._listed(info)) is not None]

    async def job_states(self) -> dict[int, JobState]:
        """Ids and states of every job (about 80 bytes a job): the cheap poll."""
        resp = await self._call("GET", "/jobs/state/", "job_states", JobStatesResponse)
        states = {}
        for entry in resp.jobs:
            try:
                states[entry.job_id] = convert.job_state(entry.state)
            except ValueError:  # not a state the bridge knows: its job is re-read on its own
                continue
        return states

    async def cancel(self, job_id: int) -> None:
        """Cancel; a job Slurm no longer knows counts as cancelled."""
        try:
            await self._call("DELETE", f"/job/{job_id}", "cancel", Envelope, job_id=job_id)
        except SlurmJobNotFound:
            return
        log.info("slurm.cancelled", job_id=job_id)

    async def list_nodes(self) -> list[SlurmNode]:
        resp = await self._call("GET", "/nodes/", "list_nodes", NodesResponse)
        return [convert.slurm_node(n) for n in resp.nodes]

    async def drain(self, node: str, reason: str) -> None:
        await self._update_node(node, NodeUpdate(state=["DRAIN"], reason=reason))

    async def resume(self, node: str) -> None:
        await self._update_node(node, NodeUpdate(state=["RESUME"]))

    async def _update_node(self, node: str, update: NodeUpdate) -> None:
        await self._call(
            "POST", f"/node/{node}", "update_node", Envelope,
            json=update.model_dump(exclude_none=True),
        )
        log.info("slurm.node_updated", node=node, state=update.state, reason=update.reason)

    async def accounting(self) -> Accounting:
        """Accounts, user associations and QOS from slurmdbd (needs slurmrestd's
        openapi/slurmdbd plugin)."""
        accounts = await self._call("GET", "/accounts/", "accounts", AccountsResponse,
                                    api="slurmdb")
        assocs = await self._call("GET", "/associations/", "associations",
                                  AssociationsResponse, api="slurmdb")
        qos = await self._call("GET", "/qos/", "qos", QosResponse, api="slurmdb")
        return convert.accounting(accounts, assocs, qos)

    def owns(self, user: str, job_name: str) -> bool:
        """Whether a job of ``user`` named ``job_name`` may be a placeholder: the bridge's own
        user's, or one submitted as the user the tenancy maps its namespace to (``trust``)."""
        return user == self._settings.user or self.trust(user, job_name)

    def _job(self, info: JobInfo) -> SlurmJob:
        """One job in the core's types; an answer the bridge cannot read is a protocol error
        naming the job, never a bare exception from deep inside the parser."""
        owned = self.owns(info.user_name, info.name)
        foreign = not owned and keys.COMMENT_POD_UID in info.comment
        if foreign and info.job_id not in self._foreign_markers:
            self._foreign_markers.add(info.job_id)
            log.warning(
                "slurm.foreign_placeholder_ignored", job_id=info.job_id, job_name=info.name,
                user=info.user_name, bridge_user=self._settings.user,
                hint="a job carries the bridge's pod marker but its user is neither the "
                "bridge's (slurm.user) nor the one the tenancy maps its namespace to",
            )
        try:
            return convert.slurm_job(info, owned=owned)
        except ValueError as exc:
            raise SlurmProtocolError(
                f"slurmrestd: job {info.job_id} of user {info.user_name!r} cannot be read: "
                f"{exc}"
            ) from exc

    def _listed(self, info: JobInfo) -> SlurmJob | None:
        """A job of a listing; another user's job the bridge cannot read is left out (it is
        none of the bridge's business), one of its own placeholders is an error."""
        try:
            return self._job(info)
        except SlurmProtocolError as exc:
            if self.owns(info.user_name, info.name):
                raise
            log.debug("slurm.foreign_job_unreadable", job_id=info.job_id, error=str(exc))
            return None

    # -- plumbing --------------------------------------------------------------

    async def _call(
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
        user = user or self._settings.user
        resp = await self._retried(method, url, op, idempotent, user, **kwargs)
        if resp.status_code in _AUTH_STATUS:
            self._creds.invalidate()
            resp = await self._retried(method, url, op, idempotent, user, **kwargs)
        return self._checked(resp, op, user)

    async def _retried(
        self, method: str, url: str, op: str, idempotent: bool, user: str, **kwargs: Any
    ) -> httpx.Response:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._settings.retries + 1),
            wait=wait_exponential(multiplier=self._settings.backoff_seconds, max=5),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(method, url, op, idempotent, user, **kwargs)
        except _Transient as exc:
            raise SlurmUnavailable(
                f"slurmrestd at {self._settings.url} failed {op} after "
                f"{self._settings.retries + 1} attempts: {exc.__cause__ or exc}"
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self, method: str, url: str, op: str, idempotent: bool, user: str, **kwargs: Any
    ) -> httpx.Response:
        headers = await self._creds.headers(user)
        try:
            with metrics.SLURM_REQUEST_SECONDS.labels(op).time():
                resp = await self._http.request(method, url, headers=headers, **kwargs)
        except httpx.ConnectError as exc:  # nothing was sent: always safe to retry
            metrics.SLURM_ERRORS.labels(op, "connect").inc()
            raise _Transient(str(exc)) from exc
        except httpx.TransportError as exc:
            metrics.SLURM_ERRORS.labels(op, "transport").inc()
            if idempotent:
                raise _Transient(str(exc)) from exc
            raise SlurmUnavailable(
                f"slurmrestd at {self._settings.url}: {op} may or may not have happened: {exc!r}"
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


__all__ = ["SlurmClient", "SlurmError"]
