"""A group's seats (bridge/placement/seats.py): rank → Slurm's node and its GPUs, one live
member per seat (issue 41, case 1)."""

import pytest

from bridge import keys
from bridge.placement.seats import Member, SeatRefused, Seats, member_of
from slurmbridge_devkit.builders import PodBuilder

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
