"""``slurmbridge uninstall`` over the fakes: each kind of object the bridge holds is released
or deleted, and said so; what an admin or a tenant made is left; a dry run changes nothing;
a second run finds nothing to do."""

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import NodeCondition, NodeSpec, NodeStatus, Taint
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from bridge import keys
from bridge.devices.marks import DeviceId, PinRecord
from bridge.jobs.owner import PodOwner
from bridge.policy.tenancy import TenancySource, owner_trust
from bridge.slurm.types import JobState
from slurmbridge_cli.failures import Failure
from slurmbridge_cli.uninstall import Options, Uninstall
from slurmbridge_cli.uninstall_report import Report
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, fake_settings, idle_node

NS = "slurmbridge-system"
FEATURE = "slurmbridge-external"
OTHER_TAINT = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
DEVICE = DeviceId("gpu.example.com", "node1", "gpu-0")


def _node() -> Node:
    return Node(
        metadata=ObjectMeta(name="node1", labels={
            keys.NODE_SLURM_NODE: "node1", keys.TOPOLOGY_LABEL_PREFIX + "tree": "leaf1",
            "team": "ml"}),
        spec=NodeSpec(taints=[Taint(key=keys.MANAGED_TAINT, effect="NoSchedule"),
                              Taint(key=keys.UNAVAILABLE_TAINT, value="drain",
                                    effect="NoSchedule"), Taint(key="gpu", value="yes",
                                                          effect="NoSchedule")]),
        status=NodeStatus(conditions=[
            NodeCondition(type="Ready", status="True"),
            NodeCondition(type=keys.NODE_CONDITION_SLURM, status="False", reason="x")]),
    )


def _claim() -> ResourceClaim:
    record = PinRecord(job=101, pod="u-run", devices=frozenset({DEVICE}))
    return cast(ResourceClaim, ResourceClaim.from_dict({
        "metadata": {"name": "c1", "namespace": "ns", "finalizers": [keys.CLAIM_FINALIZER],
                     "labels": {keys.CLAIM_JOB_LABEL: "101"},
                     "annotations": {keys.CLAIM_PINNED: record.model_dump_json()}},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DEVICE.driver, "pool": DEVICE.pool,
             "device": DEVICE.device}]}},
            "reservedFor": [{"resource": "pods", "name": "running", "uid": "u-run"}]},
    }))


class World:
    """A bridge's leftovers: a gated pod with a pending job, a running pod with its job and
    DRA claim, a finished and an ordinary pod; a Node it tainted, labelled and conditioned;
    its drain and an admin's; its external node and an admin's dynamic one; a group's Lease;
    a tenant's forged placeholder and a native job."""

    def __init__(self) -> None:
        self.kube, self.slurm = FakeKube(), FakeSlurm(("node1", "node2"), first_id=100)
        self.lines: list[str] = []
        for pod in (
            PodBuilder("waiting", "ns").uid("u-wait").gated().build(),
            PodBuilder("running", "ns").uid("u-run").annotate(keys.JOB_ID, "101")
            .node("node1").running().build(),
            PodBuilder("done", "ns").uid("u-done").node("node1").phase("Succeeded").build(),
            PodBuilder("ordinary", "ns").uid("u-ord").scheduler(None).build(),
        ):
            self.kube.add(pod)
        self.kube.add(_node())
        self.kube.add(_claim())
        for job in (
            JobBuilder(100, "k8s:ns/waiting").owner(PodOwner("u-wait")).build(),
            JobBuilder(101, "k8s:ns/running").owner(PodOwner("u-run")).running("node1").build(),
            JobBuilder(200, "k8s:ns/forged").owner(PodOwner("u-run")).unsigned()
            .tenancy(user="mallory").build(),
            JobBuilder(300, "native").owner(None).build(),
        ):
            self.slurm.put(job)
        s = self.slurm.nodes
        s["node1"] = idle_node("node1", "IDLE", "DRAIN", reason=f"{keys.DRAIN_REASON_PREFIX} "
                               "cordoned in Kubernetes")
        s["node2"] = idle_node("node2", "IDLE", "DRAIN", reason="maintenance")
        s["ext1"] = dataclasses.replace(idle_node("ext1", "IDLE", "EXTERNAL"),
                                        features=frozenset({FEATURE}))
        s["dyn1"] = idle_node("dyn1", "IDLE", "EXTERNAL")  # an admin's, without the feature

    async def uninstall(self, *, dry_run: bool = False, **options: Any) -> Report:
        report = Report(self.lines.append, dry_run=dry_run)
        believe = owner_trust(TenancySource(None), FakeSlurm.BRIDGE_USER)
        await Uninstall(fake_settings(), self.kube, self.slurm, believe, report=report,
                        options=Options(**options)).run()
        return report

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.kube.obj(Pod, name, "ns")

    def node(self) -> dict[str, Any]:
        node = self.kube.obj(Node, "node1")
        assert node is not None
        return node

    def said(self, start: str) -> list[str]:
        return [line for line in self.lines if line.startswith(start)]


