"""Workloads beyond bare pods: what their controllers create reaches Slurm as one job per group.

Jobs, Deployments and StatefulSets are created through the API and their pods by the real
kube-controller-manager (the tests play only the kubelet: pod status).  Kueue is its own
manager (built by deploy/k8s/kueue.sh from sigs.k8s.io/kueue), run on the host against the
local control plane.  JobSet and
LeaderWorkerSet controllers are not available here (their Go modules are not served): those
tests install a minimal CRD, create the owner object, and create what the controller would,
with exactly the labels and annotations it sets (bridge/keys.py cites their sources):
JobSet child Jobs (whose pods the real Job controller then creates), LWS pods (owned here by
the LWS object directly; the real controller puts StatefulSets in between).
"""

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import trustme
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import OwnerReference
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

from bridge import keys
from bridge.slurm.allocation import expand_nodes
from slurmbridge_devkit.e2e import create_pod, pod_manifest, quiet_namespace, slurm_job_view
from slurmbridge_devkit.kube import ControlPlane, cache_dir, k8s_version, run_dir
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.processes import free_port
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

Job = create_namespaced_resource("batch", "v1", "Job", "jobs")
Deployment = create_namespaced_resource("apps", "v1", "Deployment", "deployments")
StatefulSet = create_namespaced_resource("apps", "v1", "StatefulSet", "statefulsets")
# The Workload API's version: v1alpha2 in Kubernetes 1.36, v1beta1 from 1.37.
WORKLOAD_API = "v1alpha2" if k8s_version().startswith("1.36.") else "v1beta1"
PodGroup = create_namespaced_resource("scheduling.k8s.io", WORKLOAD_API, "PodGroup", "podgroups")
JobSet = create_namespaced_resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
LeaderWorkerSet = create_namespaced_resource(
    "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"
)
CRD = create_global_resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions"
)
ResourceFlavor = create_global_resource(
    "kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors"
)
ClusterQueue = create_global_resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues")
LocalQueue = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues")
KueueWorkload = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")
KUEUE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "kueue.sh"
KUEUE_DIR = cache_dir() / f"kueue-v{os.environ.get('KUEUE_VERSION', '0.17.0')}"
# Kueue reads its metrics serving certificate from this fixed path when it does not manage
# its own certificates (cmd/kueue/main.go).
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
KUEUE_LOG = run_dir() / "logs" / "kueue.log"
BIND_TIMEOUT = 120


# --- manifests ---------------------------------------------------------------------------


def template(
    *, cpu: str = "1", labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None, restart: str = "Never",
) -> dict[str, Any]:
    """A pod template asking for the bridge; no grace period (no kubelet to wait for)."""
    limits = {"cpu": cpu, "memory": "1Gi"}
    return {
        "metadata": {"labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "schedulerName": keys.SCHEDULER_NAME,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                            "resources": {"requests": dict(limits), "limits": limits}}],
        },
    }


def job_manifest(
    name: str, pods: int, *, gang: bool = False, cpu: str = "1", backoff: int = 6,
    scheduling: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": pods, "completions": pods, "completionMode": "Indexed",
        "backoffLimit": backoff, "template": template(cpu=cpu, labels=labels),
    }
    if scheduling is not None:
        spec["scheduling"] = scheduling
    annotations = {keys.GANG: "true"} if gang else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": annotations}, "spec": spec}


# --- what Kubernetes and Slurm show -------------------------------------------------------


async def create(kube: AsyncClient, resource: Any, ns: str, manifest: dict[str, Any]) -> Any:
    manifest["metadata"]["namespace"] = ns
    return await kube.create(resource.from_dict(manifest))


async def live_pods(kube: AsyncClient, ns: str, labels: dict[str, str]) -> list[Pod]:
    """Pods matching ``labels`` neither being deleted nor finished, by name."""
    found = [p async for p in kube.list(Pod, namespace=ns, labels=dict(labels.items()))]
    live = [
        p for p in found
        if p.metadata and not p.metadata.deletionTimestamp
        and not (p.status and p.status.phase in ("Succeeded", "Failed"))
    ]
    return sorted(live, key=lambda p: (p.metadata.name or "") if p.metadata else "")


