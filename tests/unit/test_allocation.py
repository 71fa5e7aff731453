"""Slurm allocation strings → nodes and GPU indices the pod is bound to."""

import hostlist
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.slurm.allocation import allocation_from, expand_nodes, format_gpu_ids, gpu_indices
from bridge.slurm.types import Allocation


@pytest.mark.parametrize(
    ("expr", "nodes"),
    [
        ("node[1-4]", ("node1", "node2", "node3", "node4")),
        ("gpu[01-04,07]", ("gpu01", "gpu02", "gpu03", "gpu04", "gpu07")),
        ("a1,b[2-3]", ("a1", "b2", "b3")),
        ("n[9-11]", ("n9", "n10", "n11")),
        ("rack1-n[001-002]", ("rack1-n001", "rack1-n002")),
        ("node3", ("node3",)),
        (" node3\n", ("node3",)),
        ("", ()),
    ],
)
def test_hostlists_expand_in_slurm_order_keeping_zero_padding(
    expr: str, nodes: tuple[str, ...]
) -> None:
    assert expand_nodes(expr) == nodes


@pytest.mark.parametrize(
    "bad", ["n[3-1]", "n[1-", "x[]", "(null)", "None assigned", "n[1-9999999]"]
)
def test_bad_hostlists_are_errors_quoting_the_text(bad: str) -> None:
    with pytest.raises(ValueError, match="bad Slurm node list") as raised:
        expand_nodes(bad)
    assert repr(bad) in str(raised.value)


@given(st.sets(st.integers(0, 999), min_size=1, max_size=40), st.sampled_from(["n", "gpu-"]))
def test_collected_hostlists_expand_back_to_the_same_nodes(numbers: set[int], prefix: str) -> None:
    names = [f"{prefix}{n:03}" for n in sorted(numbers)]
    assert expand_nodes(hostlist.collect_hostlist(names)) == tuple(names)


@pytest.mark.parametrize(
    ("entry", "indices"),
    [
        ("gpu:2(IDX:0-1)", (0, 1)),
        ("gpu:a100:2(IDX:0,3)", (0, 3)),
        ("gpu:a100:4(IDX:0-1,4-5)", (0, 1, 4, 5)),
        ("gpu:1(IDX:7)", (7,)),
        ("gpu(IDX:N/A)", ()),
        ("gpu:0", ()),
        ("gpu:a100:0", ()),
        ("gpu:2(IDX:0-1),shard:0", (0, 1)),
        ("shard:0,gpu:1(IDX:3)", (3,)),
        ("gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)", (0, 2)),
        ("gpu:2(IDX:2-3), mps:100(IDX:0)", (2, 3)),
        ("tmpfs:10", ()),
        ("", ()),
    ],
)
def test_gpu_indices_come_from_the_gpu_idx_list_only(entry: str, indices: tuple[int, ...]) -> None:
    assert gpu_indices(entry) == indices


@pytest.mark.parametrize(
    "bad",
    ["gpu:2", "gpu", "gpu:2(IDX:1-0)", "gpu:2(IDX:a)", "gpu:2(IDX:0-1", "gpu:2(IDX:0-1))",
     "gpu:1(0)", "gpu:2(IDX:0,,1)", "gpu:2(IDX:)", "gpu:2(IDX:0-1)x"],
)
def test_unreadable_gpu_detail_is_an_error_never_a_guess(bad: str) -> None:
    with pytest.raises(ValueError, match="gres") as raised:
        gpu_indices(bad)
    assert repr(bad) in str(raised.value)


@given(st.sets(st.integers(0, 63), max_size=16))
def test_idx_ranges_read_back_as_the_indices_and_format_for_the_pod(ids: set[int]) -> None:
    ranges = hostlist.collect_hostlist([str(i) for i in ids]).strip("[]")
    entry = f"gpu:{len(ids)}(IDX:{ranges or 'N/A'})"
    assert gpu_indices(entry) == tuple(sorted(ids))
    assert format_gpu_ids(gpu_indices(entry)) == ",".join(map(str, sorted(ids)))


def test_allocation_maps_each_node_to_its_gpus_in_node_order() -> None:
    allocation = allocation_from("gpu[01-02]", ["gpu:2(IDX:0-1)", "gpu:1(IDX:3)"])
    assert allocation == Allocation(
        nodes=("gpu01", "gpu02"), gpu_ids={"gpu01": (0, 1), "gpu02": (3,)}
    )


def test_job_without_gres_has_nodes_without_gpus() -> None:
    assert allocation_from("cpu[1-2]", []) == Allocation(
        nodes=("cpu1", "cpu2"), gpu_ids={"cpu1": (), "cpu2": ()}
    )


def test_pending_job_has_no_allocation() -> None:
    assert allocation_from("", []) is None


def test_gres_detail_must_have_one_entry_per_node() -> None:
    with pytest.raises(ValueError, match="one entry per node"):
        allocation_from("n[1-2]", ["gpu:1(IDX:0)"])


@pytest.mark.parametrize(("ids", "text"), [((0, 1), "0,1"), ((3,), "3"), ((), "")])
def test_gpu_ids_annotation_is_comma_separated(ids: tuple[int, ...], text: str) -> None:
    assert format_gpu_ids(ids) == text
