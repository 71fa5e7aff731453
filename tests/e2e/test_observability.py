"""``slurmbridge status`` run against the stack shows single pods, a group and an ended job,
as a table and as JSON.  (The dashboard over Prometheus: test_monitoring.py.)"""

import json

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod, quiet_namespace, wait_bound
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.scontrol import show_job
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


async def test_status_shows_pods_a_group_and_an_ended_job(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "status")
    await create_pod(kube, ns, PodBuilder("solo").gpus(2).build())
    for i in range(2):
        await create_pod(kube, ns, PodBuilder(f"member-{i}").gpus(1).group("pair", 2).build())
    await create_pod(kube, ns, PodBuilder("short").build())
    bound = {name: await wait_bound(kube, ns, name)
             for name in ("solo", "member-0", "member-1", "short")}
    await set_pod_phase(kube, bound["short"], "Running")
    await set_pod_phase(kube, bound["short"], "Succeeded")  # its job is released
    short_job = _job_id(bound["short"])
    await wait_for(lambda: show_job(bridge_stack.slurm, short_job).state not in ("RUNNING", ""),
                   30, what=f"job {short_job} of a finished pod to end")

    rows = {r["pod"]: r for r in json.loads(_status(bridge_stack, "-o", "json"))
            if r["pod"].startswith(f"{ns}/")}
    assert set(rows) == {f"{ns}/{n}" for n in bound}
    for name, pod in bound.items():
        row = rows[f"{ns}/{name}"]
        assert row["job_id"] == int(_job_id(pod))
        assert row["node"] == (pod.spec.nodeName if pod.spec else None)
        slurm = show_job(bridge_stack.slurm, row["job_id"])  # Slurm's own word, parsed here
        assert row["state"] == slurm.state
    members = [rows[f"{ns}/member-{i}"] for i in range(2)]
    assert members[0]["job_id"] == members[1]["job_id"]
    assert members[0]["node"] != members[1]["node"]
    assert rows[f"{ns}/solo"]["state"] == "RUNNING"
    assert len(rows[f"{ns}/solo"]["gpus"].split(",")) == 2
    assert rows[f"{ns}/short"]["state"] in ("CANCELLED", "COMPLETED")

    table = _status(bridge_stack).splitlines()
    assert table[0].split()[:3] == ["POD", "JOB", "STATE"]
    lines = {line.split()[0]: line.split() for line in table[1:]}
    for name in bound:
        assert lines[f"{ns}/{name}"][1:3] == [str(rows[f"{ns}/{name}"]["job_id"]),
                                             rows[f"{ns}/{name}"]["state"]]


def _job_id(pod: Pod) -> str:
    annotations: dict[str, str] = (pod.metadata and pod.metadata.annotations) or {}
    return annotations[keys.JOB_ID]


def _status(stack: BridgeStack, *args: str) -> str:
    """``slurmbridge status`` as an operator runs it, with the extender's settings."""
    done = stack.cli("--log-level", "warning", "status", *args)
    assert done.returncode == 0, done.stderr
    assert "Unclosed" not in done.stderr, f"status left its connections open: {done.stderr}"
    return done.stdout
