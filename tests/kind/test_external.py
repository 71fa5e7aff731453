"""A Kubernetes node without slurmd that Slurm schedules all the same (issue 24, item 3), on a real
kubelet: kind's third worker runs no slurmd (cluster.yaml); labelled (by an admin)
``node-restriction.kubernetes.io/slurmbridge-external-node=true`` it becomes an EXTERNAL Slurm
node with the GPUs its Node offers, Slurm places a GPU pod there (partition ``external``, kind's
NodeSet of such nodes), the job is in Slurm's accounting, a cordon drains it and a deleted Node
leaves Slurm. Slurm's side is read with the admin's tools."""

import json
from collections.abc import Callable, Iterator

import pytest

from bridge import keys
from tests.kind.cluster import Kind, wait, workload_pod
from tests.kind.test_pods import PRINT_GPU_ENV, env_lines

pytestmark = [pytest.mark.kind, pytest.mark.e2e]  # e2e: left out of the fast path

GPUS = 2  # what the Node advertises; kind's gres.conf names 2 device files for it


def sinfo(kind: Kind, node: str) -> dict[str, str]:
    """What ``sinfo -N`` says of ``node`` (state, partitions, GRES, features, reason); {}: not
    a Slurm node."""
    out = kind.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%T|%P|%G|%f|%E", check=False)
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    if not rows:
        return {}
    return {"state": rows[0][0], "partitions": ",".join(r[1] for r in rows), "gres": rows[0][2],
            "features": rows[0][3], "reason": rows[0][4]}


def _where(kind: Kind, node: str, test: Callable[[dict[str, str]], bool]) -> dict[str, str] | None:
    """sinfo's row of ``node`` once ``test`` holds for it."""
    row = sinfo(kind, node)
    return row if row and test(row) else None


def node_ready(kind: Kind, node: str) -> bool:
    out = kind.kubectl("get", "node", node, "--ignore-not-found", "-o",
                       'jsonpath={.status.conditions[?(@.type=="Ready")].status}')
    return out.strip() == "True"


@pytest.fixture
def external_node(kind: Kind) -> Iterator[str]:
    """kind's worker without slurmd, its Node advertising GPUS GPUs (as a device plugin would)
    and labelled external; afterwards unlabelled and uncordoned, or registered again if the
    test deleted it."""
    node = kind.external_workers()[0]
    patch = [{"op": "add", "path": f"/status/capacity/{keys.GPU_RESOURCE.replace('/', '~1')}",
              "value": str(GPUS)}]
    kind.kubectl("patch", "node", node, "--subresource=status", "--type=json",
                 "-p", json.dumps(patch))
    kind.kubectl("label", "node", node, f"{keys.EXTERNAL_NODE}=true")
    yield node
    if kind.kubectl("get", "node", node, "--ignore-not-found", "-o", "name").strip():
        kind.kubectl("uncordon", node, check=False)
        kind.kubectl("label", "node", node, f"{keys.EXTERNAL_NODE}-", check=False)
        wait(lambda: node_ready(kind, node), 120, f"Node {node} Ready")
        return
    kind.node_exec(node, "systemctl", "restart", "kubelet")  # it registers the Node again
    wait(lambda: node_ready(kind, node), 120, f"Node {node} registered and Ready again")
    kind.republish_dra_devices(node)  # kind's DRA driver's slices went with the Node


def test_an_external_node_runs_a_gpu_pod_slurm_placed_and_leaves_slurm_with_its_node(
    kind: Kind, ns: str, external_node: str
) -> None:
    node = external_node
    listed = wait(lambda: _where(kind, node, lambda s: "gpu:" in s["gres"]), 60,
                  f"{node} in sinfo with its GPUs")
    assert f"gpu:{GPUS}" in listed["gres"], listed
    assert "external" in listed["partitions"].split(","), listed
    assert listed["features"] == "slurmbridge-external", listed
    shown = kind.slurm("scontrol", "show", "node", node)
    assert "EXTERNAL" in shown, shown

    kind.apply(ns, workload_pod("outside", PRINT_GPU_ENV, gpus=1)
               .annotate(keys.PARTITION, "external").manifest())
    pod = kind.wait_running(ns, "outside")
    job = kind.job_of(pod)
    assert pod["spec"]["nodeName"] == node
    gpus = kind.job_gpus(job)
    assert list(gpus) == [node] and len(gpus[node]) == 1, gpus
    # The container is told the GPU Slurm allocated on the node without slurmd.
    assert [int(i) for i in env_lines(kind, ns, "outside")["NVIDIA"].split(",")] == gpus[node]
    accounted = kind.slurm("sacct", "-n", "-P", "-X", "-j", job, "-o", "JobName,NodeList,State")
    assert accounted.split("\n")[0] == f"k8s:{ns}/outside|{node}|RUNNING", accounted

    kind.kubectl("-n", ns, "delete", "pod", "outside", "--wait=true", "--timeout=60s")
    wait(lambda: kind.job_state(job) not in ("RUNNING", "COMPLETING"), 60,
         f"job {job} of the deleted pod to end")
    ended = kind.slurm("sacct", "-n", "-P", "-X", "-j", job, "-o", "State").strip()
    assert ended.startswith(("CANCELLED", "COMPLETED")), ended

    kind.kubectl("cordon", node)
    drained = wait(lambda: _where(kind, node, lambda s: "drain" in s["state"]), 60,
                   f"Slurm node {node} drained after the cordon")
    assert drained["reason"].startswith("slurmbridge"), drained
    kind.kubectl("uncordon", node)
    wait(lambda: "drain" not in sinfo(kind, node).get("state", "drain"), 60,
         f"the bridge to lift its drain of {node} after the uncordon")

    kind.kubectl("delete", "node", node)
    wait(lambda: not sinfo(kind, node), 90, f"{node} gone from Slurm with its Node")
