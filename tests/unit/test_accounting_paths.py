"""What a researcher reads when accounting holds, refuses or preempts a pod's job."""

import dataclasses
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.config import AdmissionSettings, SlurmSettings
from bridge.controllers.lifecycle import Lifecycle
from bridge.controllers.poller import Poller
from bridge.jobs.request import JobRequest
from bridge.kube.nodecache import NodeCache
from bridge.link.podcache import PodCache
from bridge.placement.grace import grace_warning
from bridge.placement.index import JobIndex
from bridge.placement.notifier import PodNotifier
from bridge.placement.outcomes import PlacementError
from bridge.placement.placer import Placer
from bridge.placement.reasons import explain, refusal, waiting_message
from bridge.placement.registry import SeenPods
from bridge.slurm.client import SlurmClient
from bridge.slurm.convert import accounting
from bridge.slurm.errors import SlurmRejected
from bridge.slurm.types import Accounting, Allocation, JobState, SlurmJob
from bridge.slurm.wire.slurmdb import AccountsResponse, AssociationsResponse, QosResponse
from slurmbridge_cli import doctor
from slurmbridge_cli.doctor import Check, tenancy_checks
from slurmbridge_cli.status_view import Row, collect, render_table
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, fake_settings
from slurmbridge_devkit.recorded_events import RecordedEvents


def _job(state: JobState, reason: str = "None", **extra: Any) -> SlurmJob:
    allocation = Allocation(("node1",), {"node1": (0,)}) if state is JobState.RUNNING else None
    fields: dict[str, Any] = {"user": "alice", "account": "team-a", "qos": "gpu2"} | extra
    return dataclasses.replace(JobBuilder(7).state(state, reason).allocation(allocation).build(),
                               **fields)


# --- the reason table -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "parts"),
    [
        ("QOSGrpGRES", ["QOS 'gpu2'", "limit on GPUs"]),
        ("AssocGrpGRES", ["account 'team-a'", "GPUs"]),
        ("AssocMaxJobsLimit", ["user 'alice'", "account 'team-a'", "as many jobs"]),
        ("QOSMaxGRESPerUser", ["user 'alice'", "QOS 'gpu2'"]),
        ("AssocGrpCpuLimit", ["account 'team-a'", "CPUs"]),
        ("AssocGrpCPULimit", ["account 'team-a'", "CPUs"]),  # spelling in the issue: same entry
        ("InvalidAccount", ["account 'team-a'", "user 'alice'", "tenancy"]),
        ("InvalidQOS", ["QOS 'gpu2'", "tenancy"]),
        ("QOSGrpWallLimit", ["QOS 'gpu2'", "QOSGrpWallLimit"]),  # not in the table: by family
        ("AssocGrpNodeLimit", ["account 'team-a'", "AssocGrpNodeLimit"]),
        ("SomethingNew", ["SomethingNew"]),
    ],
)
def test_pending_reasons_read_as_sentences(reason: str, parts: list[str]) -> None:
    sentence = explain(_job(JobState.PENDING, reason))
    for part in parts:
        assert part in sentence


def test_the_waiting_message_keeps_slurms_code_and_adds_the_sentence() -> None:
    message = waiting_message(_job(JobState.PENDING, "QOSGrpGRES"))
    assert message.startswith("waiting for Slurm job 7 (PENDING, reason QOSGrpGRES): ")
    assert "limit on GPUs" in message
    assert waiting_message(_job(JobState.SUSPENDED, "Preempted")).endswith("reason Preempted)")


def test_submit_refusals_name_the_tenancy_values() -> None:
    reason, sentence = refusal(
        "Invalid account or account/partition combination specified",
        account="team-b", user="bob", qos=None, partition=None,
    )
    assert reason == "InvalidAccount"
    assert "'team-b'" in sentence and "'bob'" in sentence and "sacctmgr" in sentence
    assert "Invalid account or account/partition" in sentence  # Slurm's own words kept
    assert refusal("odd", account=None, user=None, qos=None, partition=None) == (
        "SlurmRejected", "odd"
    )


# --- a refused submit: told once, not retried per filter ---------------------------------


