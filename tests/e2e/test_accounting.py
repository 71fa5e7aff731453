"""Pods counted like any other job: accounts, users, QOS limits and preemption, seen through the
admin's own tools (``sacct``, ``squeue``, ``sacctmgr``) and ``kubectl describe``.

Needs slurmdbd behind every local Slurm (deploy/slurm/recipe.sh: accounts team-a and team-b,
users alice and bob, QOS normal, low (preemptable, GraceTime 15 s), high (preempts low) and
gpu2 (GrpTRES=gres/gpu=2)).  Each test maps its own namespaces in the stack's tenancy file,
which the running webhook and extender re-read: no restart between tests.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod
from lightkube.resources.scheduling_v1 import PriorityClass

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import (
    create_pod,
    pod_events,
    quiet_namespace,
    wait_bound,
    wait_job_id,
    wait_slurm_job,
)
from slurmbridge_devkit.kubelet import set_pod_phase
from slurmbridge_devkit.namespaces import unique_name
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import DEFAULT_TENANCY, BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

Mapper = Callable[..., Awaitable[None]]


def _write(path: Path, tenancy: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(tenancy))


@pytest.fixture
async def tenancy(bridge_stack: BridgeStack) -> AsyncIterator[Mapper]:
    """Map namespaces for this test only (no default entry); the stack's default comes back."""

    async def use(namespaces: dict[str, dict[str, Any]], **extra: Any) -> None:
        _write(bridge_stack.tenancy_file, {"namespaces": namespaces, **extra})

    yield use
    _write(bridge_stack.tenancy_file, DEFAULT_TENANCY)


async def _quiet_accounting(
    stack: BridgeStack, e2e_namespace: NamespaceFactory, prefix: str
) -> tuple[SlurmTarget, str]:
    """The stack's Slurm with its accounting tree, once no earlier test's job is left, and a
    fresh namespace."""
    accounting_ready(stack.slurm)
    return await quiet_namespace(stack, e2e_namespace, prefix)


def accounting_ready(slurm: SlurmTarget) -> None:
    """The test needs slurmdbd: say so plainly when it is not there (never skip)."""
    out = slurm.admin("sacctmgr", "-n", "-P", "show", "account", "format=Account", check=False)
    missing = {"team-a", "team-b"} - set(out.split())
    assert not missing, (
        f"Slurm {slurm.version} has no accounting tree (accounts {sorted(missing)} missing in "
        "slurmdbd): deploy/slurm/cluster.sh up must provision slurmdbd and the accounts"
    )


def _sacct(slurm: SlurmTarget, job_id: str) -> dict[str, str]:
    out = slurm.admin("sacct", "-X", "-n", "-P", "-j", job_id,
                      "-o", "JobID,JobName,Account,User,QOS,AllocTRES,State")
    line = next((ln for ln in out.splitlines() if ln.split("|")[0] == job_id), "")
    names = ("id", "name", "account", "user", "qos", "tres", "state")
    return dict(zip(names, line.split("|"), strict=False))


def _gpu_pod(name: str, gpus: int = 1, **spec: Any) -> Pod:
    return PodBuilder(name).gpus(gpus).spec(**spec).build()


async def _condition(kube: AsyncClient, ns: str, name: str) -> tuple[str, str, str]:
    pod = await kube.get(Pod, name, namespace=ns)
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == keys.POD_CONDITION_SLURM:
            return c.status, c.reason or "", c.message or ""
    return "", "", ""


async def _said_preempted(kube: AsyncClient, ns: str, name: str) -> tuple[str, str, str] | None:
    said = await _condition(kube, ns, name)
    return said if said[1] == keys.REASON_PREEMPTED else None


