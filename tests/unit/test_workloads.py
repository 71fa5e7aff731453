"""Group recognition: which group a new pod joins, its size (from the owner) and its rank.

Owners are plain dicts shaped as the API server returns them, served by a fake reader;
the pods are shaped as each controller creates them (keys cited in bridge/keys.py).
"""

import asyncio
import re
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status, StatusDetails

from admission import mutate
from admission.membership import Membership, group_name
from admission.owners import (
    JOB,
    JOBSET,
    OWNER_CACHE_SECONDS,
    POD_GROUP,
    Kind,
    WorkloadError,
    WorkloadLookupError,
    kube_owner_reader,
)
from admission.pod import PodShape
from admission.workloads import membership
from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import PodGroup, pod_group
from bridge.jobs.owner import GroupOwner, PodOwner
from bridge.link.views import PodView, tied_to, view_of
from bridge.placement.seats import member_slot
from bridge.slurm.types import JobState
from slurmbridge_devkit.builders import JobBuilder, PodBuilder

NS = "research"


class Owners:
    """A fake API server holding owner objects by (kind, name); counts reads."""

    def __init__(self, *objects: tuple[Kind, dict[str, Any]], fail: bool = False) -> None:
        self.objects = {(kind, obj["metadata"]["name"]): obj for kind, obj in objects}
        self.reads = 0
        self.fail = fail

    async def __call__(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        assert namespace == NS
        self.reads += 1
        if self.fail:
            raise ConnectionError("apiserver unreachable")
        return self.objects.get((kind, name))


def job(name: str, *, parallelism: int, completions: int | None, gang: bool = True,
        uid: str = "job-uid") -> tuple[Kind, dict[str, Any]]:
    annotations = {keys.GANG: "true"} if gang else {}
    spec: dict[str, Any] = {"parallelism": parallelism}
    if completions is not None:
        spec["completions"] = completions
    return JOB, {"metadata": {"name": name, "uid": uid, "annotations": annotations}, "spec": spec}


def pod(*, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        owner: tuple[str, str, str] | None = None, pod_group_name: str | None = None) -> PodShape:
    built = PodBuilder("p").labels(labels or {}).annotations(annotations or {})
    if owner is not None:
        api_version, kind, name = owner
        built.owned_by(kind, name, api_version=api_version)
    if pod_group_name is not None:
        built.pod_group(pod_group_name)
    return PodShape.model_validate(built.manifest())


def job_pod(job_name: str, index: int | None = None) -> PodShape:
    """A pod as the Job controller creates it (Indexed: with the completion index)."""
    annotations = {keys.JOB_COMPLETION_INDEX: str(index)} if index is not None else {}
    return pod(owner=("batch/v1", "Job", job_name), annotations=annotations,
               labels={"batch.kubernetes.io/job-name": job_name})


# --- batch Job opted in by slurmbridge.io/gang ---------------------------------------------


async def test_gang_job_is_one_group_sized_by_parallelism_ranked_by_completion_index() -> None:
    owners = Owners(job("train", parallelism=4, completions=4))
    found = await membership(job_pod("train", index=2), NS, owners)
    assert found == Membership("train", 4, 2, f"Job {NS}/train")


async def test_job_without_the_annotation_runs_pod_by_pod() -> None:
    owners = Owners(job("etl", parallelism=4, completions=4, gang=False))
    assert await membership(job_pod("etl", index=0), NS, owners) is None


async def test_gang_job_whose_completions_differ_from_parallelism_is_refused() -> None:
    owners = Owners(job("sweep", parallelism=2, completions=10))
    with pytest.raises(WorkloadError, match=r"completions equal to spec\.parallelism"):
        await membership(job_pod("sweep", index=0), NS, owners)


async def test_non_indexed_gang_job_members_have_no_rank() -> None:
    owners = Owners(job("train", parallelism=3, completions=3))
    assert await membership(job_pod("train"), NS, owners) == Membership(
        "train", 3, None, f"Job {NS}/train"
    )


async def test_owner_that_cannot_be_read_is_an_error_not_a_lone_pod() -> None:
    with pytest.raises(WorkloadLookupError, match="apiserver unreachable"):
        await membership(job_pod("train", 0), NS, Owners(fail=True))


async def test_owner_recreated_under_the_same_name_is_not_trusted() -> None:
    owners = Owners(job("train", parallelism=2, completions=2, uid="another-uid"))
    with pytest.raises(WorkloadLookupError, match="recreated"):
        await membership(job_pod("train", 0), NS, owners)


async def test_pods_of_other_controllers_need_no_lookup() -> None:
    owners = Owners()
    replica = pod(owner=("apps/v1", "ReplicaSet", "web-5d8f"))
    assert await membership(replica, NS, owners) is None
    assert owners.reads == 0


# --- Workload API PodGroup ------------------------------------------------------------------


def pod_group_object(name: str, policy: dict[str, Any]) -> tuple[Kind, dict[str, Any]]:
    return POD_GROUP, {"metadata": {"name": name}, "spec": {"schedulingPolicy": policy}}


async def test_workload_api_gang_pod_group_sized_by_min_count() -> None:
    name = "train-694895bcd7-train-pgt-0-77846dfdd6"  # as the Job controller names it
    owners = Owners(pod_group_object(name, {"gang": {"minCount": 3}}))
    member = pod(pod_group_name=name, annotations={keys.JOB_COMPLETION_INDEX: "1"},
                 owner=("batch/v1", "Job", "train"))
    assert await membership(member, NS, owners) == Membership(name, 3, 1, f"PodGroup {NS}/{name}")


async def test_workload_api_basic_policy_schedules_pod_by_pod() -> None:
    owners = Owners(pod_group_object("web", {"basic": {}}), job("web", parallelism=2,
                                                               completions=2, gang=False))
    member = pod(pod_group_name="web", owner=("batch/v1", "Job", "web"))
    assert await membership(member, NS, owners) is None


async def test_long_pod_group_names_become_valid_label_values() -> None:
    long_name = "x" * 200
    name = group_name(long_name)
    assert len(name) <= 63 and name != group_name("x" * 199)
    owners = Owners(pod_group_object(long_name, {"gang": {"minCount": 2}}))
    found = await membership(pod(pod_group_name=long_name), NS, owners)
    assert found is not None and found.name == name


async def test_a_pod_group_kept_in_one_slurm_topology_unit_asks_slurm_for_one() -> None:
    """TopologyAwareWorkloadScheduling: every member within one domain of the key."""
    spec = {"schedulingPolicy": {"gang": {"minCount": 4}},
            "schedulingConstraints": {"topology": [{"key": keys.TOPOLOGY_LABEL_PREFIX + "t"}]}}
    owners = Owners((POD_GROUP, {"metadata": {"name": "ring"}, "spec": spec}))
    found = await membership(pod(pod_group_name="ring"), NS, owners)
    assert found is not None
    assert found.asks == {keys.SWITCHES: "1", keys.SEGMENT: "4"}
    own = pod(pod_group_name="ring", annotations={keys.SWITCHES: "2"})
    ops = mutate.patch_for(own, group=found)
    written = {op["path"]: op["value"] for op in ops if "/annotations/" in op["path"]}
    assert written == {"/metadata/annotations/slurmbridge.io~1segment": "4"}  # pod's own kept


async def test_a_pod_group_kept_in_a_domain_slurm_does_not_know_is_refused() -> None:
    spec = {"schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]}}
    owners = Owners((POD_GROUP, {"metadata": {"name": "ring"}, "spec": spec}))
    rack = re.escape("share one topology.kubernetes.io/rack")
    with pytest.raises(WorkloadError, match=rack) as refused:
        await membership(pod(pod_group_name="ring"), NS, owners)
    assert keys.TOPOLOGY_LABEL_PREFIX in str(refused.value)


# --- JobSet and LeaderWorkerSet (labels as their controllers set them) ---------------------


def jobset_pod(replicated: str, job_index: int, completion: int) -> PodShape:
    """A pod of JobSet 'llm' as its child Job's controller creates it (JobSet labels copied
    from the Job template the JobSet controller wrote)."""
    return pod(
        labels={keys.JOBSET_NAME: "llm", keys.JOBSET_REPLICATED_JOB: replicated,
                keys.JOBSET_JOB_INDEX: str(job_index)},
        annotations={keys.JOB_COMPLETION_INDEX: str(completion)},
        owner=("batch/v1", "Job", f"llm-{replicated}-{job_index}"),
    )


async def test_jobset_is_one_group_sized_from_the_jobset_ranks_across_replicated_jobs() -> None:
    jobset = {"metadata": {"name": "llm"}, "spec": {"replicatedJobs": [
        {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2}}},
    ]}}
    owners = Owners((JOBSET, jobset))
    assert await membership(jobset_pod("driver", 0, 0), NS, owners) == Membership(
        "llm", 5, 0, f"JobSet {NS}/llm", components=(("driver", 1), ("workers", 4)),
        component="driver",
    )
    second = await membership(jobset_pod("workers", 1, 0), NS, owners)
    assert second is not None and (second.size, second.rank) == (5, 3)