async def wait_bound_pods(
    kube: AsyncClient, ns: str, labels: dict[str, str], count: int, timeout: float = BIND_TIMEOUT  # noqa: ASYNC109
) -> list[Pod]:
    async def bound() -> list[Pod] | None:
        pods = await live_pods(kube, ns, labels)
        done = [p for p in pods if p.spec and p.spec.nodeName]
        return done if len(done) == count else None

    result: list[Pod] = await wait_for(bound, timeout, interval=0.5, what=f"{count} pods bound")
    return result


def slurm_jobs(slurm: SlurmTarget, name: str) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """Live jobs named ``name`` as squeue shows them: (id, state, node count, nodes)."""
    out = slurm.admin("squeue", "-h", "-n", name, "-o", "%i|%T|%D|%N")
    jobs = []
    for line in out.strip().splitlines():
        job_id, state, count, nodes = line.split("|")
        listed = expand_nodes(nodes) if nodes and nodes != "(null)" else ()
        jobs.append((job_id, state, int(count), tuple(listed)))
    return jobs


async def wait_no_jobs(slurm: SlurmTarget, name: str, timeout: float = 60) -> None:  # noqa: ASYNC109
    await wait_for(lambda: not slurm_jobs(slurm, name), timeout, interval=0.5,
                   what=f"no Slurm job named {name}")


def slurm_node_of(stack: BridgeStack, pod: Pod) -> str:
    assert pod.spec is not None and pod.spec.nodeName
    return stack.slurm_node_of(pod.spec.nodeName)


def assert_one_group_job(
    stack: BridgeStack, name: str, pods: list[Pod], rank_of: dict[str, int] | None = None
) -> str:
    """squeue shows one running job ``name`` of len(pods) nodes; every member is bound to one
    of its nodes, each to its own, rank r to the r-th (Slurm's node order)."""
    jobs = slurm_jobs(stack.slurm, name)
    assert len(jobs) == 1, f"squeue for {name}: {jobs}"
    job_id, state, count, nodes = jobs[0]
    assert (state, count) == ("RUNNING", len(pods)), jobs
    placed = [slurm_node_of(stack, p) for p in pods]
    assert sorted(placed) == sorted(nodes), (placed, nodes)
    for pod in pods:
        meta = pod.metadata
        assert meta is not None and meta.name is not None
        assert (meta.annotations or {})[keys.JOB_ID] == job_id
        if rank_of is not None:
            assert slurm_node_of(stack, pod) == nodes[rank_of[meta.name]], (meta.name, nodes)
    return job_id


def completion_ranks(pods: list[Pod]) -> dict[str, int]:
    return {p.metadata.name: int((p.metadata.annotations or {})[keys.JOB_COMPLETION_INDEX])
            for p in pods if p.metadata and p.metadata.name}


async def run_pods(kube: AsyncClient, pods: list[Pod]) -> None:
    """Play the kubelet: the bound pods' containers run."""
    for pod in pods:
        await set_pod_phase(kube, pod, "Running")


async def block(slurm: SlurmTarget, *nodes: str, cpus: int = 32) -> list[str]:
    """Admin jobs holding ``cpus`` CPUs on each node, so a 48-CPU member fits only elsewhere.

    Returns once they run: a blocker still pending when the group's job arrives could let
    Slurm give its node to the group first."""
    jobs = [
        slurm.admin("sbatch", "--parsable", "-c", str(cpus), "-w", node, "-o", "/dev/null",
                    "--wrap", "sleep 900").strip()
        for node in nodes
    ]

    def running() -> bool:
        return all(slurm_job_view(slurm, job)["state"] == "RUNNING" for job in jobs)

    await wait_for(running, 30, what=f"blockers {jobs} running")
    return jobs


