"""What ``slurmbridge uninstall`` removes from Slurm: only what the bridge itself put there.

- its placeholders: live jobs whose owner marker the bridge believes, as its job index does
  (``bridge/placement/trust.py``: its signature, and the user the owner's namespace runs as);
  a tenant's job carrying a forged marker is left, and said so;
- its drains (reason ``slurmbridge:``): resumed; anyone else's drain stays;
- the external nodes it registered (state EXTERNAL with ``controllers.external_node_feature``):
  deleted once their jobs are gone; an admin's own dynamic nodes stay.
"""

import asyncio
from collections.abc import Collection
from typing import Protocol

from bridge.controllers.drains import ours
from bridge.jobs.owner import Owner
from bridge.placement.trust import JobTrust
from bridge.slurm.errors import SlurmRejected
from bridge.slurm.types import SlurmJob, SlurmNode
from slurmbridge_cli.uninstall_report import Report

DELETE_TRIES = 10  # an external node whose cancelled jobs still complete: a second each


class UninstallSlurm(Protocol):
    async def ping(self) -> None: ...
    async def list_jobs(self) -> list[SlurmJob]: ...
    async def cancel(self, job_id: int) -> None: ...
    async def list_nodes(self) -> list[SlurmNode]: ...
    async def resume(self, node: str) -> None: ...
    async def delete_node(self, node: str) -> None: ...


async def cancel_placeholders(slurm: UninstallSlurm, trust: JobTrust, report: Report,
                              kept: Collection[Owner]) -> None:
    """Cancel the bridge's live placeholders, but those of pods left running (``kept``)."""
    for job in sorted(await slurm.list_jobs(), key=lambda j: j.job_id):
        if job.owner is None or not job.state.is_live:
            continue
        what = f"slurm job {job.job_id} ({job.name})"
        if trust.screened(job).owner is None:
            report.leave(what, f"of user {job.user}: its comment names {job.owner} without the "
                         "bridge's signature for this user, not one of its placeholders")
        elif job.owner in kept:
            report.leave(what, "its pod runs on (--keep-running-pods): scancel it once the "
                         "pod has ended")
        else:
            if report.acting:
                await slurm.cancel(job.job_id)
            report.did("cancel", what, f"the bridge's placeholder for {job.owner} "
                       f"({job.state_text})")


async def lift_drains(slurm: UninstallSlurm, report: Report, feature: str) -> None:
    """Resume the nodes the bridge drained (its external nodes are deleted instead)."""
    for node in sorted(await slurm.list_nodes(), key=lambda n: n.name):
        if "DRAIN" not in node.states or is_external(node, feature):
            continue
        what = f"slurm node {node.name}"
        if not ours(node.reason):
            report.leave(what, f"drained by someone else: {node.reason!r}")
            continue
        if report.acting:
            await slurm.resume(node.name)
        report.did("resume", what, f"the bridge's drain {node.reason!r}")


async def delete_external(slurm: UninstallSlurm, report: Report, feature: str) -> None:
    """Delete the external nodes the bridge registered, once no job holds them."""
    for node in sorted(await slurm.list_nodes(), key=lambda n: n.name):
        if not is_external(node, feature):
            continue
        what = f"slurm node {node.name}"
        why = f"an external node the bridge registered (feature {feature})"
        if not report.acting:
            report.did("delete", what, why)
            continue
        error = await _delete_node(slurm, node.name)
        if error:
            report.leave(what, f"{why}, which Slurm will not delete yet: {error}; run "
                         "`slurmbridge uninstall` again once its jobs are gone")
        else:
            report.did("delete", what, why)


def is_external(node: SlurmNode, feature: str) -> bool:
    return "EXTERNAL" in node.states and feature in node.features


async def _delete_node(slurm: UninstallSlurm, name: str) -> str:
    """Delete the node, waiting a little for jobs still completing there ("": deleted)."""
    error = ""
    for _ in range(DELETE_TRIES):
        try:
            await slurm.delete_node(name)
            return ""
        except SlurmRejected as exc:
            error = str(exc)
            await asyncio.sleep(1)
    return error