async def test_pods_of_two_namespaces_run_as_their_own_account_and_user(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    tenancy: Mapper,
) -> None:
    slurm, ns_a = await _quiet_accounting(bridge_stack, e2e_namespace, "acct-a")
    ns_b = await e2e_namespace("acct-b")
    await tenancy({ns_a: {"account": "team-a", "user": "alice"},
                   ns_b: {"account": "team-b", "user": "bob"}})
    jobs = {}
    for ns in (ns_a, ns_b):
        await create_pod(kube, ns, _gpu_pod("train", gpus=2))
        await wait_bound(kube, ns, "train")
        jobs[ns] = await wait_job_id(kube, ns, "train")

    def recorded() -> dict[str, dict[str, str]] | None:
        rows = {ns: _sacct(slurm, job) for ns, job in jobs.items()}
        return rows if all(r.get("state") == "RUNNING" for r in rows.values()) else None

    rows = await wait_for(recorded, 30, interval=1, what="the placeholders in sacct")
    for ns, (account, user) in ((ns_a, ("team-a", "alice")), (ns_b, ("team-b", "bob"))):
        row = rows[ns]
        assert row["name"] == f"k8s:{ns}/train"
        assert (row["account"], row["user"]) == (account, user), row
        assert "gres/gpu=2" in row["tres"], row
        queued = slurm.admin("squeue", "-h", "-j", jobs[ns], "-o", "%a|%u|%T").strip()
        assert queued == f"{account}|{user}|RUNNING"
        # Fair share counts the pod under that association (sshare lists it with its usage).
        shares = slurm.admin("sshare", "-n", "-P", "-A", account, "-u", user,
                             "-o", "Account,User,RawShares").splitlines()
        assert any([f.strip() for f in ln.split("|")[:2]] == [account, user] for ln in shares), (
            shares)
    # The admin's view of the bridge shows the same.
    status = bridge_stack.cli("status", "-o", "json")
    assert status.returncode == 0, status.stderr
    shown = {r["pod"]: r for r in json.loads(status.stdout)}
    assert (shown[f"{ns_a}/train"]["account"], shown[f"{ns_a}/train"]["user"]) == (
        "team-a", "alice")
    assert shown[f"{ns_b}/train"]["user"] == "bob"
    doctor = bridge_stack.cli("doctor")
    tenancy_lines = [ln for ln in doctor.stdout.splitlines() if "tenancy" in ln]
    assert len(tenancy_lines) == 2 and all(ln.startswith("PASS") for ln in tenancy_lines), (
        doctor.stdout)


async def test_a_qos_gpu_limit_keeps_the_third_pod_pending_with_the_reason(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    tenancy: Mapper,
) -> None:
    slurm, ns = await _quiet_accounting(bridge_stack, e2e_namespace, "gpu2")
    await tenancy({ns: {"account": "team-a", "user": "alice", "qos": ["gpu2"]}})
    for name in ("one", "two"):
        await create_pod(kube, ns, _gpu_pod(name))
        await wait_bound(kube, ns, name)
    await create_pod(kube, ns, _gpu_pod("three"))
    job = await wait_slurm_job(slurm, ns, "three")

    async def explained() -> str | None:
        return next((m for r, m in await pod_events(kube, ns, "three")
                     if r == "SlurmPending" and "QOSGrpGRES" in m), None)

    # Shown once the job has pended for placement.notify_quiet_seconds (10 s); the gate holds
    # the pod, so by an event alone.
    message = await wait_for(explained, 60, interval=1, what="a QOSGrpGRES event")
    assert "QOS 'gpu2'" in message and "limit on GPUs" in message, message
    assert _sacct(slurm, job)["state"] == "PENDING"
    pod = await kube.get(Pod, "three", namespace=ns)
    assert pod.spec is not None and not pod.spec.nodeName