def crd_manifest(group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    """A CRD accepting any spec (the real controller's CRD validates more)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                 "versions": [{"name": version, "served": True, "storage": True, "schema": {
                     "openAPIV3Schema": {"type": "object",
                                         "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


async def ensure_crd(kube: AsyncClient, group: str, version: str, kind: str, plural: str) -> None:
    try:
        await kube.create(CRD.from_dict(crd_manifest(group, version, kind, plural)))
    except ApiError as exc:
        if exc.status.code != 409:
            raise
    await wait_established(kube, f"{plural}.{group}")


async def wait_established(kube: AsyncClient, name: str) -> None:
    async def established() -> bool:
        got = await kube.get(CRD, name)
        conditions = (got.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await wait_for(established, 30, interval=0.2, what=f"CRD {name} established")


def owner_ref(obj: Any) -> dict[str, Any]:
    meta = obj.metadata
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta.name,
            "uid": meta.uid, "controller": True, "blockOwnerDeletion": True}


Replicated = list[tuple[str, int, int, dict[str, Any]]]  # (name, replicas, pods, pod template)
JOBSET_CRD = ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")


def jobset_manifest(name: str, replicated: Replicated) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [
            {"name": rj, "replicas": replicas,
             "template": {"spec": {"parallelism": pods, "completions": pods,
                                   "completionMode": "Indexed", "template": pod}}}
            for rj, replicas, pods, pod in replicated]},
    }


def jobset_jobs(name: str, owner: dict[str, Any], replicated: Replicated) -> list[dict[str, Any]]:
    """The child Jobs the JobSet controller makes of JobSet ``name`` (``owner``: the reference
    to it), with exactly the labels and annotations it sets."""
    jobs, global_index = [], 0
    for rj, replicas, pods, pod in replicated:
        for index in range(replicas):
            marks = {keys.JOBSET_NAME: name, keys.JOBSET_REPLICATED_JOB: rj,
                     keys.JOBSET_JOB_INDEX: str(index),
                     "jobset.sigs.k8s.io/job-global-index": str(global_index),
                     "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
                     "jobset.sigs.k8s.io/global-replicas": str(sum(r[1] for r in replicated))}
            global_index += 1
            manifest = job_manifest(f"{name}-{rj}-{index}", pods, labels=marks)
            manifest["spec"]["template"]["spec"] = pod["spec"]
            manifest["metadata"].update(labels=marks, annotations=marks, ownerReferences=[owner])
            own = pod.get("metadata") or {}
            manifest["spec"]["template"]["metadata"] = {
                "labels": {**own.get("labels", {}), **marks},
                "annotations": {**own.get("annotations", {}), **marks}}
            jobs.append(manifest)
    return jobs


async def create_jobset(kube: AsyncClient, ns: str, name: str, replicated: Replicated) -> Any:
    """JobSet ``name`` and its child Jobs as the JobSet controller makes them (its Go module
    is not served to these machines)."""
    await ensure_crd(kube, *JOBSET_CRD)
    jobset = await create(kube, JobSet, ns, jobset_manifest(name, replicated))
    for manifest in jobset_jobs(name, owner_ref(jobset), replicated):
        await create(kube, Job, ns, manifest)
    return jobset


# --- the tests ---------------------------------------------------------------------------


async def test_gang_job_is_one_slurm_job_never_half_placed(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "gang-job")
    # Two nodes keep 32 of their CPUs: 3 members of 48 CPUs would fit only 2 at a time.
    blockers = await block(slurm, "node1", "node2")
    name, selector = f"k8s:{ns}/train", {"batch.kubernetes.io/job-name": "train"}
    try:
        await create(kube, Job, ns, job_manifest("train", 3, gang=True, cpu="48"))
        await wait_for(lambda: slurm_jobs(slurm, name), 30, what=f"job {name} in squeue")
        await asyncio.sleep(8)
        jobs = slurm_jobs(slurm, name)
        assert [(state, count) for _, state, count, _ in jobs] == [("PENDING", 3)], jobs
        pods = await live_pods(kube, ns, selector)
        assert len(pods) == 3 and not [p for p in pods if p.spec and p.spec.nodeName], (
            "a member was bound while its group could only be half placed"
        )
    finally:
        slurm.admin("scancel", *blockers)
    pods = await wait_bound_pods(kube, ns, selector, 3)
    assert_one_group_job(bridge_stack, name, pods, completion_ranks(pods))
    await run_pods(kube, pods)
    await kube.delete(Job, "train", namespace=ns, cascade=CascadeType.BACKGROUND)
    await wait_no_jobs(slurm, name)  # the garbage collector deleted the pods


async def test_workload_api_gang_pod_group_is_one_slurm_job_and_finishing_leaves_none(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """A Job with a gang scheduling policy: the Job controller creates the Workload and
    PodGroup and points its pods at it (spec.schedulingGroup); the PodGroup sizes the group."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "podgroup")
    gang: dict[str, Any] = {"schedulingPolicy": {"gang": {}}}
    await create(kube, Job, ns, job_manifest("infer", 2, scheduling=gang, cpu="2"))
    selector = {"batch.kubernetes.io/job-name": "infer"}
    pods = await wait_bound_pods(kube, ns, selector, 2)
    groups = [g async for g in kube.list(PodGroup, namespace=ns)]
    assert len(groups) == 1
    pod_group = groups[0]["metadata"]["name"]
    assert groups[0]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    # The webhook named the group after the PodGroup the pods point at (spec.schedulingGroup).
    labels = [(p.metadata.labels or {}) for p in pods if p.metadata]
    assert {lbl.get(keys.GROUP) for lbl in labels} == {pod_group}
    name = f"k8s:{ns}/{pod_group}"
    assert_one_group_job(bridge_stack, name, pods, completion_ranks(pods))
    for pod in pods:
        await set_pod_phase(kube, await set_pod_phase(kube, pod, "Running"), "Succeeded")

    async def complete() -> bool:
        job = await kube.get(Job, "infer", namespace=ns)
        conditions = (job.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

    await wait_for(complete, 60, interval=0.5, what="Job infer Complete")
    await wait_no_jobs(slurm, name)


async def test_jobset_is_one_group_sized_from_the_jobset(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "jobset")
    replicated = [("driver", 1, 1), ("workers", 1, 2)]  # (name, replicas, parallelism): 3 pods
    await create_jobset(kube, ns, "llm", [(*rj, template()) for rj in replicated])
    members = await wait_bound_pods(kube, ns, {keys.JOBSET_NAME: "llm"}, 3)
    ranks = {}
    for pod in members:
        assert pod.metadata and pod.metadata.name
        labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
        offset = 0 if labels[keys.JOBSET_REPLICATED_JOB] == "driver" else 1
        ranks[pod.metadata.name] = offset + int(annotations[keys.JOB_COMPLETION_INDEX])
    assert sorted(ranks.values()) == [0, 1, 2]
    name = f"k8s:{ns}/llm"
    assert_one_group_job(bridge_stack, name, members, ranks)
    await run_pods(kube, members)
    await kube.delete(JobSet, "llm", namespace=ns, cascade=CascadeType.BACKGROUND)
    await wait_no_jobs(slurm, name)  # JobSet -> child Jobs -> pods, by the garbage collector


async def test_leaderworkerset_replica_is_one_group_ranked_by_worker_index(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "lws")
    await ensure_crd(kube, "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets")
    lws = await create(kube, LeaderWorkerSet, ns, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3, "workerTemplate": template()}},
    })
    # Workers first: the group must not start before its leader exists anyway.
    for worker, pod_name in ((2, "vllm-0-2"), (1, "vllm-0-1"), (0, "vllm-0")):
        labels = {keys.LWS_NAME: "vllm", keys.LWS_GROUP_INDEX: "0",
                  keys.LWS_WORKER_INDEX: str(worker),
                  "leaderworkerset.sigs.k8s.io/group-key": "6a1f0e"}
        pod = pod_manifest(pod_name, labels=labels, annotations={keys.LWS_SIZE: "3"})
        assert pod.metadata is not None
        ref = cast(OwnerReference, OwnerReference.from_dict(owner_ref(lws)))
        pod.metadata.ownerReferences = [ref]
        await create_pod(kube, ns, pod)
    pods = await wait_bound_pods(kube, ns, {keys.LWS_NAME: "vllm"}, 3)
    ranks = {p.metadata.name: int((p.metadata.labels or {})[keys.LWS_WORKER_INDEX])
             for p in pods if p.metadata and p.metadata.name}
    name = f"k8s:{ns}/vllm-0"
    assert_one_group_job(bridge_stack, name, pods, ranks)
    await kube.delete(LeaderWorkerSet, "vllm", namespace=ns, cascade=CascadeType.BACKGROUND)
    await wait_no_jobs(slurm, name)


