"""The SOAK run: the stack with two extender replicas and the webhook on the local Slurm and
control plane, the load and the faults for ``minutes``, the invariants checked every few
seconds, then everything repaired, every pod deleted and the last check: no placeholder left.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lightkube import AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod

from benchmarks import live
from benchmarks.common import FAILED, Figure, Outcome, at_most
from benchmarks.soak import observe
from benchmarks.soak.adversary import Adversary
from benchmarks.soak.attacks import attack_schedule
from benchmarks.soak.cut import Relay
from benchmarks.soak.faults import Injector
from benchmarks.soak.invariants import BOUND_SECONDS, Bound, Snapshot, check_all
from benchmarks.soak.kubelet import Kubelet
from benchmarks.soak.load import NATIVE_USER, Load, delete_job
from benchmarks.soak.schedule import Fault, FaultKind, fault_schedule
from benchmarks.soak.tracker import Tracker
from slurmbridge_devkit.kube import ControlPlane, cache_dir, run_dir
from slurmbridge_devkit.processes import BridgeProcess, another_replica
from slurmbridge_devkit.slurm import CLUSTER_SH, SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, make_e2e_namespace

TITLE = ("seeded fault soak: a mixed load (pods, GPU pods, 2- and 4-pod groups, pods that "
         "exit, random deletions, native GPU jobs) with a fault every 20-40 s, invariants "
         "checked from outside the bridge; target: 0 violations")


@dataclass
class Config:
    minutes: float = 30.0
    seed: int = 1
    slurm_version: str = "26.05"
    check_seconds: float = 5.0
    end_timeout: float = 180.0
    adversarial: bool = False  # a tenant tries issue 41's cases 1-6 beside the faults

    @property
    def label(self) -> str:
        return f"{'adversarial ' if self.adversarial else ''}seed {self.seed}"


def run_seeds(cfg: Config, seeds: list[int]) -> Outcome:
    """One run per seed, in turn, in one outcome: each figure and note as ``[seed N] ...``
    (``[adversarial seed N] ...`` with the adversary, even for one seed)."""
    if len(seeds) == 1 and not cfg.adversarial:
        return run(dataclasses.replace(cfg, seed=seeds[0]))
    merged = Outcome(bench="SOAK", title=TITLE, repeats=1)
    for seed in seeds:
        one_cfg = dataclasses.replace(cfg, seed=seed)
        one = run(one_cfg)
        merged.figures += [dataclasses.replace(f, name=f"[{one_cfg.label}] {f.name}")
                           for f in one.figures]
        merged.notes += [f"[{one_cfg.label}] {note}" for note in one.notes]
        merged.series |= one.series
        if one.status == FAILED:
            merged.status, merged.error = FAILED, f"seed {seed}: {one.error}"
    return merged


def run(cfg: Config) -> Outcome:
    slurm = live.slurm_target(cfg.slurm_version)
    with live.control_plane() as cp, tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        kube = live.kube_client(cp)
        try:
            outcome = asyncio.run(_with_stack(cfg, slurm, cp, kube, Path(tmp)))
        finally:
            kept = keep_logs(cfg.label.replace(" ", "-"))
        outcome.notes.append(f"The bridge's logs of this run: {kept}")
        return outcome


def keep_logs(label: str) -> Path:
    """Copy the bridge's logs (extender, second replica, webhook) out of the control plane's
    run folder, which the next stack on it overwrites: a violation is explained by them."""
    kept = cache_dir() / "soak-logs" / f"{label}-{time.strftime('%Y%m%dT%H%M%S')}"
    kept.mkdir(parents=True, exist_ok=True)
    for log in (run_dir() / "logs").glob("bridge-*.log"):
        shutil.copy2(log, kept / log.name)
    return kept


async def _with_stack(
    cfg: Config, slurm: SlurmTarget, cp: ControlPlane, kube: AsyncClient, work: Path
) -> Outcome:
    rest = urlsplit(slurm.url)
    relay = Relay(rest.hostname or "127.0.0.1", rest.port or 80)
    await relay.start()
    try:
        async with live.bridge_stack(slurm, cp, kube, work, log_level="info",
                                     settings=_settings(relay)) as stack:
            second = another_replica(stack.extender)
            await asyncio.to_thread(second.start)
            ns = await make_e2e_namespace(kube, f"soak-{cfg.seed}")
            adversary = None
            try:
                soak = Soak(cfg, slurm, kube, stack=stack, second=second, ns=ns, relay=relay)
                if cfg.adversarial:
                    adversary = Adversary(slurm, kube, cp, ns, cfg.seed, dict(stack.kube_nodes),
                                          stack.tenancy_file, lambda: soak.latest,
                                          soak.final_violation)
                    await adversary.start()
                    soak.adversary = adversary
                return await soak.run()
            finally:
                second.kill(signal.SIGTERM)
                if adversary is not None:
                    await adversary.stop()
                await live.drop_namespace(kube, ns)
                slurm.admin("scancel", "-u", NATIVE_USER, check=False)
    finally:
        await kube.close()
        await relay.close()


def _settings(relay: Relay) -> dict[str, str]:
    """The stack's timings, but Slurm through the relay, and a Lease of the soak's own: a
    bridge another session left running on the same control plane cannot lead the soak's."""
    return {"SLURMBRIDGE_SLURM__URL": relay.url,
            "SLURMBRIDGE_CONTROLLERS__LEASE_NAME": "slurmbridge-soak"}


