"""A mixed group is one Slurm heterogeneous job (issue 43): a 1-CPU launcher and two GPU
workers, each part a component with its own shape, seen through the admin's own tools."""

from collections.abc import AsyncIterator
from typing import cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import OwnerReference
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.slurm.client import SlurmClient
from bridge.slurm.wire.base import JobsResponse, JobStatesResponse
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    pod_manifest,
    quiet_namespace,
    wait_bound,
    wait_slurm_job,
)
from slurmbridge_devkit.scontrol import gpu_overlaps, parse_job_line, show_jobs
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import DEFAULT_TENANCY, BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for
from tests.e2e.test_accounting import accounting_ready
from tests.e2e.test_workloads import (
    LeaderWorkerSet,
    PodGroup,
    create,
    create_jobset,
    ensure_crd,
    owner_ref,
    template,
    wait_bound_pods,
)

pytestmark = pytest.mark.e2e

GROUP = {keys.GROUP: "mix", keys.GROUP_SIZE: "3"}
PARTS = {keys.GROUP_COMPONENTS: "launcher=1,workers=2"}
Placed = dict[str, tuple[Pod, int]]  # pod name -> (the bound pod, its component's offset)
# Kubernetes 1.37's group of PodGroups (feature gate CompositePodGroup, alpha): v1alpha3 only.
Workload = create_namespaced_resource("scheduling.k8s.io", "v1beta1", "Workload", "workloads")
CompositePodGroup = create_namespaced_resource(
    "scheduling.k8s.io", "v1alpha3", "CompositePodGroup", "compositepodgroups")


def _member(name: str, rank: int, component: str, gpus: int) -> Pod:
    labels = {**GROUP, keys.GROUP_RANK: str(rank), keys.GROUP_COMPONENT: component}
    return pod_manifest(name, cpu="1", gpus=gpus, labels=labels, annotations=PARTS)