class RefusingSlurm(FakeSlurm):
    """The dev kit's fake Slurm, refusing every submit as slurmctld does a bad account."""

    def __init__(self) -> None:
        super().__init__()
        self.submits = 0

    async def submit(self, req: JobRequest) -> int:
        self.submits += 1
        raise SlurmRejected(
            "submit", ["Invalid account or account/partition combination specified"], 500
        )


def _tenant_pod(uid: str = "uid-1") -> PodBuilder:
    """Team b's pod, run as Slurm user bob, with Kubernetes' default grace period."""
    return (PodBuilder("p", "ns").uid(uid).grace(None)
            .annotations({keys.ACCOUNT: "team-b", keys.SLURM_USER: "bob"}))


def _pod(uid: str = "uid-1", **spec: Any) -> PodResource:
    return _tenant_pod(uid).spec(**spec).build()


async def test_a_refused_submit_reaches_the_pod_once_without_a_retry_storm() -> None:
    slurm = RefusingSlurm()
    events = RecordedEvents()
    told = events.refusals
    placer = Placer(JobIndex(slurm), NodeCache(FakeKube()), SeenPods(), events)
    messages = [await _refusal(placer) for _ in range(5)]
    assert slurm.submits == 1  # the leader's intake retries; Slurm is asked once per backoff
    assert told == [("InvalidAccount", messages[0])]
    assert "'team-b'" in messages[0] and "'bob'" in messages[0]
    assert all(m == messages[0] for m in messages)
    with pytest.raises(PlacementError, match="team-b"):
        await placer.prepare(_pod())


async def _refusal(placer: Placer) -> str:
    """What the leader's intake is told when it submits the pod's job."""
    with pytest.raises(PlacementError) as refused:
        await placer.prepare(_pod())
    return str(refused.value)


def _kube(*pods: PodResource) -> FakeKube:
    """The dev kit's fake apiserver holding ``pods``."""
    kube = FakeKube()
    for pod in pods:
        kube.add(pod)
    return kube


def writes(kube: FakeKube) -> list[tuple[str, Any]]:
    """The bridge's writes, in order: conditions (reason, message), events (reason, message,
    type), evictions (the pod's name)."""
    seen: list[tuple[str, Any]] = []
    for verb, kind, body in kube.written:
        assert verb in ("create", "patch"), (verb, kind)
        if kind == "PodStatus":
            condition = body["status"]["conditions"][0]
            seen.append(("condition", (condition["reason"], condition["message"])))
        elif kind == "Event":
            seen.append(("event", (body["reason"], body["message"], body["type"])))
        else:
            assert kind == "PodEviction", kind
            seen.append(("evict", body["metadata"]["name"]))
    return seen


async def test_submit_refusal_is_an_event_and_a_condition_once() -> None:
    kube = _kube(_pod())
    notifier = PodNotifier(kube, SeenPods(), quiet_seconds=0)
    for _ in range(3):
        await notifier.submit_refused(_pod(), "InvalidAccount", "Slurm refused: account")
    await notifier.drain()
    assert writes(kube) == [
        ("event", (keys.EventReason.SUBMIT_REFUSED, "Slurm refused: account", "Warning")),
        ("condition", ("InvalidAccount", "Slurm refused: account")),
    ]


# --- preemption ------------------------------------------------------------------------------


def _fresh(job: SlurmJob) -> FakeSlurm:
    """The dev kit's fake Slurm, answering the lifecycle's confirming read with ``job``."""
    slurm = FakeSlurm()
    slurm.put(job)
    return slurm


def _bound_pod(grace: int) -> PodResource:
    pod = _pod(nodeName="kube-node1", terminationGracePeriodSeconds=grace)
    assert pod.metadata is not None and pod.metadata.annotations is not None
    pod.metadata.annotations |= {keys.JOB_ID: "7", keys.SLURM_NODE: "node1", keys.GPU_IDS: "0"}
    return pod


