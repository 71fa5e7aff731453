"""Wire models → the core's Slurm types (the only place that reads wire fields)."""

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from bridge import keys
from bridge.jobs.owner import Owner, owner_text, parse_owner
from bridge.jobs.request import TopologyAsk
from bridge.slurm.allocation import allocation_from, index_list
from bridge.slurm.types import (
    NO_REASON,
    Accounting,
    Allocation,
    ComponentState,
    JobState,
    NodeTable,
    SlurmJob,
    SlurmNode,
    SlurmQos,
)
from bridge.slurm.wire.base import (
    JobInfo,
    JobStatesResponse,
    NodeInfo,
    NodesResponse,
    NoVal,
    ResourcesResponse,
)
from bridge.slurm.wire.slurmdb import AccountsResponse, AssociationsResponse, QosResponse


def job_state(states: list[str]) -> JobState:
    """Base state of Slurm's state list; a job still COMPLETING still holds its nodes."""
    if "COMPLETING" in states:
        return JobState.COMPLETING
    for s in states:
        if s in JobState.__members__:
            return JobState(s)
    raise ValueError(f"Slurm job state {states!r} has no base state the bridge knows")


def ended_as(states: list[str]) -> JobState | None:
    """The end state Slurm lists beside COMPLETING, if any."""
    if "COMPLETING" not in states:
        return None
    return next((JobState(s) for s in states
                 if s in JobState.__members__ and not JobState(s).is_live), None)


def owner_from_comment(comment: str) -> Owner | None:
    for part in comment.split():
        if part.startswith(keys.COMMENT_OWNER):
            text = part[len(keys.COMMENT_OWNER) :]
            return parse_owner(text) if text else None
    return None


def comment_for(owner: Owner) -> str:
    return f"{keys.COMMENT_OWNER}{owner_text(owner)}"


# GRES that hold GPUs: whole (of any type), or shards, whose index is the GPU they are on.
_GPU_GRES = ("gpu", "shard")


def allocation(resources: ResourcesResponse) -> Allocation:
    """Nodes in Slurm's order, and each node's GPU indices (sorted, each once)."""
    return Allocation(
        tuple(n.node for n in resources.nodes),
        {n.node: gpus for n in resources.nodes
         if (gpus := tuple(sorted({i for g in n.gres if g.name in _GPU_GRES
                                   for i in index_list(g.index)})))},
    )


# A pending job Slurm cannot plan (what blocks it never ends: no time limits) gets a start a
# year ahead (24.11: its evaluation + 365 days; ``squeue --start`` shows it): no estimate.
# The backfill plans at most bf_window ahead, 30 days at most.
NO_PLAN_AHEAD = timedelta(days=300)


def _time(value: NoVal) -> datetime | None:
    """A Slurm timestamp; None where Slurm has none (unset, infinite or 0)."""
    if not value.set or value.infinite or value.number <= 0:
        return None
    return datetime.fromtimestamp(value.number, UTC)