async def test_deployment_scale_down_cancels_exactly_the_removed_pods_jobs(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "deploy")
    selector = {"app": "web"}
    await create(kube, Deployment, ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": selector},
                 "template": template(labels=selector, restart="Always")},
    })
    pods = await wait_bound_pods(kube, ns, selector, 3)
    await run_pods(kube, pods)
    jobs = {p.metadata.name: slurm_jobs(slurm, f"k8s:{ns}/{p.metadata.name}")
            for p in pods if p.metadata and p.metadata.name}
    assert all(len(j) == 1 and j[0][1] == "RUNNING" for j in jobs.values()), jobs
    await kube.patch(Deployment, "web", {"spec": {"replicas": 1}}, namespace=ns,
                     patch_type=PatchType.MERGE)

    async def scaled_down() -> list[Pod] | None:
        left = await live_pods(kube, ns, selector)
        return left if len(left) == 1 else None

    kept = (await wait_for(scaled_down, 60, interval=0.5, what="1 replica left"))[0]
    assert kept.metadata and kept.metadata.name
    for pod_name in jobs:
        if pod_name != kept.metadata.name:
            await wait_no_jobs(slurm, f"k8s:{ns}/{pod_name}")
    assert slurm_jobs(slurm, f"k8s:{ns}/{kept.metadata.name}") == jobs[kept.metadata.name]


