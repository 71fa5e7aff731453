"""Issue 41, case 3: a Slurm user copies another tenant's owner into their own job's comment.

Alice runs namespace ``a``, bob namespace ``b``.  Alice's job is named in her own namespace
(which the Slurm client's screen accepts) and its comment names b's group, or the UID of a
pod of b: the bridge, wired as it runs (fakes for Slurm and the apiserver), never keeps,
adopts or releases into it, and never cancels b's job nor hers for it (e2e:
tests/e2e/test_attacks.py, ``test_forged_*_of_another_namespace_*``).  Once b's pod is gone
no pod says whose UID it was: the bridge's signature on the marker does (bridge/slurm/
signing.py; e2e: ``test_forged_pod_uid_of_a_deleted_pod_of_another_namespace_*``).
"""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.config import SlurmSettings
from bridge.jobs.owner import GroupOwner, Owner, PodOwner
from bridge.jobs.request import JobRequest
from bridge.policy.tenancy import TenancyMap, TenancySource, Tenant, owner_trust
from bridge.runtime import Bridge
from bridge.slurm.client import SlurmClient
from bridge.slurm.convert import comment_for
from bridge.slurm.signing import OwnerKeyError, OwnerSigner
from bridge.slurm.types import SlurmJob
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange
from tests.unit.test_slurm_hardening import FakeRest

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


async def test_a_forged_job_naming_a_deleted_pod_of_another_namespace_is_never_cancelled(
    world: World,
) -> None:
    """Alice's job named in her own namespace names the UID of b's pod, which is then deleted:
    no pod holds the UID any more, yet the job is still not the bridge's (its marker lacks the
    bridge's signature): never kept, and never cancelled as the deleted pod's orphan."""
    await world.bridge.lifecycle.reconcile_once()  # b's pod is seen alive
    await world.kube.delete(Pod, "p", namespace="b")
    while world.bridge.pod_cache.get(B_POD.uid) is not None:
        await asyncio.sleep(0.01)
    world.slurm.put(JobBuilder(2, "k8s:a/x").owner(B_POD).tenancy(user="alice").unsigned()
                    .running("node1", gpus=(0,)).build())
    await world.bridge.index.resync()
    assert world.bridge.index.by_owner(B_POD) is None, "a forged job is kept as b's pod's job"
    for _ in range(2):
        await world.bridge.lifecycle.reconcile_once()
    assert world.slurm.cancelled == [], "the bridge cancels a job it does not own"


KEY = b"k" * 32


def test_only_the_bridges_key_signs_a_marker_for_its_name_and_owner() -> None:
    """The signature covers the job's name and the owner: a marker written by hand, a signed
    comment copied under another namespace's name, or a second marker put in front of a
    signed one, does not verify."""
    signer = OwnerSigner(KEY)
    comment = signer.comment("k8s:b/p", B_POD)
    assert comment.startswith(comment_for(B_POD) + f" {keys.COMMENT_SIGNATURE}")
    assert signer.signed("k8s:b/p", f"a note {comment}")
    assert not signer.signed("k8s:a/x", comment)  # copied onto a job named in a
    assert not signer.signed("k8s:b/p", f"{comment_for(PodOwner('uid-c'))} {comment}")
    assert not signer.signed("k8s:b/p", comment_for(B_POD))  # what a forger writes
    assert not signer.signed("k8s:b/p", f"{comment_for(B_POD)} {keys.COMMENT_SIGNATURE}ä")
    assert not OwnerSigner(b"o" * 32).signed("k8s:b/p", comment)  # another bridge's key
    assert not OwnerSigner().signed("k8s:b/p", comment)
    assert OwnerSigner().comment("k8s:b/p", B_POD) == comment_for(B_POD)


def test_the_owner_key_is_required_and_must_be_long_enough(tmp_path: Path) -> None:
    with pytest.raises(OwnerKeyError, match=r"SLURMBRIDGE_SLURM__OWNER_KEY_FILE.*Helm chart"):
        OwnerSigner.from_file(None)
    with pytest.raises(OwnerKeyError, match=r"owner key file .*/absent.*No such file"):
        OwnerSigner.from_file(tmp_path / "absent")
    (tmp_path / "short").write_text("secret\n")
    with pytest.raises(OwnerKeyError, match=r"6 bytes, fewer than 16.*openssl rand"):
        OwnerSigner.from_file(tmp_path / "short")
    (tmp_path / "key").write_text(f"{KEY.decode()}\n")  # as a Secret or `openssl rand` has it
    assert OwnerSigner.from_file(tmp_path / "key").signed(
        "k8s:b/p", OwnerSigner(KEY).comment("k8s:b/p", B_POD))


@pytest.mark.parametrize(("user", "signed", "unsigned"), [
    ("bob", True, False),  # the bridge submitted it as bob: signed
    ("bob", False, True),  # bob wrote the marker himself
    ("slurm", False, False),  # the bridge's own user, whom no tenant submits as
])
async def test_the_slurm_client_signs_its_markers_and_tells_one_it_did_not_sign(
    user: str, signed: bool, unsigned: bool
) -> None:
    rest = FakeRest([])
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token="t", retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(rest),
                           trust=lambda _user, _name: True) as client:
        client.signer = OwnerSigner(KEY)
        await client.submit(JobRequest(name="k8s:b/p", owner=B_POD))
        comment = rest.submitted[0]["job"]["comment"] if signed else comment_for(B_POD)
        rest.jobs = [{"job_id": 7, "name": "k8s:b/p", "user_name": user,
                      "job_state": ["PENDING"], "comment": comment}]
        [job] = await client.list_jobs()
    assert (job.owner, job.unsigned) == (B_POD, unsigned)
