"""GPUs at the granularity Slurm knows besides whole ones (issue 23 items 3-4), shared with
native jobs: shards of one GPU (``slurmbridge.io/gpu-shards`` -> ``gres/shard:N``) and, where
gres.conf declares GPU types, slices of one type (``slurmbridge.io/gpu-type`` ->
``gres/gpu:<type>:N``).  What the pod is told and what Slurm holds are read with the admin's
own tools (``scontrol show job -d``, ``sacct``), parsed by the dev kit, not the product.

The local Slurm (deploy/slurm/recipe.sh) gives every GPU 4 shards on the same device file."""

import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    quiet_namespace,
    slurm_idle,
    wait_bound,
    wait_job_id,
)
from slurmbridge_devkit.kubelet import NodeFactory
from slurmbridge_devkit.namespaces import unique_name
from slurmbridge_devkit.scontrol import gpu_overlaps, show_job, show_jobs
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import (
    DEFAULT_TENANCY,
    E2E_DEVICE_CLASS,
    E2E_SHARD_CLASS,
    BridgeStack,
    NamespaceFactory,
)
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e


def _node_gres(slurm: SlurmTarget) -> dict[str, str]:
    """Slurm node -> its configured Gres (``gpu:8,shard:32``), as sinfo shows it."""
    out = slurm.admin("sinfo", "-h", "-N", "-o", "%N %G")
    return dict(line.split(None, 1) for line in out.splitlines() if line.strip())


def _gpus_of(gres: str) -> int:
    """The GPUs of a node's Gres (typed ones included): ``gpu:a:4,gpu:b:4,shard:32`` -> 8."""
    return sum(int(item.split("(")[0].split(":")[-1]) for item in gres.split(",")
               if item.startswith("gpu:"))


def _sbatch(slurm: SlurmTarget, name: str, *args: str) -> str:
    return slurm.admin("sbatch", "--parsable", "-J", name, "-c", "1", "--mem=256",
                       "-o", "/dev/null", *args, "--wrap", "sleep 900").strip()


async def _running(slurm: SlurmTarget, *jobs: str) -> None:
    await wait_for(lambda: all(show_job(slurm, j).state == "RUNNING" for j in jobs), 60,
                   interval=0.5, what=f"jobs {list(jobs)} RUNNING")


@contextmanager
def _mapped(stack: BridgeStack, ns: str, account: str, user: str) -> Iterator[None]:
    """The namespace runs as a Slurm account and user of the accounting tree (recipe.sh)."""
    tenancy: dict[str, Any] = {"default": {}, "namespaces": {ns: {"account": account,
                                                                "user": user}}}
    stack.tenancy_file.write_text(yaml.safe_dump(tenancy))
    try:
        yield
    finally:
        stack.tenancy_file.write_text(yaml.safe_dump(DEFAULT_TENANCY))


def _sacct_tres(slurm: SlurmTarget, job_id: str) -> tuple[str, str]:
    out = slurm.admin("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,Account,AllocTRES")
    row = next((ln.split("|") for ln in out.splitlines() if ln.startswith(f"{job_id}|")), [])
    return (row[1], row[2]) if len(row) == 3 else ("", "")


async def _says_pending(kube: AsyncClient, ns: str, name: str, reason: str) -> None:
    async def told() -> bool:
        return any(r == keys.EventReason.PENDING.value and f"reason {reason}" in m
                   for r, m in await pod_events(kube, ns, name))

    await wait_for(told, 60, interval=1, what=f"{ns}/{name} told Slurm's reason {reason}")


def _gpu_env(pod: Pod) -> dict[str, str]:
    """Where each GPU variable of the first container comes from (the downward API)."""
    assert pod.spec is not None
    found = {}
    for env in pod.spec.containers[0].env or []:
        ref = env.valueFrom.fieldRef if env.valueFrom else None
        if env.name in keys.GPU_ENV_VARS and ref is not None:
            found[env.name] = ref.fieldPath
    return found


