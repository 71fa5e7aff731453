"""``helm uninstall`` of the bridge with the demo running: the chart's pre-delete hook runs
``slurmbridge uninstall`` as the extender, and nothing of the bridge is left in Kubernetes or
Slurm, while the admin's native job, Node labels and drain stay (issue 44, item 3).  The
bridge is installed again at the end, whatever the test did, for the kind tests after it."""

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bridge import keys
from slurmbridge_devkit.helm import helm_bin
from tests.kind.cluster import UP, Kind, pod_manifest, run, wait

pytestmark = [pytest.mark.kind, pytest.mark.e2e]  # e2e: left out of the fast path

DEMO_NS = "slurm-demo"  # deploy/kind/up.sh
NATIVE = "native-gpu-training"  # the demo's native Slurm job
ADMIN_DRAIN = "admin: uninstall test"


@pytest.fixture
def reinstalled(kind: Kind) -> Iterator[None]:
    """The bridge installed again at the end (and the demo's leftovers cleared)."""
    yield
    run(["bash", str(UP), "install"], timeout=900)
    run(["bash", str(UP), "demo-clean"], timeout=300)


def _items(kind: Kind, *args: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kind.kubectl_json("get", *args)["items"]
    return items


def bridge_marks_on_nodes(kind: Kind) -> dict[str, list[str]]:
    found = {}
    for node in _items(kind, "nodes"):
        # node sync's taints; the managed one with a value is the admin's (cluster.yaml)
        taints = [t["key"] for t in node["spec"].get("taints") or []
                  if t["key"] == keys.UNAVAILABLE_TAINT
                  or (t["key"] == keys.MANAGED_TAINT and not t.get("value"))]
        labels = [k for k in node["metadata"].get("labels") or {}
                  if k.startswith(keys.TOPOLOGY_LABEL_PREFIX)]
        conditions = [c["type"] for c in node["status"].get("conditions") or []
                      if c["type"] == keys.NODE_CONDITION_SLURM]
        if marks := taints + labels + conditions:
            found[node["metadata"]["name"]] = marks
    return found


def bridge_leftovers(kind: Kind) -> dict[str, Any]:
    """Everything of the bridge still in Kubernetes or Slurm (empty: nothing)."""
    pods = [f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in _items(kind, "pods", "-A")
            if p["spec"].get("schedulerName") == keys.SCHEDULER_NAME
            and p["status"].get("phase") not in ("Succeeded", "Failed")]
    claims = [c["metadata"]["name"] for c in _items(kind, "resourceclaims", "-A")
              if keys.CLAIM_FINALIZER in c["metadata"].get("finalizers", [])]
    leases = [le["metadata"]["name"] for le in _items(kind, "leases", "-n", kind.namespace)
              if le["metadata"]["name"] == "slurmbridge-controllers"]
    jobs = [line for line in kind.slurm("squeue", "-h", "-o", "%i %j %T").splitlines()
            if " k8s:" in line]
    drains = [line for line in kind.slurm("sinfo", "-h", "-R", "-o", "%n|%E").splitlines()
              if line.partition("|")[2].startswith(keys.DRAIN_REASON_PREFIX)]
    external = [line for line in kind.slurm("sinfo", "-h", "-N", "-o", "%N %f").splitlines()
                if "slurmbridge-external" in line]
    found = {"pods": pods, "nodes": bridge_marks_on_nodes(kind), "claims": claims,
             "leases": leases, "slurm jobs": jobs, "slurm drains": drains,
             "slurm external nodes": external}
    return {k: v for k, v in found.items() if v}


def test_helm_uninstall_leaves_nothing_of_the_bridge(
        kind: Kind, reinstalled: None, native: list[str]) -> None:
    run(["bash", str(UP), "demo"], timeout=600)  # the demo's pods, placed and running
    placed = [p for p in _items(kind, "pods", "-n", DEMO_NS)
              if p["metadata"].get("annotations", {}).get(keys.JOB_ID)]
    assert placed, "the demo placed no pod"
    # A pod held by another controller's gate as well: gated, nothing would ever release it.
    held = pod_manifest("waits", "sleep 600")
    held["spec"]["schedulingGates"] = [{"name": "slurmbridge.test/hold"}]
    kind.apply(DEMO_NS, held)
    wait(lambda: {"name": keys.SLURM_GATE} in ((kind.pod(DEMO_NS, "waits") or {}).get(
        "spec", {}).get("schedulingGates") or []), 30, "the waiting pod gated by the bridge")
    native_job = kind.slurm("squeue", "-h", "-n", NATIVE, "-o", "%i").strip()
    assert native_job, "the demo's native job is not queued"
    native.append(native_job)
    slurm_node = kind.slurm("sinfo", "-h", "-N", "-o", "%N").split()[0]
    kind.slurm("scontrol", "update", f"nodename={slurm_node}", "state=drain",
               f"reason={ADMIN_DRAIN}")
    try:
        assert bridge_marks_on_nodes(kind), "the bridge marked no Node before the uninstall"
        done = subprocess.run(
            [str(helm_bin()), "--kubeconfig", str(kind.kubeconfig), "uninstall", kind.release,
             "-n", kind.namespace, "--wait", "--timeout", "5m"],
            capture_output=True, text=True, timeout=400, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

        deadline = time.monotonic() + 90  # evicted pods and cancelled jobs take a moment
        while bridge_leftovers(kind) and time.monotonic() < deadline:
            time.sleep(2)
        assert bridge_leftovers(kind) == {}
        assert kind.slurm("squeue", "-h", "-j", native_job, "-o", "%T").strip() == "RUNNING"
        reason = kind.slurm("sinfo", "-h", "-R", "-n", slurm_node, "-o", "%E").strip()
        assert reason == ADMIN_DRAIN, reason
        events = _items(kind, "events", "-n", DEMO_NS, "--field-selector",
                        f"reason={keys.EventReason.UNINSTALLED}")
        assert {e["involvedObject"]["name"] for e in events} >= {"waits"} | {
            p["metadata"]["name"] for p in placed}, json.dumps(events)[:2000]
    finally:
        kind.slurm("scontrol", "update", f"nodename={slurm_node}", "state=resume", check=False)

