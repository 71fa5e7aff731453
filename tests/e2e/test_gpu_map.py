"""The GPU map (issue 45) against the real Slurm and apiserver: with a native GPU job and the
bridge's pods running, ``slurmbridge gpus -o json`` says, index by index, what
``scontrol show job -d`` (parsed by the dev kit) and the pods' annotations say; and
``kubectl slurmbridge gpus``, run as a user of one namespace, names that namespace's pods and
shows another's only as "another namespace"."""

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.core_v1 import Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod, quiet_namespace, wait_bound
from slurmbridge_devkit.kube import ControlPlane
from slurmbridge_devkit.namespaces import kubectl_plugin, namespace_user
from slurmbridge_devkit.scontrol import show_jobs
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for
from tests.e2e.test_kubectl_plugin import READ_PODS_AND_EVENTS

pytestmark = pytest.mark.e2e

HOLDING = ("RUNNING", "COMPLETING", "SUSPENDED")


def _native_gpu_job(stack: BridgeStack, gpus: int, node: str) -> str:
    job = stack.slurm.admin("sbatch", "--parsable", f"--gres=gpu:{gpus}", "-w", node,
                            "-o", "/dev/null", "--wrap", "sleep 600").strip()
    return job.split(";")[0]


async def _bridge_pods(stack: BridgeStack, kube: AsyncClient, ns: str, *names: str) -> list[Pod]:
    for name in names:
        await create_pod(kube, ns, PodBuilder(name).gpus(1).build())
    return [await wait_bound(kube, ns, name) for name in names]


def _map(stack: BridgeStack) -> dict[str, Any]:
    done = stack.cli("--log-level", "warning", "gpus", "-o", "json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _held(data: dict[str, Any]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    return {(n["node"], g["index"]): g["holders"] for n in data["nodes"] for g in n["gpus"]}


async def test_slurmbridge_gpus_says_what_scontrol_and_the_pods_say_index_by_index(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "gpumap")
    native = _native_gpu_job(bridge_stack, 2, "node1")
    try:
        await wait_for(lambda: bridge_stack.slurm.admin(
            "squeue", "-h", "-j", native, "-o", "%T").strip() == "RUNNING", 30, interval=0.5,
            what=f"native job {native} running")
        pods = await _bridge_pods(bridge_stack, kube, ns, "p-0", "p-1")
        data = _map(bridge_stack)
        slurm_view = {(node, index): job.job_id
                      for job in show_jobs(bridge_stack.slurm) if job.state in HOLDING
                      for node, indices in (job.gpus | {n: tuple(s) for n, s in
                                                         job.shards.items()}).items()
                      for index in indices}
        held = _held(data)
        assert {gpu: [h["job_id"] for h in holders] for gpu, holders in held.items()
                if holders} == {gpu: [job] for gpu, job in slurm_view.items()}, data
        assert all(not holders for gpu, holders in held.items() if gpu not in slurm_view)
        (native_view,) = [j for j in show_jobs(bridge_stack.slurm) if j.job_id == int(native)]
        user = native_view.fields["UserId"].partition("(")[0]
        natives = [(h["kind"], h["user"]) for hs in held.values() for h in hs
                   if h["job_id"] == int(native)]
        assert natives == [("native", user)] * 2, data
        for pod in pods:
            meta = pod.metadata
            assert meta is not None and meta.annotations is not None
            node = meta.annotations[keys.SLURM_NODE]
            for index in meta.annotations[keys.GPU_IDS].split(","):
                (holder,) = held[(node, int(index))]
                assert (holder["kind"], holder["job_id"]) == \
                    ("placeholder", int(meta.annotations[keys.JOB_ID])), data
                assert f"{ns}/{meta.name}" in holder["pods"], data
        assert data["disagreements"] == [], data
    finally:
        bridge_stack.slurm.admin("scancel", native)


async def _cluster_reader(kube: AsyncClient, ns: str, name: str) -> None:
    """Let ``ns``'s ServiceAccount ``name`` list pods in every namespace (as a cluster that
    lets researchers see the queue would): the plugin still names only their own."""
    await kube.create(ClusterRole(metadata=ObjectMeta(name=f"{ns}-{name}"), rules=[
        PolicyRule(apiGroups=[""], resources=["pods"], verbs=["list"])]))
    await kube.create(ClusterRoleBinding(
        metadata=ObjectMeta(name=f"{ns}-{name}"),
        roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole",
                        name=f"{ns}-{name}"),
        subjects=[Subject(kind="ServiceAccount", name=name, namespace=ns)]))