async def test_a_pod_and_a_native_job_share_one_gpu_by_shards(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "shards")
    nodes = _node_gres(slurm)
    shared_node, *others = sorted(nodes)
    assert "shard:" in nodes[shared_node], f"no gres/shard on {shared_node}: {nodes}"
    native = _sbatch(slurm, "native-shards", "--gres=shard:2", "-w", shared_node)
    jobs = [native]
    try:
        await _running(slurm, native)
        [(gpu, (held, per_gpu))] = show_job(slurm, native).shards[shared_node].items()
        assert held == 2 and per_gpu >= 4
        # Every other GPU is taken whole: the pod's shards can only be on the native job's GPU.
        jobs += [_sbatch(slurm, "native-rest", f"--gres=gpu:{_gpus_of(nodes[shared_node]) - 1}",
                         "-w", shared_node)]
        jobs += [_sbatch(slurm, "native-whole", f"--gres=gpu:{_gpus_of(nodes[n])}", "-w", n)
                 for n in others]
        await _running(slurm, *jobs)
        with _mapped(bridge_stack, ns, "team-a", "alice"):
            share = PodBuilder("share").annotations({keys.GPU_SHARDS: str(per_gpu - 2)}).build()
            await create_pod(kube, ns, share)
            pod = await wait_bound(kube, ns, "share")
            job_id = await wait_job_id(kube, ns, "share")
            # One shard more than the GPU has left: Slurm keeps it waiting, and says why.
            await create_pod(kube, ns, PodBuilder("more").annotations(
                {keys.GPU_SHARDS: "1"}).build())
            await _says_pending(kube, ns, "more", "Resources")
        assert pod.metadata is not None and pod.spec is not None
        ann = pod.metadata.annotations or {}
        assert bridge_stack.slurm_node_of(pod.spec.nodeName or "") == shared_node
        view = show_job(slurm, job_id)
        assert view.name == f"k8s:{ns}/share" and view.state == "RUNNING"
        assert view.shards == {shared_node: {gpu: (per_gpu - 2, per_gpu)}}
        # The pod is told the physical GPU its shards are on, as it is told whole GPUs.
        assert (ann[keys.GPU_IDS], ann[keys.CUDA_DEVICES]) == (str(gpu), "0")
        assert _gpu_env(pod) == {
            var: f"metadata.annotations['{source}']"
            for var, source in keys.GPU_ENV_SOURCES.items()}
        assert gpu_overlaps(show_jobs(slurm)) == {}  # the GPU's shards add up to its count
        account, tres = await wait_for(
            lambda: (row if "gres/shard" in (row := _sacct_tres(slurm, job_id))[1] else None),
            30, interval=1, what=f"job {job_id} in sacct with its shards")
        assert account == "team-a" and f"gres/shard={per_gpu - 2}" in tres.split(","), tres
    finally:
        slurm.admin("scancel", *jobs)


SLICE = "1g.10gb"  # deploy/slurm/recipe.sh: the last node's GPUs 0-3; 4-7 are 3g.40gb


def _typed_node(nodes: dict[str, str]) -> tuple[str, int]:
    """The node with ``SLICE`` GPUs and how many it has."""
    for node, gres in sorted(nodes.items()):
        if match := re.search(rf"gpu:{re.escape(SLICE)}:([0-9]+)", gres):
            return node, int(match[1])
    raise AssertionError(f"no node declares GPUs of type {SLICE}: {nodes}")


def _slice_held(slurm: SlurmTarget, job_id: str) -> int:
    """The index of the one ``SLICE`` GPU the job holds, as ``scontrol show job -d`` says."""
    line = slurm.admin("scontrol", "show", "job", "-d", "-o", job_id)
    found = re.findall(r"GRES=gpu:([^:(]+):1\(IDX:([0-9]+)\)", line)
    assert [t for t, _ in found] == [SLICE], line
    return int(found[0][1])


