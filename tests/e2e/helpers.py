"""Small helpers shared by the end-to-end tests: pod manifests and Slurm's own view."""

from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Pod

from bridge import keys
from bridge.slurm.allocation import expand_nodes, gpu_indices
from tests.fixtures.kube import wait_for
from tests.fixtures.slurm import GRES_DETAIL, SlurmTarget


def pod_manifest(
    name: str,
    *,
    scheduler: bool = True,
    cpu: str = "1",
    memory: str = "1Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Pod:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits[keys.GPU_RESOURCE] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                        "resources": {"requests": dict(limits), "limits": limits}}],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler:
        spec["schedulerName"] = keys.SCHEDULER_NAME
    return cast(Pod, Pod.from_dict({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }))


async def create_pod(kube: AsyncClient, namespace: str, pod: Pod) -> Pod:
    """Create ``pod`` in ``namespace`` (the manifest itself names none)."""
    assert pod.metadata is not None
    pod.metadata.namespace = namespace
    return await kube.create(pod)


async def wait_bound(kube: AsyncClient, ns: str, name: str, timeout: float = 90) -> Pod:  # noqa: ASYNC109
    async def bound() -> Pod | None:
        pod = await kube.get(Pod, name, namespace=ns)
        return pod if pod.spec and pod.spec.nodeName else None

    result: Pod = await wait_for(bound, timeout, interval=0.5, what=f"pod {ns}/{name} bound")
    return result


async def slurm_idle(slurm: SlurmTarget, timeout: float = 60) -> None:  # noqa: ASYNC109
    """Wait until no job holds resources: capacity arithmetic in a test starts from zero."""

    def idle() -> bool:
        return not slurm.admin("squeue", "-h", "-t", "RUNNING,PENDING,COMPLETING").strip()

    await wait_for(idle, timeout, interval=0.5, what="an idle Slurm (earlier tests' jobs gone)")


def slurm_job_view(slurm: SlurmTarget, job_id: int | str) -> dict[str, Any]:
    """What `scontrol show job -d` says: name, state, nodes and GPU indices per node."""
    line = slurm.admin("scontrol", "show", "job", "-d", "-o", str(job_id)).strip()
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    gpus: dict[str, tuple[int, ...]] = {}
    for nodes, gres in GRES_DETAIL.findall(line):
        for node in expand_nodes(nodes):
            gpus[node] = gpu_indices(gres) if gres else ()
    return {
        "name": fields.get("JobName", ""),
        "state": fields.get("JobState", ""),
        "nodes": expand_nodes(fields.get("NodeList", "")) if fields.get("NodeList") != "(null)"
        else (),
        "gpus": gpus,
        "reason": fields.get("Reason", ""),
    }


async def pod_events(kube: AsyncClient, ns: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the pod's events, as `kubectl describe pod` lists them."""
    found = []
    async for event in kube.list(
        Event, namespace=ns, fields={"involvedObject.name": name}
    ):
        found.append((event.reason or "", event.message or ""))
    return found
