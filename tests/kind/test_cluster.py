"""The installed bridge on the kind cluster: drains both ways between the Kubernetes node and
the Slurm node that are one host, pod groups over the nodes of one Slurm job, and the bridge's
own pods being replaced."""

import subprocess
import time
from collections.abc import Iterator

import pytest

from bridge import keys
from tests.kind.cluster import WORKLOAD_IMAGE, Kind, pod_manifest, wait

pytestmark = [pytest.mark.kind, pytest.mark.e2e]  # e2e: left out of the fast path


def slurm_node(kind: Kind, node: str) -> tuple[str, str]:
    """(state, reason) of a Slurm node, e.g. ("drained", "slurmbridge: cordoned ...")."""
    out = kind.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").strip().splitlines()[0]
    state, _, reason = out.partition("|")
    return state, reason


def taints(kind: Kind, node: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = kind.kubectl_json("get", "node", node)["spec"].get("taints", [])
    return found


@pytest.fixture
def drained_worker(kind: Kind) -> Iterator[str]:
    node = kind.workers()[-1]
    yield node
    kind.kubectl("uncordon", node, check=False)
    if "drain" in slurm_node(kind, node)[0]:
        kind.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    wait(lambda: "drain" not in slurm_node(kind, node)[0], 60, f"Slurm node {node} resumed")


def test_kubectl_drain_drains_the_slurm_node(kind: Kind, drained_worker: str) -> None:
    node = drained_worker
    kind.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s",
                 timeout=180)
    def drained() -> str | None:
        state, reason = slurm_node(kind, node)
        return reason if "drain" in state else None
    reason = wait(drained, 60, f"Slurm node {node} drained after kubectl drain")
    assert reason.startswith(keys.DRAIN_REASON_PREFIX), reason

    kind.kubectl("uncordon", node)
    wait(lambda: "drain" not in slurm_node(kind, node)[0], 60,
         f"the bridge to resume Slurm node {node} after uncordon")


def test_slurm_admin_drain_taints_the_kubernetes_node(kind: Kind, drained_worker: str) -> None:
    node = drained_worker
    kind.slurm("scontrol", "update", f"nodename={node}", "state=drain", "reason=disk swap")

    def tainted() -> list[dict[str, str]]:
        return [t for t in taints(kind, node) if t["key"] == keys.UNAVAILABLE_TAINT]
    found = wait(tainted, 60, f"a {keys.UNAVAILABLE_TAINT} taint on {node}")
    assert found[0]["effect"] == "NoSchedule"
    # The bridge never undoes an admin's drain.
    assert "drain" in slurm_node(kind, node)[0]

    kind.slurm("scontrol", "update", f"nodename={node}", "state=resume")
    wait(lambda: not tainted(), 60, f"the taint to leave {node} after the admin resumed it")


def test_two_pod_group_runs_on_the_two_nodes_of_one_job(kind: Kind, ns: str) -> None:
    group = {keys.GROUP: "allreduce", keys.GROUP_SIZE: "2"}
    for name in ("worker-0", "worker-1"):
        kind.apply(ns, pod_manifest(name, "sleep 600", gpus=1, labels=group))
    pods = [kind.wait_running(ns, name) for name in ("worker-0", "worker-1")]

    jobs = {kind.job_of(p) for p in pods}
    assert len(jobs) == 1, f"the group's pods name different jobs: {jobs}"
    job = jobs.pop()
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert nodes == sorted(kind.job_gpus(job)) == kind.workers()[:2]
    assert kind.jobs_named(f"k8s:{ns}/allreduce") == [job]