async def test_statefulset_deletion_cancels_its_pods_jobs_only(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "sts")
    await create_pod(kube, ns, pod_manifest("bystander"))
    selector = {"app": "db"}
    await create(kube, StatefulSet, ns, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": selector},
                 "template": template(labels=selector, restart="Always")},
    })
    pods = await wait_bound_pods(kube, ns, selector, 2)
    await run_pods(kube, pods)
    bystander = slurm_jobs(slurm, f"k8s:{ns}/bystander")
    assert len(bystander) == 1
    for pod_name in ("db-0", "db-1"):
        assert len(slurm_jobs(slurm, f"k8s:{ns}/{pod_name}")) == 1
    await kube.delete(StatefulSet, "db", namespace=ns, cascade=CascadeType.BACKGROUND)
    for pod_name in ("db-0", "db-1"):
        await wait_no_jobs(slurm, f"k8s:{ns}/{pod_name}")
    assert slurm_jobs(slurm, f"k8s:{ns}/bystander") == bystander


async def test_failed_job_pod_is_replaced_with_a_new_placeholder_until_backoff_limit(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "backoff")
    await create(kube, Job, ns, job_manifest("flaky", 1, backoff=1))
    selector = {"batch.kubernetes.io/job-name": "flaky"}
    seen: list[str] = []
    for _ in range(2):  # the first failure is retried, the second exceeds backoffLimit 1
        pod = (await wait_bound_pods(kube, ns, selector, 1))[0]  # failed pods not counted
        assert pod.metadata and pod.metadata.name
        job_id = (pod.metadata.annotations or {})[keys.JOB_ID]
        assert job_id not in seen, "a replacement pod must get its own placeholder"
        assert slurm_jobs(slurm, f"k8s:{ns}/{pod.metadata.name}")[0][0] == job_id
        seen.append(job_id)
        running = await set_pod_phase(kube, pod, "Running")
        await set_pod_phase(kube, running, "Failed")
        await wait_for(partial(_ended, slurm, job_id), 60, interval=0.5,
                       what=f"job {job_id} of the failed pod ended")

    async def failed() -> bool:
        job = await kube.get(Job, "flaky", namespace=ns)
        conditions = (job.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)

    await wait_for(failed, 60, interval=0.5, what="Job flaky Failed (backoffLimit)")
    assert not [j for j in seen if _live_job(slurm, j)]