async def test_each_kind_of_object_the_bridge_holds_is_released_or_deleted_and_said() -> None:
    world = World()
    report = await world.uninstall()

    assert sorted(world.kube.evicted) == ["ns/running", "ns/waiting"]
    events = world.kube.events(keys.EventReason.UNINSTALLED)
    assert sorted(e["involvedObject"]["name"] for e in events) == ["running", "waiting"]
    assert "slurmbridge uninstall" in events[0]["message"]
    assert world.slurm.jobs[100].state is JobState.CANCELLED
    assert world.slurm.jobs[101].state is JobState.CANCELLED
    claim = world.kube.obj(ResourceClaim, "c1", "ns")
    assert claim is not None and not claim["metadata"].get("finalizers")
    assert keys.CLAIM_PINNED not in claim["metadata"].get("annotations", {})
    assert not claim.get("status")
    node = world.node()
    assert node["spec"]["taints"] == [OTHER_TAINT]
    assert node["metadata"]["labels"] == {keys.NODE_SLURM_NODE: "node1", "team": "ml"}
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready"]
    assert "DRAIN" not in world.slurm.nodes["node1"].states
    assert "ext1" not in world.slurm.nodes
    assert world.kube.obj(Lease, "slurmbridge-controllers", NS) is None
    for start in ("deleted        pod ns/waiting: gated", "deleted        pod ns/running",
                  "cancelled      slurm job 100", "cancelled      slurm job 101",
                  "freed          resourceclaim ns/c1", "untainted      node node1",
                  "unlabelled     node node1", "cleared        node node1",
                  "resumed        slurm node node1", "deleted        slurm node ext1"):
        assert world.said(start), f"no line {start!r} in {world.lines}"
    assert report.summary().startswith("done: ")


async def test_what_an_admin_or_a_tenant_made_is_left_and_said_so() -> None:
    world = World()
    world.kube.add(Node(metadata=ObjectMeta(name="gpu01"), spec=NodeSpec(taints=[
        Taint(key=keys.MANAGED_TAINT, value="true", effect="NoSchedule")])))
    await world.uninstall()

    taints = (world.kube.obj(Node, "gpu01") or {})["spec"]["taints"]
    assert taints == [{"key": keys.MANAGED_TAINT, "value": "true", "effect": "NoSchedule"}]
    assert world.said(f"left           node gpu01: taint {keys.MANAGED_TAINT}=true:NoSchedule, "
                      "an admin's")
    assert world.slurm.nodes["node2"].reason == "maintenance"
    assert "DRAIN" in world.slurm.nodes["node2"].states
    assert "dyn1" in world.slurm.nodes
    assert world.slurm.jobs[200].state is JobState.PENDING  # the forged placeholder
    assert world.slurm.jobs[300].state is JobState.PENDING  # a native job
    assert 200 not in world.slurm.cancelled and 300 not in world.slurm.cancelled
    assert world.said("left           slurm job 200 (k8s:ns/forged): of user mallory")
    assert world.said("left           slurm node node2: drained by someone else")
    assert world.said(f"left           node node1: label {keys.NODE_SLURM_NODE}=node1")


async def test_a_dry_run_changes_nothing_and_says_what_it_would_do() -> None:
    world = World()
    before = copy.deepcopy(world.kube.objects), copy.deepcopy(world.slurm.nodes)
    jobs = dict(world.slurm.jobs)
    report = await world.uninstall(dry_run=True)

    assert (world.kube.objects, world.slurm.nodes) == before
    assert world.slurm.jobs == jobs and not world.slurm.cancelled
    assert world.kube.written == []
    assert world.said("would delete   pod ns/waiting")
    assert world.said("would cancel   slurm job 101")
    assert report.summary().startswith("would have: ")


async def test_a_second_run_finds_nothing_to_do() -> None:
    world = World()
    await world.uninstall()
    cancelled, world.lines[:] = list(world.slurm.cancelled), []
    written = len(world.kube.written)
    report = await world.uninstall()

    assert not [a for a in report.actions if a.changes], world.lines
    assert report.summary().startswith("nothing of the bridge to remove")
    assert world.slurm.cancelled == cancelled
    # only this run's own hold of the controllers' Lease was written (and deleted)
    assert {kind for _, kind, _ in world.kube.written[written:]} <= {"Lease"}


