"""One answer to "where does this pod go" (Placer.resolve): filter from the pod cache, filter
after a read, prioritize, bind and the release agree, over the in-memory fakes (issue 42,
item 2)."""

import asyncio
from pathlib import Path
from typing import Any, cast

from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import GroupOwner, PodOwner
from slurmbridge_cli.compose import build_bridge
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes, fake_settings, intake_running
from slurmbridge_devkit.waiting import wait_for

UID = "uid-p"
NODES = ["node1", "node2", "node3"]


async def test_a_lone_pod_goes_to_its_jobs_one_node_in_filter_as_in_bind() -> None:
    """Slurm requeued the pod's job 7 after its node was recorded on the pod, and runs it again
    on node2.  filter waited ("the bridge records which of its nodes is this pod's", which no
    one ever would) while prioritize and bind answered node2: a lone pod's node is its job's
    one node, for every path alike, with that node's GPUs."""
    kube, slurm = FakeKube(), FakeSlurm()
    job = JobBuilder(7).owner(PodOwner(UID)).running("node2", gpus=(1,)).build()
    slurm.put(job)
    kube.add(PodBuilder("p", "ns").uid(UID).annotate(keys.JOB_ID, "7")
             .annotate(keys.OWNER, UID).annotate(keys.SLURM_NODE, "node1")
             .annotate(keys.GPU_IDS, "0").build())
    bridge = build_bridge(fake_settings(), slurm=slurm, kube=kube)
    bridge.index.record(job)
    pod = cast(Pod, Pod.from_dict(cast(dict[str, Any], kube.obj(Pod, "p", "ns"))))
    bridge.pod_cache.apply("ADDED", pod)
    view = bridge.pod_cache.get(UID)
    assert view is not None
    read = await bridge.placer.filter(pod, NODES)
    assert read.keep == ["node2"], read.message
    known = bridge.placer.filter_known(view, NODES)
    assert known is not None and known.keep == ["node2"], known
    placement = bridge.placer.known_placement(UID)
    assert placement is not None and placement.kube_node == "node2"
    await bridge.binder.bind("ns", "p", UID, "node2")
    bound = kube.obj(Pod, "p", "ns")
    assert bound is not None and bound["spec"]["nodeName"] == "node2"
    assert bound["metadata"]["annotations"][keys.SLURM_NODE] == "node2"
    assert bound["metadata"]["annotations"][keys.GPU_IDS] == "1"


async def test_a_member_is_bound_from_the_seat_its_release_holds_without_a_read(
    tmp_path: Path,
) -> None:
    """The release seats each member in the group's one table; filter (from the pod cache)
    and bind read the member's node from it, and cost the apiserver no GET."""
    kube, slurm = FakeKube(), FakeSlurm(tuple(NODES))
    bridge = bridge_over_fakes(tmp_path, slurm, kube)
    async with intake_running(bridge):
        for rank in reversed(range(3)):
            kube.add(PodBuilder(f"w{rank}", "ns").group("g", 3)
                     .label(keys.GROUP_RANK, str(rank)).gated().build())
        await wait_for(lambda: len(slurm.submitted) == 1, 2, interval=0.01)
        [job_id] = slurm.jobs
        owner = slurm.jobs[job_id].owner
        assert isinstance(owner, GroupOwner)
        await wait_for(lambda: len(bridge.seen.pods_of(owner)) == 3, 2, interval=0.01)
        slurm.start(job_id, "node3", "node1", "node2")
        await bridge.poller.poll_once()
        await asyncio.wait_for(bridge.releaser.drain(), 5)
    members: dict[str, str] = {}
    for rank, node in enumerate(("node3", "node1", "node2")):
        found = kube.obj(Pod, f"w{rank}", "ns")
        assert found is not None
        assert found["metadata"]["annotations"][keys.SLURM_NODE] == node
        members[found["metadata"]["uid"]] = node
        assert bridge.placer.seats.seat_of(owner, job_id, found["metadata"]["uid"]) == node
        bridge.pod_cache.apply("MODIFIED", Pod.from_dict(found))
    reads: list[str] = []
    real_get = kube.get

    async def counting_get(res: Any, name: str, **kw: Any) -> Any:
        reads.append(name)
        return await real_get(res, name, **kw)

    kube.get = counting_get  # type: ignore[method-assign]
    for uid, node in members.items():
        view = bridge.pod_cache.get(uid)
        assert view is not None
        verdict = bridge.placer.filter_known(view, NODES)
        assert verdict is not None and verdict.keep == [node], verdict
        await bridge.binder.bind("ns", view.name, uid, node)
    assert reads == []
    assert {kube.obj(Pod, f"w{r}", "ns")["spec"]["nodeName"]  # type: ignore[index]
            for r in range(3)} == set(NODES)


async def test_bind_on_a_replica_that_saw_the_pod_waiting_binds_the_job_recorded_on_it() -> None:
    """This replica's filter saw the pod before the leader recorded its job (waiting), so its
    memory never read the record; another replica's filter passed it, and the bind comes
    here.  The owner has two live jobs: 11, a deposed leader's late duplicate this replica
    met first, and 10, the one recorded on the pod.  bind took the owner's job, 11, and wrote
    it in the Binding with its GPU (the next resync cancels 11: the pod loses its job)."""
    kube, slurm = FakeKube(), FakeSlurm()
    owner = PodOwner(UID)
    recorded = JobBuilder(10).owner(owner).running("node1", gpus=(0,)).build()
    duplicate = JobBuilder(11).owner(owner).running("node1", gpus=(1,)).build()
    for job in (recorded, duplicate):
        slurm.put(job)
    kube.add(PodBuilder("p", "ns").uid(UID).build())
    bridge = build_bridge(fake_settings(), slurm=slurm, kube=kube)
    for job in (duplicate, recorded):
        bridge.index.record(job)
    before = cast(Pod, Pod.from_dict(cast(dict[str, Any], kube.obj(Pod, "p", "ns"))))
    bridge.pod_cache.apply("ADDED", before)
    waiting = await bridge.placer.filter(before, NODES)
    assert waiting.keep == [], waiting
    stored = kube.obj(Pod, "p", "ns")
    assert stored is not None
    stored["metadata"]["annotations"] = {keys.JOB_ID: "10", keys.OWNER: UID,
                                         keys.SLURM_NODE: "node1", keys.GPU_IDS: "0"}
    stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
    bridge.pod_cache.apply("MODIFIED", Pod.from_dict(stored))  # the leader's record, watched
    await bridge.binder.bind("ns", "p", UID, "node1")
    bound = kube.obj(Pod, "p", "ns")
    assert bound is not None and bound["spec"]["nodeName"] == "node1"
    annotations = bound["metadata"]["annotations"]
    assert (annotations[keys.JOB_ID], annotations[keys.GPU_IDS]) == ("10", "0")