class Soak:
    """One run: the load, the faults, the kubelet and the checks side by side, then the end."""

    def __init__(self, cfg: Config, slurm: SlurmTarget, kube: AsyncClient, *,
                 stack: BridgeStack, second: BridgeProcess, ns: str, relay: Relay) -> None:
        self.cfg, self.slurm, self.kube, self.ns = cfg, slurm, kube, ns
        self.node_map = dict(stack.kube_nodes)
        self.tracker = Tracker(cfg.seed, time.time())
        self.kubelet = Kubelet(kube, ns)
        self.load = Load(kube, slurm, ns, self.kubelet, cfg.seed)
        self.latest: Snapshot | None = None
        self.skipped = 0
        self.adversary: Adversary | None = None  # set before run() in adversarial mode
        self.node_gpus = observe.node_gpus(slurm)
        self.lock = asyncio.Lock()  # the kubelet never writes in the middle of a snapshot
        self.injector = Injector(
            slurm, kube, [stack.extender, second], stack.webhook, self.node_map, self.tracker,
            Path(subprocess.run(["bash", str(CLUSTER_SH), "rootfs", slurm.version],
                                capture_output=True, text=True, check=True).stdout.strip()
                 ).resolve(),
            relay, lambda: self.latest,
        )
        self.stop = asyncio.Event()

    async def run(self) -> Outcome:
        seconds = self.cfg.minutes * 60
        schedule = fault_schedule(self.cfg.seed, seconds)
        attacks = attack_schedule(self.cfg.seed, seconds) if self.adversary else []
        print(f"  SOAK {self.cfg.label}: {len(schedule)} faults and {len(attacks)} attacks in "
              f"{seconds:.0f} s, namespace {self.ns}", flush=True)
        self.tracker.load_start = time.time()
        background = [asyncio.create_task(self._every(1.0, self._kubelet_step)),
                      asyncio.create_task(self._every(self.cfg.check_seconds, self._check))]
        adversary = [self.adversary.run(attacks, self.tracker.load_start)] if (
            self.adversary) else []
        try:
            try:
                await asyncio.gather(self.load.run(seconds), self._faults(schedule), *adversary)
            finally:  # never leave a node drained or a daemon down behind, whatever happened
                await self.injector.restore()
                if self.adversary is not None:
                    await self.adversary.cleanup()
            await self._delete_everything()
            await self._no_placeholder_left()
        finally:
            self.stop.set()
            await asyncio.gather(*background, return_exceptions=True)
        return self._outcome()

    async def _every(self, period: float, step: Callable[[], Awaitable[None]]) -> None:
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(step(), 60)
            except Exception as exc:  # a fault may take the apiserver away
                print(f"  {step.__name__}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), period)

    async def _kubelet_step(self) -> None:
        async with self.lock:
            await self.kubelet.step()
            if self.adversary is not None and self.adversary.kubelet is not None:
                await self.adversary.kubelet.step()

    def _scope(self) -> observe.Scope:
        """The adversary's namespace and tenancy besides the soak's own."""
        if self.adversary is None:
            return observe.Scope(node_gpus=self.node_gpus, tenants={self.ns: self.slurm.user})
        return observe.Scope([self.adversary.own], self.node_gpus, self.adversary.tenants())

    async def _check(self) -> None:
        async with self.lock:
            try:
                snap = await observe.snapshot(self.slurm, self.kube, self.ns, self.node_map,
                                              timeout=20, scope=self._scope())
            except Exception:
                self.skipped += 1
                self.tracker.timeline.skipped.append(time.time() - self.tracker.load_start)
                raise
        self.latest = snap
        suspects = check_all(snap, frozenset(self.injector.faulted_jobs))
        placed = len(self.kubelet.placed)
        for violation in self.tracker.observe(suspects, snap.at, placed=placed):
            print("  " + violation.describe(), flush=True)

    def final_violation(self, invariant: str, detail: str) -> None:
        """A violation seen outside the snapshots (the adversary's own job cancelled)."""
        print("  " + self.tracker.final(invariant, detail).describe(), flush=True)

    async def _faults(self, schedule: list[Fault]) -> None:
        for fault in schedule:
            delay = self.tracker.load_start + fault.at - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            started = time.time() - self.tracker.load_start
            try:
                await asyncio.wait_for(self.injector.inject(fault), 240)
            except (Exception, live.HarnessFailure) as exc:  # counted, go on
                failed = f"{fault.kind.value} (failed to inject)"
                self.injector.counts[failed] += 1
                self.tracker.timeline.faults.append((started, failed))
                print(f"  fault {fault.describe()} failed: {type(exc).__name__}: "
                      f"{str(exc)[:300]}", flush=True)

    async def _delete_everything(self) -> None:
        """Every pod deleted as a user would; the kubelet stops them; wait until none is left."""
        deadline = time.monotonic() + self.cfg.end_timeout
        async for job in self.kube.list(Job, namespace=self.ns):
            if job.metadata and job.metadata.name:
                with contextlib.suppress(Exception):
                    await delete_job(self.kube, self.ns, job.metadata.name)
        while time.monotonic() < deadline:
            pods = [p async for p in self.kube.list(Pod, namespace=self.ns)]
            if not pods:
                return
            for pod in pods:
                if pod.metadata and pod.metadata.name and not pod.metadata.deletionTimestamp:
                    with contextlib.suppress(Exception):
                        await self.kube.delete(Pod, pod.metadata.name, namespace=self.ns)
            await asyncio.sleep(2)
        names = [p.metadata.name async for p in self.kube.list(Pod, namespace=self.ns)
                 if p.metadata]
        print("  " + self.tracker.final("pods left after the end", f"{names}").describe())

    async def _no_placeholder_left(self) -> None:
        """0 placeholders within the orphan bound of the last pod's deletion."""
        deadline = time.monotonic() + BOUND_SECONDS[Bound.ORPHAN]
        left: list[str] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                snap = await observe.snapshot(self.slurm, self.kube, self.ns, self.node_map)
                left = [f"{j.job_id} {j.name} {j.state}" for j in snap.placeholders() if j.live]
                if not left:
                    return
            await asyncio.sleep(2)
        print("  " + self.tracker.final(
            "placeholders left after every pod was deleted", f"{left}").describe(), flush=True)

    def _outcome(self) -> Outcome:
        faults = self.injector.counts
        figures = [Figure(f"faults: {kind.value}", "faults", [float(faults[kind.value])])
                   for kind in FaultKind]
        extra = sorted(k for k in faults if k not in {kind.value for kind in FaultKind})
        figures += [Figure(f"faults: {k}", "faults", [float(faults[k])]) for k in extra]
        figures += [
            Figure("pods placed (bound at least once)", "pods", [float(len(self.kubelet.placed))]),
            Figure("pods that exited by themselves", "pods", [float(self.kubelet.completed)]),
            *(Figure(k, "", [float(v)]) for k, v in sorted(self.load.counts.items())),
            Figure("invariant checks (snapshots judged)", "checks", [float(self.tracker.checks)]),
            Figure("snapshots skipped (Slurm or apiserver unreadable)", "checks",
                   [float(self.skipped)]),
        ]
        violations = Figure("invariant violations", "violations",
                            [float(len(self.tracker.violations))])
        at_most(violations, 0, "0")
        figures.append(violations)
        by_invariant = Counter(v.invariant for v in self.tracker.violations)
        figures += [Figure(f"invariant violations: {name}", "violations", [float(n)])
                    for name, n in sorted(by_invariant.items())]
        if self.adversary is not None:
            figures += self.adversary.figures(self.tracker.violations)
        bounds = ", ".join(f"{b.value} {s:.0f} s" for b, s in BOUND_SECONDS.items())
        notes = [
            f"seed {self.cfg.seed}, {self.cfg.minutes:g} minutes of load and faults, then every "
            "fault repaired, every pod deleted, and 0 placeholders required within the orphan "
            "bound. Two extender replicas (leader election, lease 6 s) and the webhook, the dev "
            "kit's test timings (poll 1 s, resync 30 s, orphan grace 20 s).",
            "Bounds a suspect may last, in seconds the bridge could act (the clock stops from a "
            "fault that takes away the leader, slurmrestd, slurmctld or the apiserver until "
            f"20-35 s after its repair): {bounds}; strict ones must survive two snapshots.",
            "The network cut is a relay in the harness that stops passing bytes (the bridge's "
            "slurm.url points at it), not yet a network namespace with a drop rule on its veth.",
            *(v.describe() for v in self.tracker.violations[:40]),
            "Faults in order: " + " | ".join(self.tracker.faults),
            *(self.adversary.notes() if self.adversary is not None else []),
        ]
        outcome = Outcome(bench="SOAK", title=TITLE, figures=figures, notes=notes, repeats=1,
                          series={self.cfg.label: self.tracker.timeline.to_json()})
        if not self.kubelet.placed:
            outcome.status, outcome.error = FAILED, "no pod was ever placed: the harness is broken"
        return outcome