async def test_a_pod_asking_a_gpu_type_gets_a_slice_of_it_or_waits_with_slurms_reason(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "typed")
    node, slices = _typed_node(_node_gres(slurm))
    native = _sbatch(slurm, "native-slices", f"--gres=gpu:{SLICE}:{slices - 1}", "-w", node)
    try:
        await _running(slurm, native)
        taken = show_job(slurm, native).gpus[node]
        with _mapped(bridge_stack, ns, "team-a", "alice"):
            await create_pod(kube, ns, PodBuilder("slice").gpus(1).annotations(
                {keys.GPU_TYPE: SLICE}).build())
            pod = await wait_bound(kube, ns, "slice")
            job_id = await wait_job_id(kube, ns, "slice")
            # None of that type is left: the next pod waits, though whole GPUs of other nodes
            # and the other type's slices are free, and is told Slurm's reason.
            await create_pod(kube, ns, PodBuilder("another").gpus(1).annotations(
                {keys.GPU_TYPE: SLICE}).build())
            await _says_pending(kube, ns, "another", "Resources")
        assert pod.metadata is not None and pod.spec is not None
        assert bridge_stack.slurm_node_of(pod.spec.nodeName or "") == node
        held = _slice_held(slurm, job_id)
        assert held not in taken and len(taken) == slices - 1
        assert (pod.metadata.annotations or {})[keys.GPU_IDS] == str(held)  # Slurm's index
        waiting = await kube.get(Pod, "another", namespace=ns)  # never given a GPU
        assert waiting.metadata is not None and waiting.spec is not None
        assert not waiting.spec.nodeName
        assert keys.GPU_IDS not in (waiting.metadata.annotations or {})
        assert gpu_overlaps(show_jobs(slurm)) == {}
        _, tres = await wait_for(
            lambda: (row if SLICE in (row := _sacct_tres(slurm, job_id))[1] else None),
            30, interval=1, what=f"job {job_id} in sacct with its slice")
        assert f"gres/gpu:{SLICE}=1" in tres.split(","), tres
    finally:
        slurm.admin("scancel", native)


