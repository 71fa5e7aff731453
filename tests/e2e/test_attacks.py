"""Attacks on the bridge, written as a hostile researcher or a broken component would act.

Each test names one hole of the hardening issue and asserts what a user would notice:
no job cancelled under a running pod, no job submitted by an unauthenticated caller, a
forged job ignored and untouched, a priority request refused, a requeued job's pod
evicted with Slurm's reason, the poller alive after a bad answer, two replicas never
placing two group members on one node.
"""

import asyncio
import contextlib
import functools
import json
import re
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import OwnerReference
from lightkube.models.rbac_v1 import PolicyRule
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge import keys
from bridge.jobs.owner import GroupOwner, Owner, PodOwner
from bridge.jobs.request import JobRequest
from bridge.slurm.client import SlurmClient
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    pod_manifest,
    quiet_namespace,
    slurm_idle,
    slurm_job_view,
    wait_bound,
)
from slurmbridge_devkit.kube import ControlPlane, stop_scheduler
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.namespaces import namespace_user, unique_name
from slurmbridge_devkit.processes import BRIDGE_NS, BridgeProcess, free_port
from slurmbridge_devkit.stack import (
    DEFAULT_TENANCY,
    BridgeStack,
    NamespaceFactory,
    replace_scheduler,
)
from slurmbridge_devkit.stack_objects import WEBHOOK_CONFIG, ValidatingWebhookConfiguration
from slurmbridge_devkit.waiting import wait_for
from tests.e2e.test_workloads import create as create_workload
from tests.e2e.test_workloads import job_manifest
from tests.served import REFUSED

pytestmark = pytest.mark.e2e


# --- Kubernetes side: the extender's callers, admission policy, uncovered pods, GPU env ---


GATE = [{"name": "slurmbridge.test/hold"}]  # kube-scheduler and intake leave gated pods alone


def _forged_filter_body(pod: Pod, *, uid: str | None = None) -> dict[str, Any]:
    """A filter request naming a real pod, with what the attacker wants Slurm to grant."""
    assert pod.metadata is not None
    forged = {
        "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace,
                     "uid": uid or pod.metadata.uid,
                     "annotations": {keys.ACCOUNT: "chemistry", keys.PRIORITY: "4000000000"}},
        "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"limits": {"cpu": "8", "memory": "8Gi", keys.GPU_RESOURCE: "8"}}}]},
    }
    return {"Pod": forged, "NodeNames": [f"kube-node{k}" for k in range(1, 5)]}


async def _nothing_done_for(stack: BridgeStack, kube: AsyncClient, ns: str, name: str) -> None:
    """No Slurm job for the pod, and none of the bridge's annotations on it."""
    await asyncio.sleep(2)  # a submit runs inside the filter call; give a late one a chance
    jobs = stack.slurm.admin(
        "squeue", "-h", "-t", "all", "-o", "%i %j %T", "-n", f"k8s:{ns}/{name}"
    ).strip()
    assert not jobs, f"a Slurm job was submitted for {ns}/{name}: {jobs}"
    pod = await kube.get(Pod, name, namespace=ns)
    written = {k: v for k, v in ((pod.metadata and pod.metadata.annotations) or {}).items()
               if k in keys.BRIDGE_OWNED_ANNOTATIONS}
    assert not written, f"the bridge annotated {ns}/{name}: {written}"


async def _gated_pod(kube: AsyncClient, ns: str, name: str) -> Pod:
    return await create_pod(kube, ns, PodBuilder(name).spec(schedulingGates=GATE).build())


