"""What the notifier writes on a pod, and when (the dev kit's fake apiserver records the writes)."""

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import GroupOwner, PodOwner
from bridge.link.views import view_of
from bridge.placement.notifier import NOTIFICATIONS_IN_FLIGHT, PodNotifier
from bridge.placement.reasons import clock
from bridge.placement.registry import SeenPods
from bridge.slurm.types import JobState
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import InFlight

QUIET = 0.05


def writes(kube: FakeKube) -> list[tuple[str, str]]:
    """The notifier's writes, in order: annotations patched (their keys), a condition set
    (its status), an event created (its reason)."""
    seen = []
    for verb, kind, body in kube.written:
        if (verb, kind) == ("create", "Event"):
            seen.append(("event", body.get("reason") or ""))
        elif (verb, kind) == ("patch", "PodStatus"):
            seen.append(("condition", body["status"]["conditions"][0]["status"]))
        else:
            assert (verb, kind) == ("patch", "Pod"), (verb, kind)
            seen.append(("annotate", ",".join(body["metadata"]["annotations"])))
    return seen


def _pod(
    uid: str = "uid-1", annotations: dict[str, str] | None = None, *, gated: bool = False
) -> Pod:
    pod = PodBuilder("p", "ns").uid(uid).annotations(annotations or {}).containers()
    return (pod.gated() if gated else pod).build()


PENDING = JobBuilder(7).state(JobState.PENDING, "Resources").build()
RUNNING = JobBuilder(7).running("node1").build()


def _notifier(*known: Pod) -> tuple[PodNotifier, FakeKube, SeenPods]:
    """A notifier over a fake apiserver, its registry holding the ``known`` pods (as intake
    leaves them)."""
    kube, registry = FakeKube(), SeenPods()
    for pod in known:
        registry.remember(view_of(pod))
    notifier = PodNotifier(kube, registry, quiet_seconds=QUIET)
    return notifier, kube, registry


async def _settle(notifier: PodNotifier) -> None:
    await asyncio.sleep(QUIET * 3)
    await notifier.drain()


async def test_a_job_slurm_starts_at_once_costs_the_notifier_no_write() -> None:
    """It only shows status: the job is recorded on the pod by the leader that submitted it
    (placement/release.py), so the order of the job's listeners does not matter."""
    pod = _pod()
    notifier, kube, _ = _notifier(pod)
    await notifier.job_known(view_of(pod), PENDING)
    await notifier.job_changed(PENDING, RUNNING)
    await _settle(notifier)
    assert writes(kube) == []


async def test_a_parked_pod_is_nudged_as_soon_as_its_job_is_allocated() -> None:
    pod = _pod(annotations={keys.JOB_ID: "7", keys.OWNER: "uid-1"})
    notifier, kube, _ = _notifier(pod)
    await notifier.job_known(view_of(pod), PENDING)
    notifier.parked.park("uid-1")  # filter answered "waiting": kube-scheduler set the pod aside
    await notifier.job_changed(PENDING, RUNNING)
    await asyncio.sleep(0)
    await notifier.drain()  # before the quiet period is over
    assert writes(kube) == [("condition", "True")]  # kube-scheduler will say "Scheduled"
    assert not notifier.parked.parked("uid-1")
    await _settle(notifier)
    assert len(writes(kube)) == 1  # nothing more once the quiet period ends


async def test_a_job_that_keeps_pending_is_shown_after_the_quiet_period() -> None:
    pod = _pod(annotations={keys.JOB_ID: "7", keys.OWNER: "uid-1"})
    notifier, kube, _ = _notifier(pod)
    await notifier.job_known(view_of(pod), PENDING)
    await asyncio.sleep(0)
    assert writes(kube) == []
    await _settle(notifier)
    assert writes(kube) == [("event", "SlurmPending"), ("condition", "False")]
    await notifier.job_changed(PENDING, RUNNING)  # shown as pending, so its allocation is shown too
    await notifier.drain()
    # The condition alone: kube-scheduler's "Scheduled" event follows it at once, and an
    # event per allocated pod was a third of the bridge's writes in a 5,000-pod burst (B1).
    assert writes(kube)[2:] == [("condition", "True")]


async def test_a_shown_job_whose_reason_changes_gets_an_event_and_the_condition() -> None:
    pod = _pod(annotations={keys.JOB_ID: "7", keys.OWNER: "uid-1"})
    notifier, kube, _ = _notifier(pod)
    await notifier.job_known(view_of(pod), PENDING)
    await _settle(notifier)
    await notifier.job_changed(PENDING, dataclasses.replace(PENDING, reason="QOSGrpGRES"))
    await notifier.drain()
    assert writes(kube)[2:] == [("event", "SlurmPending"), ("condition", "False")]


