"""The kind cluster's DRA GPU driver (deploy/kind/dra): the ground issue 23's claims stand on.

Each worker's GPUs are published as DRA devices gpu-0..gpu-N-1 whose ``index`` is Slurm's GRES
index on that node (N as the node's gres.conf declares), and a container whose claim was
allocated is handed exactly those devices (CDI, through the node's containerd).  The pods here
are the default scheduler's, in a namespace the bridge does not serve; a slurmbridge pod's
claims get Slurm's devices instead (test_dra_claims.py)."""

import json
import re
from collections.abc import Iterator

import pytest

from slurmbridge_devkit.builders import PodBuilder
from tests.kind.cluster import DRA_DRIVER, DRA_GPUS_LABEL, WORKLOAD_IMAGE, Kind, wait

pytestmark = pytest.mark.kind


def _slurm_gpus(kind: Kind, node: str) -> int:
    shown = kind.slurm("scontrol", "show", "node", node)
    found = re.search(r"\bGres=(?:\S*,)?gpu:(\d+)", shown)
    assert found, f"no gpu GRES in Slurm's view of {node}:\n{shown}"
    return int(found.group(1))


def test_each_worker_publishes_its_gpus_with_slurms_indices(kind: Kind) -> None:
    expected = {node: _slurm_gpus(kind, node) for node in kind.workers()}
    for node in kind.external_workers():  # not in Slurm until a test registers it
        expected[node] = int(kind.kubectl_json("get", "node", node)["metadata"]["labels"]
                             [DRA_GPUS_LABEL])
    for node, count in expected.items():
        want = {f"gpu-{i}": i for i in range(count)}
        wait(lambda node=node, want=want: kind.dra_devices(node) == want,  # type: ignore[misc]
             60, f"{node}'s ResourceSlice of {DRA_DRIVER} to list {sorted(want)}")


# Pods of the default scheduler on Slurm's nodes are refused (the chart's managedNodes
# policies) unless an admin listed them: deploy/kind/up.sh lists this namespace's default
# ServiceAccount, as an admin lists the per-node checks of a device driver.
CHECKS_NS = "kind-driver-check"


@pytest.fixture
def checks_ns(kind: Kind) -> Iterator[str]:
    """The namespace (not enrolled) whose pods up.sh lets run on the workers."""
    kind.kubectl("delete", "namespace", CHECKS_NS, "--ignore-not-found", "--wait=true",
                 timeout=180)  # a previous run's, still leaving
    kind.kubectl("create", "namespace", CHECKS_NS)
    yield CHECKS_NS
    kind.kubectl("delete", "namespace", CHECKS_NS, "--wait=false", check=False)


def test_a_claimed_container_is_handed_exactly_its_allocated_devices(
        kind: Kind, checks_ns: str) -> None:
    node = kind.external_workers()[0]  # no slurmd: nothing of Slurm's uses its GPUs
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "two"},
             "spec": {"devices": {"requests": [
                 {"name": "gpus", "exactly": {"deviceClassName": DRA_DRIVER, "count": 2}}]}}}
    pod = (PodBuilder("claimed").bare()
           .command("sh", "-c", "env | grep ^GPU_DEVICE_ | sort; sleep 600", image=WORKLOAD_IMAGE)
           .pull("Never").grace(0).claim("gpus", resourceClaimName="two")
           .spec(restartPolicy="Never", nodeSelector={"kubernetes.io/hostname": node},
                 tolerations=[{"operator": "Exists"}])  # the workers' managed taint
           .manifest())
    for manifest in (claim, pod):
        kind.kubectl("-n", checks_ns, "create", "-f", "-", stdin=json.dumps(manifest))
    kind.wait_running(checks_ns, "claimed")

    allocated = kind.kubectl_json("-n", checks_ns, "get", "resourceclaim", "two")["status"]
    results = allocated["allocation"]["devices"]["results"]
    assert {(r["driver"], r["pool"]) for r in results} == {(DRA_DRIVER, node)}, results
    devices = sorted(r["device"] for r in results)
    told = wait(lambda: kind.kubectl("-n", checks_ns, "logs", "claimed").split(), 60,
                "the container's GPU_DEVICE_ variables in its log")
    assert told == [f"GPU_DEVICE_{d.removeprefix('gpu-')}={d}" for d in devices]
    assert [r["name"] for r in allocated["reservedFor"]] == ["claimed"]

    kind.kubectl("-n", checks_ns, "delete", "pod", "claimed", "--wait=true", timeout=120)
    wait(lambda: "allocation" not in kind.kubectl_json(
        "-n", checks_ns, "get", "resourceclaim", "two").get("status", {}), 120,
        "the claim's devices to be freed once its pod is gone")
