"""Teardown where peers lose GPUs or hand them out twice: a worker whose kubelet stops
answering (its containers keep running, as on a hung host) while a GPU pod runs there, and
that worker's Node deleted by an admin.  Last in the kind suite: the second test deletes a
Node, which the worker's kubelet registers again when it starts."""

import time
from collections.abc import Iterator

import pytest

from tests.kind.cluster import Kind, pod_manifest, wait

pytestmark = [pytest.mark.kind, pytest.mark.e2e]  # e2e: left out of the fast path

# NotReady comes after the node controller's grace (40-50 s), the drain at nodesync's next round.
NOT_READY_WITHIN = 150


def slurm_reason(kind: Kind, node: str) -> tuple[str, str]:
    out = kind.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").strip().splitlines()[0]
    state, _, reason = out.partition("|")
    return state, reason


def node_ready(kind: Kind, node: str) -> bool:
    out = kind.kubectl("get", "node", node, "--ignore-not-found", "-o",
                       "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
    return out.strip() == "True"


@pytest.fixture
def gpu_pod(kind: Kind, ns: str) -> Iterator[tuple[str, str, str]]:
    """(node, job id, container id) of a running 1-GPU pod ``gpu``; the node's kubelet is
    started again at the end and the bridge's drain must be lifted."""
    kind.apply(ns, pod_manifest("gpu", "sleep 600", gpus=1, grace=5))
    pod = kind.wait_running(ns, "gpu")
    node = pod["spec"]["nodeName"]
    container = pod["status"]["containerStatuses"][0]["containerID"]
    yield node, kind.job_of(pod), container
    kind.node_exec(node, "systemctl", "start", "kubelet", check=False)
    wait(lambda: node_ready(kind, node), 180, f"node {node} Ready again")
    wait(lambda: "drain" not in slurm_reason(kind, node)[0], 90,
         f"the bridge to resume Slurm node {node}")


def silence_kubelet(kind: Kind, node: str, pod: str, job: str) -> str:
    """Stop the node's kubelet (containers keep running); the drain reason once it names
    ``pod`` with ``job``."""
    kind.node_exec(node, "systemctl", "stop", "kubelet")

    def drained() -> str | None:
        state, reason = slurm_reason(kind, node)
        return reason if "drain" in state and f"{pod} (job {job})" in reason else None
    return wait(drained, NOT_READY_WITHIN, f"Slurm node {node} drained naming pod {pod}",
                interval=2)


def test_a_silent_kubelet_keeps_the_job_while_the_container_may_run(
        kind: Kind, ns: str, gpu_pod: tuple[str, str, str]) -> None:
    node, job, container = gpu_pod
    reason = silence_kubelet(kind, node, f"{ns}/gpu", job)
    assert reason.startswith("slurmbridge:") and "may still run" in reason, reason

    # Deleted (as the taint manager's eviction would): Terminating, its container still runs.
    kind.kubectl("-n", ns, "delete", "pod", "gpu", "--wait=false")
    wait(lambda: (kind.pod(ns, "gpu") or {}).get("metadata", {}).get("deletionTimestamp"),
         30, f"pod {ns}/gpu Terminating")
    for _ in range(10):  # well past the pod's 5 s grace period
        assert kind.container_running(node, container), "the container stopped by itself"
        assert kind.job_state(job) == "RUNNING", "the job ended while its container ran"
        time.sleep(1)
    assert "drain" in slurm_reason(kind, node)[0]

    kind.node_exec(node, "systemctl", "start", "kubelet")  # it stops the container
    wait(lambda: not kind.in_squeue(job) or kind.job_state(job) != "RUNNING", 120,
         f"job {job} to end once the kubelet stopped the pod's container")
    assert not kind.container_running(node, container)
    wait(lambda: "drain" not in slurm_reason(kind, node)[0], 120,
         f"the bridge to lift its drain of {node}")


def test_a_deleted_node_cancels_the_job_and_the_drain_says_why(
        kind: Kind, ns: str, gpu_pod: tuple[str, str, str]) -> None:
    node, job, _ = gpu_pod
    silence_kubelet(kind, node, f"{ns}/gpu", job)

    kind.kubectl("delete", "node", node, "--wait=false")  # the pod GC deletes its pods
    wait(lambda: kind.pod(ns, "gpu") is None, 120, f"the pod GC to delete {ns}/gpu")
    wait(lambda: not kind.in_squeue(job) or kind.job_state(job) != "RUNNING", 60,
         f"job {job} cancelled once its pod was deleted")

    def says_deleted() -> str | None:
        state, reason = slurm_reason(kind, node)
        return reason if "drain" in state and "Kubernetes node deleted" in reason else None
    reason = wait(says_deleted, 60, f"Slurm node {node}'s drain to say its Node was deleted")
    assert f"{ns}/gpu (job {job})" in reason and "containers may remain" in reason, reason
