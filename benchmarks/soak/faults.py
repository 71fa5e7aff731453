"""The injector: carries out one scheduled fault, repairs it after its hold, and tells the
tracker when the bridge could not act (an outage: the fault's start until ``TAIL_SECONDS``
after its repair).  Everything goes through the dev kit's own handles: the stack's
``BridgeProcess``es, ``cluster.sh`` (``rest start``, ``exec``), ``controlplane.sh up``; the
network cut through the harness's relay (cut.py).
Drains and cordons are lifted in the background, so they overlap later faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from benchmarks import live
from benchmarks.soak.cut import Relay
from benchmarks.soak.invariants import Snapshot
from benchmarks.soak.schedule import Fault, FaultKind, pick_one
from benchmarks.soak.tracker import Tracker
from slurmbridge_devkit.kube import run_controlplane, run_dir
from slurmbridge_devkit.processes import BridgeProcess, leader_identity, leads
from slurmbridge_devkit.slurm import CLUSTER_SH, SlurmTarget

# Seconds after a repair until the bridge is whole again: a new leader's lease (6 s) and first
# resync; the poller's backoff after Slurm failed it (up to 30 s); watches re-established.
TAIL_SECONDS: dict[FaultKind, float] = {
    FaultKind.KILL_LEADER: 20.0,
    FaultKind.KILL_SLURMRESTD: 35.0,
    FaultKind.NET_CUT: 35.0,
    FaultKind.RESTART_SLURMCTLD: 35.0,
    FaultKind.RESTART_APISERVER: 20.0,
}
DRAIN_REASON = "soak: an admin's drain"


def chroot_pids(root: Path, comm: str) -> list[int]:
    """Processes named ``comm`` running in the chroot ``root`` (another Slurm's are not)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(proc / "root") == str(root) and (proc / "comm").read_text().strip() \
                    == comm:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _signal_and_wait(pids: list[int], sig: int, timeout: float = 30) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() for p in pids):
            return
        time.sleep(0.2)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class NotApplicable(Exception):
    """The fault cannot happen to this Slurm (e.g. a requeue of an external job)."""


@dataclass
class Injector:
    slurm: SlurmTarget
    kube: AsyncClient
    replicas: list[BridgeProcess]  # two extender replicas
    webhook: BridgeProcess
    kube_nodes: dict[str, str]  # Kubernetes node -> Slurm node
    tracker: Tracker
    chroot: Path  # the Slurm chroot (cluster.sh rootfs)
    relay: Relay  # the bridge's way to slurmrestd
    last: Callable[[], Snapshot | None]  # the checker's latest snapshot, to pick victims
    counts: Counter[str] = field(default_factory=Counter)
    faulted_jobs: set[str] = field(default_factory=set)
    _repairs: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    async def inject(self, fault: Fault) -> None:
        handlers = {
            FaultKind.KILL_LEADER: self._kill_replica,
            FaultKind.KILL_FOLLOWER: self._kill_replica,
            FaultKind.KILL_WEBHOOK: self._kill_webhook,
            FaultKind.KILL_SLURMRESTD: self._kill_slurmrestd,
            FaultKind.NET_CUT: self._cut,
            FaultKind.RESTART_SLURMCTLD: self._restart_slurmctld,
            FaultKind.RESTART_APISERVER: self._restart_apiserver,
            FaultKind.SCANCEL: self._end_placeholder,
            FaultKind.REQUEUE: self._end_placeholder,
            FaultKind.DRAIN: self._drain,
            FaultKind.CORDON: self._cordon,
        }
        tail = TAIL_SECONDS.get(fault.kind)
        at = time.time()
        outage = self.tracker.open_outage(at) if tail is not None else None
        started = time.strftime("%H:%M:%S", time.gmtime(at))
        victim, skipped = "failed", ""
        try:
            victim = await handlers[fault.kind](fault)
            skipped = "" if victim else "no victim alive, skipped"
        except NotApplicable as exc:
            victim, skipped = "", f"{exc}, skipped"
        finally:
            if outage is not None and tail is not None:
                self.tracker.close_outage(outage, time.time() + tail)
            described = f"{fault.describe()}: {victim or skipped}"
            self.tracker.fault(f"{started} UTC {described}")
            print(f"  fault {described}", flush=True)
        counted = fault.kind.value if victim else f"{fault.kind.value} (skipped)"
        self.counts[counted] += 1
        self.tracker.timeline.faults.append((at - self.tracker.load_start, counted))

    async def _kill_replica(self, fault: Fault) -> str:
        try:
            lease = self.replicas[0].env.get("SLURMBRIDGE_CONTROLLERS__LEASE_NAME")
            holder = await leader_identity(self.kube, *([lease] if lease else []))
        except Exception:  # the apiserver may be away: pick by position then
            holder = ""
        leader = [r for r in self.replicas if leads(holder, r)]
        others = [r for r in self.replicas if r not in leader]
        want = leader if fault.kind is FaultKind.KILL_LEADER else others
        victim = pick_one(want or self.replicas, fault.pick)
        assert victim is not None
        role = "leader" if victim in leader else "not leading"
        pid = victim.proc.pid if victim.proc else 0
        await asyncio.to_thread(victim.kill, signal.SIGKILL)
        await asyncio.sleep(fault.hold)
        await asyncio.to_thread(victim.start)
        return f"replica pid {pid} ({role}, lease held by {holder or 'nobody'}) killed, restarted"

    async def _kill_webhook(self, fault: Fault) -> str:
        await asyncio.to_thread(self.webhook.kill, signal.SIGKILL)
        await asyncio.sleep(fault.hold)
        await asyncio.to_thread(self.webhook.start)
        return "webhook killed, restarted"

    async def _kill_slurmrestd(self, fault: Fault) -> str:
        pids = chroot_pids(self.chroot, "slurmrestd")
        await asyncio.to_thread(_signal_and_wait, pids, signal.SIGKILL)
        await asyncio.sleep(fault.hold)
        await asyncio.to_thread(self._cluster, "rest", "start", self.slurm.version)
        return f"slurmrestd {pids} killed, restarted"

    async def _cut(self, fault: Fault) -> str:
        self.relay.cut()
        try:
            await asyncio.sleep(fault.hold)
        finally:
            self.relay.heal()
        return f"bridge <-> slurmrestd cut for {fault.hold:.0f}s"

    async def _restart_slurmctld(self, fault: Fault) -> str:
        pids = chroot_pids(self.chroot, "slurmctld")
        await asyncio.to_thread(_signal_and_wait, pids, signal.SIGTERM)
        await asyncio.sleep(fault.hold)
        await asyncio.to_thread(self.slurm.admin, "slurmctld")  # no -c: recovers its state
        await asyncio.to_thread(self._wait_ctld)
        return f"slurmctld {pids} stopped, started from its state"

    async def _restart_apiserver(self, fault: Fault) -> str:
        pid = int((run_dir() / "kube-apiserver.pid").read_text().strip())
        await asyncio.to_thread(_signal_and_wait, [pid], signal.SIGTERM)
        await asyncio.sleep(fault.hold)
        await asyncio.to_thread(run_controlplane, "up")
        return f"kube-apiserver {pid} stopped, started (etcd kept)"

    async def _end_placeholder(self, fault: Fault) -> str:
        snap = self.last()
        running = sorted((j for j in snap.placeholders() if j.state == "RUNNING"),
                         key=lambda j: int(j.job_id)) if snap else []
        job = pick_one(running, fault.pick)
        if job is None:
            return ""
        self.faulted_jobs.add(job.job_id)
        if fault.kind is FaultKind.SCANCEL:
            await asyncio.to_thread(self.slurm.admin, "scancel", job.job_id)
            return f"scancel {job.job_id} ({job.name})"
        # Placeholders are submitted non-requeueable: an admin makes one requeueable first.
        # Slurm requeues batch jobs only: on 25.11+ the placeholders are external jobs
        # (data parser v0.0.44+), so there the fault is a no-op, said as such (24.11 has it).
        try:
            await asyncio.to_thread(self.slurm.admin, "scontrol", "update",
                                    f"JobId={job.job_id}", "Requeue=1")
            await asyncio.to_thread(self.slurm.admin, "scontrol", "requeue", job.job_id)
        except AssertionError as exc:
            if "Only batch jobs" not in str(exc):
                raise
            raise NotApplicable(
                f"job {job.job_id} is external: Slurm requeues batch jobs only") from exc
        return f"scontrol requeue {job.job_id} ({job.name})"

    async def _drain(self, fault: Fault) -> str:
        node = pick_one(sorted(self.kube_nodes.values()), fault.pick)
        assert node is not None
        if f"drain:{node}" in self._repairs:
            return ""
        await asyncio.to_thread(self.slurm.admin, "scontrol", "update", f"NodeName={node}",
                                "State=DRAIN", f"Reason={DRAIN_REASON}")

        async def resume() -> None:
            await asyncio.to_thread(self.slurm.admin, "scontrol", "update", f"NodeName={node}",
                                    "State=RESUME")

        self._later(f"drain:{node}", fault.hold, resume)
        return f"{node} drained for {fault.hold:.0f}s"

    async def _cordon(self, fault: Fault) -> str:
        node = pick_one(sorted(self.kube_nodes), fault.pick)
        assert node is not None
        if f"cordon:{node}" in self._repairs:
            return ""
        await self.kube.patch(Node, node, {"spec": {"unschedulable": True}})

        async def uncordon() -> None:
            await self.kube.patch(Node, node, {"spec": {"unschedulable": None}})

        self._later(f"cordon:{node}", fault.hold, uncordon)
        return f"{node} cordoned for {fault.hold:.0f}s"

    def _later(self, key: str, delay: float, repair: Callable[[], Awaitable[None]]) -> None:
        self._repairs[key] = repair

        async def run() -> None:
            await asyncio.sleep(delay)
            await self._repair(key)

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _repair(self, key: str) -> None:
        repair = self._repairs.pop(key, None)
        for attempt in range(5):  # the apiserver or slurmctld may be restarting just now
            if repair is None:
                return
            try:
                await repair()
                return
            except Exception as exc:  # retried, then reported
                print(f"  repair {key} failed (attempt {attempt + 1}): {exc}", flush=True)
                await asyncio.sleep(5)

    async def restore(self) -> None:
        """Everything back as before the soak: pending repairs now, every process up.  Each
        step is tried whatever the others did (a failure is printed)."""
        self.relay.heal()
        for task in list(self._background):
            task.cancel()
        for key in list(self._repairs):
            await self._repair(key)
        steps: list[Callable[[], object]] = [
            lambda: run_controlplane("up"),  # a no-op when every component is up
            lambda: self._cluster("rest", "start", self.slurm.version),
            self._ensure_ctld,
            *(self._ensure_running(p) for p in (*self.replicas, self.webhook)),
        ]
        for step in steps:
            try:
                await asyncio.to_thread(step)
            except (Exception, live.HarnessFailure) as exc:
                print(f"  restore: {type(exc).__name__}: {str(exc)[:300]}", flush=True)

    def _ensure_ctld(self) -> None:
        if not chroot_pids(self.chroot, "slurmctld"):
            self.slurm.admin("slurmctld")
        self._wait_ctld()

    @staticmethod
    def _ensure_running(proc: BridgeProcess) -> Callable[[], None]:
        def start() -> None:
            if proc.proc is None or proc.proc.poll() is not None:
                proc.start()

        return start

    def _cluster(self, *args: str) -> None:
        done = subprocess.run(["bash", str(CLUSTER_SH), *args], capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            raise live.SetupError(f"cluster.sh {' '.join(args)}: {done.stderr[-500:]}")

    def _wait_ctld(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "UP" in self.slurm.admin("scontrol", "ping", check=False, timeout=20):
                return
            time.sleep(1)
        raise live.SetupError(f"slurmctld not answering {timeout:.0f}s after its restart")
