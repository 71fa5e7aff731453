"""The real environment for B1 and B5: the project's local Slurm and control plane.

Everything comes from the dev kit (slurmbridge_devkit): ``local_target`` runs
``deploy/slurm/cluster.sh up`` (a no-op when already up), ``run_controlplane("up")``
joins or starts ``deploy/k8s/controlplane.sh`` as a holder, ``start_stack`` starts the
extender, the webhook and the bridge's kube-scheduler as subprocesses.  These benchmarks
want an otherwise idle machine: ``start_stack`` cancels every job of users slurm and root,
and B1 may restart Slurm with bigger nodes (restoring the default shape afterwards).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families

from bridge.config import SlurmSettings
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.slurm import convert
from bridge.slurm.client import SlurmClient
from bridge.slurm.wire.base import SubmitResponse
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.kube import (
    FIELD_MANAGER,
    ControlPlane,
    k8s_bin_dir,
    missing_binaries,
    parse_env,
    run_controlplane,
)
from slurmbridge_devkit.kubelet import create_node, node_status
from slurmbridge_devkit.namespaces import create_namespace, delete_namespace, unique_name
from slurmbridge_devkit.slurm import CLUSTER_SH, SlurmTarget, external_target, local_target
from slurmbridge_devkit.stack import BridgeStack, start_stack, stop_stack
from slurmbridge_devkit.stack_objects import E2E_LABEL, FIRST_INSTALL

HarnessFailure: type[BaseException] = pytest.fail.Exception  # the harness reports via pytest.fail


class SetupError(RuntimeError):
    """The environment could not be set up; the message says what to do."""


def slurm_target(version: str) -> SlurmTarget:
    try:
        return external_target() or local_target(version)
    except HarnessFailure as exc:
        raise SetupError(str(exc)) from None


def _cluster(*args: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        ["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=1200,
        check=False, env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise SetupError(f"cluster.sh {' '.join(args)} failed: {done.stderr[-2000:]}")


async def slurm_cpus(slurm: SlurmTarget) -> tuple[list[int], list[int]]:
    """CPUs and memory (MB) of each node."""
    async with SlurmClient(slurm.settings()) as client:
        nodes = await client.list_nodes()
        return [n.cpus for n in nodes], [n.memory_mb for n in nodes]


@contextlib.contextmanager
def slurm_with_cpus(
    version: str, total_cpus: int, per_node: int, *, memory_mb: int | None = None,
) -> Iterator[SlurmTarget]:
    """The local Slurm with at least ``total_cpus`` CPUs; restarted with ``per_node`` if needed.

    With ``memory_mb``, also restarted (with that much per node) if a node has less.
    The default shape (4 x 64 CPUs) is put back afterwards, so the test suite finds what it
    expects.  An external Slurm (SLURMBRIDGE_TEST_SLURM_URL) is never restarted.
    """
    slurm = slurm_target(version)
    have, memory = asyncio.run(slurm_cpus(slurm))
    if sum(have) >= total_cpus and min(memory) >= (memory_mb or 0):
        yield slurm
        return
    if slurm.version == "external" or os.environ.get("SLURMBRIDGE_TEST_SLURM_URL"):
        raise SetupError(f"the external Slurm has {sum(have)} CPUs; this benchmark needs "
                         f"{total_cpus}")
    print(f"  Slurm {version} has {sum(have)} CPUs, need {total_cpus}: restarting it with "
          f"CPUS={per_node} per node (the default shape is restored afterwards)", flush=True)
    _cluster("down", version)
    try:
        env = {"CPUS": str(per_node)}
        if memory_mb:
            env["MEMORY_MB"] = str(memory_mb)
        _cluster("up", version, env=env)
        slurm = slurm_target(version)
        yield slurm
    finally:
        _cluster("down", version)
        _cluster("up", version)


@contextlib.contextmanager
def control_plane() -> Iterator[ControlPlane]:
    missing = missing_binaries()
    if missing:
        raise SetupError(f"Kubernetes binaries missing ({', '.join(map(str, missing))}): "
                         f"build them with deploy/k8s/build.sh (into {k8s_bin_dir()})")
    try:
        env = parse_env(run_controlplane("up"))
    except HarnessFailure as exc:
        raise SetupError(str(exc)) from None
    try:
        yield ControlPlane(
            kubeconfig=Path(env["KUBECONFIG"]),
            server=env["SLURMBRIDGE_KUBE_SERVER"],
            ca_file=Path(env["SLURMBRIDGE_KUBE_CA"]),
            bin_dir=Path(env["SLURMBRIDGE_KUBE_BIN"]),
        )
    finally:
        if os.environ.get("SLURMBRIDGE_KEEP_CLUSTER") != "1":
            with contextlib.suppress(HarnessFailure):
                run_controlplane("release", str(os.getpid()))


def kube_client(cp: ControlPlane) -> AsyncClient:
    return AsyncClient(
        KubeConfig.from_file(cp.kubeconfig), field_manager=FIELD_MANAGER, trust_env=False
    )


@contextlib.asynccontextmanager
async def bridge_stack(
    slurm: SlurmTarget, cp: ControlPlane, kube: AsyncClient, work: Path,
    *, settings: dict[str, str] | None = None, log_level: str = "debug",
) -> AsyncIterator[BridgeStack]:
    await no_namespace_terminating(kube)
    try:
        stack = await start_stack(slurm, cp, kube, work, settings=settings, log_level=log_level,
                                  chart_flags=FIRST_INSTALL)
    except HarnessFailure as exc:
        raise SetupError(str(exc)) from None
    try:
        yield stack
    finally:
        with contextlib.suppress(Exception, HarnessFailure):
            await stop_stack(stack, kube)


async def no_namespace_terminating(kube: AsyncClient, timeout: float = 120) -> None:  # noqa: ASYNC109
    """Until no namespace is being deleted.  One that cannot finish (a finalizer whose
    controller is gone: a Kueue Workload's, left by a killed test) is retried by the namespace
    controller every few seconds, for ever: its writes and CPU would be measured in every round
    (it was, unnoticed, in B1's runs of 2026-12-05 15:55 and 18:55)."""
    deadline = time.monotonic() + timeout
    while True:
        stuck = [ns.metadata.name async for ns in kube.list(Namespace)
                 if ns.metadata and ns.status and ns.status.phase == "Terminating"]
        if not stuck:
            return
        if time.monotonic() > deadline:
            raise SetupError(
                f"namespaces {', '.join(map(str, stuck))} have been terminating for "
                f"{timeout:.0f} s or more: the namespace controller would retry them in every "
                "round; `kubectl get ns <name> -o yaml` names what holds them (remove a "
                "finalizer whose controller is gone), then run again")
        await asyncio.sleep(2)


FLOOR_NODE_PREFIX = "bench-floor-node"


async def bench_namespace(kube: AsyncClient, prefix: str, *, bridge: bool) -> str:
    """A fresh namespace; the bridge's in the webhooks' scope (as a site's would be)."""
    ns = unique_name(prefix)
    await create_namespace(kube, ns, {E2E_LABEL: "true"} if bridge else None)
    return ns


@contextlib.asynccontextmanager
async def floor_nodes(kube: AsyncClient, like: list[str]) -> AsyncIterator[list[str]]:
    """Twins of the managed Nodes ``like`` (same capacity), neither labelled nor tainted
    managed: the default kube-scheduler's pods, the floor, go there, as the API server
    refuses any pod the bridge does not place the managed toleration (issue 41, case 5)."""
    names = []
    try:
        for k, name in enumerate(like, start=1):
            node = await kube.get(Node, name)
            capacity = node.status.capacity if node.status and node.status.capacity else {}
            names.append(f"{FLOOR_NODE_PREFIX}{k}")
            with contextlib.suppress(ApiError):  # left by a run that was killed
                await kube.delete(Node, names[-1])
            await create_node(kube, names[-1], cpu=capacity.get("cpu", "64"),
                              memory=capacity.get("memory", "256Gi"))
            await resize_nodes(kube, names[-1:], cpu=capacity.get("cpu", "64"),
                               memory=capacity.get("memory", "256Gi"),
                               pods=capacity.get("pods", "110"))
        yield names
    finally:
        for name in names:
            with contextlib.suppress(ApiError):
                await kube.delete(Node, name)


async def resize_nodes(
    kube: AsyncClient, names: list[str], *, cpu: str, memory: str, pods: str
) -> None:
    """Give the (kubelet-less) Nodes a new capacity, as a kubelet would report it."""
    for name in names:
        await kube.patch(
            Node.Status, name, {"status": node_status(cpu, memory, 8, pods=pods)},
            patch_type=PatchType.MERGE,
        )


def bench_pod(name: str, scheduler: str, app: str) -> Pod:
    """A 1-CPU pod as a researcher writes it, plain: for the bridge, its webhook adds the
    managed taint's toleration and the gate, in the timed path as for a user; the default
    scheduler's go to the ``floor_nodes``."""
    return PodBuilder(name).scheduler(scheduler).label("app", app).memory("512Mi").build()


async def create_pods(kube: AsyncClient, ns: str, pods: list[Pod], parallel: int) -> None:
    slots = asyncio.Semaphore(parallel)

    async def one(pod: Pod) -> None:
        async with slots:
            await kube.create(pod, namespace=ns)  # type: ignore[call-overload]  # lightkube overloads

    await asyncio.gather(*(one(p) for p in pods))


async def wait_all_bound(
    kube: AsyncClient, ns: str, n: int, t0: float, timeout: float  # noqa: ASYNC109
) -> float:
    """Seconds from ``t0`` (perf_counter) until ``n`` pods of ``ns`` have a node.

    Watches rather than lists: listing hundreds of pods every fraction of a second
    would cost the apiserver (and this process) more than the schedulers under test.
    """
    bound: set[str] = set()
    try:
        async with asyncio.timeout(timeout):
            async for _, pod in kube.watch(Pod, namespace=ns):
                if pod.spec is not None and pod.spec.nodeName and pod.metadata is not None:
                    bound.add(str(pod.metadata.uid))
                    if len(bound) >= n:
                        return time.perf_counter() - t0
    except TimeoutError:
        pass
    raise TimeoutError(f"{len(bound)}/{n} pods bound in {ns} after {timeout:.0f} s")


def cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by each kind of process on this machine (from /proc)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = _process_kind(int(stat.parent.name), [c.decode(errors="replace") for c in cmdline])
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _cpu_busy_idle() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, idle


async def wait_cpu_idle(
    share: float = 0.6, window: float = 5.0, timeout: float = 600  # noqa: ASYNC109
) -> float:
    """Until the machine's CPUs are at least ``share`` idle over ``window`` seconds.

    After a burst (1,000 jobs starting) slurmctld and the apiserver answer slowly for a
    while; a round started then measures the burst, not the system.  Returns the wait.
    """
    t0 = time.monotonic()
    while True:
        busy0, idle0 = _cpu_busy_idle()
        await asyncio.sleep(window)
        busy1, idle1 = _cpu_busy_idle()
        ticks = (busy1 - busy0) + (idle1 - idle0)
        if ticks and (idle1 - idle0) / ticks >= share:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise SetupError(f"the machine is still busy after {timeout:.0f} s")


def apiserver_requests(cp: ControlPlane) -> tuple[dict[str, float], dict[str, float]]:
    """The apiserver's own request counters (``apiserver_request_total``) by verb and
    resource, and the sums and counts of the latencies a pod's create pays as the apiserver
    times them: the create itself (``POST pods``) and each admission webhook it calls."""
    text = cp.kubectl("get", "--raw", "/metrics").stdout
    out: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "apiserver_request_total":
                what = f"{labels.get('verb', '')} {labels.get('resource', '')}"
                if labels.get("subresource"):
                    what += f"/{labels['subresource']}"
                out[what] = out.get(what, 0.0) + sample.value
                continue
            timed = _timed(sample.name, labels)
            if timed is not None:
                seconds[timed] = seconds.get(timed, 0.0) + sample.value
    return out, seconds


def _timed(name: str, labels: dict[str, str]) -> str | None:
    """``"<what> sum"``/``"<what> count"`` of a latency sample kept, else None."""
    for suffix in ("_sum", "_count"):
        if not name.endswith(suffix):
            continue
        base = name.removesuffix(suffix)
        if (base == "apiserver_request_duration_seconds" and labels.get("verb") == "POST"
                and labels.get("resource") == "pods" and not labels.get("subresource")):
            return f"create{suffix.replace('_', ' ')}"
        if base == "apiserver_admission_webhook_admission_duration_seconds":
            return f"webhook {labels.get('name', '')}{suffix.replace('_', ' ')}"
    return None


def format_latency(seconds: dict[str, float]) -> str:
    """Each timed kind's mean in ms and its count, from sums and counts over a span."""
    kinds = sorted({k.rsplit(" ", 1)[0] for k in seconds})
    parts = []
    for kind in kinds:
        n = seconds.get(f"{kind} count", 0.0)
        if n:
            parts.append(f"{kind} {seconds.get(f'{kind} sum', 0.0) / n * 1000:.1f} ms x {n:.0f}")
    return ", ".join(parts)


def counts_since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def format_counts(counts: dict[str, float], at_least: float = 10) -> str:
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.0f}" for k, v in top if v >= at_least)


def cpu_since(before: dict[str, float]) -> dict[str, float]:
    return counts_since(before, cpu_seconds())


def format_cpu(used: dict[str, float]) -> str:
    top = sorted(used.items(), key=lambda kv: -kv[1])
    return f"{sum(used.values()):.1f} s in all (" + ", ".join(
        f"{k} {v:.1f}" for k, v in top if v >= 0.1
    ) + ")"


def _process_kind(pid: int, argv: list[str]) -> str:
    if pid == os.getpid():
        return "benchmark client"
    if "slurmbridge_cli" in argv or (argv and Path(argv[0]).name == "slurmbridge"):
        role = next((a for a in argv if a in ("extender", "webhook")), "")
        return f"slurmbridge {role}".strip()
    names = [Path(a).name for a in argv[:4]]  # etcd runs under the chroot's ld.so
    known = next((n for n in names if n in _KNOWN), None)
    return known or (f"other: {names[0]}" if names else "other")


_KNOWN = {"kube-apiserver", "kube-scheduler", "etcd", "slurmctld", "slurmrestd", "slurmd"}


async def drop_namespace(kube: AsyncClient, ns: str) -> None:
    with contextlib.suppress(ApiError):
        await delete_namespace(kube, ns)


async def namespace_gone(kube: AsyncClient, ns: str, timeout: float = 120) -> None:  # noqa: ASYNC109
    """Until kube-controller-manager has removed ``ns`` (its events, then itself: 5-7 s even
    empty), so its clean-up is not billed to the round that follows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await kube.get(Namespace, ns)
        except ApiError as exc:
            if exc.status.code == 404:
                return
            raise
        await asyncio.sleep(0.5)
    print(f"  namespace {ns} still there after {timeout:.0f} s: the next round starts anyway",
          flush=True)


async def wait_slurm_quiet(slurm: SlurmTarget, timeout: float = 300) -> None:  # noqa: ASYNC109
    """Until the benchmarks' user has no RUNNING, PENDING or COMPLETING job.

    Earlier rounds' jobs are gone then; other users' jobs (B6's native queue) stay.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = await asyncio.to_thread(
            slurm.admin, "squeue", "-h", "-u", slurm.user, "-t", "RUNNING,PENDING,COMPLETING",
            "-o", "%i",
        )
        if not live.strip():
            return
        await asyncio.sleep(1)
    raise TimeoutError(f"Slurm still has live jobs of user {slurm.user} after {timeout:.0f} s")


async def submit_job(
    client: SlurmClient, name: str, owner: PodOwner | None = None, *, cpus: int = 1,
    hold: bool = False, user: str | None = None, fields: dict[str, object] | None = None,
) -> int:
    """One job through slurmrestd as the bridge describes its own for this Slurm (batch or
    ``EXTERNAL_JOB``): a placeholder (``owner``: the bridge's comment marker) or, without
    one, a job that looks native; ``hold``: PENDING until released; ``fields`` add to the
    description (``begin_time``); ``user`` submits as that Slurm user."""
    req = JobRequest(name=name, owner=owner or PodOwner(""), cpus=cpus, memory_mb=64)
    comment = convert.comment_for(owner) if owner is not None else ""
    job = {**client.family.describe(req, comment).model_dump(exclude_none=True), **(fields or {})}
    if hold:
        job["hold"] = True
    resp = await client.rest.call("POST", "/job/submit", "submit", SubmitResponse,
                                  body={"job": job}, idempotent=False, user=user)
    if resp.job_id is None:
        raise SetupError(f"Slurm refused job {name} (user {user or 'the bridge'}): "
                         f"{[e.text() for e in resp.errors]}")
    return resp.job_id


def cancel_jobs(slurm: SlurmTarget, ids: list[int]) -> None:
    for k in range(0, len(ids), 500):
        slurm.admin("scancel", *map(str, ids[k : k + 500]), check=False)


def slurm_settings(slurm: SlurmTarget, **overrides: object) -> SlurmSettings:
    return slurm.settings(**overrides)


def metric_samples(port: int) -> dict[str, float]:
    """The extender's counters, histogram counts and sums, keyed ``name{label=value,...}``."""
    return _samples(httpx.get(f"http://127.0.0.1:{port}/metrics/", timeout=10).text)


def webhook_samples(stack: BridgeStack) -> dict[str, float]:
    """The webhook's, as ``metric_samples``: its /metrics is on its HTTPS port."""
    port = stack.webhook.env["SLURMBRIDGE_ADMISSION__PORT"]
    text = httpx.get(f"https://127.0.0.1:{port}/metrics", timeout=10,
                     verify=ssl.create_default_context(cafile=str(stack.work / "ca.crt"))).text
    return _samples(text)


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            if "le" not in sample.labels:
                out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def slurm_requests(port: int) -> dict[str, float]:
    """The extender's cumulative slurmrestd request count per operation (from /metrics/)."""
    prefix = "slurmbridge_slurm_request_seconds_count{operation="
    return {
        key[len(prefix):-1]: value
        for key, value in metric_samples(port).items() if key.startswith(prefix)
    }
