"""Helpers of the end-to-end tests, benchmarks and demo: pods, their waits, Slurm's own view."""

from typing import TYPE_CHECKING, Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Pod

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.scontrol import show_job
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.waiting import wait_for

if TYPE_CHECKING:  # the stack's fixtures need pytest; the demo imports this module without
    from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory


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
    """The common test pod in one call (``PodBuilder`` for anything else)."""
    builder = PodBuilder(name).cpu(cpu).memory(memory).gpus(gpus)
    builder.labels(labels or {}).annotations(annotations or {})
    return builder.scheduler(keys.SCHEDULER_NAME if scheduler else None).build()


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


async def wait_job_id(kube: AsyncClient, ns: str, name: str, timeout: float = 60) -> str:  # noqa: ASYNC109
    """The Slurm job id the bridge recorded on the pod, once it has."""

    async def recorded() -> str | None:
        pod = await kube.get(Pod, name, namespace=ns)
        return ((pod.metadata and pod.metadata.annotations) or {}).get(keys.JOB_ID)

    job_id: str = await wait_for(recorded, timeout, interval=0.5, what=f"job id of {ns}/{name}")
    return job_id


async def wait_slurm_job(slurm: SlurmTarget, ns: str, name: str, timeout: float = 60) -> str:  # noqa: ASYNC109
    """The id of the job Slurm lists for pod ``ns/name`` (``k8s:<ns>/<name>``), as an admin
    finds it in squeue: a gated pod records its job only once Slurm has placed it."""

    def listed() -> str:
        out = slurm.admin("squeue", "-h", "-o", "%i", "-n", f"{keys.JOB_NAME_PREFIX}{ns}/{name}")
        return out.strip()

    job_id: str = await wait_for(listed, timeout, interval=0.5, what=f"Slurm job of {ns}/{name}")
    return job_id


async def slurm_idle(slurm: SlurmTarget, timeout: float = 60) -> None:  # noqa: ASYNC109
    """Wait until no job holds resources: capacity arithmetic in a test starts from zero."""

    def idle() -> bool:
        return not slurm.admin("squeue", "-h", "-t", "RUNNING,PENDING,COMPLETING").strip()

    await wait_for(idle, timeout, interval=0.5, what="an idle Slurm (earlier tests' jobs gone)")


async def quiet_namespace(
    stack: "BridgeStack", e2e_namespace: "NamespaceFactory", prefix: str
) -> tuple[SlurmTarget, str]:
    """The stack's Slurm once no earlier test's job is left, and a fresh namespace."""
    await slurm_idle(stack.slurm)
    ns = await e2e_namespace(prefix)
    return stack.slurm, ns


def slurm_job_view(slurm: SlurmTarget, job_id: int | str) -> dict[str, Any]:
    """What `scontrol show job -d` says (parsed by the dev kit, not the product): name,
    state, nodes, GPU indices per node, reason."""
    job = show_job(slurm, job_id)
    return {"name": job.name, "state": job.state, "nodes": job.nodes, "gpus": job.gpus,
            "reason": job.reason}


async def pod_events(kube: AsyncClient, ns: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the pod's events, as `kubectl describe pod` lists them."""
    found = []
    async for event in kube.list(
        Event, namespace=ns, fields={"involvedObject.name": name}
    ):
        found.append((event.reason or "", event.message or ""))
    return found