async def test_a_gated_pod_that_keeps_pending_costs_one_write_the_event() -> None:
    """kube-scheduler does not hold a gated pod: no condition is needed to requeue it, and
    an event (in ``kubectl describe``) costs the apiserver less than a pod status write,
    which every pod watcher is sent.  Nothing stale is left to correct at allocation."""
    pod = _pod(gated=True)
    notifier, kube, _ = _notifier(pod)
    await notifier.job_known(view_of(pod), PENDING)
    await _settle(notifier)
    assert writes(kube) == [("event", "SlurmPending")]
    await notifier.job_changed(PENDING, dataclasses.replace(PENDING, reason="QOSGrpGRES"))
    await notifier.job_changed(PENDING, RUNNING)  # released with its allocation: nothing to correct
    await _settle(notifier)
    assert writes(kube) == [("event", "SlurmPending"), ("event", "SlurmPending")]


async def test_a_gated_pods_refusal_is_corrected_once_its_job_is_accepted() -> None:
    """The refusal's condition must not outlive it: the next status replaces it, once."""
    pod = _pod(gated=True)
    notifier, kube, _ = _notifier(pod)
    await notifier.submit_refused(pod, keys.REASON_CANNOT_SUBMIT, "no such partition")
    await notifier.drain()
    await notifier.job_known(view_of(pod), PENDING)  # the admin fixed it: submitted, pending
    await _settle(notifier)
    await notifier.job_changed(PENDING, RUNNING)
    await _settle(notifier)
    assert writes(kube) == [("event", "SlurmSubmitRefused"), ("condition", "False"),
                            ("event", "SlurmPending"), ("condition", "False")]


async def test_a_job_slurm_has_not_been_read_about_is_shown_once_its_reason_is_known() -> None:
    """After the quiet period a burst's jobs may not have been re-read yet (reason "None"):
    saying "Slurm has not looked at it" would be wrong, and a second event would follow."""
    pod = _pod(gated=True)
    notifier, kube, _ = _notifier(pod)
    unread = dataclasses.replace(PENDING, reason="None")
    await notifier.job_known(view_of(pod), unread)
    await _settle(notifier)
    assert writes(kube) == []
    await notifier.job_changed(unread, PENDING)  # the poller's reason refresh read "Resources"
    await notifier.drain()
    assert writes(kube) == [("event", "SlurmPending")]


async def test_pods_whose_jobs_are_long_gone_are_forgotten() -> None:
    """A bridge that runs for months must not grow with every pod it ever saw."""
    notifier, _, registry = _notifier()
    gone, waiting = _pod("uid-1"), _pod("uid-2")
    for uid, pod, job in (("uid-1", gone, PENDING), ("uid-2", waiting, RUNNING)):
        registry.remember(view_of(pod))
        await notifier.job_known(view_of(pod), job)
        assert registry.owner_of(uid) == PodOwner(uid)
    tracked = {PodOwner("uid-2")}  # the index still has uid-2's job; uid-1's left Slurm's listing
    assert registry.prune(tracked.__contains__, idle_seconds=3600) == 0  # not idle yet
    assert registry.prune(tracked.__contains__, idle_seconds=0) == 1
    notifier.prune()
    assert registry.owner_of("uid-1") is None and registry.pods_of(PodOwner("uid-1")) == []
    assert registry.owner_of("uid-2") == PodOwner("uid-2")
    assert set(notifier._seen) == {"uid-2"}
    await notifier.drain()


# Hours ahead: "in about 5 hours" holds however long the suite runs before these tests.
SOON = datetime.now(UTC) + timedelta(hours=5)
ESTIMATED = dataclasses.replace(PENDING, expected_start=SOON,
                                backfill_at=datetime.now(UTC) - timedelta(seconds=20))


def _messages(kube: FakeKube) -> list[tuple[str, str]]:
    """(event reason or "condition", message) of each event and condition written."""
    said = []
    for verb, kind, body in kube.written:
        if (verb, kind) == ("create", "Event"):
            said.append((body.get("reason") or "", body["message"]))
        elif (verb, kind) == ("patch", "PodStatus"):
            said.append(("condition", body["status"]["conditions"][0]["message"]))
    return said


async def test_a_pending_pod_is_told_when_slurm_expects_its_job_to_start() -> None:
    """Issue 26: Slurm's backfill estimate in the event and the condition, with the reason."""
    pod = _pod(annotations={keys.JOB_ID: "7", keys.OWNER: "uid-1"})
    notifier, kube, _ = _notifier(pod)
    await notifier.job_known(view_of(pod), ESTIMATED)
    await _settle(notifier)
    said = _messages(kube)
    assert [reason for reason, _ in said] == ["SlurmPending", "condition"]
    expected = (f"; expected to start at {clock(SOON, datetime.now(UTC))}, in about 5 hours, "
                f"by Slurm's backfill at {ESTIMATED.backfill_at:%H:%M}")
    assert all(message.startswith("waiting for Slurm job 7 (PENDING, reason Resources): ")
               and message.endswith(expected) for _, message in said), said


