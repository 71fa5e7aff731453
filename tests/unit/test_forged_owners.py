"""Issue 41, case 3: a Slurm user copies another tenant's owner into their own job's comment.

Alice runs namespace ``a``, bob namespace ``b``.  Alice's job is named in her own namespace
(which the Slurm client's screen accepts) and its comment names b's group, or the UID of a
pod of b: the bridge, wired as it runs (fakes for Slurm and the apiserver), never keeps,
adopts or releases into it, and never cancels b's job nor hers for it (e2e:
tests/e2e/test_attacks.py, ``test_forged_*_of_another_namespace_*``).
"""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.jobs.owner import GroupOwner, Owner, PodOwner
from bridge.policy.tenancy import TenancyMap, TenancySource, Tenant, owner_trust
from bridge.runtime import Bridge
from bridge.slurm.types import SlurmJob
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes

TWO_TENANTS = ("namespaces:\n  a: {account: team-a, user: alice}\n"
               "  b: {account: team-b, user: bob}\n")
TRAIN = GroupOwner("b", "train")
B_POD = PodOwner("uid-b")


def test_an_owner_is_believed_only_for_the_user_its_own_namespace_runs_as() -> None:
    """Issue 41, case 3: alice (team-a) names her job in her own namespace and writes team-b's
    group, or the UID of a team-b pod (``squeue -o %k`` shows it), into its comment."""
    tenancy = TenancyMap(namespaces={"team-a": Tenant(user="alice"), "team-b": Tenant(user="bob")})
    trusted = owner_trust(TenancySource(None, fixed=tenancy), "slurm")
    train = GroupOwner("team-b", "train")
    assert trusted("bob", train, "k8s:team-b/train", None)
    assert not trusted("alice", train, "k8s:team-a/x", None)  # A's user, B's group: forged
    assert trusted("slurm", train, "k8s:team-a/x", None)  # the bridge's own user
    assert not trusted("alice", PodOwner("uid-b"), "k8s:team-a/x", "team-b")  # B's pod: forged
    assert trusted("bob", PodOwner("uid-b"), "k8s:team-b/p", "team-b")
    assert trusted("alice", PodOwner("uid-a"), "k8s:team-b/p", "team-a")  # the pod decides
    # No pod with that UID is known (deleted while the bridge was away): the name stands in.
    assert trusted("alice", PodOwner("gone"), "k8s:team-a/p", None)
    assert not trusted("alice", PodOwner("gone"), "k8s:team-b/p", None)
    assert not trusted("mallory", GroupOwner("team-a", "g"), "k8s:team-a/g", None)


class World:
    def __init__(self, workdir: Path) -> None:
        self.kube, self.slurm = FakeKube(), FakeSlurm(("node1", "node2"))
        self.bridge: Bridge = bridge_over_fakes(workdir, self.slurm, self.kube,
                                                tenancy=TWO_TENANTS)

    def real_and_forged(self, owner: Owner, real_name: str) -> tuple[SlurmJob, SlurmJob]:
        """Bob's job for ``owner``, still waiting; alice's copy, already running."""
        real = self.slurm.put(JobBuilder(1, real_name).owner(owner).tenancy(user="bob").build())
        forged = self.slurm.put(JobBuilder(2, "k8s:a/x").owner(owner).tenancy(user="alice")
                                .running("node1", gpus=(0,)).build())
        return real, forged


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """The bridge's pod cache runs (a UID's pod says whose job names it) and holds b's pod."""
    world = World(tmp_path)
    world.kube.add(PodBuilder("p", "b").uid(B_POD.uid).build())
    cache = asyncio.create_task(world.bridge.pod_cache.run())
    await world.bridge.pod_cache.wait_synced()
    yield world
    cache.cancel()
    await asyncio.gather(cache, return_exceptions=True)


@pytest.mark.parametrize(("owner", "real_name"), [(TRAIN, "k8s:b/train"), (B_POD, "k8s:b/p")])
async def test_the_resync_never_keeps_a_forged_job_nor_cancels_for_it(
    world: World, owner: Owner, real_name: str
) -> None:
    """Of "two live jobs for one owner" the keeper would keep the running one (alice's) and
    cancel bob's, whose pods would then be released into alice's job."""
    real, forged = world.real_and_forged(owner, real_name)
    resynced = await world.bridge.index.resync()
    assert (resynced.cancelled, world.slurm.cancelled) == ([], [])
    assert world.bridge.index.by_owner(owner) == real
    assert world.bridge.index.by_id(forged.job_id) is None
    assert await world.bridge.index.find_live(owner) == real


@pytest.mark.parametrize("owner", [TRAIN, B_POD])
async def test_a_forged_job_is_never_adopted_nor_cancelled_as_an_orphan(
    world: World, owner: Owner
) -> None:
    """Alone in Slurm for its owner: not b's job for intake or filter, and the lifecycle does
    not cancel it as a job whose pods are gone (it is not the bridge's to cancel)."""
    forged = world.slurm.put(JobBuilder(2, "k8s:a/x").owner(owner).tenancy(user="alice")
                             .running("node1", gpus=(0,)).build())
    await world.bridge.index.resync()
    assert world.bridge.index.by_owner(owner) is None
    assert (await world.bridge.index.adopt(forged.job_id)).owner is None
    assert world.bridge.index.by_id(forged.job_id) is None
    for _ in range(2):
        await world.bridge.lifecycle.reconcile_once()
    assert world.slurm.cancelled == []


async def test_a_job_of_a_pod_the_bridge_no_longer_knows_is_still_its_own(world: World) -> None:
    """Alice's placeholder for a pod of ``a`` deleted while the bridge was away: its name
    stands in for the pod's namespace, so it stays the bridge's (to cancel as an orphan)."""
    gone = PodOwner("uid-gone")
    world.slurm.put(JobBuilder(3, "k8s:a/p").owner(gone).tenancy(user="alice").build())
    await world.bridge.index.resync()
    held = world.bridge.index.by_owner(gone)
    assert held is not None and held.job_id == 3
