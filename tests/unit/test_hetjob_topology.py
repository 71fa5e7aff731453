"""A mixed group's topology ask (issue 43, item 5) as Slurm applies it to a heterogeneous job:
``--switches`` and ``--segment`` belong to each component (Slurm 24.11 and 26.05 show them on
the component whose description carries them, and 26.05's tree and block partitions kept each
component within its own leaf switch or block), so each component's members' ask goes to
that component, and a segment must divide that component's node count, not the group's."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge import keys
from bridge.jobs.request import TopologyAsk
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fakes import bridge_over_fakes, intake_running
from tests.unit.test_hetjob import PARTS
from tests.unit.test_release import World, until


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """The namespace's policy allows topology asks (``allow_topology``)."""
    world = World(tmp_path)
    world.bridge = bridge_over_fakes(tmp_path, world.slurm, world.kube, admission={
        "default_policy": {"allow_topology": True}})
    async with intake_running(world.bridge):
        yield world


def _part(name: str, rank: int, component: str, gpus: int, **asks: str) -> Any:
    return (PodBuilder(name, "ns").group("g", 3).label(keys.GROUP_RANK, str(rank))
            .label(keys.GROUP_COMPONENT, component).annotate(keys.GROUP_COMPONENTS, PARTS)
            .annotations(asks).gpus(gpus).gated().build())


def _add_group(world: World, launcher: dict[str, str], workers: dict[str, str]) -> None:
    world.kube.add(_part("launcher", 0, "launcher", 0, **launcher))
    for i in range(2):
        world.kube.add(_part(f"worker-{i}", 1 + i, "workers", 2, **workers))


async def test_the_workers_segment_applies_to_their_component(world: World) -> None:
    """``segment: 2`` on the two workers (not on the launcher): the workers' component asks
    Slurm for one segment of 2 nodes within a block; the group's 3 nodes are no matter."""
    _add_group(world, {}, {keys.SEGMENT: "2"})
    await until(lambda: len(world.slurm.submitted) == 1)
    [request] = world.slurm.submitted
    assert [c.placement.topology for c in request.components] == [
        None, TopologyAsk(segment=2)]


async def test_every_component_keeps_its_own_switches(world: World) -> None:
    ask = {keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "5:00"}
    _add_group(world, ask, ask)
    await until(lambda: len(world.slurm.submitted) == 1)
    [request] = world.slurm.submitted
    assert [c.placement.topology for c in request.components] == [
        TopologyAsk(switches=1, wait_seconds=300)] * 2


async def test_a_segment_that_does_not_divide_a_components_nodes_is_refused(
    world: World,
) -> None:
    """``segment: 2`` on every member: the launcher's component has 1 node, which Slurm cannot
    split in segments of 2.  Nothing is submitted; each member is told, naming the key and
    the component."""
    _add_group(world, {keys.SEGMENT: "2"}, {keys.SEGMENT: "2"})

    def told() -> list[str]:
        return [e["message"] for e in world.kube.events(keys.EventReason.SUBMIT_REFUSED.value)]

    await until(lambda: bool(told()))
    assert world.slurm.submitted == []
    message = told()[0]
    assert f'annotation {keys.SEGMENT}="2"' in message, message
    assert "component launcher" in message and "1 node" in message, message
