"""B6's failover figures (issue 42): what counts as the new leader's first release, which pods
were waiting at the kill, and what the new leader's log says it did in between."""

import json
from datetime import UTC, datetime

from benchmarks.b6_failover import Timeline, figures, leader_steps, note

KILL = 1_000.0


def timeline() -> Timeline:
    """Pods a..e: a released before the kill, b and c waiting at it, d created while nobody
    led, e after the takeover at +12 s; an in-flight write of the old leader lands at +0.01 s."""
    return Timeline(
        killed=KILL, expired=KILL + 11.9, acquired=KILL + 12,
        created={"a": KILL - 5, "b": KILL - 1, "c": KILL - 0.5, "d": KILL + 4, "e": KILL + 13},
        released={"a": KILL - 4, "z": KILL + 0.01, "c": KILL + 13.5, "b": KILL + 14,
                  "d": KILL + 15, "e": KILL + 14.5},
    )


def by_name(tl: Timeline) -> dict[str, list[float]]:
    return by_name_of([tl])


def test_the_first_release_is_the_first_after_the_takeover_not_an_old_write_landing_late() -> None:
    tl = timeline()
    assert tl.first_release() == KILL + 13.5
    got = by_name(tl)
    assert got["SIGKILL -> the Lease names the new replica"] == [12]
    assert got["SIGKILL -> the dead leader's Lease expired"] == [KILL + 11.9 - KILL]
    assert got["SIGKILL -> first pod released by the new leader"] == [13.5]


def test_the_pods_waiting_at_the_kill_and_when_the_last_of_them_was_released() -> None:
    tl = timeline()
    assert sorted(tl.waiting_at_kill()) == ["b", "c"]
    assert tl.created_leaderless() == ["d"]
    assert by_name(tl)["SIGKILL -> every pod waiting at the kill released"] == [14]
    assert tl.steady_latency() == 1


def test_the_target_is_15_s_and_no_takeover_misses_it_with_no_sample() -> None:
    first = {f.name: f for f in figures([timeline()])}[
        "failover: SIGKILL -> first pod released by the new leader"]
    assert first.target == "<= 15 s" and first.met
    late = timeline()
    late.released = {**late.released, "c": KILL + 16, "b": KILL + 17, "e": KILL + 18,
                     "d": KILL + 19}
    assert not {f.name: f for f in figures([late])}[first.name].met
    none = Timeline(killed=KILL, created={"b": KILL - 1})
    missed = {f.name: f for f in figures([none])}[first.name]
    assert missed.samples == [] and missed.met is False
    assert "no pod released by a new leader in 1 failover(s)" in missed.verdict


def log_line(event: str, at: float, **fields: object) -> str:
    stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"event": event, "timestamp": stamp, **fields})


def test_the_new_leaders_steps_are_read_after_its_holder_went_quiet_only() -> None:
    lines = [
        log_line("poller.resynced", KILL - 30, jobs=9),  # its start-up, before the kill
        log_line("release.done", KILL - 20),  # an earlier term's
        "not json",
        log_line("poller.resynced", KILL + 3, jobs=10),  # a periodic one, before it leads
        log_line("leader.holder_quiet", KILL + 9),
        log_line("poller.resynced", KILL + 11, jobs=11),  # asked for then: done before
        log_line("leader.acquired", KILL + 12),
        log_line("release.done", KILL + 13.5),
        log_line("release.done", KILL + 14),
    ]
    steps = leader_steps(lines, KILL)
    assert {e: round(t - KILL, 3) for e, (t, _) in steps.items()} == {
        "leader.holder_quiet": 9, "poller.resynced": 11, "leader.acquired": 12,
        "release.done": 13.5}
    text = note(timeline(), steps, 15)
    assert "2 waiting at the SIGKILL, all released +14.0 s" in text
    assert "the Lease expired +11.9 s; 1 more created before the takeover (+12.0 s)" in text
    assert text.split("log: ")[1] == (
        "leader.holder_quiet +9.0 s, poller.resynced +11.0 s (11 jobs indexed), "
        "leader.acquired +12.0 s, release.done +13.5 s")


def test_a_takeover_without_the_holder_going_quiet_says_so_and_keeps_the_rest() -> None:
    lines = [log_line("leader.acquired", KILL + 12), log_line("poller.resynced", KILL + 13)]
    text = note(timeline(), leader_steps(lines, KILL), 15)
    assert text.split("log: ")[1] == (
        "no leader.holder_quiet, no release.done, leader.acquired +12.0 s, "
        "poller.resynced +13.0 s")


def test_each_failover_is_one_sample_and_one_that_never_released_misses_the_target() -> None:
    quick, slow = timeline(), timeline()
    slow.acquired = KILL + 14
    got = by_name_of([quick, slow])
    assert got["SIGKILL -> the Lease names the new replica"] == [12, 14]
    assert got["SIGKILL -> first pod released by the new leader"] == [13.5, 14]
    never = Timeline(killed=KILL, acquired=KILL + 12, created={"b": KILL - 1})
    first = figures([quick, never])[2]
    assert first.samples == [13.5] and first.met is False


def by_name_of(timelines: list[Timeline]) -> dict[str, list[float]]:
    return {f.name.split(": ", 1)[1]: f.samples for f in figures(timelines)}


def test_with_no_pod_waiting_at_the_kill_there_is_no_all_released_sample() -> None:
    tl = timeline()
    tl.released["b"] = tl.released["c"] = KILL - 0.2  # released just before the kill
    assert tl.waiting_at_kill() == []
    assert by_name(tl)["SIGKILL -> every pod waiting at the kill released"] == []
    assert "none waiting at the SIGKILL; the Lease expired +11.9 s; 1 more" in note(tl, {}, 15)