def slurm_job(
    info: JobInfo, *, owned: bool, signed: bool, last_backfill: NoVal | None = None
) -> SlurmJob:
    """The core's view of one job.

    A job may be a placeholder only if it is ``owned``: submitted by the bridge's own Slurm
    user, or as the user the tenancy maps the namespace of its name to (``SlurmClient.owns``);
    the job index then believes the owner only for the user the owner's own namespace runs as
    (bridge/placement/trust.py) and only if ``signed`` (the bridge's signature, or its own
    user's job).  Any Slurm user can write the comment marker, and a forged one must neither
    be bound into nor cancelled as a duplicate.  Other jobs are not the
    bridge's business, so their allocation (and whatever odd GPU detail a native job carries)
    is never parsed.  A pending job's ``start_time`` is the backfill scheduler's estimate,
    dated by the answer's ``last_backfill`` (``squeue --start`` shows the same field).
    """
    owner = owner_from_comment(info.comment) if owned else None
    state = job_state(info.job_state)
    allocated = owner is not None and state is not JobState.PENDING and info.nodes
    allocation, unreadable = None, ""
    if allocated:
        try:
            allocation = allocation_from(info.nodes, info.gres_detail)
        except ValueError as exc:  # the job is still the owner's: see SlurmJob.unreadable
            unreadable = str(exc)
    expected = _time(info.start_time) if state is JobState.PENDING else None
    if expected is not None and expected - datetime.now(UTC) > NO_PLAN_AHEAD:
        expected = None
    return SlurmJob(
        job_id=info.job_id,
        name=info.name,
        state=state,
        reason=info.state_reason or NO_REASON,
        owner=owner,
        allocation=allocation,
        partition=info.partition,
        user=info.user_name,
        account=info.account,
        qos=info.qos,
        preempting=_signalled(info),
        expected_start=expected,
        backfill_at=_time(last_backfill) if expected and last_backfill else None,
        unreadable=unreadable,
        topology=_topology(info) if owner is not None else None,
        ended_as=ended_as(info.job_state),
        unsigned=owner is not None and not signed,
    )


def _signalled(info: JobInfo) -> bool:
    """Slurm signalled the job's preemption (its GraceTime runs)."""
    return info.preempt_time.set and info.preempt_time.number > 0


_UNSET = 2**32 - 3  # Slurm's NO_VAL and INFINITE sit above: not an ask


def _topology(info: JobInfo) -> TopologyAsk | None:
    switches = info.required_switches if 0 < info.required_switches < _UNSET else None
    segment = info.segment_size if 0 < info.segment_size < 2**16 - 2 else None
    if switches is None and segment is None:
        return None
    wait = info.maximum_switch_wait_time if switches is not None else None
    return TopologyAsk(switches=switches, wait_seconds=wait, segment=segment)


def node_table(resp: NodesResponse) -> NodeTable:
    stamp = resp.last_update
    return NodeTable(tuple(slurm_node(n) for n in resp.nodes),
                     stamp.number if stamp.set and stamp.number else None)


def slurm_node(info: NodeInfo) -> SlurmNode:
    return SlurmNode(
        name=info.name,
        states=frozenset(info.state),
        reason=info.reason,
        cpus=info.cpus,
        memory_mb=info.real_memory,
        gres=info.gres,
        topology=topology_units(info.topology),
        features=_names(info.features),
        partitions=_names(info.partitions),
    )


def _names(listed: list[str] | str) -> frozenset[str]:
    """A list of names as slurmrestd gives it: a list, or CSV in some parsers."""
    return frozenset(n.strip() for n in (listed.split(",") if isinstance(listed, str)
                                         else listed) if n.strip())


def topology_units(text: str) -> tuple[tuple[str, str], ...]:
    """``tree:leaf1,block:b1`` → (("tree", "leaf1"), ("block", "b1")); a part without a unit is
    skipped."""
    pairs = (part.strip().partition(":") for part in text.split(","))
    return tuple((name, unit) for name, _, unit in pairs if name and unit)


def accounting(
    accounts: AccountsResponse, associations: AssociationsResponse, qos: QosResponse
) -> Accounting:
    return Accounting(
        accounts=frozenset(a.name for a in accounts.accounts),
        associations=frozenset(
            (a.user, a.account) for a in associations.associations if a.user
        ),
        qos={q.name: SlurmQos(q.name, q.limits.grace_time, tuple(q.preempt.qos))
             for q in qos.qos},
    )


def with_any_allocation(parts: Sequence[JobInfo], job: SlurmJob) -> SlurmJob:
    """``job`` (of records ``parts``) with where it holds nodes and GPUs, native jobs too, every
    component of a heterogeneous one that still holds its own: an admin's GPU map draws them
    (``slurmbridge gpus``); the bridge itself never acts on it.  An allocation that cannot be
    read is left ``unreadable``, never guessed."""
    if job.allocation is not None or job.unreadable or job.state is JobState.PENDING:
        return job
    try:
        holding = [p for p in parts if job_state(p.job_state).holds_allocation]
        return dataclasses.replace(job, allocation=_folded(holding) if holding else None)
    except ValueError as exc:
        return dataclasses.replace(job, unreadable=str(exc))


