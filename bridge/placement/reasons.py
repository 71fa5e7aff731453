"""Slurm's pending reasons and submit refusals in words a researcher understands.

Slurm's codes (``QOSGrpGRES``, ``AssocMaxJobsLimit``) are precise but opaque to someone who
only wrote a pod.  The code stays in the condition's reason (tools and admins key on it);
the sentence goes into the event and the condition's message.
"""

import dataclasses
import re
from datetime import datetime

from bridge.jobs.request import TopologyAsk
from bridge.slurm.types import JobState, SlurmJob

_WAIT = "the pod starts when jobs already running under it end"

# Slurm's job_state_reason strings (src/common/slurm_protocol_defs.c), case-insensitive.
_PENDING: dict[str, str] = {
    "qosgrpgres": "the QOS {qos} has reached its limit on GPUs in use (all users together); "
                  + _WAIT,
    "qosmaxgrespernode": "the job asks for more GPUs per node than the QOS {qos} allows one job",
    "qosmaxgresperuser": "user {user} already uses as many GPUs as the QOS {qos} allows one "
                         "user; " + _WAIT,
    "qosmaxgresperjob": "the job asks for more GPUs than the QOS {qos} allows one job: it will "
                        "not start as asked; ask for fewer GPUs or another QOS",
    "qosgrpcpulimit": "the QOS {qos} has reached its limit on CPUs in use; " + _WAIT,
    "qosgrpmemlimit": "the QOS {qos} has reached its limit on memory in use; " + _WAIT,
    "qosgrpjobslimit": "the QOS {qos} already runs as many jobs as it may; " + _WAIT,
    "qosmaxjobsperuserlimit": "user {user} already runs as many jobs as the QOS {qos} allows "
                              "one user; " + _WAIT,
    "qosmaxcpuperuserlimit": "user {user} already uses as many CPUs as the QOS {qos} allows "
                             "one user; " + _WAIT,
    "assocgrpgres": "account {account} has reached its limit on GPUs in use; " + _WAIT,
    "assocgrpcpulimit": "account {account} has reached its limit on CPUs in use; " + _WAIT,
    "assocgrpmemlimit": "account {account} has reached its limit on memory in use; " + _WAIT,
    "assocgrpjobslimit": "account {account} already runs as many jobs as it may; " + _WAIT,
    "assocmaxjobslimit": "user {user} already runs as many jobs as account {account} allows; "
                         + _WAIT,
    "assocgrpgresminutes": "account {account} has used up its GPU time (GrpTRESMins): it "
                           "starts only when an admin raises the limit or usage decays",
    "assocgrpcpuminutes": "account {account} has used up its CPU time (GrpTRESMins): it "
                          "starts only when an admin raises the limit or usage decays",
    "invalidaccount": "Slurm no longer accepts account {account} for user {user} (removed or "
                      "never in slurmdbd): it will not start; an admin fixes the namespace's "
                      "tenancy or the account (sacctmgr)",
    "invalidqos": "Slurm does not accept QOS {qos} for account {account} and user {user}: it "
                  "will not start; an admin fixes the namespace's tenancy or the association",
    "priority": "other jobs come first (fair share, QOS priority); the pod starts when Slurm "
                "gets to it",
    "resources": "no node has the CPUs, memory or GPUs free right now; the pod starts when "
                 "enough are released",
    "reqnodenotavail": "the nodes the job may use are not available (drained or down)",
    "partitionnodelimit": "the job asks for more nodes than partition {partition} allows",
    "partitiondown": "partition {partition} is down",
    "partitioninactive": "partition {partition} is inactive",
    "jobheldadmin": "an admin holds the job (scontrol release lets it run)",
    "jobhelduser": "the job is held (scontrol release lets it run)",
    "begintime": "the job may not start before its begin time",
    "dependency": "the job waits for another job to finish",
    "reservation": "the job waits for its reservation to start",
    "none": "Slurm has not looked at the job yet",
}


def _fill(template: str, job: SlurmJob) -> str:
    return template.format(
        qos=repr(job.qos) if job.qos else "of the job",
        account=repr(job.account) if job.account else "(default)",
        user=repr(job.user) if job.user else "(the bridge's)",
        partition=repr(job.partition) if job.partition else "(default)",
    )


# A member's component of its group's heterogeneous job: its name and offset (``+1``).
Part = tuple[str, int]


def waiting_message(job: SlurmJob, part: Part | None = None) -> str:
    """What filter, the event and the condition say about a job that does not run (yet); a
    member of a pending heterogeneous job is told its own component's state and reason."""
    own = component_view(job, part)
    head = f"waiting for Slurm job {job.job_id} ({own.state}, reason {own.reason})"
    if part is not None and own is not job:
        head += f", component {part[0]} (+{part[1]}) of heterogeneous job {job.job_id}"
    return f"{head}: {explain(own)}" if own.state is JobState.PENDING else head


_SAID_COMPONENT = re.compile(
    r", component (?P<name>\S+) \(\+(?P<offset>\d+)\) of heterogeneous job ")


def said_component(words: str) -> Part | None:
    """The member's component as ``waiting_message`` said it (``kubectl slurmbridge``)."""
    found = _SAID_COMPONENT.search(words)
    return (found["name"], int(found["offset"])) if found else None


