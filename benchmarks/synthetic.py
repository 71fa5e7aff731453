"""An offline bridge loaded with synthetic jobs and pods (B3, B4): no Slurm, no apiserver.

Slurm and the apiserver are the dev kit's in-memory fakes (slurmbridge_devkit/fakes.py):
the filter path for a pod whose job is already indexed reads the pod from the (fake)
apiserver and never calls Slurm.  Each pod carries the leader's record of its job (job id,
owner, Slurm node), as every pod of the bridge does once its job runs, and the notifier has
seen its job once, so ``job_known`` returns without a write.  The fake apiserver counts
every write, so a benchmark can prove the path stayed write-free.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any, cast

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from bridge import keys
from bridge.jobs.owner import PodOwner
from bridge.link.views import view_of
from bridge.runtime import Bridge
from bridge.slurm.types import Allocation, JobState, SlurmJob
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes

NAMESPACE = "bench"
JOB_ID_BASE = 100_000


def pod_uid(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def kube_node(k: int) -> str:
    return f"kube-node{k}"


def slurm_node(k: int) -> str:
    return f"node{k}"


def node_of(i: int, nodes: int) -> int:
    return i % nodes + 1


def job(i: int, nodes: int) -> SlurmJob:
    """A running placeholder job holding one node (and, for every fourth, one GPU)."""
    node = slurm_node(node_of(i, nodes))
    gpus: dict[str, tuple[int, ...]] = {node: (i % 8,)} if i % 4 == 0 else {}
    return SlurmJob(
        job_id=JOB_ID_BASE + i,
        name=f"k8s:{NAMESPACE}/pod-{i}",
        state=JobState.RUNNING,
        reason="None",
        owner=PodOwner(pod_uid(i)),
        allocation=Allocation(nodes=(node,), gpu_ids=gpus),
        partition="main",
        user=FakeSlurm.BRIDGE_USER,  # the bridge's own: believed without a tenancy entry
    )


def pod(i: int, nodes: int) -> dict[str, Any]:
    """The pod as kube-scheduler sends it to the extender (informer copy, no managedFields),
    its job (on one of ``nodes``) recorded by the leader."""
    name = f"pod-{i}"
    recorded = {keys.SLURM_NODE: slurm_node(node_of(i, nodes))}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": pod_uid(i),
            "resourceVersion": str(500_000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"app": "bench", "slurmbridge.test/owner": "1"},
            "annotations": {keys.JOB_ID: str(JOB_ID_BASE + i), keys.OWNER: pod_uid(i),
                            **recorded},
        },
        "spec": {
            "schedulerName": keys.SCHEDULER_NAME,
            "containers": [{
                "name": "main",
                "image": "busybox",
                "command": ["sleep", "3600"],
                "resources": {
                    "requests": {"cpu": "1", "memory": "512Mi"},
                    "limits": {"cpu": "1", "memory": "512Mi"},
                },
                "env": [{
                    "name": env, "valueFrom": {"fieldRef": {
                        "fieldPath": f"metadata.annotations['{keys.GPU_IDS}']"}},
                } for env in keys.GPU_ENV_VARS],
                "volumeMounts": [{
                    "name": "kube-api-access", "readOnly": True,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                }],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "Always",
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": keys.MANAGED_TAINT, "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "volumes": [{"name": "kube-api-access", "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt",
                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                        "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
            }}],
        },
        "status": {"phase": "Pending", "qosClass": "Guaranteed", "conditions": [{
            "type": keys.POD_CONDITION_SLURM, "status": "False", "reason": "Priority",
            "message": f"waiting for Slurm job {JOB_ID_BASE + i}",
            "lastTransitionTime": "2025-01-01T00:00:01Z",
        }]},
    }


def filter_body(i: int, nodes: int) -> dict[str, Any]:
    """ExtenderArgs as kube-scheduler sends them with nodeCacheCapable: true."""
    return {"Pod": pod(i, nodes), "NodeNames": [kube_node(k) for k in range(1, nodes + 1)]}


def filter_answer(nodes: int) -> dict[str, Any]:
    """What the bridge answers for an allocated pod: one node kept, the others left out."""
    return {"NodeNames": [kube_node(1)], "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
            "Error": ""}


def offline_bridge(workdir: Path | None = None) -> tuple[Bridge, FakeKube]:
    """The bridge over the dev kit's fakes; the fake apiserver counts the writes."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="slurmbridge-bench-"))
    kube = FakeKube()
    return bridge_over_fakes(workdir, FakeSlurm(), kube), kube


def load(
    bridge: Bridge, kube: FakeKube, jobs: int, nodes: int, *, pods: bool, released: bool = False
) -> None:
    """Index ``jobs`` allocated placeholder jobs, map the nodes, and let the notifier see
    each pod's job once (steady state: nothing left to write).  ``pods``: the fake
    apiserver holds the pods too, so filter reads them as it reads the real one.
    ``released``: the pods are released gated pods, and the pod cache holds them as its
    watch would (filter decides from memory, as for every gated pod)."""
    for k in range(1, nodes + 1):
        bridge.nodes.apply("ADDED", Node(metadata=ObjectMeta(
            name=kube_node(k), labels={keys.NODE_SLURM_NODE: slurm_node(k)}
        )))

    async def seed() -> None:
        for i in range(jobs):
            j = job(i, nodes)
            p = cast(Pod, Pod.from_dict(pod(i, nodes)))
            bridge.index.record(j)
            if pods:
                kube.add(p)
            if released:
                bridge.pod_cache.apply("ADDED", p)
            await bridge.notifier.job_known(view_of(p), j)
        await bridge.notifier.drain()
        if len(bridge.index.live()) != jobs:  # else the benchmark times a bridge with no jobs
            raise RuntimeError(f"the index believes {len(bridge.index.live())} of {jobs} "
                               "synthetic jobs: see placement.forged_placeholder_ignored")

    asyncio.run(seed())