@pytest.mark.parametrize(
    "job",
    [
        _job(JobState.PREEMPTED, "None", qos="low"),  # PreemptMode CANCEL, grace over
        _job(JobState.RUNNING, qos="low", preempting=True),  # in Slurm's GraceTime
        _job(JobState.PENDING, "Preempted", qos="low"),  # REQUEUE
    ],
    ids=["ended", "in-grace", "requeued"],
)
async def test_a_preempted_job_evicts_its_pod_with_the_reason(job: SlurmJob) -> None:
    kube, slurm = _kube(_bound_pod(grace=45)), _fresh(job)
    index = JobIndex(slurm)
    index.record(job)  # as the poller saw it; the lifecycle confirms with a fresh read
    lifecycle = Lifecycle(kube, slurm, index, SeenPods(), PodCache(kube))
    await lifecycle.reconcile_once()
    assert writes(kube)[0] == ("evict", "p")  # the Eviction API: the pod's grace period holds
    (reason, message, kind), = [w[1] for w in writes(kube) if w[0] == "event"]
    assert (reason, kind) == (keys.EventReason.PREEMPTED, "Warning")
    assert "preempted by Slurm" in message and "QOS low" in message
    assert "terminationGracePeriodSeconds=45" in message
    conditions = [w[1] for w in writes(kube) if w[0] == "condition"]
    assert conditions == [(keys.REASON_PREEMPTED, message)]
    await lifecycle.reconcile_once()  # evicted once
    assert [w[0] for w in writes(kube)].count("evict") == 1


async def test_a_job_that_ended_otherwise_is_not_called_a_preemption() -> None:
    cancelled = _job(JobState.CANCELLED)
    kube, slurm = _kube(_bound_pod(grace=0)), _fresh(cancelled)
    index = JobIndex(slurm)
    index.record(cancelled)
    lifecycle = Lifecycle(kube, slurm, index, SeenPods(), PodCache(kube))
    await lifecycle.reconcile_once()
    events = [w[1] for w in writes(kube) if w[0] == "event"]
    assert [e[0] for e in events] == ["SlurmJobEnded"]
    assert not [w for w in writes(kube) if w[0] == "condition"]


# --- doctor, status and the slurmdb wire models ------------------------------------------------

SLURMDB = {
    "accounts": {"accounts": [{"name": "team-a", "description": "x", "organization": "y"},
                              {"name": "root"}], "errors": [], "warnings": []},
    "associations": {"associations": [
        {"account": "team-a", "user": "alice", "cluster": "c", "partition": "", "qos": ["low"]},
        {"account": "team-a", "user": "", "cluster": "c"},  # the account's own association
    ]},
    "qos": {"qos": [
        {"name": "normal", "limits": {"grace_time": 0}, "preempt": {"list": [], "mode": []}},
        {"name": "low", "limits": {"grace_time": 15}, "preempt": {"list": [], "mode": ["CANCEL"]}},
        {"name": "high", "limits": {"grace_time": {"set": True, "number": 0}},
         "preempt": {"list": ["low"], "mode": ["CANCEL"]}},
    ]},
}


def _accounting() -> Accounting:
    return accounting(
        AccountsResponse.model_validate(SLURMDB["accounts"]),
        AssociationsResponse.model_validate(SLURMDB["associations"]),
        QosResponse.model_validate(SLURMDB["qos"]),
    )


def test_slurmdb_answers_parse_into_what_doctor_compares() -> None:
    known = _accounting()
    assert known.accounts == {"team-a", "root"}
    assert known.associations == {("alice", "team-a")}
    assert known.qos["low"].grace_seconds == 15 and known.qos["high"].preempts == ("low",)
    assert known.preemptable("low") and not known.preemptable("high")


class SlurmdbdOnly:
    """slurmrestd as ``doctor``'s tenancy checks read it: slurmdbd's accounting, nothing else."""

    def __init__(self, settings: SlurmSettings) -> None:
        self.settings = settings

    async def __aenter__(self) -> "SlurmdbdOnly":
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def accounting(self) -> Accounting:
        return _accounting()