async def test_lws_group_is_one_replica_ranked_by_worker_index() -> None:
    labels = {keys.LWS_NAME: "vllm", keys.LWS_GROUP_INDEX: "1", keys.LWS_WORKER_INDEX: "2"}
    worker = pod(labels=labels, annotations={keys.LWS_SIZE: "4"})
    found = await membership(worker, NS, Owners())
    assert found == Membership("vllm-1", 4, 2, "LeaderWorkerSet vllm",
                               components=(("leader", 1), ("worker", 3)), component="worker")


async def test_one_domain_per_child_of_jobset_and_lws_is_refused_naming_the_annotation() -> None:
    jobset = {"metadata": {"name": "llm", "annotations": {
        keys.JOBSET_EXCLUSIVE_TOPOLOGY: keys.TOPOLOGY_LABEL_PREFIX + "tree"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2}]}}
    with pytest.raises(WorkloadError, match=re.escape(keys.JOBSET_EXCLUSIVE_TOPOLOGY)) as refused:
        await membership(jobset_pod("workers", 0, 0), NS, Owners((JOBSET, jobset)))
    assert f"{keys.SWITCHES}: \"1\"" in str(refused.value)
    assert "each child Job a domain of its own" in str(refused.value)
    labels = {keys.LWS_NAME: "vllm", keys.LWS_GROUP_INDEX: "0", keys.LWS_WORKER_INDEX: "0"}
    # What Slurm cannot give, said for each: a group is one Slurm job, which Slurm keeps in one
    # unit when asked, but not alone there; a subgroup cannot have a unit of its own.
    refusals = ((keys.LWS_EXCLUSIVE_TOPOLOGY, "a domain no other group shares"),
                (keys.LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY, "each subgroup a domain of its own"))
    for key, cannot in refusals:
        leader = pod(labels=labels, annotations={keys.LWS_SIZE: "2", key: "rack"})
        with pytest.raises(WorkloadError, match=re.escape(key)) as refused:
            await membership(leader, NS, Owners())
        assert cannot in str(refused.value) and keys.SWITCHES in str(refused.value), refused