async def test_a_gpu_type_slurm_does_not_have_is_refused_with_slurms_words(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    """Well-formed, so the webhook admits it; Slurm refuses the job, and the pod says so."""
    ns = await e2e_namespace("typed-unknown")
    await create_pod(kube, ns, PodBuilder("odd").gpus(1).annotations(
        {keys.GPU_TYPE: "2g.20gb"}).build())

    async def refused() -> str | None:
        return next((m for r, m in await pod_events(kube, ns, "odd")
                     if r == keys.EventReason.SUBMIT_REFUSED.value), None)

    message = await wait_for(refused, 60, interval=1, what="the pod told Slurm refused its job")
    assert message.startswith(keys.SUBMIT_REFUSED_MESSAGE), message


REFUSED = [  # (annotations, nvidia.com/gpu, the annotation named, words of the message)
    ({keys.GPU_SHARDS: "2"}, 1, keys.GPU_SHARDS, "shards or whole GPUs, not both"),
    ({keys.GPU_TYPE: "1g:10gb"}, 1, keys.GPU_TYPE, "a Slurm GPU type"),
    ({keys.GPU_TYPE: "1g.10gb"}, 0, keys.GPU_TYPE, f"alongside a {keys.GPU_RESOURCE}"),
    ({keys.GPU_SHARDS: "0"}, 0, keys.GPU_SHARDS, "a whole number from 1"),
]


async def test_gpu_requests_slurm_cannot_express_are_refused_by_the_webhook(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    ns = await e2e_namespace("gpu-refused")
    for i, (annotations, gpus, field, words) in enumerate(REFUSED):
        pod = PodBuilder(f"refused-{i}").gpus(gpus).annotations(annotations).build()
        with pytest.raises(ApiError) as refused:
            await create_pod(kube, ns, pod)
        message = str(refused.value.status.message)
        assert "slurmbridge cannot run this pod" in message, message
        assert f"annotation {field}=" in message and words in message, message


E2E_EXTENDED = "e2e.slurmbridge.io/gpu"  # the class's extended resource (KEP-5004)
E2E_SHARDS = "e2e.slurmbridge.io/shard"  # the shard class's


def _driver_objects(kube_node: str, gpus: int) -> list[Any]:
    """What a DRA driver publishes for ``kube_node`` (there is no kubelet here to run one):
    its class and a slice of devices gpu-0.. whose ``index`` is Slurm's GPU index."""
    device_class = DeviceClass.from_dict({"metadata": {"name": E2E_DEVICE_CLASS},
                                          "spec": {"extendedResourceName": E2E_EXTENDED}})
    shard_class = DeviceClass.from_dict({"metadata": {"name": E2E_SHARD_CLASS},
                                         "spec": {"extendedResourceName": E2E_SHARDS}})
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(gpus)]
    published = ResourceSlice.from_dict({
        "metadata": {"name": f"{kube_node}-{E2E_DEVICE_CLASS}"},
        "spec": {"driver": E2E_DEVICE_CLASS, "nodeName": kube_node, "devices": devices,
                 "pool": {"name": kube_node, "generation": 1, "resourceSliceCount": 1}}})
    return [device_class, shard_class, published]


async def _claimed_pod(kube: AsyncClient, ns: str, name: str, template: str) -> None:
    pod = PodBuilder(name).cpu(None).memory(None).claim("gpu", resourceClaimTemplateName=template)
    await create_pod(kube, ns, pod.build())


async def _claim_of(kube: AsyncClient, ns: str, pod: str) -> ResourceClaim:
    """The claim kube-controller-manager made from the pod's template, once it is allocated."""
    async def allocated() -> ResourceClaim | None:
        found = await kube.get(Pod, pod, namespace=ns)
        statuses = (found.status.resourceClaimStatuses if found.status else None) or []
        names = [s.resourceClaimName for s in statuses if s.resourceClaimName]
        claim = await kube.get(ResourceClaim, names[0], namespace=ns) if names else None
        return claim if claim and claim.status and claim.status.allocation else None
    found: ResourceClaim = await wait_for(allocated, 30, interval=0.5,
                                          what=f"{ns}/{pod}'s claim allocated")
    return found


async def test_a_claim_gets_the_gpus_slurm_gave_and_slurms_limits_are_refused(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    """A pod's claim from a template of the mapped class: its job asks Slurm for the GPUs,
    the claim names exactly the devices of Slurm's indices (native jobs hold the node's other
    GPUs), and kube-scheduler binds the pod to that node.  What Slurm cannot express is
    refused at create, naming the template; the class's extended resource is asked of Slurm."""
    slurm = bridge_stack.slurm
    ns = await e2e_namespace("dra")
    async with _published(bridge_stack, kube) as published:
        await _hold(slurm, published, 2)
        node, kube_node = published.node, published.kube_node
        for name, request in (("two", {"count": 2}), ("picky", {"selectors": [
                {"cel": {"expression": "device.attributes['x'].model == 'h100'"}}]})):
            await kube.create(cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict({
                "metadata": {"name": name, "namespace": ns}, "spec": {"spec": {"devices": {
                    "requests": [{"name": "gpus", "exactly": {
                        "deviceClassName": E2E_DEVICE_CLASS, **request}}]}}}})))
        await _claimed_pod(kube, ns, "claimed", "two")
        pod = await wait_bound(kube, ns, "claimed")
        job_id = await wait_job_id(kube, ns, "claimed")
        claim = await _claim_of(kube, ns, "claimed")
        assert pod.spec is not None and pod.spec.nodeName == kube_node
        slurm_gpus = show_job(slurm, job_id).gpus[node]
        assert len(slurm_gpus) == 2 and slurm_gpus == _free_of(slurm, node)
        assert _devices(claim) == [(kube_node, f"gpu-{i}") for i in sorted(slurm_gpus)]
        assert pod.metadata is not None and claim.status is not None
        assert [r.uid for r in claim.status.reservedFor or []] == [pod.metadata.uid]

        with pytest.raises(ApiError) as refused:
            await _claimed_pod(kube, ns, "picky", "picky")
        message = str(refused.value.status.message)
        assert f"ResourceClaimTemplate {ns}/picky request 'gpus': CEL selectors" in message
        # The classes' extended resources are asked of Slurm (kube-scheduler would pick the
        # devices itself): none is free now, so their jobs wait in Slurm, asking for them.
        for name, resource, gres in (("extended", E2E_EXTENDED, "gpu"),
                                     ("sharded", E2E_SHARDS, "shard")):
            manifest = PodBuilder(name).manifest()
            manifest["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
            stored = await create_pod(kube, ns, cast(Pod, Pod.from_dict(manifest)))
            assert stored.spec is not None
            resources = stored.spec.containers[0].resources
            assert resource not in ((resources.limits if resources else None) or {})
            asked = await wait_for(lambda name=name: slurm.admin(  # type: ignore[misc]
                "squeue", "-h", "-n", f"k8s:{ns}/{name}", "-o", "%b").strip(), 30,
                interval=0.5, what=f"{name}'s job in squeue")
            assert asked.replace("gres:", "gres/") == f"gres/{gres}:1", asked


def _requeue_or_end(slurm: SlurmTarget, job_id: str) -> None:
    """Requeue as an admin who insists would (requeueing switched back on: placeholders are
    submitted Requeue=0); Slurm requeues only batch jobs, and from 25.11 a placeholder is an
    EXTERNAL_JOB: there it is ended instead, as a preemption that cancels does."""
    slurm.admin("scontrol", "update", f"JobId={job_id}", "Requeue=1")
    try:
        slurm.admin("scontrol", "requeue", job_id)
    except AssertionError as refused:
        assert "Only batch jobs" in str(refused), refused
        slurm.admin("scancel", job_id)


async def test_a_requeued_jobs_claim_is_freed_before_its_gpu_is_claimed_again(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    """Pod a's job is requeued (24.11; ended on 26.05): the pod is evicted and, its kubelet
    done, gone; pod b's job gets the one free GPU, a's: a's claim is freed first, and no
    device is ever in two claims."""
    slurm = bridge_stack.slurm
    ns = await e2e_namespace("dra-requeue")
    async with _published(bridge_stack, kube) as published:
        await _hold(slurm, published, 1)
        node, kube_node = published.node, published.kube_node
        await kube.create(cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict({
            "metadata": {"name": "one", "namespace": ns}, "spec": {"spec": {"devices": {
                "requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": E2E_DEVICE_CLASS, "count": 1}}]}}}})))
        await _claimed_pod(kube, ns, "a", "one")
        await wait_bound(kube, ns, "a")
        job_a = await wait_job_id(kube, ns, "a")
        claim_a = await _claim_of(kube, ns, "a")
        assert claim_a.metadata is not None and claim_a.metadata.name
        [gpu] = show_job(slurm, job_a).gpus[node]
        assert _devices(claim_a) == [(kube_node, f"gpu-{gpu}")]

        _requeue_or_end(slurm, job_a)
        await wait_for(lambda: _evicted(kube, ns, "a"), 30, interval=0.5, what="a evicted")
        with contextlib.suppress(ApiError):  # gone already, or its kubelet stopped it now
            await kube.delete(Pod, "a", namespace=ns, grace_period=0)
        await _claimed_pod(kube, ns, "b", "one")
        await wait_bound(kube, ns, "b")
        job_b = await wait_job_id(kube, ns, "b")
        claim_b = await _claim_of(kube, ns, "b")
        assert show_job(slurm, job_b).gpus[node] == (gpu,)
        assert _devices(claim_b) == [(kube_node, f"gpu-{gpu}")]
        held = [d for c in await _claims(kube, ns) for d in _devices(c)]
        assert len(held) == len(set(held)) == 1, held
        with contextlib.suppress(ApiError):  # deleted once freed: its pod is gone
            freed = await kube.get(ResourceClaim, claim_a.metadata.name, namespace=ns)
            assert not _devices(freed)