def component_view(job: SlurmJob, part: Part | None) -> SlurmJob:
    """A pending heterogeneous job as one member's component sees it: that component's
    state and reason as Slurm lists them; ``job`` itself otherwise."""
    if part is None or job.state is not JobState.PENDING or part[1] >= len(job.parts):
        return job
    own = job.parts[part[1]]
    return dataclasses.replace(job, state=own.state, reason=own.reason)


EXPECTED = "expected to start at "
_SAID_EXPECTED = re.compile(re.escape(EXPECTED) + r"(?P<at>(?:\d{4}-\d\d-\d\d )?\d\d:\d\d UTC)")


def clock(at: datetime, now: datetime) -> str:
    """``14:05 UTC``; with the date when it is not today's."""
    return f"{at:%H:%M} UTC" if at.date() == now.date() else f"{at:%Y-%m-%d %H:%M} UTC"


def _in_about(seconds: float) -> str:
    if seconds < 30:
        return "any moment now"
    unit, size = (("day", 86400) if seconds >= 48 * 3600
                  else ("hour", 3600) if seconds >= 90 * 60 else ("minute", 60))
    n = max(round(seconds / size), 1)
    return f"in about {n} {unit}{'s' if n != 1 else ''}"


def expected_start(job: SlurmJob, now: datetime) -> str:
    """When Slurm's backfill expects the job to start, in words; "" without an estimate.
    The words age ("in about 12 minutes"), so filter's answer, which kube-scheduler repeats
    in events keyed by their message, never carries them."""
    if job.expected_start is None:
        return ""
    words = (f"{EXPECTED}{clock(job.expected_start, now)}, "
             f"{_in_about((job.expected_start - now).total_seconds())}")
    if job.backfill_at is not None:
        words += f", by Slurm's backfill at {job.backfill_at:%H:%M}"
    return words


def said_expected(message: str) -> str:
    """The expected start a message of the bridge's names (``14:05 UTC``); "" if none."""
    found = _SAID_EXPECTED.search(message)
    return found["at"] if found else ""


def explain(job: SlurmJob) -> str:
    """Why a pending job waits, in words; Slurm's own code when the table has none."""
    reason = job.reason.strip()
    if reason.lower() == "resources" and job.topology is not None:
        return _topology_wait(job.topology)
    template = _PENDING.get(reason.lower())
    if template is not None:
        return _fill(template, job)
    if reason.lower().startswith("qos"):
        return _fill(f"a limit of the QOS {{qos}} holds the job ({reason})", job)
    if reason.lower().startswith("assoc"):
        return _fill(f"a limit of account {{account}} holds the job ({reason})", job)
    return f"Slurm's reason: {reason}"


def _topology_wait(ask: TopologyAsk) -> str:
    """Slurm says only "Resources" while a job waits for its switches or blocks."""
    if ask.switches is not None:
        n = ask.switches
        wait = f"up to {_duration(ask.wait_seconds)}" if ask.wait_seconds else "a while"
        return (f"the job asked for at most {n} leaf switch{'es' if n > 1 else ''} and no "
                f"{'such set' if n > 1 else 'switch'} has enough nodes free together yet; Slurm "
                f"waits {wait} (slurmbridge.io/topology-wait, capped by its max_switch_wait) "
                "for one, then places the job on more switches")
    return (f"the job's nodes go in segments of {ask.segment}, each within one block, and no "
            "block has that many nodes free together yet; the pod starts when one has")


def _duration(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{minutes} min {rest} s" if minutes and rest else (
        f"{minutes} min" if minutes else f"{rest} s")


# Submit refusals: a piece of Slurm's error text → what it means for the pod.
_REFUSED: tuple[tuple[str, str, str], ...] = (
    ("invalid account", "InvalidAccount",
     "Slurm refused account {account} for user {user} (the account or the user's association "
     "is not in slurmdbd): an admin fixes the namespace's tenancy or runs sacctmgr"),
    ("invalid qos", "InvalidQOS",
     "Slurm refused QOS {qos} for account {account} and user {user}: an admin fixes the "
     "namespace's tenancy or the association's QOS (sacctmgr)"),
    ("invalid partition", "InvalidPartition",
     "Slurm has no partition {partition} (or the account may not use it): an admin fixes the "
     "namespace's tenancy"),
    ("invalid user", "InvalidUser",
     "Slurm does not know user {user}: an admin adds the user (sacctmgr) or fixes the "
     "namespace's tenancy"),
    ("job violates accounting/qos policy", "AccountingPolicy",
     "the job breaks a limit of QOS {qos} or account {account} that waiting cannot cure (too "
     "many GPUs, CPUs or time for one job): ask for less or another QOS"),
)


def refusal(
    error: str, *, account: str | None, user: str | None, qos: str | None,
    partition: str | None,
) -> tuple[str, str]:
    """(condition reason, sentence) for a submit Slurm refused; the error text appended."""
    low = error.lower()
    values = {
        "account": repr(account) if account else "(the user's default)",
        "user": repr(user) if user else "(the bridge's own)",
        "qos": repr(qos) if qos else "(the default)",
        "partition": repr(partition) if partition else "(the default)",
    }
    for needle, reason, template in _REFUSED:
        if needle in low:
            return reason, f"{template.format(**values)} [{error}]"
    return "SlurmRejected", error