async def test_gated_pods_are_left_gated_when_the_admin_says_so() -> None:
    world = World()
    await world.uninstall(keep_gated_pods=True)

    pod = world.pod("waiting")
    assert pod is not None and pod["spec"]["schedulingGates"] == [{"name": keys.SLURM_GATE}]
    assert world.kube.evicted == ["ns/running"]
    assert world.said("left           pod ns/waiting: gated: nothing would release it "
                      "(--keep-gated-pods)")
    assert world.slurm.jobs[100].state is JobState.CANCELLED  # no bridge will take it up


async def test_running_pods_are_left_with_their_jobs_and_claims_when_the_admin_says_so() -> None:
    world = World()
    await world.uninstall(keep_running_pods=True)

    assert world.kube.evicted == ["ns/waiting"]
    assert world.slurm.jobs[101].state is JobState.RUNNING
    claim = world.kube.obj(ResourceClaim, "c1", "ns")
    assert claim is not None and claim["metadata"]["finalizers"] == [keys.CLAIM_FINALIZER]
    assert world.said("left           slurm job 101 (k8s:ns/running): its pod runs on")


async def test_the_named_extender_is_scaled_to_zero_first() -> None:
    world = World()
    world.kube.add(Deployment(metadata=ObjectMeta(name="sb-extender", namespace=NS),
                              spec=DeploymentSpec(replicas=2, selector=LabelSelector(),
                                                  template=cast(Any, {}))))
    await world.uninstall(extender_deployment="sb-extender")

    deployment = world.kube.obj(Deployment, "sb-extender", NS)
    assert deployment is not None and deployment["spec"]["replicas"] == 0
    assert world.lines[0].startswith("stopped        deployment slurmbridge-system/sb-extender")


async def test_a_bridge_still_leading_is_an_error_and_nothing_is_changed() -> None:
    world = World()
    world.kube.add(Lease(metadata=ObjectMeta(name="slurmbridge-controllers", namespace=NS),
                         spec=LeaseSpec(holderIdentity="extender-0", leaseDurationSeconds=15,
                                        renewTime=datetime.now(UTC) + timedelta(minutes=5))))
    with pytest.raises(Failure, match=r"the bridge is running.*no object of the bridge"):
        await world.uninstall(wait_seconds=0)
    assert not world.kube.evicted and not world.slurm.cancelled


async def test_an_unreachable_slurmrestd_is_an_error_and_nothing_is_changed() -> None:
    world = World()
    world.slurm.down = True
    with pytest.raises(Failure, match=r"cannot reach slurmrestd.*Nothing was changed"):
        await world.uninstall()
    assert world.kube.written == []


async def test_an_apiserver_lost_midway_says_what_was_done_and_what_is_left() -> None:
    world = World()

    async def cancel_then_lose_the_apiserver(job_id: int) -> None:
        world.kube.down = True
        await FakeSlurm.cancel(world.slurm, job_id)

    world.slurm.cancel = cancel_then_lose_the_apiserver  # type: ignore[method-assign]
    with pytest.raises(Failure, match=r"stopped while freeing DRA claims.*change.*left"):
        await world.uninstall()
    assert world.said("cancelled      slurm job 100")


async def test_a_node_changed_between_the_listing_and_the_write_is_read_again() -> None:
    """Its kubelet writes the Node too: a write under an older resourceVersion (409) is
    retried on the Node as it is now, never dropping what changed meanwhile."""
    world = World()
    real_patch = world.kube.patch
    raced: list[str] = []

    async def kubelet_first(res: Any, name: str, obj: Any, **kw: Any) -> Any:
        if res is Node and not raced:  # the kubelet adds a taint just before our write
            raced.append(name)
            await real_patch(Node, name, {"spec": {"taints": [
                *world.node()["spec"]["taints"],
                {"key": "kubelet", "effect": "NoExecute"}]}}, patch_type=PatchType.MERGE)
        return await real_patch(res, name, obj, **kw)

    world.kube.patch = kubelet_first  # type: ignore[method-assign]
    await world.uninstall()
    assert raced == ["node1"]
    kubelets = {"key": "kubelet", "effect": "NoExecute"}
    assert world.node()["spec"]["taints"] == [OTHER_TAINT, kubelets]
    assert len(world.said("untainted      node node1")) == 1
