"""An offline bridge loaded with synthetic jobs and pods (B3, B4): no Slurm, no apiserver.

Slurm and the apiserver point at 127.0.0.1:9 (discard port, nothing listens): the filter
path for a pod whose job is already indexed never calls either.  The notifier is
*pre-seeded* as it is in steady state: each pod already carries its job-id annotation and
the notifier already published the job's (id, state, reason), so ``job_known`` returns
without a write.  Its ``_spawn`` is wrapped to count (and drop) any write that would still
happen, so a benchmark can prove the path stayed write-free.
"""

from __future__ import annotations

import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from pydantic import SecretStr

from bridge import keys
from bridge.config import ControllerSettings, KubeSettings, Settings, SlurmSettings
from bridge.runtime import Bridge
from bridge.slurm.types import Allocation, JobState, SlurmJob

UNREACHABLE = "127.0.0.1:9"
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
        owner=pod_uid(i),
        allocation=Allocation(nodes=(node,), gpu_ids=gpus),
        partition="main",
        user="slurm",
    )


def pod(i: int) -> dict[str, Any]:
    """The pod as kube-scheduler sends it to the extender (informer copy, no managedFields)."""
    name = f"pod-{i}"
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
            "annotations": {keys.JOB_ID: str(JOB_ID_BASE + i)},
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
    return {"Pod": pod(i), "NodeNames": [kube_node(k) for k in range(1, nodes + 1)]}


def filter_answer(nodes: int) -> dict[str, Any]:
    """What the bridge answers for an allocated pod: one node kept, the rest unresolvable."""
    keep = kube_node(1)
    return {
        "NodeNames": [keep],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {
            kube_node(k): f"Slurm placed this pod on {keep}" for k in range(2, nodes + 1)
        },
        "Error": "",
    }


def offline_settings(workdir: Path) -> Settings:
    server = f"https://{UNREACHABLE}"
    kubeconfig = workdir / "unreachable.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "none", "cluster": {
            "server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "bench", "user": {"token": "unused"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "none", "user": "bench"}}],
    }))
    return Settings(
        slurm=SlurmSettings(
            url=f"http://{UNREACHABLE}", token=SecretStr("unused"), retries=0, timeout_seconds=1
        ),
        kube=KubeSettings(kubeconfig=kubeconfig),
        controllers=ControllerSettings(enabled=False),
    )


@dataclass
class WriteCounter:
    """Replaces PodNotifier._spawn: counts the apiserver writes the filter path would start."""

    writes: int = 0

    def __call__(self, work: Coroutine[Any, Any, None]) -> None:
        self.writes += 1
        work.close()


def offline_bridge(workdir: Path | None = None) -> tuple[Bridge, WriteCounter]:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="slurmbridge-bench-"))
    bridge = Bridge(offline_settings(workdir))
    counter = WriteCounter()
    bridge.notifier._spawn = counter  # type: ignore[method-assign]  # benchmark instrumentation
    return bridge, counter


def load(bridge: Bridge, jobs: int, nodes: int) -> None:
    """Index ``jobs`` allocated placeholder jobs, map the nodes, pre-seed the notifier."""
    bridge.nodes.update([
        Node(metadata=ObjectMeta(
            name=kube_node(k), labels={keys.SLURM_NODE: slurm_node(k)}
        ))
        for k in range(1, nodes + 1)
    ])
    seen = bridge.notifier._seen  # steady state: every job's status already published
    for i in range(jobs):
        j = job(i, nodes)
        bridge.index.record(j)
        seen[pod_uid(i)] = (j.job_id, j.state, j.reason)
