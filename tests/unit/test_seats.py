"""A group's seats (bridge/placement/seats.py): rank → Slurm's node and its GPUs, one live
member per seat (issue 41, case 1)."""

import pytest

from bridge import keys
from bridge.jobs.owner import GroupOwner
from bridge.placement.seats import Member, SeatRefused, Seats, SeatTable, member_of
from slurmbridge_devkit.builders import JobBuilder, PodBuilder

NODES = ("node2", "node3", "node4")


def _seats(*members: Member) -> Seats:
    return Seats("g", 7, NODES, members)


def test_rank_zero_gets_slurms_first_node_and_no_rank_the_first_free_one() -> None:
    seats = _seats()
    assert seats.take(Member("w2", "uid-w2", 2, None, True)) == "node4"
    assert seats.take(Member("w0", "uid-w0", 0, None, True)) == "node2"
    assert seats.take(Member("any", "uid-any", None, None, True)) == "node3"


def test_a_seat_a_live_member_holds_is_never_given_twice() -> None:
    seats = _seats(Member("w0", "uid-w0", 0, "node2", True))
    with pytest.raises(SeatRefused, match=r"w0 holds") as refused:
        seats.take(Member("intruder", "uid-intruder", 0, None, True))
    assert keys.GROUP_RANK in str(refused.value) and "node2" in str(refused.value)
    assert seats.take(Member("w0", "uid-w0", 0, None, True)) == "node2"  # its own seat, read again


def test_two_waiting_pods_of_one_rank_get_one_seat() -> None:
    seats = _seats()
    assert seats.take(Member("a", "uid-a", 1, None, True)) == "node3"
    with pytest.raises(SeatRefused, match="pod a holds"):
        seats.take(Member("b", "uid-b", 1, None, True))


def test_a_rank_beyond_the_jobs_nodes_is_refused() -> None:
    with pytest.raises(SeatRefused, match=r"group-rank 3, beyond the 3 node\(s\)"):
        _seats().take(Member("w3", "uid-w3", 3, None, True))


def test_no_rank_never_takes_a_seat_ranked_for_a_live_member() -> None:
    seats = _seats(Member("w0", "uid-w0", 0, None, True), Member("w1", "uid-w1", 1, "node3", True))
    assert seats.take(Member("any", "uid-any", None, None, True)) == "node4"
    with pytest.raises(SeatRefused, match="group-size too small"):
        seats.take(Member("more", "uid-more", None, None, True))


def test_a_finished_member_holds_no_seat() -> None:
    seats = _seats(Member("w0", "uid-w0", 0, None, False))  # finished: member_of records no seat
    assert seats.take(Member("w0-again", "uid-w0-again", 0, None, True)) == "node2"


def test_a_member_whose_group_labels_cannot_be_read_gets_no_seat() -> None:
    pod = PodBuilder("odd", "ns").uid("uid-odd").group("g", 2).label(keys.GROUP_RANK, "5")
    member = member_of(pod.gated().build(), 7)
    with pytest.raises(SeatRefused, match=f"pod odd: .*{keys.GROUP_RANK}"):
        _seats().take(member)


# The one store of every group's seats (SeatTable): the release gives them, filter and bind
# read them (issue 42, item 2).

OWNER = GroupOwner("ns", "g")
JOB = JobBuilder(7, "k8s:ns/g").owner(OWNER).running(*NODES).build()


def _member(name: str, rank: int | None, *, uid: str | None = None) -> PodBuilder:
    pod = PodBuilder(name, "ns").uid(uid or f"uid-{name}").group("g", len(NODES))
    return pod if rank is None else pod.label(keys.GROUP_RANK, str(rank))


def _seated_at(pod: PodBuilder, node: str) -> PodBuilder:
    """A member the release recorded at ``node`` for job 7, running there."""
    return pod.annotate(keys.JOB_ID, "7").annotate(keys.SLURM_NODE, node).node(node).running()


