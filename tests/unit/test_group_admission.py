"""A new group member weighed against its group's live members at admission (issue 41,
cases 1 and 2): a rank taken, a group full, members asking for different things."""

from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from lightkube.models.core_v1 import Pod

from admission.webhook import create_app
from bridge import keys
from tests.unit.test_admission import OPEN, SETTINGS, lookups, make_pod, make_review, post

NS = "team-a"


class Members:
    """The pods the API server lists for a group (as stored: mutated, uid'd)."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.fail = False

    async def __call__(self, namespace: str, group: str) -> list[Pod]:
        assert namespace == NS
        if self.fail:
            raise ConnectionError("apiserver unreachable")
        return [cast(Pod, Pod.from_dict(p)) for p in self.pods
                if p["metadata"]["labels"].get(keys.GROUP) == group]


def member(name: str, rank: int | None = None, *, size: int = 2, gpus: int = 0,
           **status: Any) -> dict[str, Any]:
    labels = {keys.GROUP: "train", keys.GROUP_SIZE: str(size)}
    if rank is not None:
        labels[keys.GROUP_RANK] = str(rank)
    pod = make_pod(name=name, labels=labels,
                   annotations={keys.GPUS: str(gpus), keys.ACCOUNT: "physics",
                                keys.QOS: "normal"},
                   schedulingGates=[{"name": keys.SLURM_GATE}])
    pod["status"] = status
    return pod


@pytest.fixture
def members() -> Members:
    return Members()


@pytest.fixture
async def client(members: Members) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, lookups(members=members), tenancy=OPEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://webhook") as http:
        yield http


async def _validated(client: httpx.AsyncClient, pod: dict[str, Any]) -> dict[str, Any]:
    return await post(client, "validate", make_review(pod))


async def test_a_rank_a_live_member_holds_is_refused_naming_it(
    client: httpx.AsyncClient, members: Members
) -> None:
    members.pods = [member("train-0", 0, phase="Running")]
    response = await _validated(client, member("intruder", 0))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert f"{keys.GROUP_RANK} 0" in message and "train-0" in message, message


async def test_a_full_group_refuses_one_more_member(
    client: httpx.AsyncClient, members: Members
) -> None:
    members.pods = [member("a", phase="Running"), member("b", phase="Pending")]
    response = await _validated(client, member("c"))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "already has its 2 member(s) (a, b)" in message, message


async def test_a_rank_beyond_the_group_size_is_refused(client: httpx.AsyncClient) -> None:
    response = await _validated(client, member("w2", 2))
    assert response["allowed"] is False
    assert keys.GROUP_RANK in response["status"]["message"]


async def test_a_replacement_is_admitted_once_its_predecessor_finished_or_goes(
    client: httpx.AsyncClient, members: Members
) -> None:
    failed = member("train-0", 0, phase="Failed")
    deleting = member("train-0b", 0, phase="Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    members.pods = [failed, deleting, member("train-1", 1, phase="Running")]
    assert (await _validated(client, member("train-0c", 0)))["allowed"] is True


async def test_members_asking_for_different_things_are_refused_naming_them_and_the_field(
    client: httpx.AsyncClient, members: Members
) -> None:
    """A CPU-only launcher first, then a GPU worker: one Slurm job cannot be both."""
    members.pods = [member("launcher", 0, phase="Pending")]
    response = await _validated(client, member("worker", 1, gpus=2))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "launcher" in message and "worker" in message and "gpus 0 vs 2" in message, message
    members.pods = [member("worker-0", 0, gpus=2)]
    response = await _validated(client, member("worker-1", 1, size=3, gpus=2))
    assert response["allowed"] is False
    assert f"{keys.GROUP_SIZE} 2 vs 3" in response["status"]["message"]


async def test_a_late_member_of_a_placed_group_is_admitted(
    client: httpx.AsyncClient, members: Members
) -> None:
    members.pods = [member("late-0", phase="Running")]
    assert (await _validated(client, member("late-1")))["allowed"] is True


async def test_a_group_that_cannot_be_listed_is_left_to_the_bridge(
    client: httpx.AsyncClient, members: Members
) -> None:
    members.fail = True
    assert (await _validated(client, member("w0", 0)))["allowed"] is True


JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


async def test_a_pod_pointing_at_a_colleagues_gang_job_is_refused(members: Members) -> None:
    """A pod of one's own naming a colleague's gang Job as its controller (ownerReference)
    would join that Job's Slurm job; only the Job controller's pods may."""
    gang = {"metadata": {"name": "train", "uid": "job-uid",
                         "annotations": {keys.GANG: "true"}},
            "spec": {"parallelism": 2, "completions": 2}}

    async def owners(kind: Any, namespace: str, name: str) -> dict[str, Any] | None:
        return gang if (kind.kind, name) == ("Job", "train") else None

    app = create_app(SETTINGS, lookups(owners=owners, members=members), tenancy=OPEN)
    pod = make_pod(name="train-1-x", annotations={keys.JOB_COMPLETION_INDEX: "1"},
                   containers=[{"name": "c", "image": "busybox"}])
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                           "name": "train", "uid": "job-uid",
                                           "controller": True}]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://webhook") as http:
        refused = await post(http, "mutate", make_review(pod, username="bob"))
        admitted = await post(http, "mutate", make_review(pod, username=JOB_CONTROLLER))
    assert refused["allowed"] is False
    message = refused["status"]["message"]
    assert "Job team-a/train" in message and "bob" in message, message
    assert admitted["allowed"] is True


# --- a mixed group: components of one heterogeneous job (issue 43) -------------------------

MIXED = {keys.GROUP_COMPONENTS: "launcher=1,workers=2"}


def part(name: str, rank: int, component: str, *, gpus: int = 0, cpus: str = "1",
         **status: Any) -> dict[str, Any]:
    """A member of group train (launcher=1, workers=2) in ``component``."""
    pod = member(name, rank, size=3, gpus=gpus, **status)
    pod["metadata"]["labels"][keys.GROUP_COMPONENT] = component
    pod["metadata"]["annotations"].update(MIXED)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpus}}
    return pod


async def test_a_launcher_and_gpu_workers_in_components_of_their_own_are_admitted(
    client: httpx.AsyncClient, members: Members
) -> None:
    """The group the issue's old refusal turned away, its parts named: one heterogeneous job."""
    members.pods = [part("launcher", 0, "launcher", phase="Pending")]
    assert (await _validated(client, part("worker-0", 1, "workers", gpus=2)))["allowed"]
    members.pods.append(part("worker-0", 1, "workers", gpus=2, phase="Pending"))
    assert (await _validated(client, part("worker-1", 2, "workers", gpus=2)))["allowed"]