async def test_an_estimate_is_shown_again_only_when_it_moves_by_more_than_the_setting() -> None:
    notifier, kube, registry = _notifier()  # estimate_moves_seconds: 120
    pod = _pod(gated=True)  # gated: the event alone says it
    registry.remember(view_of(pod))
    await notifier.job_known(view_of(pod), ESTIMATED)
    await _settle(notifier)
    for moved in (timedelta(seconds=90), timedelta(seconds=-100)):  # jitter: nothing written
        jittered = dataclasses.replace(ESTIMATED, expected_start=SOON + moved)
        await notifier.job_changed(ESTIMATED, jittered)
    await notifier.drain()
    assert writes(kube) == [("event", "SlurmPending")]
    later = SOON + timedelta(minutes=30)
    moved_later = dataclasses.replace(ESTIMATED, expected_start=later)
    await notifier.job_changed(ESTIMATED, moved_later)
    await notifier.job_changed(moved_later, dataclasses.replace(ESTIMATED, expected_start=None))
    await notifier.drain()
    said = _messages(kube)
    assert [reason for reason, _ in said] == ["SlurmPending"] * 3
    assert f"expected to start at {clock(later, datetime.now(UTC))}" in said[1][1]
    assert "expected" not in said[2][1]  # Slurm no longer estimates it: the words say so


async def test_every_member_of_a_group_is_told_its_groups_expected_start() -> None:
    notifier, kube, registry = _notifier()
    group = GroupOwner("ns", "allreduce")
    job = dataclasses.replace(ESTIMATED, owner=group)
    for i in range(2):
        pod = _pod(f"uid-w{i}", gated=True)
        assert pod.metadata is not None
        pod.metadata.name, pod.metadata.labels = f"w{i}", {keys.GROUP: "allreduce"}
        registry.remember(view_of(pod))
        await notifier.job_known(view_of(pod), dataclasses.replace(job, reason="None"))
    await _settle(notifier)
    await notifier.job_changed(dataclasses.replace(job, reason="None"), job)
    await notifier.drain()
    events = [(body["involvedObject"]["name"], body["message"])
              for verb, kind, body in kube.written if kind == "Event"]
    assert sorted(name for name, _ in events) == ["w0", "w1"]
    started = f"expected to start at {clock(SOON, datetime.now(UTC))}"
    assert all(started in message for _, message in events)


async def test_a_burst_of_pending_pods_keeps_the_notifiers_writes_in_flight_bounded() -> None:
    """500 pods whose jobs pend (B1-full) are all told at the end of one quiet period: their
    events wait their turn in the bridge, not for the apiserver client's connections, which
    kube-scheduler's bind calls also need (releases are bounded the same way)."""
    notifier, kube, registry = _notifier()
    creates = InFlight(kube.create)
    kube.create = creates  # type: ignore[method-assign]
    pods = 3 * NOTIFICATIONS_IN_FLIGHT
    for i in range(pods):
        pod = _pod(f"uid-{i}", gated=True)
        registry.remember(view_of(pod))
        await notifier.job_known(view_of(pod), dataclasses.replace(PENDING, job_id=100 + i,
                                                          owner=PodOwner(f"uid-{i}")))
    await _settle(notifier)
    assert 0 < creates.most <= NOTIFICATIONS_IN_FLIGHT
    assert writes(kube) == [("event", "SlurmPending")] * pods


async def test_pods_in_their_quiet_period_hold_no_write_slot() -> None:
    """The quiet period is a wait, not a write: 48 pending pods are all told one quiet
    period after they appeared, not 16 quiet periods at a time."""
    kube, registry = FakeKube(), SeenPods()
    quiet = 0.3
    notifier = PodNotifier(kube, registry, quiet_seconds=quiet)
    pods = 3 * NOTIFICATIONS_IN_FLIGHT
    started = asyncio.get_running_loop().time()
    for i in range(pods):
        pod = _pod(f"uid-{i}", gated=True)
        registry.remember(view_of(pod))
        await notifier.job_known(view_of(pod), dataclasses.replace(PENDING, job_id=100 + i,
                                                          owner=PodOwner(f"uid-{i}")))
    await asyncio.sleep(quiet)
    await notifier.drain()
    assert writes(kube) == [("event", "SlurmPending")] * pods
    assert asyncio.get_running_loop().time() - started < 2 * quiet