def test_a_replaced_member_keeps_its_predecessors_seat() -> None:
    table = SeatTable()
    ranked = _seated_at(_member("w1", 1), "node3").build()
    unranked = _seated_at(_member("a", None), "node2").build()
    table.seated(OWNER, JOB, [ranked, unranked])
    assert table.seat_of(OWNER, 7, "uid-w1") == "node3"
    # w1 deleted and made again under its name and rank (a StatefulSet), a finished by its Job
    again = _member("w1", 1, uid="uid-w1-again").gated().build()
    successor = _member("b", None).gated().build()
    finished = _seated_at(_member("a", None), "node2").phase("Failed").build()
    seating = table.seated(OWNER, JOB, [again, finished, successor])
    assert seating.take(again) == "node3"
    assert seating.take(successor) == "node2"
    assert table.seat_of(OWNER, 7, "uid-w1-again") == "node3"
    assert table.seat_of(OWNER, 7, "uid-b") == "node2"
    assert table.seat_of(OWNER, 7, "uid-w1") is None


def test_two_members_never_share_a_seat() -> None:
    table = SeatTable()
    twins = [_seated_at(_member(n, None), "node2").build() for n in ("a", "b")]
    seating = table.seated(OWNER, JOB, twins)  # two records of one seat: one holder
    assert [table.seat_of(OWNER, 7, u) for u in ("uid-a", "uid-b")].count("node2") == 1
    with pytest.raises(SeatRefused, match=r"pod [ab] holds"):
        seating.take(_member("c", 0).gated().build())
    table.hold(OWNER, JOB, "uid-c", "node3")  # filter read c's record
    table.hold(OWNER, JOB, "uid-d", "node3")  # then d's, for the same seat: the later record
    assert table.seat_of(OWNER, 7, "uid-c") is None
    assert table.seat_of(OWNER, 7, "uid-d") == "node3"
    table.hold(OWNER, JOB, "uid-d", "node4")  # and one pod holds one seat
    assert table.seat_of(OWNER, 7, "uid-d") == "node4"
    assert table.seated(OWNER, JOB, []).take(_member("e", None).gated().build()) == "node2"


def test_a_seat_is_freed_when_its_pod_is_gone() -> None:
    table = SeatTable()
    holder = _seated_at(_member("w0", 0), "node2").build()
    seating = table.seated(OWNER, JOB, [holder])
    newcomer = _member("w0-new", 0, uid="uid-new").gated().build()
    with pytest.raises(SeatRefused, match="pod w0 holds"):
        seating.take(newcomer)
    seating.vacate("uid-w0")  # its release was not recorded after all
    assert table.seat_of(OWNER, 7, "uid-w0") is None
    assert table.seated(OWNER, JOB, [newcomer]).take(newcomer) == "node2"  # w0 no longer listed
    deleted = _seated_at(_member("w1", 1), "node3").deleting().phase("Succeeded").build()
    assert table.seated(OWNER, JOB, [deleted]).seat_of("uid-w1") is None
    table.prune(lambda job_id: False)  # its job left the index
    assert table.seat_of(OWNER, 7, "uid-new") is None


def test_a_seat_read_for_an_earlier_job_of_the_group_is_not_its_seat_now() -> None:
    table = SeatTable()
    table.hold(OWNER, JOB, "uid-w0", "node2")
    assert table.seat_of(OWNER, 8, "uid-w0") is None
    later = JobBuilder(8, "k8s:ns/g").owner(OWNER).running("node5").build()
    table.hold(OWNER, later, "uid-w1", "node5")
    assert table.seat_of(OWNER, 7, "uid-w0") is None
    assert table.seat_of(OWNER, 8, "uid-w1") == "node5"


def test_a_seat_taken_and_then_read_back_keeps_its_holders_name() -> None:
    """The release takes a seat, then resolves the member's placement, which holds the same
    seat again: a second member of that rank is still told whose seat it is, by name."""
    table = SeatTable()
    seating = table.seated(OWNER, JOB, [])
    assert seating.take(_member("a", 1).gated().build()) == "node3"
    table.hold(OWNER, JOB, "uid-a", "node3")
    with pytest.raises(SeatRefused, match="pod a holds"):
        seating.take(_member("b", 1).gated().build())