async def test_unauthenticated_filter_submits_nothing(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Any in-cluster workload POSTs /filter without a client certificate, forging the pod."""
    ns = await e2e_namespace("forged-filter")
    victim = await _gated_pod(kube, ns, "victim")
    body = _forged_filter_body(victim)
    answers = []
    for scheme in ("http", "https"):  # plain, and TLS without a client certificate
        url = f"{scheme}://127.0.0.1:{bridge_stack.extender_port}/filter"
        try:
            async with httpx.AsyncClient(verify=False, timeout=15) as http:
                answers.append(f"{scheme}: HTTP {(await http.post(url, json=body)).status_code}")
        except (httpx.HTTPError, *REFUSED) as exc:
            answers.append(f"{scheme}: {exc!r}")
    await _nothing_done_for(bridge_stack, kube, ns, "victim")
    assert not [a for a in answers if "HTTP 200" in a], f"the extender answered: {answers}"


async def test_filter_with_a_pod_uid_the_apiserver_does_not_hold_submits_nothing(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """A caller holding the scheduler's credentials sends a pod body that is not the real pod."""
    ns = await e2e_namespace("forged-uid")
    victim = await _gated_pod(kube, ns, "victim")
    async with bridge_stack.scheduler_client() as http:
        # A made-up UID; then the real one with a forged body (the API's pod is gated:
        # kube-scheduler would never ask about it, so there is nothing to place yet).
        for uid in (str(uuid.uuid4()), None):
            resp = await http.post("/filter", json=_forged_filter_body(victim, uid=uid))
            assert resp.status_code < 500, resp.text
            assert not resp.json().get("NodeNames"), resp.text
            await _nothing_done_for(bridge_stack, kube, ns, "victim")


async def test_priority_outside_namespace_policy_is_refused(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory, namespace: str
) -> None:
    """A researcher asks Slurm for a top priority: refused at admission, and again at submit."""
    ns = await e2e_namespace("jump-queue")
    with pytest.raises(ApiError) as err:
        await create_pod(kube, ns, pod_manifest("jumper", annotations={keys.PRIORITY: "100000"}))
    message = str(err.value.status.message)
    assert keys.PRIORITY in message and ns in message and "max_priority" in message, message

    # A namespace the webhook does not see (no e2e label): the bridge must not trust admission.
    pod = (PodBuilder("jumper").annotate(keys.PRIORITY, "100000").tolerate(keys.MANAGED_TAINT)
           .build())
    await create_pod(kube, namespace, pod)

    async def refused() -> str:
        got = await kube.get(Pod, "jumper", namespace=namespace)
        conditions = (got.status.conditions if got.status else None) or []
        return next((c.message or "" for c in conditions if c.type == "PodScheduled"
                     and c.status == "False" and "max_priority" in (c.message or "")), "")

    await wait_for(refused, 60, interval=0.5, what="the bridge refusing the priority")
    await _nothing_done_for(bridge_stack, kube, namespace, "jumper")


async def _researcher(kube: AsyncClient, cp: ControlPlane, ns: str) -> AsyncClient:
    """A client as a non-admin: a ServiceAccount allowed to read, create and patch pods in ns."""
    rules = [PolicyRule(apiGroups=[""], resources=["pods"],
                        verbs=["get", "list", "watch", "create", "patch", "update"])]
    config = await namespace_user(kube, cp, ns, rules)
    return AsyncClient(KubeConfig.from_dict(config), trust_env=False)


async def test_group_label_of_a_placed_pod_cannot_change(
    bridge_stack: BridgeStack, kube: AsyncClient, control_plane: ControlPlane,
    e2e_namespace: NamespaceFactory,
) -> None:
    """A researcher relabels a running pod into another 'group' (the job's owner would move)."""
    ns = await e2e_namespace("relabel")
    await create_pod(kube, ns, pod_manifest("solo"))
    await wait_bound(kube, ns, "solo")
    researcher = await _researcher(kube, control_plane, ns)
    try:
        attempts = [
            ("researcher", researcher, {"metadata": {"labels": {keys.GROUP: "other"}}}),
            ("researcher", researcher, {"metadata": {"labels": {keys.GROUP_SIZE: "2"}}}),
            ("admin", kube, {"metadata": {"labels": {keys.GROUP: "other"}}}),
        ]
        for who, client, patch in attempts:
            with pytest.raises(ApiError) as err:
                await client.patch(Pod, "solo", patch, namespace=ns)
            (key,) = patch["metadata"]["labels"]
            assert err.value.status.code == 403 and key in str(err.value.status.message), (
                who, err.value.status.message)
        # Unrelated labels stay free.
        await researcher.patch(Pod, "solo", {"metadata": {"labels": {"team": "a"}}}, namespace=ns)
    finally:
        await researcher.close()
    pod = await kube.get(Pod, "solo", namespace=ns)
    assert keys.GROUP not in ((pod.metadata and pod.metadata.labels) or {})


async def test_pod_with_a_preset_node_name_is_refused(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """spec.nodeName set at creation skips every scheduler: Slurm would never hear of the pod."""
    ns = await e2e_namespace("preset-node")
    enrolled = await e2e_namespace("preset-node-enrolled", enrolled=True)
    for where, scheduler in ((ns, True), (enrolled, False)):
        pod = (PodBuilder("squatter").gpus(8).scheduler(keys.SCHEDULER_NAME if scheduler else None)
               .node("kube-node1").build())
        with pytest.raises(ApiError) as err:
            await create_pod(kube, where, pod)
        message = str(err.value.status.message)
        assert "nodeName" in message and keys.SCHEDULER_NAME in message, message


async def test_pod_in_a_namespace_the_webhooks_skip_is_refused(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    """schedulerName slurmbridge where no webhook looks (the bridge's own namespace)."""
    pod = pod_manifest(unique_name("stowaway"), gpus=8)
    assert pod.metadata is not None and pod.metadata.name is not None
    try:
        with pytest.raises(ApiError) as err:
            await create_pod(kube, BRIDGE_NS, pod)
        message = str(err.value.status.message)
        assert BRIDGE_NS in message and "not covered" in message, message
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(Pod, pod.metadata.name, namespace=BRIDGE_NS, grace_period=0)


def _resolved_env(pod: Pod) -> dict[str, str | None]:
    """The GPU variables as kubelet resolves them at container start (downward API)."""
    assert pod.spec is not None and pod.metadata is not None
    annotations = pod.metadata.annotations or {}
    (container,) = pod.spec.containers
    env: dict[str, str | None] = dict.fromkeys(keys.GPU_ENV_VARS)
    for var in container.env or []:
        if var.name not in env:
            continue
        ref = var.valueFrom.fieldRef if var.valueFrom else None
        if ref is None:
            env[var.name] = var.value
            continue
        match = re.fullmatch(r"metadata\.annotations\['(.+)'\]", ref.fieldPath)
        assert match, f"{var.name}: unexpected fieldRef {ref.fieldPath}"
        env[var.name] = annotations.get(match[1], "")
    return env


async def test_gpu_env_is_right_under_the_nvidia_container_runtime(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Slurm gives the pod GPUs 4,5; inside the container they are devices 0 and 1."""
    slurm = bridge_stack.slurm
    await slurm_idle(slurm)
    native = [slurm.admin("sbatch", "--parsable", "-J", "native-gpu", "--gres=gpu:4", "-c", "1",
                          "-w", f"node{k}", "-o", "/dev/null", "--wrap", "sleep 600").strip()
              for k in range(1, 5)]
    try:
        def running() -> bool:
            return all(slurm_job_view(slurm, j)["state"] == "RUNNING" for j in native)

        await wait_for(running, 30, what="the native jobs running")
        for k, job in enumerate(native, start=1):
            assert slurm_job_view(slurm, job)["gpus"] == {f"node{k}": (0, 1, 2, 3)}
        ns = await e2e_namespace("gpu-env")
        await create_pod(kube, ns, pod_manifest("trainer", gpus=2))
        pod = await wait_bound(kube, ns, "trainer")
        assert pod.metadata is not None and pod.spec is not None
        annotations = pod.metadata.annotations or {}
        slurm_node = bridge_stack.slurm_node_of(pod.spec.nodeName or "")
        assert slurm_job_view(slurm, annotations[keys.JOB_ID])["gpus"] == {slurm_node: (4, 5)}
        env = _resolved_env(pod)
        assert env["NVIDIA_VISIBLE_DEVICES"] == "4,5", env
        assert env["CUDA_VISIBLE_DEVICES"] in ("0,1", None), (
            f"CUDA numbers the container's GPUs from 0: {env}")
    finally:
        slurm.admin("scancel", *native)


# --- Slurm side: ownership, forged placeholders, requeue, poller, group claims ---


def _job_of(pod: Pod) -> str:
    annotations: dict[str, str] = (pod.metadata and pod.metadata.annotations) or {}
    return annotations.get(keys.JOB_ID, "")


def _squeue(stack: BridgeStack, job_id: str, fmt: str = "%T") -> str:
    """One field of a job as squeue shows it ("" once the job left the queue)."""
    return stack.slurm.admin("squeue", "-h", "-j", job_id, "-o", fmt, check=False).strip()


async def _running_pod(stack: BridgeStack, kube: AsyncClient, ns: str, name: str) -> Pod:
    await create_pod(kube, ns, pod_manifest(name))
    pod = await wait_bound(kube, ns, name)
    return await set_pod_phase(kube, pod, "Running")


async def _still_placed(kube: AsyncClient, ns: str, name: str) -> bool:
    pod = await kube.get(Pod, name, namespace=ns)
    ended = [e for e in await pod_events(kube, ns, name) if e[0] == "SlurmJobEnded"]
    return bool(pod.metadata and not pod.metadata.deletionTimestamp and not ended)


@contextlib.asynccontextmanager
async def _validating_webhook_gone(
    kube: AsyncClient, probe: Callable[[], Awaitable[object]]
) -> AsyncIterator[None]:
    """The validating webhook fails open for a while (deleted, or down with failurePolicy
    Ignore): whatever admission would refuse gets through.

    The API server drops and restores a webhook from its own watch, a moment after the
    change: ``probe`` dry-runs the request the test makes, to wait for that moment.
    """
    config = await kube.get(ValidatingWebhookConfiguration, WEBHOOK_CONFIG)
    saved: dict[str, Any] = config.to_dict()  # type: ignore[no-untyped-call]
    await kube.delete(ValidatingWebhookConfiguration, WEBHOOK_CONFIG)
    try:
        await wait_for(lambda: _webhook_refuses(probe, False), 30,
                       what="the API server to stop calling the validating webhook")
        yield
    finally:
        saved["metadata"] = {"name": WEBHOOK_CONFIG}
        await kube.create(ValidatingWebhookConfiguration.from_dict(saved))
        await wait_for(lambda: _webhook_refuses(probe, True), 30,
                       what="the API server to call the validating webhook again")


async def _create_past_the_validating_webhook(kube: AsyncClient, ns: str, pod: Pod) -> None:
    probe = functools.partial(kube.create, pod, namespace=ns, dry_run=True)
    async with _validating_webhook_gone(kube, probe):
        await create_pod(kube, ns, pod)


async def _webhook_refuses(probe: Callable[[], Awaitable[object]], expected: bool) -> bool:
    """Does the validating webhook refuse ``probe``'s dry run, as ``expected``?"""
    try:
        await probe()
        refused = False
    except ApiError as exc:
        refused = "validate.slurmbridge.io" in str(exc.status.message)
    return refused == expected


async def _relabel_keeps_the_job(
    stack: BridgeStack, kube: AsyncClient, ns: str, job_id: str, labels: dict[str, str | None]
) -> str:
    """Relabel the running pod as its owner would; "refused" if admission said no."""
    try:
        await kube.patch(Pod, "runner", {"metadata": {"labels": labels}}, namespace=ns)
        outcome = "accepted"
    except ApiError as exc:
        outcome = f"refused: {exc.status.message}"
    await asyncio.sleep(5)  # several poll and reconcile periods (1 s each)
    assert _squeue(stack, job_id) == "RUNNING", (
        f"Slurm job {job_id} of the running pod ended after relabel {labels} ({outcome})"
    )
    assert await _still_placed(kube, ns, "runner"), "the running pod was evicted"
    return outcome


async def test_relabelling_a_running_pod_does_not_cancel_its_job(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """A researcher puts a running pod into a group and takes it out again, with admission
    in place and while the validating webhook fails open: the job under it must stay."""
    ns = await e2e_namespace("relabel")
    job_id = _job_of(await _running_pod(bridge_stack, kube, ns, "runner"))
    assert _squeue(bridge_stack, job_id) == "RUNNING"
    join: dict[str, str | None] = {keys.GROUP: "hijack", keys.GROUP_SIZE: "2"}
    leave: dict[str, str | None] = {keys.GROUP: None, keys.GROUP_SIZE: None}
    await _relabel_keeps_the_job(bridge_stack, kube, ns, job_id, join)
    probe = functools.partial(
        kube.patch, Pod, "runner", {"metadata": {"labels": join}}, namespace=ns, dry_run=True)
    async with _validating_webhook_gone(kube, probe):
        for labels in (join, leave):
            outcome = await _relabel_keeps_the_job(bridge_stack, kube, ns, job_id, labels)
            assert outcome == "accepted", outcome  # the bridge alone must hold the line here


def _since(path: Path, offset: int, event: str) -> bool:
    """Did the bridge log ``event`` after byte ``offset`` of its log file?"""
    with path.open("rb") as log:
        log.seek(offset)
        return f'"event": "{event}"'.encode() in log.read()


async def _forge(stack: BridgeStack, ns: str, owner: Owner, *, user: str = "researcher") -> str:
    """Submit, as the Slurm user ``user`` with their own token, a job that looks exactly
    like a placeholder of namespace ``ns``: its name, and the comment marker carrying
    ``owner`` (a pod's UID, or a group)."""
    slurm = stack.slurm
    token = slurm.admin("scontrol", "token", f"username={user}", "lifespan=1800")
    forger = slurm.settings(
        user=user, token=token.strip().removeprefix("SLURM_JWT="), token_file=None,
        data_parser="v0.0.42",  # a plain batch job: any Slurm user may submit one
    )
    async with SlurmClient(forger) as client:
        job_id = await client.submit(
            JobRequest(name=f"k8s:{ns}/target", owner=owner, time_limit_minutes=30)
        )
    await wait_for(lambda: _squeue(stack, str(job_id)) == "RUNNING", 30,
                   what=f"forged job {job_id} running")
    assert _squeue(stack, str(job_id), "%u") == user
    return str(job_id)


async def _resynced_after(stack: BridgeStack, offset: int) -> None:
    """Wait for the bridge's next full listing (every 30 s in the stack)."""
    await wait_for(lambda: _since(stack.extender.log_file, offset, "poller.resynced"), 45,
                   interval=0.5, what="a full resync of the bridge's job index")


async def test_forged_placeholder_is_ignored_and_untouched(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """A Slurm user writes a pod's UID into their own job's comment, before and after the
    bridge places the pod: the bridge neither binds the pod into it nor cancels it."""
    ns = await e2e_namespace("forged-job")
    manifest = PodBuilder("target").spec(schedulingGates=[{"name": "slurmbridge.test/hold"}])
    pod = await create_pod(kube, ns, manifest.build())
    assert pod.metadata is not None and pod.metadata.uid
    target = PodOwner(pod.metadata.uid)
    forged = []
    try:
        offset = bridge_stack.extender.log_file.stat().st_size
        forged.append(await _forge(bridge_stack, ns, target))
        await _resynced_after(bridge_stack, offset)  # the bridge has read the forged job
        # Its own gate lifted, as the controller holding it would; the bridge's stays.
        await kube.patch(Pod, "target", {"spec": {"schedulingGates": [
            {"name": keys.SLURM_GATE}]}}, namespace=ns, patch_type=PatchType.MERGE)
        job_id = _job_of(await wait_bound(kube, ns, "target"))
        assert job_id != forged[0], f"pod bound into the forger's job {job_id}"
        assert _squeue(bridge_stack, job_id, "%u") == bridge_stack.slurm.user
        offset = bridge_stack.extender.log_file.stat().st_size
        forged.append(await _forge(bridge_stack, ns, target))  # now a "duplicate"
        await _resynced_after(bridge_stack, offset)
        await asyncio.sleep(2)
        states = {j: _squeue(bridge_stack, j) for j in [*forged, job_id]}
        assert states == dict.fromkeys([*forged, job_id], "RUNNING"), states
        assert _job_of(await kube.get(Pod, "target", namespace=ns)) == job_id
    finally:
        if forged:
            bridge_stack.slurm.admin("scancel", *forged)


@contextlib.contextmanager
def _two_tenants(stack: BridgeStack, ns_a: str, ns_b: str) -> Iterator[None]:
    """Namespace ``ns_a`` runs as Slurm user alice (account team-a), ``ns_b`` as bob (team-b):
    the accounting tree of deploy/slurm/recipe.sh."""
    tenancy = {**DEFAULT_TENANCY, "namespaces": {
        ns_a: {"account": "team-a", "user": "alice"}, ns_b: {"account": "team-b", "user": "bob"}}}
    stack.tenancy_file.write_text(yaml.safe_dump(tenancy))
    try:
        yield
    finally:
        stack.tenancy_file.write_text(yaml.safe_dump(DEFAULT_TENANCY))


async def _forged_by_another_tenant(
    stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory, group: str | None
) -> None:
    """Alice, whom namespace A runs as, names her job in A and writes the owner of B's pod
    (its group, or its UID) into its comment, before the bridge places the pod and again once
    it runs: the pod goes into B's own job (bob's), and the bridge cancels no job for it."""
    ns_a, ns_b = await e2e_namespace("forger-a"), await e2e_namespace("victim-b")
    manifest = PodBuilder("target").spec(schedulingGates=GATE)
    if group:
        manifest = manifest.group(group, 1)
    forged: list[str] = []
    with _two_tenants(stack, ns_a, ns_b):
        pod = await create_pod(kube, ns_b, manifest.build())
        assert pod.metadata is not None and pod.metadata.uid
        owner = GroupOwner(ns_b, group) if group else PodOwner(pod.metadata.uid)
        try:
            offset = stack.extender.log_file.stat().st_size
            forged.append(await _forge(stack, ns_a, owner, user="alice"))
            await _resynced_after(stack, offset)  # the bridge has read the forged job
            await kube.patch(Pod, "target", {"spec": {"schedulingGates": [
                {"name": keys.SLURM_GATE}]}}, namespace=ns_b, patch_type=PatchType.MERGE)
            job_id = _job_of(await wait_bound(kube, ns_b, "target"))
            assert job_id not in forged, f"B's pod released into alice's job {job_id}"
            assert _squeue(stack, job_id, "%u") == "bob"
            offset = stack.extender.log_file.stat().st_size
            forged.append(await _forge(stack, ns_a, owner, user="alice"))
            await _resynced_after(stack, offset)  # a "duplicate" of B's running job now
            await asyncio.sleep(2)
            states = {j: _squeue(stack, j) for j in [*forged, job_id]}
            assert states == dict.fromkeys([*forged, job_id], "RUNNING"), states
            assert _job_of(await kube.get(Pod, "target", namespace=ns_b)) == job_id
        finally:
            if forged:
                stack.slurm.admin("scancel", *forged)


async def test_forged_group_placeholder_of_another_namespace_is_ignored_and_untouched(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Issue 41, case 3: ``--comment=slurmbridge.io/pod-uid=group:B/train``."""
    await _forged_by_another_tenant(bridge_stack, kube, e2e_namespace, "train")


async def test_forged_pod_uid_placeholder_of_another_namespace_is_ignored_and_untouched(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Issue 41, case 3: the UID of B's pod (``squeue -o %k`` shows it) in alice's comment."""
    await _forged_by_another_tenant(bridge_stack, kube, e2e_namespace, None)


async def test_forged_pod_uid_of_a_deleted_pod_of_another_namespace_is_never_cancelled(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """Issue 41, case 3: alice writes the UID of B's pod, deleted since (no pod holds the UID
    any more), into her job named in A: the bridge does not take it for A's placeholder
    orphaned by its pod, and leaves it running past the orphan grace (20 s in the stack)."""
    ns_a, ns_b = await e2e_namespace("forger-a"), await e2e_namespace("victim-b")
    with _two_tenants(bridge_stack, ns_a, ns_b):
        pod = await create_pod(kube, ns_b, PodBuilder("target").spec(schedulingGates=GATE).build())
        assert pod.metadata is not None and pod.metadata.uid
        await kube.delete(Pod, "target", namespace=ns_b, grace_period=0)
        await wait_for(lambda: _pod_gone(kube, ns_b, "target"), 30, what="victim pod deleted")
        offset = bridge_stack.extender.log_file.stat().st_size
        forged = await _forge(bridge_stack, ns_a, PodOwner(pod.metadata.uid), user="alice")
        try:
            await _resynced_after(bridge_stack, offset)  # the bridge has read the forged job
            await asyncio.sleep(25)  # past the orphan grace
            assert _squeue(bridge_stack, forged) == "RUNNING", "the bridge cancelled alice's job"
        finally:
            bridge_stack.slurm.admin("scancel", forged)


async def _pod_gone(kube: AsyncClient, ns: str, name: str) -> bool:
    try:
        await kube.get(Pod, name, namespace=ns)
    except ApiError as exc:
        return exc.status.code == 404
    return False


async def _ended_event(kube: AsyncClient, ns: str, name: str) -> str:
    async def event() -> str:
        found = [m for r, m in await pod_events(kube, ns, name) if r == "SlurmJobEnded"]
        return found[0] if found else ""

    message: str = await wait_for(event, 20, interval=0.25, what=f"{ns}/{name} evicted")
    try:
        pod = await kube.get(Pod, name, namespace=ns)
    except ApiError as exc:  # evicted and gone already
        assert exc.status.code == 404, exc
        return message
    assert pod.metadata is not None and pod.metadata.deletionTimestamp, "pod not evicted"
    return message


async def test_requeued_or_suspended_job_evicts_its_pod_with_the_reason(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """An admin (or preemption with REQUEUE or SUSPEND) takes a running pod's job off its
    node without ending it: the pod must go, saying why, instead of running on GPUs Slurm
    now counts as free."""
    ns = await e2e_namespace("requeue")
    slurm = bridge_stack.slurm
    requeued = _job_of(await _running_pod(bridge_stack, kube, ns, "requeued"))
    suspended = _job_of(await _running_pod(bridge_stack, kube, ns, "suspended"))
    try:
        await _requeue_and_suspend(bridge_stack, kube, ns, requeued, suspended)
    finally:
        slurm.admin("scancel", requeued, suspended)


async def _requeue_and_suspend(
    stack: BridgeStack, kube: AsyncClient, ns: str, requeued: str, suspended: str
) -> None:
    slurm = stack.slurm
    submitted_as = slurm.admin("scontrol", "show", "job", requeued)
    try:
        slurm.admin("scontrol", "requeue", requeued)
    except AssertionError as refused:  # not requeueable, or an EXTERNAL_JOB (batch jobs only)
        assert "disabled" in str(refused) or "Only batch jobs" in str(refused), refused
        if "disabled" in str(refused):  # an admin who insists turns requeueing back on
            slurm.admin("scontrol", "update", f"JobId={requeued}", "Requeue=1")
            try:
                slurm.admin("scontrol", "requeue", requeued)
            except AssertionError as still:
                assert "Only batch jobs" in str(still), still
    slurm.admin("scontrol", "suspend", suspended)

    message = await _ended_event(kube, ns, "suspended")
    assert suspended in message and "SUSPENDED" in message, message
    if _squeue(stack, requeued) == "RUNNING":  # Slurm refused every requeue: the pod stays
        assert await _still_placed(kube, ns, "requeued")
    else:
        message = await _ended_event(kube, ns, "requeued")
        # A requeued batch job passes through COMPLETING (its epilog) on its way back to
        # PENDING: the eviction names the state it read, and Slurm's reason once pending.
        state = next((s for s in ("PENDING", "COMPLETING") if f"({s}," in message), None)
        assert requeued in message and state, message
        if state == "PENDING":
            assert _squeue(stack, requeued, "%r") in message, message
    assert "Requeue=0" in submitted_as, f"placeholder {requeued} was submitted requeueable"


class _CorruptingSlurm:
    """A broken component between the bridge and slurmrestd: a transparent proxy on
    127.0.0.1 that, once armed, garbles every answer about the next job submitted for
    ``seconds`` (its ``gres_detail`` gets an unbalanced parenthesis, its allocation's GPU
    index list an open range, as no parser expects)."""

    def __init__(self, upstream: str, seconds: float = 5.0) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.armed = False
        self._seconds = seconds
        self._target: tuple[int, float] | None = None  # job id, garbled until (monotonic)
        self.corrupted: list[str] = []
        app = Starlette(routes=[Route("/{path:path}", self._forward,
                                      methods=["GET", "POST", "DELETE"])])
        self._server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "_CorruptingSlurm":
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the corrupting proxy did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _forward(self, request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower().startswith("x-slurm")}
        if request.headers.get("content-type"):
            headers["content-type"] = request.headers["content-type"]
        async with httpx.AsyncClient(base_url=self.upstream, timeout=30) as http:
            answer = await http.request(
                request.method, request.url.path, params=request.query_params,
                content=await request.body(), headers=headers,
            )
        body = answer.content
        path = request.url.path
        if self.armed and path.endswith("/job/submit") and answer.status_code == 200:
            self.armed = False
            self._target = (int(json.loads(body)["job_id"]), time.monotonic() + self._seconds)
        elif self._target is not None and time.monotonic() < self._target[1] and re.fullmatch(
            rf"/slurm/v[0-9.]+/(job|resources)/{self._target[0]}", path
        ):
            doc = json.loads(body)
            for job in doc.get("jobs", []):  # the whole job
                job["gres_detail"] = ["gpu:1(IDX:0-1"]
            for node in doc.get("nodes", []):  # its allocation alone (v0.0.44+)
                node["gres"] = [{"name": "gpu", "count": 1, "index": "0-"}]
            self.corrupted.append(path)
            body = json.dumps(doc).encode()
        return Response(body, status_code=answer.status_code,
                        media_type=answer.headers.get("content-type"))


def _metric(process: BridgeProcess, name: str) -> float:
    text = httpx.get(process.health_url.replace("/healthz", "/metrics/"), timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((f"{name}{{", f"{name} ")))


async def test_poller_survives_an_answer_it_cannot_parse(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """slurmrestd (or something in front of it) sends one answer the bridge cannot read: the
    poller counts it and carries on, so later pods are still placed."""
    ns = await e2e_namespace("bad-answer")
    original = bridge_stack.extender
    with _CorruptingSlurm(bridge_stack.slurm.url) as proxy:
        proxied = replace(original, env={**original.env, "SLURMBRIDGE_SLURM__URL": proxy.url},
                          proc=None)
        original.kill(signal.SIGTERM)
        bridge_stack.extender = proxied
        try:
            proxied.start()
            await create_pod(kube, ns, pod_manifest("warmup"))
            await wait_bound(kube, ns, "warmup")
            proxy.armed = True  # reads of the next job submitted are garbled for a while
            await create_pod(kube, ns, pod_manifest("first"))
            await wait_for(lambda: proxy.corrupted, 30, what="a garbled answer sent")
            await asyncio.sleep(6)  # the garbling is over: what happens now is the bridge's doing
            await create_pod(kube, ns, pod_manifest("later"))
            await wait_bound(kube, ns, "later", timeout=60)
            await wait_bound(kube, ns, "first", timeout=30)
            assert _metric(proxied, "slurmbridge_poll_errors_total") >= 1, "error not counted"
            async with httpx.AsyncClient() as http:
                ready = await http.get(proxied.health_url.replace("/healthz", "/readyz"))
            assert ready.status_code == 200, ready.text
        finally:
            proxied.kill(signal.SIGTERM)
            bridge_stack.extender = original
            original.start()


async def _filter(
    http: httpx.AsyncClient, url: str, kube: AsyncClient, ns: str, name: str
) -> str | None:
    """Act as kube-scheduler: one filter call at ``url``; the node kept, if any."""
    pod = await kube.get(Pod, name, namespace=ns)
    body = {"Pod": pod.to_dict(), "NodeNames": [f"kube-node{k}" for k in range(1, 5)]}
    answer = (await http.post(f"{url}/filter", json=body)).raise_for_status().json()
    kept = answer.get("NodeNames") or []
    assert len(kept) <= 1, answer
    return str(kept[0]) if kept else None


async def _keeps(http: httpx.AsyncClient, url: str, kube: AsyncClient, ns: str, name: str) -> str:
    """Filter the pod at ``url`` until the extender keeps a node (kube-scheduler's retries)."""
    while (node := await _filter(http, url, kube, ns, name)) is None:
        await asyncio.sleep(0.5)
    return node


async def _bind(
    http: httpx.AsyncClient, url: str, kube: AsyncClient, ns: str, name: str, *, node: str
) -> str:
    pod = await kube.get(Pod, name, namespace=ns)
    assert pod.metadata is not None and pod.metadata.uid
    args = {"PodName": name, "PodNamespace": ns, "PodUID": pod.metadata.uid, "Node": node}
    return str((await http.post(f"{url}/bind", json=args)).raise_for_status().json()["Error"])


async def test_two_replicas_never_put_two_group_members_on_one_node(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """The chart's two replicas each filter one member of a new 2-pod group at the same
    moment (the stack's own extender, leading, submits on creation too); one replica dies
    and the other binds both: one Slurm job, one member per node."""
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "group-replicas")
    first = bridge_stack.extender
    replicas, urls = [], []
    stop_scheduler(bridge_stack.scheduler_name)  # this test plays kube-scheduler
    try:
        async with bridge_stack.scheduler_client() as http:
            for name in ("a", "b"):  # same settings as the stack's extender, other ports
                port, health = free_port(), free_port()
                replicas.append(replace(
                    first, env={**first.env, "SLURMBRIDGE_EXTENDER__PORT": str(port),
                                "SLURMBRIDGE_EXTENDER__HEALTH_PORT": str(health),
                                "SLURMBRIDGE_CONTROLLERS__ENABLED": "false"},
                    log_file=first.log_file.with_suffix(f".replica-{name}.log"),
                    health_url=f"http://127.0.0.1:{health}/healthz", proc=None,
                ))
                urls.append(f"{http.base_url.scheme}://127.0.0.1:{port}")
            await _race_two_replicas(bridge_stack, kube, http, ns, replicas=replicas, urls=urls)
    finally:
        replace_scheduler(bridge_stack)


async def _listening(url: str) -> bool:
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    try:
        _, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        return False
    writer.close()
    return True


async def _race_two_replicas(
    stack: BridgeStack, kube: AsyncClient, http: httpx.AsyncClient, ns: str, *,
    replicas: list[BridgeProcess], urls: list[str],
) -> None:
    try:
        for replica in replicas:
            replica.start()
        # Healthy is not yet serving: uvicorn binds the protocol port only after the bridge's
        # startup, while the health port already answers (CI once met the gap).
        for url in urls:
            await wait_for(functools.partial(_listening, url), 30, what=f"{url} listening")
        labels = {keys.GROUP: "pair", keys.GROUP_SIZE: "2"}
        for i in range(2):
            await create_pod(kube, ns, pod_manifest(f"member-{i}", labels=labels))
        await asyncio.gather(  # both replicas see a member of the new group at once
            _filter(http, urls[0], kube, ns, "member-0"),
            _filter(http, urls[1], kube, ns, "member-1"),
        )
        kept = await asyncio.wait_for(asyncio.gather(
            _keeps(http, urls[0], kube, ns, "member-0"),
            _keeps(http, urls[1], kube, ns, "member-1"),
        ), 60)
        name = f"k8s:{ns}/pair"  # every job ever submitted for the group, cancelled ones too
        jobs = stack.slurm.admin("squeue", "-h", "-t", "all", "-o", "%i", "-n", name).split()
        assert len(jobs) == 1, f"Slurm jobs for one group: {jobs}"
        replicas[0].kill()  # replica a dies; kube-scheduler's retries reach b
        again = await asyncio.wait_for(_keeps(http, urls[1], kube, ns, "member-0"), 30)
        assert again == kept[0], f"replica b moved member-0 from {kept[0]} to {again}"
        errors = [await _bind(http, urls[1], kube, ns, f"member-{i}", node=kept[i])
                  for i in range(2)]
        bound = [await kube.get(Pod, f"member-{i}", namespace=ns) for i in range(2)]
        nodes = [p.spec.nodeName if p.spec else None for p in bound]
        assert nodes[0] != nodes[1], f"both members on {nodes[0]} (bind errors: {errors})"
        assert errors == ["", ""] and nodes == list(kept), (errors, nodes, kept)
    finally:
        for replica in replicas:
            replica.kill()
        stack.slurm.admin("scancel", "-n", f"k8s:{ns}/pair")


# --- groups: one seat per live member, one ask per group (issue 41, cases 1 and 2) ---------


async def _still_gated_and_told(kube: AsyncClient, ns: str, name: str, *words: str) -> str:
    """The pod stays gated, unbound and without GPUs, and its event says why (all ``words``)."""
    async def told() -> str:
        found = [m for r, m in await pod_events(kube, ns, name)
                 if r == keys.EventReason.RELEASE_REFUSED.value]
        return found[0] if found else ""

    message: str = await wait_for(told, 30, interval=0.5, what=f"{ns}/{name} told why")
    assert all(w in message for w in words), message
    await asyncio.sleep(3)  # several release rounds (every 2 s): still nothing given
    pod = await kube.get(Pod, name, namespace=ns)
    assert pod.spec is not None and pod.metadata is not None
    annotations = pod.metadata.annotations or {}
    assert not pod.spec.nodeName and keys.GPU_IDS not in annotations, (
        f"{ns}/{name} released onto {annotations.get(keys.SLURM_NODE)} "
        f"with GPUs {annotations.get(keys.GPU_IDS)!r}")
    assert [g.name for g in pod.spec.schedulingGates or []] == [keys.SLURM_GATE]
    return message


async def test_a_second_pod_under_a_taken_rank_is_refused_and_never_released_onto_its_gpus(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """A researcher creates a second pod in a placed group of one, under the rank its
    running member holds: refused at admission; past the validating webhook, it waits gated
    instead of running on the member's node with the member's GPU."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "taken-rank")
    labels = {keys.GROUP: "solo", keys.GROUP_SIZE: "1", keys.GROUP_RANK: "0"}
    try:
        await create_pod(kube, ns, pod_manifest("solo-0", gpus=1, labels=labels))
        first = await wait_bound(kube, ns, "solo-0")
        assert first.metadata is not None
        held = (first.metadata.annotations or {})[keys.GPU_IDS]
        with pytest.raises(ApiError) as err:
            await create_pod(kube, ns, pod_manifest("solo-1", gpus=1, labels=labels))
        message = str(err.value.status.message)
        assert err.value.status.code == 403 and "solo-0" in message, message
        await _create_past_the_validating_webhook(
            kube, ns, pod_manifest("solo-1", gpus=1, labels=labels))
        await _still_gated_and_told(kube, ns, "solo-1", "solo-0", keys.GROUP_RANK)
        again = await kube.get(Pod, "solo-0", namespace=ns)
        assert ((again.metadata and again.metadata.annotations) or {})[keys.GPU_IDS] == held
    finally:
        slurm.admin("scancel", "-n", f"k8s:{ns}/solo")


async def test_a_launcher_first_mixed_group_is_refused_and_its_gpu_worker_never_released(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """A CPU-only launcher, then a GPU worker in its group: refused at admission; past the
    validating webhook, the worker is not released into the job built from the launcher
    (whose node Slurm gave no GPU)."""
    slurm, ns = await quiet_namespace(bridge_stack, e2e_namespace, "mixed-group")
    group = {keys.GROUP: "mix", keys.GROUP_SIZE: "2"}
    try:
        await create_pod(kube, ns, pod_manifest(
            "launcher", labels={**group, keys.GROUP_RANK: "0"}))
        await wait_bound(kube, ns, "launcher")
        worker = pod_manifest("worker", gpus=1, labels={**group, keys.GROUP_RANK: "1"})
        with pytest.raises(ApiError) as err:
            await create_pod(kube, ns, worker)
        message = str(err.value.status.message)
        assert all(w in message for w in ("launcher", "worker", "gpus 0 vs 1")), message
        await _create_past_the_validating_webhook(kube, ns, worker)
        await _still_gated_and_told(kube, ns, "worker", "launcher", "gpus 0 vs 1")
    finally:
        slurm.admin("scancel", "-n", f"k8s:{ns}/mix")


async def test_a_pod_pointing_at_a_colleagues_gang_job_is_refused_as_a_foreign_owner(
    bridge_stack: BridgeStack, kube: AsyncClient, control_plane: ControlPlane,
    e2e_namespace: NamespaceFactory,
) -> None:
    """A researcher creates a pod of their own whose ownerReference names a colleague's gang
    Job (its name and uid are readable): it would join that Job's group and Slurm job."""
    ns = await e2e_namespace("foreign-owner")
    job = await create_workload(kube, Job, ns, job_manifest("train", 2, gang=True))
    assert job.metadata is not None and job.metadata.uid
    researcher = await _researcher(kube, control_plane, ns)
    stowaway = pod_manifest("stowaway", annotations={keys.JOB_COMPLETION_INDEX: "0"})
    assert stowaway.metadata is not None
    stowaway.metadata.ownerReferences = [OwnerReference(
        apiVersion="batch/v1", kind="Job", name="train", uid=job.metadata.uid, controller=True)]
    try:
        with pytest.raises(ApiError) as err:
            await create_pod(researcher, ns, stowaway)
        message = str(err.value.status.message)
        assert f"Job {ns}/train" in message and "researcher" in message, message
    finally:
        await researcher.close()
        await kube.delete(Job, "train", namespace=ns, cascade=CascadeType.BACKGROUND)
        bridge_stack.slurm.admin("scancel", "-n", f"k8s:{ns}/train")
