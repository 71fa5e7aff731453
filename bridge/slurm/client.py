"""Async slurmrestd client: what the bridge asks Slurm, answered in the core's types.

Every operation goes through ``SlurmRest.call`` (``rest.py``), which owns negotiation,
credentials, retries and error mapping, so a caller sees either a result in the core's
types or one ``SlurmError``.  Here: which jobs are the bridge's (``owns``), and reading
them without trusting another user's job.

The poll asks for named jobs only (``job_states(ids)``), so its cost follows the bridge's
own jobs, not Slurm's queue.  Checked on 24.11 (v0.0.41, v0.0.42) and 26.05 (v0.0.44):
``GET /jobs/state/`` takes ``job_id`` REPEATED (``?job_id=1&job_id=3``) and answers those
jobs only; ids Slurm does not know are simply absent (200, no error); without the parameter
it answers every job.  The "CSV list" form the docs show (``job_id=1,3``) fails: 400
"Unable to parse query" on 24.11, 500 "Unspecified error" on 26.05.  Both accepted 5,000
repeated ids (a 59 kB query); requests carry at most ``IDS_PER_REQUEST`` so a query stays
under the 8 kB request-line limit common in proxies in front of slurmrestd.  ``GET /jobs/``
ignores ``job_id`` (every job) and ``GET /job/1,3`` is a 404, so reasons are read one job
at a time.  ``GET /ping/`` says a controller is up with ``pinged: "UP"`` in v0.0.41,
``responding: true`` in v0.0.45, both in v0.0.42 and v0.0.44 (``PingEntry.up``).
"""

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Self

import structlog

from bridge import keys
from bridge.config import SlurmSettings
from bridge.jobs.request import JobRequest
from bridge.slurm import convert, negotiate
from bridge.slurm.errors import (
    SlurmError,
    SlurmJobNotFound,
    SlurmProtocolError,
    SlurmRejected,
    SlurmUnavailable,
)
from bridge.slurm.http import Exchange
from bridge.slurm.node_calls import NodeCalls
from bridge.slurm.rest import SlurmRest
from bridge.slurm.signing import OwnerSigner
from bridge.slurm.types import (
    Accounting,
    Allocation,
    JobState,
    SlurmJob,
)
from bridge.slurm.wire.base import (
    Envelope,
    JobInfo,
    JobsResponse,
    JobStatesResponse,
    NoVal,
    PingResponse,
    ResourcesResponse,
    SubmitResponse,
    WireFamily,
)
from bridge.slurm.wire.slurmdb import AccountsResponse, AssociationsResponse, QosResponse

log = structlog.get_logger(__name__)

RESOURCES_SINCE = "v0.0.44"  # GET /resources/{job_id}: Slurm 25.11
IDS_PER_REQUEST = 400  # "job_id=" + an 8-digit id + "&": 16 bytes each, 6.4 kB a query

PlaceholderTrust = Callable[[str, str], bool]
"""``(slurm_user, job_name) -> bool``: may a job of this user with this name be one of the
bridge's placeholders?  The bridge's own user always may; the tenancy answers for the users it
maps namespaces to (a name ``k8s:<namespace>/...`` of a namespace mapped to that user).  A
first screen only: whether the owner in the comment is believed, the job index asks the
tenancy with the owner's namespace (bridge/placement/trust.py)."""


