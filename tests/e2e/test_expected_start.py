"""Issue 26: a pending pod is told when Slurm expects its job to start, as `squeue --start`
says it: a native job with a time limit fills every node, so the backfill scheduler plans
the pods' jobs for when it ends.  A gated pod (the webhook's) reads it in its SlurmPending
event, a pod that came without the gate in its SlurmJobAllocated condition too; the admin's
`slurmbridge status` and the researcher's `kubectl slurmbridge` show the same time."""

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    pod_manifest,
    quiet_namespace,
    slurm_job_view,
)
from slurmbridge_devkit.kube import ControlPlane
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

_SAID = re.compile(r"waiting for Slurm job (?P<job>\d+) \(PENDING, reason (?P<reason>\w+)\).*; "
                   r"expected to start at (?P<at>\d\d:\d\d) UTC, in about \d+ \w+, by Slurm's "
                   r"backfill at \d\d:\d\d$")


def _condition_message(pod: Pod) -> str:
    conditions = (pod.status.conditions if pod.status else None) or []
    return next((c.message or "" for c in conditions if c.type == keys.POD_CONDITION_SLURM), "")


def _run(env: dict[str, str], *command: str) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode in (0, 1), done.stderr  # kubectl slurmbridge why: 1 while waiting
    return done.stdout


def _kubectl_slurmbridge(cp: ControlPlane, *args: str) -> str:
    """Through the real kubectl, which finds the plugin beside this Python on PATH."""
    scripts = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(cp.kubeconfig)}
    return _run(env, str(cp.bin_dir / "kubectl"), "slurmbridge", *args)


def _close_to_squeue(bridge_stack: BridgeStack, said: re.Match[str]) -> None:
    """The shown start (minutes, UTC) is within a minute of `squeue --start` for the job."""
    start = bridge_stack.slurm.admin("squeue", "--start", "-h", "-o", "%S", "-j", said["job"])
    expected = datetime.fromisoformat(start.strip()).replace(tzinfo=UTC)  # the chroot is UTC
    shown = datetime.combine(expected.date(), datetime.strptime(said["at"], "%H:%M").time(), UTC)
    assert abs((expected - shown).total_seconds()) < 60, (start, said.group(0))


async def test_a_pending_pod_says_when_slurm_expects_its_job_to_start(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    slurm, gated_ns = await quiet_namespace(bridge_stack, e2e_namespace, "expected")
    plain_ns = await e2e_namespace("expected-plain", served=False)  # the webhook does not gate it
    holder = slurm.admin("sbatch", "--parsable", "-J", "native-full", "--exclusive", "-N", "4",
                         "-t", "10", "-o", "/dev/null", "--wrap", "sleep 600").strip()
    try:
        await wait_for(lambda: slurm_job_view(slurm, holder)["state"] == "RUNNING", 30,
                       what="a native job with a time limit holding every node")
        limit = {keys.TIME_LIMIT: "5"}
        await create_pod(kube, gated_ns, pod_manifest("gated", annotations=limit))
        # what the webhook would have added, but the gate
        plain = PodBuilder("plain").annotations(limit).tolerate(keys.MANAGED_TAINT).build()
        await create_pod(kube, plain_ns, plain)

        async def event_said() -> re.Match[str] | None:
            return next((m for reason, message in await pod_events(kube, gated_ns, "gated")
                         if reason == "SlurmPending" and (m := _SAID.search(message))), None)

        async def condition_said() -> re.Match[str] | None:
            return _SAID.search(_condition_message(await kube.get(Pod, "plain",
                                                                  namespace=plain_ns)))

        gated = await wait_for(event_said, 90, what="the gated pod's event with a start")
        ungated = await wait_for(condition_said, 90, what="the pod's condition with a start")
        for said in (gated, ungated):
            # the first job waits for Resources, the one behind it for Priority
            assert said["reason"] in ("Resources", "Priority"), said.group(0)
            _close_to_squeue(bridge_stack, said)
        # The same words in the ungated pod's event; the gated pod has no condition.
        assert any(reason == "SlurmPending" and _SAID.search(message)
                   for reason, message in await pod_events(kube, plain_ns, "plain"))
        assert not _condition_message(await kube.get(Pod, "gated", namespace=gated_ns))
        # Both read back from what the bridge wrote (the plugin) or from Slurm (the admin's).
        admin = _run(bridge_stack.extender.env, sys.executable, "-m", "slurmbridge_cli",
                     "status").splitlines()
        for ns, name, said in ((gated_ns, "gated", gated), (plain_ns, "plain", ungated)):
            why = _kubectl_slurmbridge(bridge_stack.control_plane, "why", name, "-n", ns)
            assert f"\nExpected:   {said['at']} UTC (Slurm's estimate, " in why, why
            table = _kubectl_slurmbridge(bridge_stack.control_plane, "status", "-n", ns)
            assert f"   {said['at']} UTC   " in table.splitlines()[1], table
            [row] = [line for line in admin if line.startswith(f"{ns}/{name} ")]
            assert f"  {said['at']} UTC  " in row, admin
    finally:
        slurm.admin("scancel", holder)