def _devices(claim: ResourceClaim) -> list[tuple[str, str]]:
    allocation = claim.status.allocation if claim.status else None
    devices = allocation.devices if allocation else None
    return sorted((r.pool, r.device) for r in (devices.results if devices else None) or [])


async def _claims(kube: AsyncClient, ns: str) -> list[ResourceClaim]:
    return [c async for c in kube.list(ResourceClaim, namespace=ns)]


async def _evicted(kube: AsyncClient, ns: str, name: str) -> bool:
    """Being deleted, or gone (a pod no kubelet ever ran goes at once)."""
    try:
        pod = await kube.get(Pod, name, namespace=ns)
    except ApiError as exc:
        return exc.status.code == 404
    return pod.metadata is not None and pod.metadata.deletionTimestamp is not None


@dataclass
class _Published:
    node: str  # the Slurm node whose GPUs are published
    kube_node: str
    native: list[str] = dataclasses.field(default_factory=list)  # cancelled after the test


@asynccontextmanager
async def _published(stack: BridgeStack, kube: AsyncClient) -> AsyncIterator[_Published]:
    """The first Slurm node's GPUs published as its DRA driver would, every node idle first.
    The native jobs a test starts (``_hold``) are cancelled after it."""
    await slurm_idle(stack.slurm)
    node = sorted(_node_gres(stack.slurm))[0]
    kube_node = next(k for k, s in stack.kube_nodes.items() if s == node)
    published = _driver_objects(kube_node, _gpus_of(_node_gres(stack.slurm)[node]))
    for obj in published:
        with contextlib.suppress(ApiError):  # left by an earlier run
            await kube.delete(type(obj), obj.metadata.name)
        await kube.create(obj)
    found = _Published(node, kube_node)
    try:
        yield found
    finally:
        if found.native:
            stack.slurm.admin("scancel", *found.native)
        for obj in published:
            with contextlib.suppress(ApiError):
                await kube.delete(type(obj), obj.metadata.name)


