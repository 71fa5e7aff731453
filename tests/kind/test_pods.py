"""Pods that really run: what a pod's container sees and what happens to its Slurm job when the
container ends, is cancelled or is deleted — on kind workers whose kubelet runs the containers
and whose slurmd is the Slurm node of the same name."""

import time

import pytest

from tests.kind.cluster import Kind, pod_manifest, wait

pytestmark = [pytest.mark.kind, pytest.mark.e2e]  # e2e: left out of the fast path

PRINT_GPU_ENV = (
    'echo "NVIDIA=$NVIDIA_VISIBLE_DEVICES"; echo "CUDA=$CUDA_VISIBLE_DEVICES"; sleep 600'
)


def env_lines(kind: Kind, ns: str, name: str, container: str = "main") -> dict[str, str]:
    def printed() -> dict[str, str] | None:
        out = kind.kubectl("-n", ns, "logs", name, "-c", container, check=False)
        lines = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return lines if {"NVIDIA", "CUDA"} <= lines.keys() else None
    return wait(printed, 60, f"pod {ns}/{name} to print its GPU variables")


def test_gpu_env_is_the_slurm_allocation_next_to_a_native_job(kind: Kind, ns: str,
                                                               native: list[str]) -> None:
    # A native job holds 2 of the first worker's 4 GPUs; another fills the second worker, so
    # the pod can only get the first worker's other two.
    first = kind.hold_gpus(native, 2)

    kind.apply(ns, pod_manifest("gpu", PRINT_GPU_ENV, gpus=2))
    pod = kind.wait_running(ns, "gpu")
    job = kind.job_of(pod)
    slurm_gpus = kind.job_gpus(job)
    native_gpus = kind.job_gpus(native[0])[first]
    env = env_lines(kind, ns, "gpu")

    assert list(slurm_gpus) == [first] == [pod["spec"]["nodeName"]]
    # It was gated until Slurm placed it, and released to exactly that node (one write).
    assert not pod["spec"].get("schedulingGates")
    required = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [first]}]}]
    assert sorted(slurm_gpus[first]) == [i for i in range(4) if i not in native_gpus]
    # What the container was told is what Slurm allocated, and never the native job's GPUs.
    assert [int(i) for i in env["NVIDIA"].split(",")] == sorted(slurm_gpus[first])
    assert not set(slurm_gpus[first]) & set(native_gpus)
    # Under the NVIDIA container runtime the container sees only its devices, numbered from 0.
    assert env["CUDA"] == "0,1"


def test_pod_exiting_by_itself_frees_its_job(kind: Kind, ns: str) -> None:
    kind.apply(ns, pod_manifest("short", "sleep 8; exit 0", gpus=1))
    pod = kind.wait_running(ns, "short")
    job = kind.job_of(pod)
    assert kind.job_state(job) == "RUNNING"

    wait(lambda: (kind.pod(ns, "short") or {}).get("status", {}).get("phase") == "Succeeded",
         60, "the container to exit and the pod to succeed")
    wait(lambda: not kind.in_squeue(job), 60, f"job {job} to leave squeue")
    assert kind.job_state(job) in {"COMPLETED", "CANCELLED", ""}


def test_the_webhooks_review_a_pods_creation_but_not_the_bridges_own_writes(
    kind: Kind, ns: str
) -> None:
    """The bridge writes its claim and the job id on every pod it places (two UPDATEs); the
    chart's matchConditions keep the webhooks out of those, so the API server calls them for
    the pod's creation only: once (``/admit``) or twice (``/mutate``, ``/validate``), as the
    install set webhook.validateCreates (its default, auto: once on a first install)."""
    kind.apply(ns, pod_manifest("reviewed", "sleep 600"))
    kind.job_of(kind.wait_running(ns, "reviewed"))  # the bridge has written on the pod
    reviews = [
        (line["endpoint"], line["operation"], line.get("user"))
        for line in kind.logs(kind.namespace, "app.kubernetes.io/component=webhook")
        if line.get("event") == "admission.review" and line.get("pod") == f"{ns}/reviewed"
    ]
    created = {"one": {("admit", "CREATE")},
               "two": {("mutate", "CREATE"), ("validate", "CREATE")}}[kind.reviews_per_create()]
    assert {(endpoint, op) for endpoint, op, _ in reviews} == created, reviews


def test_scancel_evicts_the_pod_and_kubelet_stops_its_container(kind: Kind, ns: str) -> None:
    kind.apply(ns, pod_manifest("victim", "sleep 600", gpus=1))
    pod = kind.wait_running(ns, "victim")
    job, node = kind.job_of(pod), pod["spec"]["nodeName"]
    container = pod["status"]["containerStatuses"][0]["containerID"]
    assert kind.container_running(node, container)

    kind.slurm("scancel", job)

    wait(lambda: not kind.container_running(node, container), 90,
         f"kubelet on {node} to stop the container of the cancelled job {job}")
    after = kind.pod(ns, "victim")
    assert after is None or after["status"].get("phase") in {"Failed", "Succeeded"} \
        or after["metadata"].get("deletionTimestamp"), after


def test_deleted_pod_keeps_its_gpus_until_its_container_stopped(kind: Kind, ns: str,
                                                                native: list[str]) -> None:
    # The container takes 15 s to exit after SIGTERM.
    slow = "trap 'sleep 15; exit 0' TERM; while true; do sleep 1; done"
    kind.apply(ns, pod_manifest("slow", slow, gpus=4, grace=60))
    pod = kind.wait_running(ns, "slow")
    job, node = kind.job_of(pod), pod["spec"]["nodeName"]
    container = pod["status"]["containerStatuses"][0]["containerID"]
    # A native job wants the same four GPUs: it can only start once the pod's job ends.
    waiting = kind.sbatch("-J", "native-next", "-w", node, "--gres=gpu:4", "-c", "1",
                          "--wrap", "sleep 600")
    native.append(waiting)
    time.sleep(3)
    assert kind.job_state(waiting) == "PENDING"

    kind.kubectl("-n", ns, "delete", "pod", "slow", "--wait=false")
    deleted = time.time()
    while kind.container_running(node, container):
        assert kind.job_state(job) == "RUNNING", "the pod's job ended while its container ran"
        assert kind.job_state(waiting) == "PENDING", "the native job started on GPUs in use"
        assert time.time() - deleted < 60, "the container did not stop within its grace period"
        time.sleep(0.5)
    stopped = time.time()
    assert stopped - deleted >= 10, "the container stopped at once: the test proves nothing"

    wait(lambda: kind.job_state(waiting) == "RUNNING", 90, f"native job {waiting} to start")
    start = kind.job(waiting)["StartTime"]
    started = time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S"))
    assert started >= int(stopped) - 1, f"native job started at {start}, container stopped later"
