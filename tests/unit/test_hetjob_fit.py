"""A heterogeneous job that can never start is not submitted (issue 43): Slurm puts no two
components of one heterogeneous job on one node (24.11 and 26.05: ``sbatch -N1 : -N2`` on two
idle nodes pends for ever, reason Resources), so a mixed group whose components need more
nodes together than their partitions hold is refused, each member told why and what to do."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge import keys
from bridge.jobs.owner import GroupOwner
from bridge.jobs.request import JobRequest, SlurmPlacement
from bridge.placement.hetfit import never_fits
from bridge.slurm.convert import slurm_node
from bridge.slurm.types import SlurmNode
from bridge.slurm.wire.base import NodeInfo
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fakes import intake_running
from tests.unit.test_release import World, until

OWNER = GroupOwner("ns", "g")


def _node(name: str, *partitions: str, states: tuple[str, ...] = ("IDLE",)) -> SlurmNode:
    return SlurmNode(name, frozenset(states), "", cpus=8, memory_mb=16000, gres="gpu:4",
                     partitions=frozenset(partitions))


def _job(*parts: tuple[int, str | None]) -> JobRequest:
    """A heterogeneous job whose components ask these (nodes, partition)."""
    components = tuple(JobRequest("k8s:ns/g", OWNER, nodes=n,
                                  placement=SlurmPlacement(partition=p)) for n, p in parts)
    return JobRequest("k8s:ns/g", OWNER, nodes=sum(n for n, _ in parts),
                      components=components)


NAMES = ("launcher", "workers")
FOUR = [_node(f"node{i}", "main", "debug") for i in range(1, 5)]


def test_components_that_fit_side_by_side_are_submitted() -> None:
    assert never_fits(OWNER, NAMES, _job((1, "main"), (3, "main")), FOUR) is None


def test_components_needing_more_nodes_than_their_partition_holds_are_refused() -> None:
    message = never_fits(OWNER, NAMES, _job((1, "main"), (4, "main")), FOUR)
    assert message is not None
    for said in ("group ns/g", "5 nodes", "launcher 1", "workers 4", "partition main has 4",
                 "no two components of one heterogeneous job on one node",
                 "fewer members", "partitions with more nodes"):
        assert said in message, (said, message)


def test_drained_and_down_nodes_count_they_may_come_back() -> None:
    nodes = [*FOUR[:2], _node("node3", "main", states=("IDLE", "DRAIN")),
             _node("node4", "main", states=("DOWN",))]
    assert never_fits(OWNER, NAMES, _job((1, "main"), (3, "main")), nodes) is None


def test_the_nodes_of_every_partition_asked_count_once() -> None:
    """The launcher in ``cpu`` (node1-2), the workers in ``gpu`` (node2-4): 4 nodes."""
    nodes = [_node("node1", "cpu"), _node("node2", "cpu", "gpu"), _node("node3", "gpu"),
             _node("node4", "gpu"), _node("node5", "other")]
    assert never_fits(OWNER, NAMES, _job((1, "cpu"), (3, "gpu")), nodes) is None
    message = never_fits(OWNER, NAMES, _job((2, "cpu"), (3, "gpu")), nodes)
    assert message is not None and "partitions cpu, gpu have 4" in message, message


def test_a_comma_separated_partition_list_counts_every_partition_named() -> None:
    nodes = [_node("node1", "a"), _node("node2", "b"), _node("node3", "c")]
    assert never_fits(OWNER, NAMES, _job((1, "a,b"), (1, "b")), nodes) is None
    assert never_fits(OWNER, NAMES, _job((1, "a,b"), (2, "b")), nodes) is not None


def test_a_component_in_the_default_partition_counts_every_node() -> None:
    """Which partition is Slurm's default the node listing does not say: every node counts,
    so a refusal is never wrong."""
    nodes = [_node("node1", "a"), _node("node2", "b"), _node("node3", "c")]
    assert never_fits(OWNER, NAMES, _job((1, None), (2, "a")), nodes) is None
    message = never_fits(OWNER, NAMES, _job((1, None), (3, "a")), nodes)
    assert message is not None and "Slurm has 3 nodes" in message, message


def test_a_partition_no_node_lists_is_left_to_slurm() -> None:
    """Slurm refuses an unknown partition itself, naming it: the bridge says nothing else."""
    assert never_fits(OWNER, NAMES, _job((1, "main"), (9, "nosuch")), FOUR) is None
    assert never_fits(OWNER, NAMES, _job((1, "main"), (9, "main")), []) is None


def test_an_ordinary_job_is_not_checked() -> None:
    assert never_fits(OWNER, (), JobRequest("k8s:ns/g", OWNER, nodes=9), FOUR) is None


def test_slurmrestd_lists_each_nodes_partitions() -> None:
    """The node listing's ``partitions``: a list (v0.0.41+), or CSV in some parsers."""
    listed = slurm_node(NodeInfo.model_validate({"name": "n1", "partitions": ["main", "debug"]}))
    assert listed.partitions == {"main", "debug"}
    csv = slurm_node(NodeInfo.model_validate({"name": "n1", "partitions": "main,debug"}))
    assert csv.partitions == {"main", "debug"}


# --- through the bridge: the fakes' Slurm has 3 nodes (node1-3) ------------------------------

@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    world = World(tmp_path)
    async with intake_running(world.bridge):
        yield world


def _member(name: str, rank: int, component: str, parts: str, *, gpus: int) -> Any:
    size = 1 + int(parts.rsplit("=", 1)[1])  # launcher=1,workers=N
    return (PodBuilder(name, "ns").group("g", size).label(keys.GROUP_RANK, str(rank))
            .label(keys.GROUP_COMPONENT, component).annotate(keys.GROUP_COMPONENTS, parts)
            .gpus(gpus).gated().build())


def _add(world: World, workers: int) -> list[str]:
    parts = f"launcher=1,workers={workers}"
    world.kube.add(_member("launcher", 0, "launcher", parts, gpus=0))
    names = ["launcher"]
    for i in range(workers):
        world.kube.add(_member(f"worker-{i}", 1 + i, "workers", parts, gpus=2))
        names.append(f"worker-{i}")
    return names


async def test_every_member_of_a_group_that_can_never_start_is_told_and_nothing_submitted(
    world: World,
) -> None:
    names = _add(world, 3)  # 1 + 3 nodes on Slurm's 3

    def told() -> dict[str, str]:
        return {e["involvedObject"]["name"]: e["message"]
                for e in world.kube.events(keys.EventReason.SUBMIT_REFUSED.value)}

    await until(lambda: set(told()) == set(names))
    assert world.slurm.submitted == []
    message = told()["launcher"]
    assert "launcher 1, workers 3" in message and "Slurm has 3 nodes" in message, message


async def test_a_fresh_node_listing_is_read_without_a_call_of_its_own(world: World) -> None:
    """The node sync lists Slurm's nodes every round: the submit check reads that listing."""
    await world.bridge.nodesync.reconcile_once()
    listed = world.slurm.requests["list_nodes"]
    _add(world, 2)
    await until(lambda: len(world.slurm.submitted) == 1)
    assert world.slurm.requests["list_nodes"] == listed
