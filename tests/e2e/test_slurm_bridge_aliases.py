"""A slurm-bridge manifest runs as it is: its timelimit and job-name annotations reach Slurm.

The time limit passes the namespace policy like the bridge's own annotation: the e2e stack's
default policy allows up to a day (``max_time_limit_minutes``).
"""

import pytest
from lightkube import AsyncClient

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest, wait_bound
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory

pytestmark = pytest.mark.e2e


async def test_slurm_bridge_timelimit_and_job_name_reach_the_job(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("slinky")
    annotations = {keys.SLINKY_TIME_LIMIT: "1:30:00", keys.SLINKY_JOB_NAME: "train-run"}
    await create_pod(kube, ns, pod_manifest("migrated", annotations=annotations))
    pod = await wait_bound(kube, ns, "migrated")
    assert pod.metadata is not None and pod.metadata.annotations is not None
    job_id = pod.metadata.annotations[keys.JOB_ID]
    squeue = bridge_stack.slurm.admin("squeue", "-h", "-j", job_id, "-o", "%j|%l")
    assert squeue.strip() == f"k8s:{ns}/train-run|1:30:00"