async def test_a_member_differing_from_its_component_is_refused_naming_both_and_the_field(
    client: httpx.AsyncClient, members: Members
) -> None:
    members.pods = [part("launcher", 0, "launcher", phase="Pending"),
                    part("worker-0", 1, "workers", gpus=2, phase="Pending")]
    response = await _validated(client, part("worker-1", 2, "workers", gpus=2, cpus="4"))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "component workers of group train" in message, message
    assert "worker-0" in message and "worker-1" in message and "cpus 1 vs 4" in message, message
    assert "launcher" not in message.split("(")[1], message  # the other component is no peer


async def test_a_member_listing_other_components_than_its_group_is_refused(
    client: httpx.AsyncClient, members: Members
) -> None:
    members.pods = [part("launcher", 0, "launcher", phase="Pending")]
    other = part("worker-0", 1, "workers", gpus=2)
    other["metadata"]["annotations"][keys.GROUP_COMPONENTS] = "launcher=2,workers=1"
    other["metadata"]["labels"][keys.GROUP_RANK] = "2"
    response = await _validated(client, other)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert keys.GROUP_COMPONENTS in message and "launcher" in message, message


async def test_a_rank_outside_its_component_is_refused_naming_the_range(
    client: httpx.AsyncClient,
) -> None:
    response = await _validated(client, part("worker-0", 0, "workers", gpus=2))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert keys.GROUP_RANK in message and "from 1 to 2" in message, message
