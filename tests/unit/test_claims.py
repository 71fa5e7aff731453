"""Who submits a pod's job when several replicas filter it (the claims on the pod and on a
group's Lease): two bridges over one fake apiserver and one fake Slurm, through /filter."""

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.jobs.owner import PodOwner
from bridge.slurm.types import JobState
from extender.protocol import create_app
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes

NODES = ["node1", "node2"]


class Replicas:
    """Replicas a and b of the bridge, sharing the fake apiserver and the fake Slurm."""

    def __init__(self, workdir: Path) -> None:
        self.kube, self.slurm = FakeKube(), FakeSlurm(tuple(NODES))
        self.bridges = {
            name: bridge_over_fakes(workdir, self.slurm, self.kube, identity=name)
            for name in ("a", "b")
        }

    def add(self, builder: PodBuilder, uid: str) -> dict[str, Any]:
        pod = builder.uid(uid).build()
        assert pod.metadata is not None
        self.kube.add(pod)
        return self.pod(pod.metadata.name or "")

    def pod(self, name: str) -> dict[str, Any]:
        found = self.kube.obj(Pod, name, "ns")
        assert found is not None
        return found

    async def filter(self, replica: str, name: str) -> dict[str, Any]:
        app = create_app(self.bridges[replica])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://extender") as http:
            resp = await http.post("/filter", json={"Pod": self.pod(name), "NodeNames": NODES})
        assert resp.status_code == 200
        body: dict[str, Any] = resp.json()
        return body

    async def polled(self) -> None:
        """Both replicas' pollers read Slurm once (they learn of started jobs)."""
        for bridge in self.bridges.values():
            await bridge.poller.poll_once()

    async def drain(self) -> None:
        for bridge in self.bridges.values():
            await bridge.notifier.drain()


async def test_two_replicas_filtering_one_pod_at_once_submit_one_job(tmp_path: Path) -> None:
    replicas = Replicas(tmp_path)
    replicas.add(PodBuilder("p", "ns"), "uid-p")
    answers = await asyncio.gather(replicas.filter("a", "p"), replicas.filter("b", "p"))
    assert len(replicas.slurm.submitted) == 1
    assert all(answer["NodeNames"] == [] for answer in answers)  # pending: nowhere yet
    await replicas.drain()
    [job_id] = replicas.slurm.jobs
    annotations = replicas.pod("p")["metadata"]["annotations"]
    assert annotations[keys.JOB_ID] == str(job_id) and keys.SUBMITTING not in annotations


async def test_a_claim_a_live_replica_holds_makes_the_other_wait(tmp_path: Path) -> None:
    replicas = Replicas(tmp_path)
    replicas.add(PodBuilder("p", "ns").annotate(keys.SUBMITTING, f"a@{int(time.time())}"),
                 "uid-p")
    answer = await replicas.filter("b", "p")
    assert replicas.slurm.submitted == []
    assert "replica a" in answer["FailedAndUnresolvableNodes"]["node1"]


async def test_a_dead_replicas_claim_is_taken_over_and_its_job_adopted(tmp_path: Path) -> None:
    """Replica a claimed, submitted and died before recording the job id on the pod."""
    replicas = Replicas(tmp_path)
    stale = f"a@{int(time.time()) - 120}"
    replicas.add(PodBuilder("p", "ns").annotate(keys.SUBMITTING, stale), "uid-p")
    replicas.slurm.put(
        JobBuilder(55).owner(PodOwner("uid-p")).state(JobState.PENDING, "Priority").build()
    )
    await replicas.filter("b", "p")
    await replicas.drain()
    assert replicas.slurm.submitted == []  # no second job
    assert replicas.pod("p")["metadata"]["annotations"][keys.JOB_ID] == "55"


async def test_two_members_of_a_group_filtered_by_two_replicas_get_one_job_and_two_nodes(
    tmp_path: Path,
) -> None:
    replicas = Replicas(tmp_path)
    for rank in (0, 1):
        replicas.add(PodBuilder(f"m{rank}", "ns").group("g", 2), f"uid-m{rank}")
    await asyncio.gather(replicas.filter("a", "m0"), replicas.filter("b", "m1"))
    [request] = replicas.slurm.submitted
    assert request.nodes == 2 and request.name == "k8s:ns/g"
    [job_id] = replicas.slurm.jobs
    replicas.slurm.start(job_id, "node1", "node2")
    await replicas.polled()
    kept = await asyncio.gather(replicas.filter("a", "m0"), replicas.filter("b", "m1"))
    assert sorted(node for answer in kept for node in answer["NodeNames"]) == NODES
    await replicas.drain()


async def test_a_second_pod_under_a_taken_rank_gets_no_node_from_filter(
    tmp_path: Path,
) -> None:
    """Pods without the bridge's gate (the webhook skipped them): a second pod under a rank
    a live member holds must not be placed on that member's node and GPUs (issue 41, case 1)."""
    replicas = Replicas(tmp_path)
    ranked = PodBuilder("m0", "ns").group("g", 2).label(keys.GROUP_RANK, "0")
    replicas.add(ranked, "uid-m0")
    await replicas.filter("a", "m0")
    [job_id] = replicas.slurm.jobs
    replicas.slurm.start(job_id, "node1", "node2")
    await replicas.polled()
    assert (await replicas.filter("a", "m0"))["NodeNames"] == ["node1"]
    intruder = PodBuilder("intruder", "ns").group("g", 2).label(keys.GROUP_RANK, "0")
    replicas.add(intruder, "uid-intruder")
    for replica in ("a", "b"):
        answer = await replicas.filter(replica, "intruder")
        assert answer["NodeNames"] == [], f"replica {replica} placed it: {answer}"
        assert "m0 holds" in answer["FailedAndUnresolvableNodes"]["node1"], answer
    assert (await replicas.filter("b", "m0"))["NodeNames"] == ["node1"]
    await replicas.drain()