async def test_lws_pod_without_the_size_annotation_is_refused() -> None:
    labels = {keys.LWS_NAME: "vllm", keys.LWS_GROUP_INDEX: "0", keys.LWS_WORKER_INDEX: "0"}
    with pytest.raises(WorkloadError, match=keys.LWS_SIZE):
        await membership(pod(labels=labels), NS, Owners())


async def test_own_labels_stand_as_written() -> None:
    labelled = pod(labels={keys.GROUP: "mine", keys.GROUP_SIZE: "2"})
    assert await membership(labelled, NS, Owners()) is None


# --- the webhook's patch and what the bridge reads back ----------------------------------


def test_patch_writes_the_group_labels_over_the_pods_own() -> None:
    member = pod(labels={keys.GROUP: "guess", keys.GROUP_SIZE: "1", keys.GROUP_RANK: "0"})
    ops = mutate.patch_for(member, group=Membership("train", 4, None, "Job x"))
    labels = {op["path"]: op.get("value") for op in ops if "/labels" in op["path"]}
    assert labels == {
        "/metadata/labels/slurmbridge.io~1group": "train",
        "/metadata/labels/slurmbridge.io~1group-size": "4",
        "/metadata/labels/slurmbridge.io~1group-rank": None,  # removed: no rank known
    }