@pytest.fixture
async def beside_natives(
    bridge_stack: BridgeStack, e2e_namespace: NamespaceFactory
) -> AsyncIterator[tuple[SlurmTarget, str]]:
    """A quiet Slurm whose every node has a native job on GPUs 0-1, and a fresh namespace
    running as alice in account team-a."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "hetjob")
    accounting_ready(slurm)
    bridge_stack.tenancy_file.write_text(yaml.safe_dump(
        {"namespaces": {ns: {"account": "team-a", "user": "alice"}}}))
    nodes = sorted(set(slurm.admin("sinfo", "-h", "-N", "-o", "%N").split()))
    natives = [slurm.admin("sbatch", "--parsable", "-J", "native-gpu", "--gres=gpu:2", "-c", "1",
                           "-w", node, "-o", "/dev/null", "--wrap", "sleep 900").strip()
               for node in nodes]
    try:
        await wait_for(lambda: all(j.state == "RUNNING" for j in show_jobs(slurm)
                                   if str(j.job_id) in natives), 30, what="natives running")
        yield slurm, ns
    finally:
        slurm.admin("scancel", *natives)
        slurm.admin("scancel", "-u", "alice")  # the namespace's jobs
        bridge_stack.tenancy_file.write_text(yaml.safe_dump(DEFAULT_TENANCY))


def _assert_one_heterogeneous_job(
    stack: BridgeStack, ns: str, placed: Placed, group: str = "mix"
) -> None:
    """squeue, scontrol and sacct show one job of two components under team-a; each member
    sits on its component's node with exactly its GPUs there (the launcher none); no GPU of
    any running job is held twice."""
    slurm, name = stack.slurm, f"k8s:{ns}/{group}"
    leader = {(p.metadata.annotations or {})[keys.JOB_ID] for p, _ in placed.values()
              if p.metadata}
    assert len(leader) == 1, f"one Slurm job for the group: {leader}"
    job_id = leader.pop()
    rows = [f"{job_id}+0|{name}|team-a", f"{job_id}+1|{name}|team-a"]
    assert sorted(slurm.admin("squeue", "-h", "-o", "%i|%j|%a", "-n", name).split()) == rows
    shown = slurm.admin("scontrol", "show", "job", "-d", "-o", job_id).splitlines()
    parts = {int(v.fields["HetJobOffset"]): v for v in map(parse_job_line, shown)}
    assert sorted(parts) == [0, 1], shown
    for member, (pod, offset) in placed.items():
        assert pod.metadata and pod.spec
        node = stack.slurm_node_of(pod.spec.nodeName or "")
        assert node in parts[offset].nodes, (member, node, parts[offset].nodes)
        ids = (pod.metadata.annotations or {})[keys.GPU_IDS]
        held = {int(i) for i in ids.split(",") if i}
        if offset == 0:
            assert held == set(), f"the launcher got GPUs {ids}"
        else:
            assert len(held) == 2 and held <= set(parts[1].gpus[node]), (member, ids)
            assert not held & {0, 1}, f"{member} on the native job's GPUs: {ids}"
    assert gpu_overlaps(show_jobs(slurm)) == {}
    accounted = slurm.admin("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,JobName,Account")
    assert sorted(accounted.split()) == rows


async def test_a_launcher_and_gpu_workers_are_one_heterogeneous_job_on_slurms_gpus(
    bridge_stack: BridgeStack, kube: AsyncClient, beside_natives: tuple[SlurmTarget, str]
) -> None:
    _, ns = beside_natives
    await create_pod(kube, ns, _member("launcher", 0, "launcher", 0))
    for i in range(2):
        await create_pod(kube, ns, _member(f"worker-{i}", 1 + i, "workers", 2))
    placed = {name: (await wait_bound(kube, ns, name, timeout=120), offset)
              for name, offset in (("launcher", 0), ("worker-0", 1), ("worker-1", 1))}
    _assert_one_heterogeneous_job(bridge_stack, ns, placed)


async def test_a_jobset_of_a_cpu_driver_and_gpu_workers_is_one_heterogeneous_job(
    bridge_stack: BridgeStack, kube: AsyncClient, beside_natives: tuple[SlurmTarget, str]
) -> None:
    _, ns = beside_natives
    workers = template()
    workers["spec"]["containers"][0]["resources"]["limits"][keys.GPU_RESOURCE] = "2"
    await create_jobset(kube, ns, "mix", [("driver", 1, 1, template()), ("workers", 1, 2, workers)])
    pods = await wait_bound_pods(kube, ns, {keys.JOBSET_NAME: "mix"}, 3)
    placed = {}
    for pod in pods:
        assert pod.metadata and pod.metadata.name
        labels = pod.metadata.labels or {}
        assert labels[keys.GROUP_COMPONENT] == labels[keys.JOBSET_REPLICATED_JOB]
        placed[pod.metadata.name] = (pod, 0 if labels[keys.GROUP_COMPONENT] == "driver" else 1)
    _assert_one_heterogeneous_job(bridge_stack, ns, placed)


async def test_an_lws_whose_leader_differs_from_its_workers_is_one_heterogeneous_job(
    bridge_stack: BridgeStack, kube: AsyncClient, beside_natives: tuple[SlurmTarget, str]
) -> None:
    """A 1-CPU leader serving the API, two workers holding 2 GPUs each: the LWS's pods as its
    controller makes them (its Go module is not served to these machines)."""
    _, ns = beside_natives
    await ensure_crd(kube, "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets")
    workers = template()
    workers["spec"]["containers"][0]["resources"]["limits"][keys.GPU_RESOURCE] = "2"
    lws = await create(kube, LeaderWorkerSet, ns, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "mix"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": 3, "leaderTemplate": template(), "workerTemplate": workers}},
    })
    for worker, pod_name in ((0, "mix-0"), (1, "mix-0-1"), (2, "mix-0-2")):
        labels = {keys.LWS_NAME: "mix", keys.LWS_GROUP_INDEX: "0",
                  keys.LWS_WORKER_INDEX: str(worker)}
        pod = pod_manifest(pod_name, gpus=2 if worker else 0, labels=labels,
                           annotations={keys.LWS_SIZE: "3"})
        assert pod.metadata is not None
        pod.metadata.ownerReferences = [
            cast(OwnerReference, OwnerReference.from_dict(owner_ref(lws)))]
        await create_pod(kube, ns, pod)
    pods = await wait_bound_pods(kube, ns, {keys.LWS_NAME: "mix"}, 3)
    placed = {}
    for pod in pods:
        assert pod.metadata and pod.metadata.name
        component = (pod.metadata.labels or {})[keys.GROUP_COMPONENT]
        assert component == ("leader" if pod.metadata.name == "mix-0" else "worker")
        placed[pod.metadata.name] = (pod, 0 if component == "leader" else 1)
    _assert_one_heterogeneous_job(bridge_stack, ns, placed, group="mix-0")


# Workload 'train' with one composite template (a launcher template of 1 pod, a workers
# template of 2), the CompositePodGroup 'mix' made from it and its two child PodGroups, as a
# workload controller would create them (docs/workloads.md shows these manifests).
COMPOSITE_MANIFESTS = """\
apiVersion: scheduling.k8s.io/v1beta1
kind: Workload
metadata: {name: train}
spec:
  compositePodGroupTemplates:
  - name: job
    schedulingPolicy: {gang: {minGroupCount: 2}}
    podGroupTemplates:
    - {name: launcher, schedulingPolicy: {gang: {minCount: 1}}}
    - {name: workers, schedulingPolicy: {gang: {minCount: 2}}}