async def test_doctor_names_what_the_tenancy_maps_but_slurmdbd_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text("namespaces:\n  a: {account: team-a, user: alice, qos: [low]}\n"
                       "  b: {account: team-b, user: bob, qos: [vip]}\n"
                       "default: {account: team-a, user: eve}\n")
    monkeypatch.setattr(doctor, "SlurmClient", SlurmdbdOnly)
    settings = fake_settings(admission=AdmissionSettings(tenancy_file=tenancy))
    checks = [c async for c in tenancy_checks(settings, cast(AsyncClient, FakeKube()))]
    good, bad, stranger = checks
    assert good.ok and "in slurmdbd" in good.line()
    assert not bad.ok
    assert "account 'team-b'" in bad.line() and "QOS 'vip'" in bad.line()
    assert "sacctmgr" in bad.line()
    assert "user 'eve' in account 'team-a'" in stranger.line()


def test_a_grace_period_longer_than_slurm_waits_is_named() -> None:
    known = _accounting()

    def pod(qos: str, grace: int | None) -> Pod:
        return _tenant_pod().grace(grace).annotate(keys.QOS, qos).build()

    warning = grace_warning(pod("low", None), known)  # Kubernetes' default: 30 s > 15 s
    assert warning is not None and "30" in warning and "GraceTime (15s)" in warning
    assert grace_warning(pod("low", 10), known) is None
    assert grace_warning(pod("high", 600), known) is None  # nothing preempts high
    check = Check(True, "pod ns/p: x", "lower it", warning=True)
    assert check.line().startswith("WARN") and "hint: lower it" in check.line()


class JobListing:
    """slurmrestd as ``slurmbridge status`` reads it: the list of jobs."""

    def __init__(self, *jobs: SlurmJob) -> None:
        self.jobs = list(jobs)

    async def list_jobs(self) -> list[SlurmJob]:
        return self.jobs


async def _status_row(pod: PodResource, *jobs: SlurmJob) -> Row:
    """``slurmbridge status``'s one row: ``pod`` joined with its job among ``jobs``."""
    kube = FakeKube()
    kube.add(pod)
    (row,) = await collect(cast(AsyncClient, kube), cast(SlurmClient, JobListing(*jobs)))
    return row


async def test_status_shows_account_user_and_qos() -> None:
    pod = _pod()
    assert pod.metadata is not None and pod.metadata.annotations is not None
    pod.metadata.annotations[keys.QOS] = "low"
    row = await _status_row(pod, _job(JobState.RUNNING, qos="high"))
    assert (row.account, row.user, row.qos) == ("team-a", "alice", "high")
    waiting = await _status_row(pod)  # no job yet: what the tenancy asked for
    assert (waiting.account, waiting.user, waiting.qos) == ("team-b", "bob", "low")
    table = render_table([row])
    assert table.splitlines()[0].split()[5:8] == ["ACCOUNT", "USER", "QOS"]
    assert table.splitlines()[1].split()[4:8] == ["-", "team-a", "alice", "high"]


class SignallingSlurm(FakeSlurm):
    """A running job whose preemption Slurm has signalled: its state is still RUNNING."""

    def __init__(self, job: SlurmJob) -> None:
        super().__init__()
        self.put(job)
        self.reads = 0

    async def get_job(self, job_id: int) -> SlurmJob:
        self.reads += 1
        return await super().get_job(job_id)


@pytest.mark.parametrize("qos", ["low", "high"])
async def test_running_jobs_of_a_preemptable_qos_are_watched_for_the_signal(qos: str) -> None:
    signalled = _job(JobState.RUNNING, qos=qos, preempting=True)
    slurm = SignallingSlurm(signalled)
    index = JobIndex(slurm)
    index.record(_job(JobState.RUNNING, qos=qos))  # as last read: not preempted
    events = RecordedEvents()
    changes = events.changed
    poller = Poller(slurm, index, events,
                    watch_running=lambda job: job.qos == "low")
    await poller.poll_once()
    job = index.by_id(7)
    if qos == "low":  # re-read although its state did not change: the signal is seen
        assert slurm.reads == 1 and job is not None and job.preempting and changes == [job]
    else:  # nothing preempts "high": no read beyond the cheap state list
        assert slurm.reads == 0 and changes == []