async def test_suspend_cancels_the_group_and_resume_submits_a_new_one(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "suspend")
    await create(kube, Job, ns, job_manifest("train", 2, gang=True))
    selector, name = {"batch.kubernetes.io/job-name": "train"}, f"k8s:{ns}/train"
    pods = await wait_bound_pods(kube, ns, selector, 2)
    first = assert_one_group_job(bridge_stack, name, pods, completion_ranks(pods))
    await run_pods(kube, pods)
    await kube.patch(Job, "train", {"spec": {"suspend": True}}, namespace=ns,
                     patch_type=PatchType.MERGE)
    await wait_no_jobs(slurm, name)
    await wait_for(lambda: _none(kube, ns, selector), 60, interval=0.5, what="pods deleted")
    await kube.patch(Job, "train", {"spec": {"suspend": False}}, namespace=ns,
                     patch_type=PatchType.MERGE)
    pods = await wait_bound_pods(kube, ns, selector, 2)
    second = assert_one_group_job(bridge_stack, name, pods, completion_ranks(pods))
    assert second != first
    await kube.delete(Job, "train", namespace=ns, cascade=CascadeType.BACKGROUND)
    await wait_no_jobs(slurm, name)


def _live_job(slurm: SlurmTarget, job_id: str) -> bool:
    return bool(slurm.admin("squeue", "-h", "-j", job_id, check=False).strip())


def _ended(slurm: SlurmTarget, job_id: str) -> bool:
    return not _live_job(slurm, job_id)


def _install_kueue(control_plane: ControlPlane) -> None:
    if not os.access(KUEUE_DIR / "bin" / "kueue", os.X_OK):
        pytest.fail(f"Kueue is not built ({KUEUE_DIR}/bin/kueue missing): run bash {KUEUE}",
                    pytrace=False)
    control_plane.kubectl("apply", "--server-side", "-f", str(KUEUE_DIR / "crds"))
    control_plane.kubectl("create", "namespace", "kueue-system", check=False)


