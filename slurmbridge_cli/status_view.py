"""``slurmbridge status``: bridged pods joined with their Slurm jobs, for people."""

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.jobs.components import member_part, squeue_job_text
from bridge.jobs.owner import Owner
from bridge.link.ownership import owner_key
from bridge.placement.reasons import clock, component_view
from bridge.policy.tenancy import OwnerTrust
from bridge.slurm.client import SlurmClient
from bridge.slurm.types import SlurmJob


@dataclass(frozen=True, slots=True)
class Row:
    pod: str
    job_id: int | None
    state: str
    reason: str
    node: str
    gpus: str
    age: str
    account: str = ""
    user: str = ""
    qos: str = ""
    expected_start: str | None = None  # Slurm's backfill estimate for a pending job (ISO)
    # The pod's component of its group's heterogeneous job: name and offset (``JOB`` 42+1).
    component: str = ""
    offset: int | None = None

    @property
    def job(self) -> str:
        return "-" if self.job_id is None else squeue_job_text(self.job_id, self.offset)


def _age(created: datetime | None) -> str:
    if created is None:
        return "?"
    seconds = int((datetime.now(UTC) - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _row(pod: Pod, job: SlurmJob | None) -> Row:
    meta = pod.metadata
    assert meta is not None
    ann = meta.annotations or {}
    part = member_part(meta.labels, ann) if job and job.het_components else None
    own = component_view(job, part) if job else None
    return Row(
        pod=f"{meta.namespace}/{meta.name}",
        job_id=job.job_id if job else None,
        state=str(own.state) if own else "NO JOB",
        reason=own.reason if own else "",
        node=(pod.spec.nodeName if pod.spec else None) or "",
        gpus=ann.get(keys.GPU_IDS, ""),
        age=_age(meta.creationTimestamp),
        # What Slurm has for the job; before there is one, what the tenancy asked for.
        account=(job.account if job else "") or ann.get(keys.ACCOUNT, ""),
        user=(job.user if job else "") or ann.get(keys.SLURM_USER, ""),
        qos=(job.qos if job else "") or ann.get(keys.QOS, ""),
        expected_start=job.expected_start.isoformat() if job and job.expected_start else None,
        component=part[0] if part else "", offset=part[1] if part else None,
    )


async def collect(
    kube: AsyncClient, slurm: SlurmClient, believe: OwnerTrust | None = None
) -> list[Row]:
    """``believe``: whose placeholder a job is, as the bridge decides it (None: every owner the
    client reports)."""
    jobs: dict[Owner, list[SlurmJob]] = {}
    for job in await slurm.list_jobs():
        if job.owner:
            jobs.setdefault(job.owner, []).append(job)
    rows = []
    async for pod in kube.list(
        Pod, namespace="*", fields={"spec.schedulerName": keys.SCHEDULER_NAME}
    ):
        rows.append(_row(pod, _job_of(pod, jobs.get(owner_key(pod), []), believe)))
    return sorted(rows, key=lambda r: r.pod)


def _job_of(pod: Pod, jobs: list[SlurmJob], believe: OwnerTrust | None) -> SlurmJob | None:
    """The last live of the jobs of the pod's owner, else the first; only jobs whose owner is
    believed for the pod's namespace (another tenant may copy the owner into their job), and
    signed by the bridge."""
    namespace = pod.metadata.namespace if pod.metadata else None
    mine = [j for j in jobs if believe is None or (
        j.owner is not None and not j.unsigned and believe(j.user, j.owner, j.name, namespace))]
    live = [j for j in mine if j.state.is_live]
    return live[-1] if live else next(iter(mine), None)


def _expected(row: Row, now: datetime) -> str:
    return clock(datetime.fromisoformat(row.expected_start), now) if row.expected_start else "-"


def render_table(rows: list[Row]) -> str:
    header = ("POD", "JOB", "STATE", "REASON", "EXPECTED", "ACCOUNT", "USER", "QOS", "NODE",
              "GPUS", "AGE")
    now = datetime.now(UTC)
    cells = [header] + [
        (r.pod, r.job, r.state, r.reason, _expected(r, now), r.account or "-",
         r.user or "-", r.qos or "-", r.node or "-", r.gpus or "-", r.age)
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def as_dicts(rows: list[Row]) -> list[dict[str, object]]:
    return [asdict(r) for r in rows]