def test_extender_pod_deleted_comes_back_without_duplicate_jobs(kind: Kind, ns: str) -> None:
    kind.apply(ns, pod_manifest("before", "sleep 600"))
    job = kind.job_of(kind.wait_running(ns, "before"))

    selector = "app.kubernetes.io/component=extender"
    victims = kind.kubectl("-n", kind.namespace, "get", "pods", "-l", selector,
                           "-o", "name").split()
    assert victims, f"no extender pods ({selector}) in {kind.namespace}"
    kind.kubectl("-n", kind.namespace, "delete", *victims, "--wait=false")
    kind.kubectl("-n", kind.namespace, "rollout", "status", f"deploy/{kind.release}-extender",
                 "--timeout=180s", timeout=200)
    wait(lambda: not set(victims) & set(kind.kubectl(
        "-n", kind.namespace, "get", "pods", "-l", selector, "-o", "name").split()),
        120, "the deleted extender pods to be replaced")

    kind.apply(ns, pod_manifest("after", "sleep 600"))
    kind.wait_running(ns, "after")
    assert kind.jobs_named(f"k8s:{ns}/before") == [job]
    assert len(kind.jobs_named(f"k8s:{ns}/after")) == 1
    names = kind.slurm("squeue", "-h", "-o", "%j").split()
    assert len([n for n in names if n.startswith(f"k8s:{ns}/")]) == 2, names

    # Whichever replica submitted a job, deleting its pod frees it promptly.
    for name in ("before", "after"):
        job = kind.jobs_named(f"k8s:{ns}/{name}")[0]
        kind.kubectl("-n", ns, "delete", "pod", name, "--wait=false")
        wait(lambda job=job: not kind.in_squeue(job), 60,  # type: ignore[misc]
             f"job {job} of deleted pod {name} to leave squeue")


def test_pods_are_admitted_throughout_a_rolling_restart_of_the_webhook(kind: Kind,
                                                                       ns: str) -> None:
    """A helm upgrade rolls the webhook's pods; a pod created meanwhile must not be refused
    because a terminating replica stopped listening before its Service endpoint left."""
    deploy = f"deploy/{kind.release}-webhook"
    kind.kubectl("-n", kind.namespace, "rollout", "restart", deploy)
    refused: list[str] = []
    tries, settled_at, during = 0, None, 0
    while settled_at is None or time.monotonic() < settled_at + 10:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(kind.kubeconfig), "-n", ns, "run", f"probe-{tries}",
             f"--image={WORKLOAD_IMAGE}", "--restart=Never", "--dry-run=server", "-o", "name"],
            capture_output=True, text=True, timeout=30, check=False)
        tries += 1
        if done.returncode:
            refused.append(done.stderr.strip())
        if settled_at is None and "successfully rolled out" in kind.kubectl(
                "-n", kind.namespace, "rollout", "status", deploy, "--watch=false"):
            settled_at, during = time.monotonic(), tries
        time.sleep(0.2)
    # A probe costs two kubectl calls, over a second on a busy machine: count the rollout's.
    assert during >= 5, f"only {during} pods tried before the rollout settled"
    assert not refused, f"{len(refused)} of {tries} pods refused, e.g. {refused[0]}"


def test_workers_carry_the_topology_units_of_kinds_slurm(kind: Kind) -> None:
    """recipe.sh's TOPOLOGY_LAYOUT=leaf-per-node, kind's: each hybrid worker under a leaf switch
    of its own, both in block b1; node sync labels each Node with its units, as Kueue's TAS
    levels expect."""
    def units(node: str) -> dict[str, str]:
        labels = kind.kubectl_json("get", "node", node)["metadata"]["labels"]
        return {k.removeprefix(keys.TOPOLOGY_LABEL_PREFIX): v for k, v in labels.items()
                if k.startswith(keys.TOPOLOGY_LABEL_PREFIX)}

    workers = kind.workers()
    want = {node: {"tree": f"leaf{i}", "block": "b1"} for i, node in enumerate(workers, 1)}
    wait(lambda: {n: units(n) for n in workers} == want, 60,
         f"topology labels {want} on the workers")
    shown = kind.slurm("scontrol", "show", "topology", "tree")
    assert all(f"SwitchName=leaf{i} " in shown for i in (1, 2)), shown