---
apiVersion: scheduling.k8s.io/v1alpha3
kind: CompositePodGroup
metadata: {name: mix}
spec:
  workloadRef: {workloadName: train, templateName: job}
  schedulingPolicy: {gang: {minGroupCount: 2}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: mix-launcher}
spec:
  parentCompositePodGroupName: mix
  workloadRef: {workloadName: train, templateName: launcher}
  schedulingPolicy: {gang: {minCount: 1}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: mix-workers}
spec:
  parentCompositePodGroupName: mix
  workloadRef: {workloadName: train, templateName: workers}
  schedulingPolicy: {gang: {minCount: 2}}
"""


async def _create_composite(kube: AsyncClient, ns: str, manifests: str) -> None:
    kinds = {"Workload": Workload, "CompositePodGroup": CompositePodGroup, "PodGroup": PodGroup}
    for manifest in yaml.safe_load_all(manifests):
        await create(kube, kinds[manifest["kind"]], ns, manifest)


def _composite_member(name: str, part: str, index: int, gpus: int) -> Pod:
    return (PodBuilder(name).cpu("1").memory("1Gi").gpus(gpus)
            .annotations({keys.JOB_COMPLETION_INDEX: str(index)})
            .pod_group(f"mix-{part}").scheduler(keys.SCHEDULER_NAME).build())


async def test_a_composite_pod_group_of_a_launcher_and_gpu_workers_is_one_heterogeneous_job(
    bridge_stack: BridgeStack, kube: AsyncClient, beside_natives: tuple[SlurmTarget, str]
) -> None:
    """Kubernetes 1.37's CompositePodGroup: each pod names its child PodGroup
    (spec.schedulingGroup); the composite is the group, each child template a component."""
    slurm, ns = beside_natives
    await _create_composite(kube, ns, COMPOSITE_MANIFESTS)
    members = (("launcher", "launcher", 0, 0), ("worker-0", "workers", 0, 2),
               ("worker-1", "workers", 1, 2))
    for name, part, index, gpus in members:
        await create_pod(kube, ns, _composite_member(name, part, index, gpus))
    placed, job_id = {}, ""
    for name, part, _, _ in members:
        pod = await wait_bound(kube, ns, name, timeout=120)
        assert pod.metadata
        labels = pod.metadata.labels or {}
        assert (labels[keys.GROUP], labels[keys.GROUP_COMPONENT]) == ("mix", part), labels
        placed[name] = (pod, 0 if part == "launcher" else 1)
        job_id = (pod.metadata.annotations or {}).get(keys.JOB_ID, "")
    _assert_one_heterogeneous_job(bridge_stack, ns, placed)
    for command in (("squeue", "-o", "%i|%j|%a|%T|%D|%N|%b", "-j", job_id),
                    ("scontrol", "show", "job", "-d", job_id),
                    ("sacct", "-X", "-P", "-j", job_id, "-o", "JobID,JobName,Account,AllocTRES")):
        print(f"slurm {slurm.version} $ {' '.join(command)}\n{slurm.admin(*command)}")


async def test_a_composite_asking_for_fewer_groups_than_it_has_is_refused_naming_it(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Slurm starts every component of a heterogeneous job together: a composite that lets
    kube-scheduler start one child group without the other cannot be one; the pod is refused
    when created, naming the composite and the count to set."""
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "hetpart")
    await _create_composite(kube, ns, COMPOSITE_MANIFESTS.replace("minGroupCount: 2",
                                                                  "minGroupCount: 1"))
    with pytest.raises(ApiError) as refused:
        await create_pod(kube, ns, _composite_member("worker-0", "workers", 0, 2))
    message = str(refused.value.status.message)
    print(f"refused: {message}")
    assert f"CompositePodGroup {ns}/mix asks for 1 of its 2 child groups" in message, message
    assert "set schedulingPolicy.gang.minGroupCount to 2" in message, message