async def _hold(slurm: SlurmTarget, published: _Published, free: int) -> None:
    """Native jobs hold every GPU but ``free`` of the published node, and all of the others."""
    nodes, node, jobs = _node_gres(slurm), published.node, published.native
    jobs.append(_sbatch(slurm, "native-rest", f"--gres=gpu:{_gpus_of(nodes[node]) - free}",
                        "-w", node))
    jobs += [_sbatch(slurm, "native-whole", f"--gres=gpu:{_gpus_of(nodes[n])}", "-w", n)
             for n in nodes if n != node]
    await _running(slurm, *jobs)


def _free_of(slurm: SlurmTarget, node: str) -> tuple[int, ...]:
    """The GPUs of ``node`` no native job holds."""
    held = {i for j in show_jobs(slurm) if j.state == "RUNNING" and not j.name.startswith("k8s:")
            for i in j.gpus.get(node, ())}
    return tuple(i for i in range(_gpus_of(_node_gres(slurm)[node])) if i not in held)


PLAIN_CLASS = "plain.e2e.slurmbridge.io"  # a DRA class the bridge maps to nothing


@asynccontextmanager
async def _plain_devices(kube: AsyncClient, node: str) -> AsyncIterator[None]:
    """A DRA driver's class and one device on ``node``, which kube-scheduler allocates."""
    objects: list[Any] = [
        DeviceClass.from_dict({"metadata": {"name": PLAIN_CLASS}, "spec": {"selectors": [
            {"cel": {"expression": f"device.driver == '{PLAIN_CLASS}'"}}]}}),
        ResourceSlice.from_dict({"metadata": {"name": f"{node}-{PLAIN_CLASS}"}, "spec": {
            "driver": PLAIN_CLASS, "nodeName": node, "devices": [{"name": "gpu-0"}],
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}),
    ]
    for obj in objects:
        with contextlib.suppress(ApiError):  # left by an earlier run
            await kube.delete(type(obj), obj.metadata.name)
        await kube.create(obj)
    try:
        yield
    finally:
        for obj in objects:
            with contextlib.suppress(ApiError):
                await kube.delete(type(obj), obj.metadata.name)


def _plain_claim(ns: str, name: str, **metadata: Any) -> ResourceClaim:
    return cast(ResourceClaim, ResourceClaim.from_dict({
        "metadata": {"name": name, "namespace": ns, **metadata},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": PLAIN_CLASS}}]}}}))


async def _freed(kube: AsyncClient, ns: str, name: str) -> bool:
    """The claim's allocation cleared, or the claim gone (a generated one whose pod went)."""
    try:
        return not _devices(await kube.get(ResourceClaim, name, namespace=ns))
    except ApiError as exc:
        return exc.status.code == 404


async def test_a_users_job_label_never_frees_a_claim_kube_scheduler_allocated(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    make_node: NodeFactory,
) -> None:
    """Issue 41, case 4: an ordinary pod's claim, allocated by kube-scheduler, labelled by
    its user with an ended job's id: the bridge's freeing round, seen freeing the bridge's
    own claim of another job, leaves the ordinary pod's device allocated."""
    slurm = bridge_stack.slurm
    ns = await e2e_namespace("dra-label")
    plain = unique_name("plain")
    await make_node(plain)  # no taint: the default scheduler's
    async with _published(bridge_stack, kube) as published, _plain_devices(kube, plain):
        ended = _sbatch(slurm, "ended")
        slurm.admin("scancel", ended)
        await kube.create(_plain_claim(ns, "mine"))
        ordinary = PodBuilder("ordinary").scheduler(None).cpu(None).memory(None)
        await create_pod(kube, ns, ordinary.claim("gpu", resourceClaimName="mine").build())
        pod = await wait_bound(kube, ns, "ordinary")
        await wait_for(lambda: _allocated(kube, ns, "mine"), 30, interval=0.5,
                       what="kube-scheduler allocated mine")
        await kube.patch(ResourceClaim, "mine", {"metadata": {"labels": {
            keys.CLAIM_JOB_LABEL: ended}}}, namespace=ns)

        # The bridge's own claim, pinned and then freed: the freeing round the test waits on.
        await _hold(slurm, published, 1)
        await kube.create(cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict({
            "metadata": {"name": "one", "namespace": ns}, "spec": {"spec": {"devices": {
                "requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": E2E_DEVICE_CLASS, "count": 1}}]}}}})))
        await _claimed_pod(kube, ns, "pinned", "one")
        await wait_bound(kube, ns, "pinned")
        job_id = await wait_job_id(kube, ns, "pinned")
        pinned = (await _claim_of(kube, ns, "pinned")).metadata
        assert pinned is not None and pinned.name
        slurm.admin("scancel", job_id)
        with contextlib.suppress(ApiError):  # evicted and gone already
            await kube.delete(Pod, "pinned", namespace=ns, grace_period=0)
        await wait_for(lambda: _freed(kube, ns, pinned.name or ""), 60, interval=0.5,
                       what=f"the bridge freed its claim {pinned.name}")

        kept = await kube.get(ResourceClaim, "mine", namespace=ns)
        assert _devices(kept) == [(plain, "gpu-0")], "the ordinary pod's device was freed"
        assert kept.status is not None and pod.metadata is not None
        assert [r.uid for r in kept.status.reservedFor or []] == [pod.metadata.uid]