class SlurmClient(NodeCalls):
    def __init__(
        self,
        settings: SlurmSettings,
        *,
        exchange: Exchange | None = None,
        trust: PlaceholderTrust | None = None,
        signer: OwnerSigner | None = None,
    ) -> None:
        self._settings = settings
        self.rest = SlurmRest(settings, exchange)
        self.signer = signer or OwnerSigner()  # no key: signs nothing, finds nothing signed
        self.trust: PlaceholderTrust = trust or (lambda _user, _name: False)
        self._foreign_markers: set[int] = set()  # warned about once each

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.rest.aclose()

    async def connect(self) -> str:
        """Negotiate the data parser once; later calls return the cached choice."""
        return await self.rest.connect()

    @property
    def family(self) -> WireFamily:
        return self.rest.family

    # -- operations ----------------------------------------------------------

    async def submit(self, req: JobRequest) -> int:
        """Submit a placeholder as ``req.user`` (default: the bridge's own user); not retried
        once sent (callers dedupe by pod UID)."""
        await self.connect()
        comment = self.signer.comment(req.name, req.owner)
        described = [self.family.describe(part, comment).model_dump(exclude_none=True)
                     for part in req.components or (req,)]
        # A heterogeneous job is a list of job descriptions, one per component, in one submit.
        body = {"jobs": described} if req.components else {"job": described[0]}
        resp = await self.rest.call(
            "POST", "/job/submit", "submit", SubmitResponse, body=body, idempotent=False,
            user=req.placement.user,
        )
        if resp.job_id is None:
            raise SlurmRejected("submit", [e.text() for e in resp.errors], 200)
        log.info(
            "slurm.submitted", job_id=resp.job_id, job_name=req.name, owner=str(req.owner),
            user=req.placement.user or self._settings.user, account=req.placement.account,
            qos=req.placement.qos, components=len(req.components),
        )
        return resp.job_id

    async def get_job(self, job_id: int) -> SlurmJob:
        resp = await self.rest.call("GET", f"/job/{job_id}", "get_job", JobsResponse, job_id=job_id)
        jobs = convert.het_records(resp.jobs)
        if not jobs:
            raise SlurmJobNotFound(job_id)
        return self._job(jobs[0], resp.last_backfill)

    async def job_allocation(self, job_id: int) -> Allocation | None:
        """A running job's nodes and GPU indices from ``GET /resources/{job_id}`` (~600 bytes;
        ``GET /job/{id}`` lists every core of each node); None where the data parser has no
        such endpoint (before v0.0.44) or the job is not running: then read the whole job."""
        if not negotiate.at_least(await self.connect(), RESOURCES_SINCE):
            return None
        try:
            resp = await self.rest.call(
                "GET", f"/resources/{job_id}", "job_allocation", ResourcesResponse, job_id=job_id
            )
        except SlurmRejected:  # "Job is not running" (any more): the whole job says what now
            return None
        try:
            return convert.allocation(resp) if resp.nodes else None
        except ValueError as exc:
            raise SlurmProtocolError(
                f"slurmrestd: the allocation of job {job_id} cannot be read: {exc}"
            ) from exc

    async def list_jobs(self, *, every_allocation: bool = False) -> list[SlurmJob]:
        """Every job with its allocation (the big answer, tens of kB a running job): only an
        admin's on-demand views (status, gpus, uninstall) ask for it; the bridge itself rebuilds
        its index from ``every_job_state``.  Not ``?update_time=``: Slurm answers it with every
        job as soon as any changed.  ``every_allocation``: native jobs' too (the GPU map)."""
        resp = await self.rest.call("GET", "/jobs/", "list_jobs", JobsResponse)
        return [convert.with_any_allocation(parts, job) if every_allocation else job
                for parts in convert.het_records(resp.jobs)
                if (job := self._listed(parts, resp.last_backfill)) is not None]

    async def job_states(self, ids: Iterable[int]) -> dict[int, JobState]:
        """States of the jobs ``ids`` (about 80 bytes a job), ``IDS_PER_REQUEST`` per request:
        the cheap poll.  A job Slurm no longer lists is absent; no ids, no request (without
        ``job_id`` Slurm would answer with every job)."""
        wanted = sorted(set(ids))
        states: dict[int, JobState] = {}
        for start in range(0, len(wanted), IDS_PER_REQUEST):
            chunk = wanted[start:start + IDS_PER_REQUEST]
            resp = await self.rest.call(
                "GET", "/jobs/state/", "job_states", JobStatesResponse,
                query=[("job_id", str(i)) for i in chunk],
            )
            # a state the bridge does not know is left out: that job is re-read on its own
            states.update((i, st) for i, st in convert.listed_states(resp).items()
                          if st is not None)
        return states

    async def every_job_state(self) -> dict[int, JobState | None]:
        """Id and state of every job Slurm lists (``GET /jobs/state/``, about 80 bytes a job):
        what a resync starts from instead of ``GET /jobs/``, whose answer carries each job's
        per-core allocation.  None: a state the bridge does not know (read that job).  Array
        records not split into tasks are left out."""
        return convert.listed_states(
            await self.rest.call("GET", "/jobs/state/", "every_job_state", JobStatesResponse)
        )

    async def ping(self) -> None:
        """Does slurmctld answer (through slurmrestd)?  ``SlurmUnavailable`` if not."""
        resp = await self.rest.call("GET", "/ping/", "ping", PingResponse)
        if not any(p.up for p in resp.pings):
            raise SlurmUnavailable(
                f"slurmrestd answers but no slurmctld is up: {resp.model_dump(include={'pings'})}"
            )

    async def cancel(self, job_id: int) -> None:
        """Cancel; a job Slurm no longer knows counts as cancelled."""
        try:
            await self.rest.call("DELETE", f"/job/{job_id}", "cancel", Envelope, job_id=job_id)
        except SlurmJobNotFound:
            return
        log.info("slurm.cancelled", job_id=job_id)

    async def accounting(self) -> Accounting:
        """Accounts, user associations and QOS from slurmdbd (needs slurmrestd's
        openapi/slurmdbd plugin)."""
        accounts = await self.rest.call("GET", "/accounts/", "accounts", AccountsResponse,
                                    api="slurmdb")
        assocs = await self.rest.call("GET", "/associations/", "associations",
                                  AssociationsResponse, api="slurmdb")
        qos = await self.rest.call("GET", "/qos/", "qos", QosResponse, api="slurmdb")
        return convert.accounting(accounts, assocs, qos)

    def owns(self, user: str, job_name: str) -> bool:
        """Whether a job of ``user`` named ``job_name`` may be a placeholder: the bridge's own
        user's, or one submitted as the user the tenancy maps its namespace to (``trust``)."""
        return user == self._settings.user or self.trust(user, job_name)

    def _job(self, parts: list[JobInfo], last_backfill: NoVal) -> SlurmJob:
        """One job (a heterogeneous one's records, leader first) in the core's types; an answer
        the bridge cannot read is a protocol error naming the job, never a bare exception."""
        info = parts[0]
        owned = self.owns(info.user_name, info.name)
        foreign = not owned and keys.COMMENT_OWNER in info.comment
        if foreign and info.job_id not in self._foreign_markers:
            self._foreign_markers.add(info.job_id)
            log.warning(
                "slurm.foreign_placeholder_ignored", job_id=info.job_id, job_name=info.name,
                user=info.user_name, bridge_user=self._settings.user,
                hint="a job carries the bridge's pod marker but its user is neither the "
                "bridge's (slurm.user) nor the one the tenancy maps its namespace to",
            )
        try:
            signed = (info.user_name == self._settings.user
                      or self.signer.signed(info.name, info.comment))
            return convert.with_components(convert.slurm_job(
                info, owned=owned, signed=signed, last_backfill=last_backfill), parts)
        except ValueError as exc:
            raise SlurmProtocolError(
                f"slurmrestd: job {info.job_id} of user {info.user_name!r} cannot be read: "
                f"{exc}"
            ) from exc

    def _listed(self, parts: list[JobInfo], last_backfill: NoVal) -> SlurmJob | None:
        """A job of a listing; another user's job the bridge cannot read is left out (it is
        none of the bridge's business), one of its own placeholders is an error."""
        info = parts[0]
        try:
            return self._job(parts, last_backfill)
        except SlurmProtocolError as exc:
            if self.owns(info.user_name, info.name):
                raise
            log.debug("slurm.foreign_job_unreadable", job_id=info.job_id, error=str(exc))
            return None


__all__ = ["SlurmClient", "SlurmError"]