async def _user(kube: AsyncClient, cp: ControlPlane, ns: str, name: str, path: Path) -> Path:
    config = await namespace_user(kube, cp, ns, READ_PODS_AND_EVENTS, name=name)
    path.write_text(yaml.safe_dump(config))  # noqa: ASYNC240 - a small file, once
    return path


def _gpus(cp: ControlPlane, user: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = kubectl_plugin(cp, user, "gpus", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


async def test_kubectl_gpus_shows_another_namespaces_pods_only_as_another_namespace(
    bridge_stack: BridgeStack, kube: AsyncClient, control_plane: ControlPlane,
    e2e_namespace: NamespaceFactory, tmp_path: Path,
) -> None:
    _, mine = await quiet_namespace(bridge_stack, e2e_namespace, "gpus-mine")
    theirs = await e2e_namespace("gpus-theirs")
    (own,) = await _bridge_pods(bridge_stack, kube, mine, "mine-0")
    (other,) = await _bridge_pods(bridge_stack, kube, theirs, "secret-0")
    wide = await _user(kube, control_plane, mine, "wide", tmp_path / "wide.kubeconfig")
    narrow = await _user(kube, control_plane, mine, "narrow", tmp_path / "narrow.kubeconfig")
    await _cluster_reader(kube, mine, "wide")
    try:
        table = _gpus(control_plane, wide).stdout
        data = json.loads(_gpus(control_plane, wide, "-o", "json").stdout)
    finally:
        await kube.delete(ClusterRoleBinding, f"{mine}-wide")
        await kube.delete(ClusterRole, f"{mine}-wide")
    assert f"{mine}/mine-0" in table and "→ another namespace" in table, table
    for text in (table, json.dumps(data)):
        assert theirs not in text and "secret-0" not in text, text
    held = _held(data)
    for pod, shown in ((own, f"{mine}/mine-0"), (other, "")):
        assert pod.metadata is not None and pod.metadata.annotations is not None
        notes = pod.metadata.annotations
        holders = held[(notes[keys.SLURM_NODE], int(notes[keys.GPU_IDS]))]
        assert any(shown in h["pods"] and h["job_id"] == int(notes[keys.JOB_ID])
                   for h in holders), data
    alone = _gpus(control_plane, narrow).stdout  # RBAC of its namespace alone: its own pods
    assert f"{mine}/mine-0" in alone and "→ another namespace" not in alone, alone


async def test_a_native_heterogeneous_jobs_every_component_is_on_the_map(
    bridge_stack: BridgeStack, e2e_namespace: NamespaceFactory,
) -> None:
    """Issue 43: a Slurm user's ``sbatch --gres=gpu:1 -w node1 : --gres=gpu:2 -w node2``, one
    job of two components: the map shows the GPUs Slurm gave each (``scontrol show job -d``
    lists them on the component's own record), as the job's id, not the first alone."""
    slurm = (await quiet_namespace(bridge_stack, e2e_namespace, "gpumaphet"))[0]
    script = "/tmp/slurmbridge-native-het.sh"
    slurm.admin("bash", "-c", f"printf '#!/bin/sh\\nsleep 600\\n' > {script}")
    job = slurm.admin("sbatch", "--parsable", "-J", "native-het", "--gres=gpu:1", "-w", "node1",
                      "-o", "/dev/null", ":", "--gres=gpu:2", "-w", "node2", script)
    job = job.strip().split(";")[0]
    try:
        await wait_for(lambda: slurm.admin("squeue", "-h", "-j", job, "-o", "%T").split()
                       == ["RUNNING"] * 2, 30, interval=0.5, what=f"both components of {job}")
        parts = [j for j in show_jobs(slurm) if j.fields.get("HetJobId") == job]
        slurm_view = {(node, index): int(job) for part in parts
                      for node, indices in part.gpus.items() for index in indices}
        assert {node for node, _ in slurm_view} == {"node1", "node2"}, parts
        held = {gpu: [h["job_id"] for h in holders]
                for gpu, holders in _held(_map(bridge_stack)).items() if holders}
        assert held == {gpu: [owner] for gpu, owner in slurm_view.items()}, held
    finally:
        slurm.admin("scancel", job)