async def _allocated(kube: AsyncClient, ns: str, name: str) -> bool:
    return bool(_devices(await kube.get(ResourceClaim, name, namespace=ns)))


async def test_only_the_bridge_writes_its_record_on_a_claim(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
) -> None:
    """The record the bridge frees a claim by (its finalizer and annotation) is refused to
    everyone else by the chart's admission policy, cluster admins included: at create and
    on an update."""
    ns = await e2e_namespace("dra-forge")
    record = '{"job": 1, "pod": "u", "devices": []}'
    forged: list[dict[str, Any]] = [{"annotations": {keys.CLAIM_PINNED: record}},
                                    {"finalizers": [keys.CLAIM_FINALIZER]}]
    for i, metadata in enumerate(forged):
        with pytest.raises(ApiError) as refused:
            await kube.create(_plain_claim(ns, f"forged-{i}", **metadata))
        assert "only slurmbridge" in str(refused.value.status.message), refused.value.status
    await kube.create(_plain_claim(ns, "mine"))
    for metadata in forged:
        with pytest.raises(ApiError) as refused:
            await kube.patch(ResourceClaim, "mine", {"metadata": metadata}, namespace=ns)
        assert "only slurmbridge" in str(refused.value.status.message), refused.value.status
    stored = await kube.get(ResourceClaim, "mine", namespace=ns)
    assert stored.metadata is not None
    assert keys.CLAIM_PINNED not in (stored.metadata.annotations or {})
    assert keys.CLAIM_FINALIZER not in (stored.metadata.finalizers or [])