def _folded(parts: Sequence[JobInfo]) -> Allocation | None:
    """The allocation of a job's records: one record's, or a heterogeneous job's components'
    on the nodes and GPUs of all of them (Slurm gives no node to two components), each
    component's nodes kept apart; None while one has no nodes yet.  Raises ValueError for
    an allocation that cannot be read."""
    allocations = [allocation_from(p.nodes, p.gres_detail) for p in parts]
    every = [a for a in allocations if a is not None]
    if len(every) < len(parts):
        return None
    if len(every) == 1:
        return every[0]
    return Allocation(
        tuple(n for a in every for n in a.nodes),
        {n: g for a in every for n, g in a.gpu_ids.items()},
        {n: g for a in every for n, g in a.shared.items()},
        components=tuple(a.nodes for a in every),
    )


def het_records(infos: Sequence[JobInfo]) -> list[list[JobInfo]]:
    """Each job's records: a heterogeneous job's (one per component) as one, its leader
    first; a component listed without its leader is left out (it is no job of its own)."""
    jobs: dict[int, list[JobInfo]] = {}
    for info in infos:
        jobs.setdefault(info.het_leader or info.job_id, []).append(info)
    ordered = (sorted(parts, key=lambda i: i.het_job_offset.number) for parts in jobs.values())
    return [parts for parts in ordered if parts[0].job_id == (parts[0].het_leader or
                                                              parts[0].job_id)]


def with_components(job: SlurmJob, parts: Sequence[JobInfo]) -> SlurmJob:
    """``job`` (read from its leader's record) as the whole heterogeneous job of ``parts``:
    allocated once every component is, on the nodes and GPUs of all of them (Slurm gives no
    node to two components), each component's nodes kept apart."""
    if len(parts) < 2:
        return job
    states = tuple(ComponentState(job_state(p.job_state), p.state_reason or NO_REASON,
                                  ended_as(p.job_state), _signalled(p)) for p in parts)
    job = dataclasses.replace(job, het_components=len(parts), parts=states,
                              preempting=any(c.preempting for c in states))
    ended = next((i for i, c in enumerate(states) if c.ended), None)
    if ended is not None and job.state.is_live:
        return _ending(job, ended)
    if job.allocation is None:
        return job
    try:  # None: a component not allocated yet
        return dataclasses.replace(job, allocation=_folded(parts))
    except ValueError as exc:  # still the owner's job: see SlurmJob.unreadable
        return dataclasses.replace(job, allocation=None, unreadable=str(exc))


def _ending(job: SlurmJob, offset: int) -> SlurmJob:
    """A component past the first ended (``scancel <id>+1``: Slurm keeps the others running):
    for the bridge the whole job is ending, so every member goes and the rest is cancelled,
    as when any ordinary job of a group ends."""
    part = job.parts[offset]
    return dataclasses.replace(
        job, state=JobState.COMPLETING, ended_as=part.ended_as or part.state, allocation=None,
        reason=f"its component +{offset} ended ({part.state}, reason {part.reason})")


def listed_states(resp: JobStatesResponse) -> dict[int, JobState | None]:
    """A state list's jobs (array records left out); None: a state the bridge does not know."""
    states: dict[int, JobState | None] = {}
    ended: set[int] = set()  # leaders one of whose later components ended
    for entry in resp.jobs:
        try:
            state: JobState | None = job_state(entry.state)
        except ValueError:
            state = None
        if (job_id := entry.number) is not None:
            states[job_id] = state
        elif entry.leader is not None and state is not None and (
                not state.is_live or ended_as(entry.state) is not None):
            ended.add(entry.leader)
    for leader in ended:  # re-read whole: see _ending
        if (listed := states.get(leader)) is not None and listed.is_live:
            states[leader] = JobState.COMPLETING
    return states