async def test_a_high_priority_native_job_preempts_a_low_priority_pod(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    tenancy: Mapper,
) -> None:
    slurm, ns = await _quiet_accounting(bridge_stack, e2e_namespace, "preempt")
    low = unique_name("sb-batch-low")
    await kube.create(PriorityClass(metadata=ObjectMeta(name=low), value=10))
    try:
        await tenancy({ns: {"account": "team-a", "user": "alice", "qos": ["normal", "low"]}},
                      priority_classes={low: "low"})
        grace = 20  # longer than low's GraceTime (15 s): the bridge warns
        await create_pod(kube, ns, _gpu_pod("victim", gpus=8, priorityClassName=low,
                                            terminationGracePeriodSeconds=grace))
        pod = await wait_bound(kube, ns, "victim")
        annotations = (pod.metadata and pod.metadata.annotations) or {}
        assert annotations[keys.QOS] == "low"  # from the PriorityClass
        await set_pod_phase(kube, pod, "Running")
        job = annotations[keys.JOB_ID]
        assert _sacct(slurm, job)["qos"] == "low"
        node = annotations[keys.SLURM_NODE]
        native = slurm.admin("sbatch", "--parsable", "--qos=high", "--gres=gpu:8", "-w", node,
                             "-o", "/dev/null", "--wrap", "sleep 600").strip()
        try:
            async def preempted() -> list[tuple[str, str]]:
                return [e for e in await pod_events(kube, ns, "victim")
                        if e[0] == keys.EventReason.PREEMPTED]

            (_, message), = await wait_for(preempted, 90, interval=1, what="SlurmPreempted")
            assert "preempted by Slurm" in message and job in message and "QOS low" in message
            # The event is written first, the condition right after: wait for both.
            status, reason, _ = await wait_for(
                lambda: _said_preempted(kube, ns, "victim"), 15, interval=0.5,
                what="victim's condition PreemptedBySlurm")
            assert (status, reason) == ("False", keys.REASON_PREEMPTED)
            evicted = await kube.get(Pod, "victim", namespace=ns)
            assert evicted.metadata is not None and evicted.metadata.deletionTimestamp
            # Evicted, not killed: the pod keeps its own grace period to stop.
            assert evicted.metadata.deletionGracePeriodSeconds == grace
            events = await pod_events(kube, ns, "victim")
            too_long = keys.EventReason.GRACE_TOO_LONG
            assert any(r == too_long and "15s" in m for r, m in events), events
            # The pod was evicted at Slurm's signal; the job ends once the GraceTime is over.
            await wait_for(lambda: _sacct(slurm, job)["state"] == "PREEMPTED", 60, interval=1,
                           what=f"job {job} PREEMPTED in sacct")
            await wait_for(lambda: slurm.admin("squeue", "-h", "-j", native, "-o", "%T").strip()
                           == "RUNNING", 60, interval=1, what="the native job running")
        finally:
            slurm.admin("scancel", native)
    finally:
        await kube.delete(PriorityClass, low)


async def test_a_pod_of_an_unmapped_namespace_is_refused_at_admission(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    tenancy: Mapper,
) -> None:
    mapped, unmapped = await e2e_namespace("mapped"), await e2e_namespace("unmapped")
    await tenancy({mapped: {"account": "team-a", "user": "alice"}})
    with pytest.raises(ApiError) as refused:
        await create_pod(kube, unmapped, _gpu_pod("lost"))
    message = str(refused.value.status.message)
    assert f"namespace {unmapped!r} is not mapped" in message
    assert f"namespaces.{unmapped}" in message and str(bridge_stack.tenancy_file) in message
    created = await create_pod(kube, mapped, _gpu_pod("fine"))
    assert created.metadata is not None and created.metadata.annotations is not None
    assert created.metadata.annotations[keys.SLURM_USER] == "alice"


async def test_an_account_removed_from_slurmdbd_gives_the_pod_a_clear_reason(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    tenancy: Mapper,
) -> None:
    slurm = bridge_stack.slurm
    accounting_ready(slurm)
    account = unique_name("gone", max_len=20)
    slurm.admin("sacctmgr", "-i", "add", "account", account)
    slurm.admin("sacctmgr", "-i", "add", "user", "alice", f"account={account}")
    ns = await e2e_namespace("gone")
    await tenancy({ns: {"account": account, "user": "alice"}})
    slurm.admin("sacctmgr", "-i", "delete", "user", "alice", f"account={account}")
    slurm.admin("sacctmgr", "-i", "delete", "account", account)
    await create_pod(kube, ns, _gpu_pod("orphan"))

    async def told() -> tuple[str, str, str] | None:
        status, reason, message = await _condition(kube, ns, "orphan")
        return (status, reason, message) if reason == "InvalidAccount" else None

    status, _, message = await wait_for(told, 60, interval=1, what="InvalidAccount condition")
    assert status == "False" and f"account {account!r}" in message and "'alice'" in message
    # kube-scheduler keeps retrying the pod; the bridge tells it once and does not ask Slurm
    # again for REFUSED_RETRY_SECONDS (30 s): no crash loop, no retry storm.
    await asyncio.sleep(12)
    pod = await kube.get(Pod, "orphan", namespace=ns)
    uid = pod.metadata.uid if pod.metadata else ""
    submits = [ln for ln in bridge_stack.extender.log_file.read_text().splitlines()
               if "placement.submit_refused" in ln and str(uid) in ln]
    assert len(submits) == 1, submits
    events = [e for e in await pod_events(kube, ns, "orphan")
              if e[0] == keys.EventReason.SUBMIT_REFUSED]
    assert len(events) == 1 and account in events[0][1], events
    assert pod.status is not None and pod.status.phase == "Pending"
    assert keys.JOB_ID not in ((pod.metadata and pod.metadata.annotations) or {})
