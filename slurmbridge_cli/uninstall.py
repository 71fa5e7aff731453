"""``slurmbridge uninstall``: release or delete what the bridge holds in Kubernetes and Slurm,
so that ``helm uninstall`` leaves nothing of it behind (the chart's pre-delete hook runs it).

First the bridge stops acting: its extender is scaled to zero when named, and this command
takes the controllers' Lease, so no leader re-taints, re-drains or resubmits behind it (a
bridge still leading after the wait is an error: nothing is changed).  Then, in this order:
pods, placeholders, DRA claims, Nodes, drains, external nodes, Leases.  Each object is one
line; a step that fails stops the run, saying what was done and what is left, and a second run
picks up from there (each step only finds what is still the bridge's).
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from lightkube.resources.apps_v1 import Deployment
from lightkube.types import PatchType

from bridge.config import Settings
from bridge.controllers.leader import LeaderElector
from bridge.placement.trust import JobTrust
from bridge.policy.tenancy import OwnerTrust
from slurmbridge_cli import uninstall_kube as k8s
from slurmbridge_cli import uninstall_slurm as slurm_side
from slurmbridge_cli.failures import Failure
from slurmbridge_cli.uninstall_report import Report

IDENTITY = "slurmbridge-uninstall"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Options:
    keep_gated_pods: bool = False
    keep_running_pods: bool = False
    extender_deployment: str | None = None  # scaled to 0 first (the chart's hook names it)
    wait_seconds: float = 120.0  # for the bridge's leader to stop


class Uninstall:
    def __init__(self, settings: Settings, kube: k8s.UninstallKube,
                 slurm: slurm_side.UninstallSlurm, believe: OwnerTrust, *, report: Report,
                 options: Options) -> None:
        self._kube, self._slurm, self._believe = kube, slurm, believe
        self._report, self._options = report, options
        c = settings.controllers
        self._namespace, self._lease, self._feature = c.lease_namespace, c.lease_name, \
            c.external_node_feature
        self._elector = LeaderElector(kube, namespace=self._namespace, name=self._lease,
                                      identity=IDENTITY, lease_seconds=c.lease_seconds)
        self._lease_seconds = c.lease_seconds
        self._lease_found = False  # the bridge's leader Lease existed before this run

    async def run(self) -> None:
        try:
            await self._slurm.ping()
        except Exception as exc:
            raise Failure(f"cannot reach slurmrestd: {exc}. Nothing was changed; run "
                          "`slurmbridge uninstall` again once it answers") from exc
        try:
            await self._stop_bridge()
        except Failure:
            raise
        except Exception as exc:
            raise Failure(f"the API server did not answer or refused: {exc}. No object of the "
                          "bridge was changed; run `slurmbridge uninstall` again once it "
                          "answers (its RBAC: docs/install.md)") from exc
        async with self._leading():
            await self._steps()

    async def _steps(self) -> None:
        report, kube, slurm = self._report, self._kube, self._slurm
        pods = await self._step("reading the bridge's pods", k8s.bridge_pods(kube))
        kept = await self._step("deleting pods", k8s.remove_pods(
            kube, pods, report, keep_gated=self._options.keep_gated_pods,
            keep_running=self._options.keep_running_pods))
        trust = JobTrust(self._believe, pods)
        await self._step("cancelling placeholders", slurm_side.cancel_placeholders(
            slurm, trust, report, {p.owner for p in kept}))
        await self._step("freeing DRA claims", k8s.free_claims(
            kube, report, {p.job_id for p in kept if p.job_id is not None}))
        await self._step("cleaning Nodes", k8s.clean_nodes(kube, report))
        await self._step("lifting drains", slurm_side.lift_drains(slurm, report, self._feature))
        await self._step("deleting external nodes",
                         slurm_side.delete_external(slurm, report, self._feature))

    async def _step(self, doing: str, work: Awaitable[T]) -> T:
        try:
            return await work
        except Exception as exc:
            done = sum(1 for a in self._report.actions if a.changes)
            raise Failure(
                f"stopped while {doing}: {exc}. {done} change(s) done (above); the rest of the "
                "bridge's objects are left: run `slurmbridge uninstall` again once slurmrestd "
                "and the API server answer") from exc

    async def _stop_bridge(self) -> None:
        self._lease_found = await k8s.lease_exists(self._kube, self._namespace, self._lease)
        name = self._options.extender_deployment
        if name:
            if self._report.acting:
                await self._kube.patch(Deployment.Scale, name, {"spec": {"replicas": 0}},
                                       namespace=self._namespace, patch_type=PatchType.MERGE)
            self._report.did("stop", f"deployment {self._namespace}/{name}",
                             "scaled to 0 replicas: no bridge acts behind this command")
        if not self._report.acting:
            return
        deadline = asyncio.get_running_loop().time() + self._options.wait_seconds
        while not await self._elector.try_acquire():
            if asyncio.get_running_loop().time() > deadline:
                raise Failure(
                    f"the bridge is running: it holds Lease {self._namespace}/{self._lease}. "
                    "Stop its extender first (kubectl -n NAMESPACE scale deployment "
                    "<release>-extender --replicas=0) or pass --extender-deployment; "
                    "no object of the bridge was changed")
            await asyncio.sleep(1)

    @contextlib.asynccontextmanager
    async def _leading(self) -> AsyncIterator[None]:
        """Hold the controllers' Lease while working (renewed), then delete it."""
        if not self._report.acting:
            yield
            await self._drop_lease()
            return
        renew = asyncio.create_task(_every(self._lease_seconds / 3, self._elector.try_acquire))
        try:
            yield
        finally:
            renew.cancel()
            await asyncio.gather(renew, return_exceptions=True)
        await self._step("deleting the leader Lease", self._drop_lease())

    async def _drop_lease(self) -> None:
        """The controllers' Lease goes (said when the bridge had made it, not this run)."""
        await k8s.delete_lease(self._kube, self._namespace, self._lease, self._report,
                               "the controllers' leader election", said=self._lease_found)


async def _every(seconds: float, call: Callable[[], Awaitable[object]]) -> None:
    while True:
        await asyncio.sleep(seconds)
        with contextlib.suppress(Exception):  # the next try, or the lease just runs out
            await call()