async def test_a_group_needing_more_nodes_than_slurm_has_is_refused_naming_the_fix(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Slurm puts no two components of one heterogeneous job on one node (``-N1 : -N2`` on two
    idle nodes pends for ever, reason Resources): a launcher beside a worker on every node
    needs one node more than Slurm has.  Nothing is submitted, and every member is told so,
    naming each component's nodes, Slurm's and what to do."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "hetfit")
    count = len(set(slurm.admin("sinfo", "-h", "-N", "-o", "%N").split()))
    group = {keys.GROUP: "big", keys.GROUP_SIZE: str(1 + count)}
    parts = {keys.GROUP_COMPONENTS: f"launcher=1,workers={count}"}
    names = ["launcher", *(f"worker-{i}" for i in range(count))]
    for rank, name in enumerate(names):
        labels = {**group, keys.GROUP_RANK: str(rank),
                  keys.GROUP_COMPONENT: "launcher" if rank == 0 else "workers"}
        await create_pod(kube, ns, pod_manifest(name, cpu="1", gpus=1 if rank else 0,
                                                labels=labels, annotations=parts))
    said: dict[str, str] = {}

    async def told() -> bool:
        for name in names:
            said[name] = next((m for r, m in await pod_events(kube, ns, name)
                               if r == keys.EventReason.SUBMIT_REFUSED.value), "")
        return all(said.values())

    try:
        await wait_for(told, 60, interval=1, what="every member told its job can never start")
        print(f"slurm {slurm.version}, each member's {keys.EventReason.SUBMIT_REFUSED.value}: "
              f"{said['launcher']}")
        for name, message in said.items():
            for words in (f"group {ns}/big can never start",
                          "no two components of one heterogeneous job on one node",
                          f"launcher 1, workers {count}", f"Slurm has {count} nodes",
                          "put fewer members in a component, or ask for partitions with more "
                          "nodes"):
                assert words in message, (name, words, message)
        listed = slurm.admin("squeue", "-h", "-t", "all", "-o", "%i", "-n", f"k8s:{ns}/big")
        assert listed.split() == [], f"a job was submitted: {listed}"
    finally:
        slurm.admin("scancel", "-n", f"k8s:{ns}/big")

# --- lifecycle and status (issue 43, item 4) -------------------------------------------------

async def _slurmrestd_says(slurm: SlurmTarget, job_id: str) -> list[tuple[str, str, str, str]]:
    """Each component's record as slurmrestd answers ``GET /job/<id>`` and the state list
    ``GET /jobs/state/?job_id=<id>&job_id=<id+1>`` (printed: what the bridge reads)."""
    async with SlurmClient(slurm.settings()) as client:
        await client.connect()
        whole = await client.rest.call("GET", f"/job/{job_id}", "get_job", JobsResponse)
        listed = await client.rest.call(
            "GET", "/jobs/state/", "job_states", JobStatesResponse,
            query=[("job_id", job_id), ("job_id", str(int(job_id) + 1))])
    records = [(str(j.job_id), str(j.het_job_offset.number), ",".join(j.job_state),
                j.state_reason) for j in whole.jobs]
    print(f"slurm {slurm.version} GET /job/{job_id}: {records}")
    print(f"slurm {slurm.version} GET /jobs/state/: "
          f"{[(str(e.job_id), ','.join(e.state)) for e in listed.jobs]}")
    return records


async def test_a_pending_heterogeneous_jobs_members_are_told_their_components_state(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Every node but two held whole by a native job: the group's three nodes are not free,
    its job pends, and each member's event names its own component and that component's
    state and reason as slurmrestd gives them."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "hetpend")
    nodes = set(slurm.admin("sinfo", "-h", "-N", "-o", "%N").split())
    native = slurm.admin("sbatch", "--parsable", "-J", "native-whole", "--exclusive",
                         f"-N{len(nodes) - 2}", "-o", "/dev/null", "--wrap", "sleep 900").strip()
    try:
        await wait_for(lambda: any(j.state == "RUNNING" for j in show_jobs(slurm)
                                   if str(j.job_id) == native), 30, what="the native running")
        await create_pod(kube, ns, _member("launcher", 0, "launcher", 0))
        for i in range(2):
            await create_pod(kube, ns, _member(f"worker-{i}", 1 + i, "workers", 1))
        job_id = (await wait_slurm_job(slurm, ns, "mix")).split()[0].partition("+")[0]
        said: dict[str, str] = {}

        async def told() -> bool:
            for name in ("launcher", "worker-0"):
                said[name] = next((m for r, m in await pod_events(kube, ns, name)
                                   if r == keys.EventReason.PENDING.value), "")
            return all(said.values())

        await wait_for(told, 60, interval=1, what="each member told why its job waits")
        records = await _slurmrestd_says(slurm, job_id)
        assert [r[2] for r in records] == ["PENDING", "PENDING"], records
        for name, offset, component in (("launcher", 0, "launcher"), ("worker-0", 1, "workers")):
            reason = records[offset][3]
            words = (f"Slurm job {job_id} (PENDING, reason {reason}), component {component} "
                     f"(+{offset}) of heterogeneous job {job_id}")
            assert words in said[name], (name, said[name], records)
    finally:
        slurm.admin("scancel", native)
        slurm.admin("scancel", "-n", f"k8s:{ns}/mix")


async def test_cancelling_one_component_ends_every_member_of_the_group(
    bridge_stack: BridgeStack, kube: AsyncClient, beside_natives: tuple[SlurmTarget, str]
) -> None:
    """An admin cancels the workers' component (``scancel <id>+1``; Slurm keeps the
    launcher's running): no worker is left on GPUs Slurm gave back, every member is evicted,
    and the rest of the job is cancelled."""
    slurm, ns = beside_natives
    await create_pod(kube, ns, _member("launcher", 0, "launcher", 0))
    for i in range(2):
        await create_pod(kube, ns, _member(f"worker-{i}", 1 + i, "workers", 2))
    names = ("launcher", "worker-0", "worker-1")
    bound = [await wait_bound(kube, ns, name, timeout=120) for name in names]
    job_id = (bound[0].metadata.annotations or {})[keys.JOB_ID] if bound[0].metadata else ""
    slurm.admin("scancel", f"{job_id}+1")
    print(f"slurm {slurm.version} after scancel {job_id}+1: "
          + slurm.admin("squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", job_id).strip())
    await _slurmrestd_says(slurm, job_id)

    async def all_ended() -> bool:
        for name in names:
            try:
                pod = await kube.get(Pod, name, namespace=ns)
            except ApiError as exc:
                if exc.status.code == 404:
                    continue
                raise
            if not (pod.metadata and pod.metadata.deletionTimestamp) and not (
                    pod.status and pod.status.phase in ("Failed", "Succeeded")):
                return False
        return True

    await wait_for(all_ended, 60, interval=1, what="every member of the group evicted")

    def job_over() -> bool:
        states = slurm.admin("squeue", "-h", "-t", "all", "-o", "%T", "-j", job_id).split()
        return not {"RUNNING", "PENDING"} & set(states)

    await wait_for(job_over, 60, interval=1, what=f"no component of job {job_id} running")