def _start_kueue(control_plane: ControlPlane, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start Kueue's manager; returns the process and its health URL."""
    binary = KUEUE_DIR / "bin" / "kueue"
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(work / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(work / "tls.crt"))
    if not (KUEUE_METRICS_CERTS / "tls.crt").exists():
        # Whole or not at all: the other test tier may be writing its own pair at once.
        staged = KUEUE_METRICS_CERTS.with_name(f"{KUEUE_METRICS_CERTS.name}.{os.getpid()}")
        staged.mkdir(parents=True, exist_ok=True)
        for name in ("tls.key", "tls.crt"):
            (staged / name).write_bytes((work / name).read_bytes())
        with contextlib.suppress(OSError):  # the other tier's pair is there: keep it
            staged.rename(KUEUE_METRICS_CERTS)
        shutil.rmtree(staged, ignore_errors=True)
    health = free_port()
    (work / "config.yaml").write_text(yaml.safe_dump({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(work)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
    }))
    with KUEUE_LOG.open("ab") as out:
        proc = subprocess.Popen(
            [str(binary), "--config", str(work / "config.yaml"),
             "--feature-gates=VisibilityOnDemand=false"],  # its API server wants more certs
            env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    return proc, f"http://127.0.0.1:{health}/healthz"


@pytest.fixture(scope="module")
async def kueue(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[None]:
    """Kueue's CRDs installed and its manager running on 127.0.0.1 (webhooks not
    registered: the Jobs below are created suspended, as Kueue's webhook would make them)."""
    work = tmp_path_factory.mktemp("kueue")
    kube = AsyncClient(KubeConfig.from_file(control_plane.kubeconfig), trust_env=False)
    await asyncio.to_thread(_install_kueue, control_plane)
    for kind in ("workloads", "clusterqueues", "localqueues", "resourceflavors"):
        await wait_established(kube, f"{kind}.kueue.x-k8s.io")
    await kube.close()
    proc, health_url = await asyncio.to_thread(_start_kueue, control_plane, work)

    async def healthy() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"kueue exited ({proc.returncode}): see {KUEUE_LOG}", pytrace=False)
        try:
            async with httpx.AsyncClient() as client:
                return (await client.get(health_url)).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        await wait_for(healthy, 60, interval=0.5, what=f"kueue healthy (log {KUEUE_LOG})")
        yield
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 20)
        await _release_workloads(control_plane)


async def _release_workloads(control_plane: ControlPlane) -> None:
    """Kueue's finalizers dropped from the Workloads it left: with its manager gone nothing
    else removes them, and their namespace would stay Terminating for good, its deletion
    retried by the namespace controller every few seconds on this shared control plane."""
    async with AsyncClient(KubeConfig.from_file(control_plane.kubeconfig),
                           trust_env=False) as kube:
        async for workload in kube.list(KueueWorkload, namespace="*"):
            meta = workload.metadata
            if meta is not None and meta.name and meta.finalizers:
                with contextlib.suppress(ApiError):
                    await kube.patch(KueueWorkload, meta.name, {"metadata": {"finalizers": None}},
                                     namespace=meta.namespace, patch_type=PatchType.MERGE)


async def test_job_admitted_by_kueue_reaches_slurm_through_the_bridge(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory, kueue: None
) -> None:
    """Kueue admits a queued Job into a ClusterQueue (by un-suspending it); its pods then go
    through the bridge.  A second Job beyond the queue's quota stays suspended: nothing of it
    reaches Slurm until the first is gone."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "kueue")
    flavor, queue = f"flavor-{ns}", f"cq-{ns}"
    await kube.create(ResourceFlavor.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": flavor}}))
    await kube.create(ClusterQueue.from_dict({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": queue},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": 2}, {"name": "memory", "nominalQuota": "8Gi"}]}],
        }]}}))
    try:
        await create(kube, LocalQueue, ns, {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "research"}, "spec": {"clusterQueue": queue}})
        # One Job after the other: two Jobs created in the same second tie in Kueue's FIFO
        # and either may be admitted first (a CI run waited for the wrong one).
        await create(kube, Job, ns, queued_job("first"))
        first = await wait_bound_pods(kube, ns, {"batch.kubernetes.io/job-name": "first"}, 2)
        await run_pods(kube, first)
        for pod in first:
            assert pod.metadata and pod.metadata.name
            jobs = slurm_jobs(slurm, f"k8s:{ns}/{pod.metadata.name}")
            assert [(state, count) for _, state, count, _ in jobs] == [("RUNNING", 1)], jobs
        await create(kube, Job, ns, queued_job("second"))
        await wait_for(partial(_quota_refused, kube, ns, "second"), 60, interval=0.5,
                       what=f"Kueue to keep Job {ns}/second pending for quota (log {KUEUE_LOG})")
        second = await kube.get(Job, "second", namespace=ns)
        assert second["spec"]["suspend"] is True, "Kueue admitted beyond the queue's quota"
        assert not await live_pods(kube, ns, {"batch.kubernetes.io/job-name": "second"})
        await kube.delete(Job, "first", namespace=ns, cascade=CascadeType.BACKGROUND)
        later = await wait_bound_pods(kube, ns, {"batch.kubernetes.io/job-name": "second"}, 2)
        for pod in first:
            assert pod.metadata and pod.metadata.name
            await wait_no_jobs(slurm, f"k8s:{ns}/{pod.metadata.name}")
        assert all((p.metadata.annotations or {}).get(keys.JOB_ID) for p in later if p.metadata)
    finally:
        await kube.delete(ClusterQueue, queue)
        await kube.delete(ResourceFlavor, flavor)


def queued_job(name: str) -> dict[str, Any]:
    """A 2-pod Job sent to the LocalQueue "research", suspended as Kueue's webhook would make it."""
    manifest = job_manifest(name, 2)
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "research"}
    manifest["spec"]["suspend"] = True
    return manifest


async def _quota_refused(kube: AsyncClient, ns: str, job: str) -> bool:
    """Kueue has looked at the Job's Workload and reserved no quota for it."""
    async for workload in kube.list(KueueWorkload, namespace=ns):
        owners = workload.metadata.ownerReferences or [] if workload.metadata else []
        if not any(o.kind == "Job" and o.name == job for o in owners):
            continue
        conditions = (workload.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "QuotaReserved" and c.get("status") == "False"
                   for c in conditions)
    return False


async def _none(kube: AsyncClient, ns: str, labels: dict[str, str]) -> bool:
    return not [p async for p in kube.list(Pod, namespace=ns, labels=dict(labels.items()))]