def test_patch_of_a_pod_without_labels_adds_them_in_one_op() -> None:
    bare = PodShape.model_validate(
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    )
    ops = mutate.patch_for(bare, group=Membership("train", 2, 1, "Job x"))
    assert {"op": "add", "path": "/metadata/labels", "value": {
        keys.GROUP: "train", keys.GROUP_SIZE: "2", keys.GROUP_RANK: "1"}} in ops


def test_rank_label_is_read_and_checked_against_the_size() -> None:
    assert pod_group({keys.GROUP: "g", keys.GROUP_SIZE: "3", keys.GROUP_RANK: "2"}) == PodGroup(
        "g", 3, 2
    )
    with pytest.raises(InvalidPodRequest, match="group-rank"):
        pod_group({keys.GROUP: "g", keys.GROUP_SIZE: "3", keys.GROUP_RANK: "3"})


# --- placement: ranks and group runs --------------------------------------------------------


def test_rank_zero_gets_the_first_allocated_node_whatever_arrives_first() -> None:
    allocated = ("node2", "node3", "node4")
    assert member_slot(allocated, set(), 2) == "node4"
    assert member_slot(allocated, {"node4"}, 0) == "node2"
    assert member_slot(allocated, {"node2"}, None) == "node3"  # no rank: first free
    assert member_slot(allocated, set(allocated), None) is None


def _pod_with(annotations: dict[str, str]) -> PodView:
    return view_of(PodBuilder("p", NS).uid("u").annotations(annotations).build())


def test_an_ended_group_job_binds_only_the_members_it_was_recorded_on() -> None:
    ended = (JobBuilder(7, "k8s:research/train").owner(GroupOwner(NS, "train"))
             .state(JobState.CANCELLED).build())
    assert tied_to(_pod_with({keys.JOB_ID: "7"}), ended)
    assert not tied_to(_pod_with({}), ended)  # a resumed Job's new pod: the group's next run
    lone = JobBuilder(8, "k8s:research/p").owner(PodOwner("u")).state(JobState.CANCELLED).build()
    assert tied_to(_pod_with({}), lone)


async def test_a_pod_group_not_created_yet_is_retried_not_refused() -> None:
    with pytest.raises(WorkloadLookupError, match="does not exist"):
        await membership(pod(pod_group_name="later"), NS, Owners())


async def test_one_read_of_the_owner_serves_a_burst_of_pods() -> None:
    class Client:
        gets = 0

        async def get(self, resource: Any, name: str, *, namespace: str) -> Any:
            Client.gets += 1
            return resource.from_dict({"metadata": {"name": name}, "spec": {}})

    now = [0.0]
    read = kube_owner_reader(cast(AsyncClient, Client()), clock=lambda: now[0])
    for _ in range(3):
        assert (await read(JOB, NS, "train")) == {"metadata": {"name": "train"}, "spec": {}}
    assert Client.gets == 1
    now[0] += OWNER_CACHE_SECONDS
    await read(JOB, NS, "train")
    assert Client.gets == 2


async def test_a_burst_of_pods_reviewed_at_once_reads_their_owner_once() -> None:
    class Client:
        gets = 0
        answer = asyncio.Event()

        async def get(self, resource: Any, name: str, *, namespace: str) -> Any:
            Client.gets += 1
            await Client.answer.wait()  # the apiserver answers after every review has asked
            return resource.from_dict({"metadata": {"name": name}, "spec": {}})

    read = kube_owner_reader(cast(AsyncClient, Client()))
    burst = asyncio.gather(*(read(JOB, NS, "train") for _ in range(8)))
    await asyncio.sleep(0)
    Client.answer.set()
    assert all(found is not None for found in await burst)
    assert Client.gets == 1


