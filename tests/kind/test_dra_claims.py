"""DRA claims Slurm allocates (issue 23): a slurmbridge pod's ResourceClaim is written with the
devices of the GPU indices Slurm gave its job, on a worker whose other GPUs a native job holds;
the DRA driver (deploy/kind/dra) hands the container exactly those; the claim is freed when the
job ended and the pod is gone, and a requeue never leaves two claims on one device."""

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kind.cluster import DRA_DRIVER, Kind, wait, workload_pod

pytestmark = [pytest.mark.kind, pytest.mark.e2e]

PRINT_DEVICES = "env | grep ^GPU_DEVICE_ | sort; sleep 600"


def claim_spec(count: int) -> dict[str, Any]:
    return {"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": DRA_DRIVER, "count": count}}]}}


def claimed_pod(name: str, ref: dict[str, str]) -> dict[str, Any]:
    return workload_pod(name, PRINT_DEVICES).claim("gpus", **ref).manifest()


def allocated(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """(pool, device) of the claim's allocation: the pool is the node."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", [])]


def devices_told(kind: Kind, ns: str, name: str) -> list[str]:
    def printed() -> list[str] | None:
        lines = kind.kubectl("-n", ns, "logs", name, check=False).split()
        return lines or None
    return [line.split("=", 1)[1] for line in wait(printed, 60, f"{name}'s GPU_DEVICE_ lines")]


def test_a_users_claim_gets_the_gpus_slurm_gave_next_to_a_native_job(
    kind: Kind, ns: str, native: list[str]
) -> None:
    first = kind.hold_gpus(native, 2)
    kind.apply(ns, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": "mine"}, "spec": claim_spec(2)})
    kind.apply(ns, claimed_pod("claimed", {"resourceClaimName": "mine"}))

    pod = kind.wait_running(ns, "claimed")
    job = kind.job_of(pod)
    slurm_gpus = kind.job_gpus(job)
    native_gpus = kind.job_gpus(native[0])[first]
    claim = kind.kubectl_json("-n", ns, "get", "resourceclaim", "mine")

    assert list(slurm_gpus) == [first] == [pod["spec"]["nodeName"]]
    assert not set(slurm_gpus[first]) & set(native_gpus)
    assert sorted(allocated(claim)) == [(first, f"gpu-{i}") for i in sorted(slurm_gpus[first])]
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["claimed"]
    assert devices_told(kind, ns, "claimed") == [f"gpu-{i}" for i in sorted(slurm_gpus[first])]
    # Slurm admins see the claim's GPUs on the pod's job.
    assert "gres/gpu=2" in kind.job(job).get("AllocTRES", "")

    kind.kubectl("-n", ns, "delete", "pod", "claimed", "--wait=true", timeout=120)
    wait(lambda: not allocated(kind.kubectl_json("-n", ns, "get", "resourceclaim", "mine")),
         60, "the claim to be freed once the pod is gone and its job ended")
    assert not kind.in_squeue(job)
    native.append(kind.sbatch("-J", "native-after", "-w", first, "--gres=gpu:2", "-c", "1",
                              "--wrap", "sleep 600"))
    wait(lambda: kind.job_state(native[-1]) == "RUNNING", 60, "a native job on the freed GPUs")
    assert sorted(kind.job_gpus(native[-1])[first]) == sorted(slurm_gpus[first])


class ClaimWatch:
    """Every claim allocation in the namespace, sampled until stopped: any device found in
    two claims at once is recorded."""

    def __init__(self, kind: Kind, ns: str) -> None:
        self.kind, self.ns = kind, ns
        self.doubles: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            claims = self.kind.kubectl_json("-n", self.ns, "get", "resourceclaims")["items"]
            held: dict[tuple[str, str], str] = {}
            for claim in claims:
                for device in allocated(claim):
                    name = claim["metadata"]["name"]
                    if device in held:
                        self.doubles.append(f"{device} in {held[device]} and {name}")
                    held[device] = name
            self.samples += 1

    def __enter__(self) -> "ClaimWatch":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def template(kind: Kind, ns: str) -> Iterator[str]:
    kind.apply(ns, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "one-gpu"}, "spec": {"spec": claim_spec(1)}})
    yield "one-gpu"


def requeue_or_end(kind: Kind, job: str) -> str:
    """Requeue the job as an admin who insists would (requeueing switched back on); Slurm
    requeues only batch jobs, and from 25.11 a placeholder is an EXTERNAL_JOB: there the
    job is ended instead, as a preemption that cancels does.  Which of the two happened."""
    kind.slurm("scontrol", "update", f"JobId={job}", "Requeue=1", check=False)
    try:
        kind.slurm("scontrol", "requeue", job)
    except AssertionError as refused:
        assert "Only batch jobs" in str(refused), refused
        kind.slurm("scancel", job)
        return "cancelled"
    return "requeued"


def test_a_requeued_job_never_leaves_two_claims_on_one_device(
    kind: Kind, ns: str, template: str, native: list[str]
) -> None:
    """A Job's pod with a claim from a template; its Slurm job requeued (or ended, where Slurm
    cannot requeue it): the pod is evicted, the Job makes another, whose job gets the same GPU
    (the worker's others are held), and no device is ever in two claims."""
    first = kind.hold_gpus(native, 3)
    pod = claimed_pod("worker", {"resourceClaimTemplateName": template})["spec"]
    kind.apply(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
                    "spec": {"backoffLimit": 4, "podReplacementPolicy": "Failed",
                             "template": {"metadata": {"labels": {"app": "train"}},
                                          "spec": pod}}})

    def running_pod() -> dict[str, Any] | None:
        pods = kind.kubectl_json("-n", ns, "get", "pods", "-l", "app=train")["items"]
        live = [p for p in pods if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
        return live[0] if live else None

    with ClaimWatch(kind, ns) as watch:
        before = wait(running_pod, 180, "the Job's pod Running")
        job = kind.job_of(before)
        how = requeue_or_end(kind, job)
        after = wait(lambda: (p := running_pod()) and p["metadata"]["uid"] !=
                     before["metadata"]["uid"] and p, 240, "the Job's next pod Running")
        claims = kind.kubectl_json("-n", ns, "get", "resourceclaims")["items"]
    assert watch.samples > 10
    assert watch.doubles == []
    mine = [c for c in claims if c["status"].get("reservedFor", [{}])[0].get("uid")
            == after["metadata"]["uid"]]
    [(node, device)] = allocated(mine[0])
    new_job = kind.job_of(after)
    assert (node, device) == (first, f"gpu-{kind.job_gpus(new_job)[first][0]}")
    print(json.dumps({how: job, "next": new_job, "device": device, "samples": watch.samples}))
