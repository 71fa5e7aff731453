"""A mixed group is one Slurm heterogeneous job (issue 43): a 1-CPU launcher and two GPU
workers, each part a component with its own shape, seen through the admin's own tools."""

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest, quiet_namespace, wait_bound
from slurmbridge_devkit.scontrol import gpu_overlaps, parse_job_line, show_jobs
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import DEFAULT_TENANCY, BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for
from tests.e2e.test_accounting import _accounting_ready

pytestmark = pytest.mark.e2e

GROUP = {keys.GROUP: "mix", keys.GROUP_SIZE: "3"}
PARTS = {keys.GROUP_COMPONENTS: "launcher=1,workers=2"}


def _member(name: str, rank: int, component: str, gpus: int) -> Pod:
    labels = {**GROUP, keys.GROUP_RANK: str(rank), keys.GROUP_COMPONENT: component}
    return pod_manifest(name, cpu="1", gpus=gpus, labels=labels, annotations=PARTS)


def _natives_on_gpus_0_1(slurm: SlurmTarget) -> list[str]:
    nodes = sorted(set(slurm.admin("sinfo", "-h", "-N", "-o", "%N").split()))
    return [slurm.admin("sbatch", "--parsable", "-J", "native-gpu", "--gres=gpu:2", "-c", "1",
                        "-w", node, "-o", "/dev/null", "--wrap", "sleep 900").strip()
            for node in nodes]


async def test_a_launcher_and_gpu_workers_are_one_heterogeneous_job_on_slurms_gpus(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "hetjob")
    _accounting_ready(slurm)
    bridge_stack.tenancy_file.write_text(yaml.safe_dump(
        {"namespaces": {ns: {"account": "team-a", "user": "alice"}}}))
    natives = _natives_on_gpus_0_1(slurm)
    name = f"k8s:{ns}/mix"
    try:
        await wait_for(lambda: all(j.state == "RUNNING" for j in show_jobs(slurm)
                                   if str(j.job_id) in natives), 30, what="natives running")
        await create_pod(kube, ns, _member("launcher", 0, "launcher", 0))
        for i in range(2):
            await create_pod(kube, ns, _member(f"worker-{i}", 1 + i, "workers", 2))
        pods = {n: await wait_bound(kube, ns, n, timeout=120)
                for n in ("launcher", "worker-0", "worker-1")}
        leader = {(p.metadata.annotations or {})[keys.JOB_ID] for p in pods.values()
                  if p.metadata}
        assert len(leader) == 1, f"one Slurm job for the group: {leader}"
        job_id = leader.pop()
        queue = slurm.admin("squeue", "-h", "-o", "%i|%j|%a", "-n", name).split()
        assert sorted(queue) == [f"{job_id}+0|{name}|team-a", f"{job_id}+1|{name}|team-a"]
        shown = slurm.admin("scontrol", "show", "job", "-d", "-o", job_id).splitlines()
        parts = {int(v.fields["HetJobOffset"]): v for v in map(parse_job_line, shown)}
        assert sorted(parts) == [0, 1], shown
        for member, offset in (("launcher", 0), ("worker-0", 1), ("worker-1", 1)):
            pod = pods[member]
            assert pod.metadata and pod.spec
            node = bridge_stack.slurm_node_of(pod.spec.nodeName or "")
            assert node in parts[offset].nodes, (member, node, parts[offset].nodes)
            ids = (pod.metadata.annotations or {})[keys.GPU_IDS]
            held = {int(i) for i in ids.split(",") if i}
            if offset == 0:
                assert held == set(), f"the launcher got GPUs {ids}"
            else:
                assert len(held) == 2 and held <= set(parts[1].gpus[node]), (member, ids)
                assert not held & {0, 1}, f"{member} on the native job's GPUs: {ids}"
        assert gpu_overlaps(show_jobs(slurm)) == {}
        accounted = slurm.admin("sacct", "-X", "-n", "-P", "-j", job_id,
                                "-o", "JobID,JobName,Account").split()
        assert sorted(accounted) == [f"{job_id}+0|{name}|team-a", f"{job_id}+1|{name}|team-a"]
    finally:
        slurm.admin("scancel", *natives)
        slurm.admin("scancel", "-n", name)
        bridge_stack.tenancy_file.write_text(yaml.safe_dump(DEFAULT_TENANCY))