class VersionedServer:
    """An API server serving PodGroups at ``served`` only (1.36: v1alpha2, 1.37: v1beta1),
    answering as kube-apiserver does: an unserved version is a 404 without details, a
    missing object one naming it."""

    def __init__(self, served: str, objects: dict[str, dict[str, Any]]) -> None:
        self.served, self.objects, self.versions_asked = served, objects, list[str]()

    async def get(self, resource: Any, name: str, *, namespace: str) -> Any:
        version = resource._api_info.resource.version
        self.versions_asked.append(version)
        if version != self.served:
            raise ApiError(status=Status(
                code=404, status="Failure", reason="NotFound", details=StatusDetails(),
                message="the server could not find the requested resource"))
        if name not in self.objects:
            raise ApiError(status=Status(code=404, status="Failure", reason="NotFound",
                                         details=StatusDetails(name=name, kind="podgroups"),
                                         message=f'podgroups.scheduling.k8s.io "{name}" not found'))
        return resource.from_dict(self.objects[name])


async def test_a_pod_group_is_read_at_the_version_the_server_serves() -> None:
    """Kubernetes 1.36 serves the Workload API as v1alpha2 only (1.37: v1beta1): its Job
    controller's PodGroups were 'not found (yet)' at v1beta1, and every pod refused."""
    gang = {"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    server = VersionedServer("v1alpha2", {"g": gang})
    read = kube_owner_reader(cast(AsyncClient, server), clock=lambda: 0.0)
    found = await read(POD_GROUP, NS, "g")
    assert found is not None and found["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    assert await read(POD_GROUP, NS, "later") is None  # served, not there: retried, not refused
    assert server.versions_asked == ["v1beta1", "v1alpha2", "v1alpha2"]  # found once, then kept


async def test_a_pod_group_at_the_newest_version_takes_one_read() -> None:
    gang = {"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {}}}
    server = VersionedServer("v1beta1", {"g": gang})
    read = kube_owner_reader(cast(AsyncClient, server), clock=lambda: 0.0)
    assert await read(POD_GROUP, NS, "g") is not None
    assert await read(POD_GROUP, NS, "later") is None
    assert server.versions_asked == ["v1beta1", "v1beta1"]


def test_patch_writes_a_mixed_groups_component_and_every_component_with_its_size() -> None:
    """Issue 43: each member of a JobSet of several replicated jobs says which it is."""
    group = Membership("llm", 3, 1, "JobSet x", components=(("driver", 1), ("workers", 2)),
                       component="workers")
    ops = {op["path"]: op.get("value") for op in mutate.patch_for(pod(), group=group)}
    assert ops["/metadata/labels/slurmbridge.io~1group-component"] == "workers"
    assert ops["/metadata/annotations/slurmbridge.io~1group-components"] == "driver=1,workers=2"
    stale = pod(labels={keys.GROUP_COMPONENT: "x"}, annotations={keys.GROUP_COMPONENTS: "x=1"})
    removed = [op["path"] for op in mutate.patch_for(stale, group=Membership("j", 1, 0, "Job j"))
               if op["op"] == "remove"]
    assert sorted(removed) == ["/metadata/annotations/slurmbridge.io~1group-components",
                               "/metadata/labels/slurmbridge.io~1group-component"]


async def test_an_lws_leader_and_workers_are_two_components() -> None:
    labels = {keys.LWS_NAME: "vllm", keys.LWS_GROUP_INDEX: "0", keys.LWS_WORKER_INDEX: "0"}
    leader = await membership(pod(labels=labels, annotations={keys.LWS_SIZE: "3"}), NS, Owners())
    assert leader is not None and (leader.component, leader.components) == (
        "leader", (("leader", 1), ("worker", 2)))
