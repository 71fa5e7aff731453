"""The reason of a Slurm drain the bridge sets, written for the Slurm admin who reads it.

A node whose kubelet stopped answering may still run the containers of its pods: their jobs
are kept (the GPUs stay taken) and the drain names them.  A pod deleted meanwhile (force
delete, or the pod GC after the Node was deleted) has its job cancelled, though its
containers may still run on the host: the drain keeps its name, from its own earlier text,
so a new leader or a later round still says so.  Only the bridge's own drains are read or
rewritten (prefix ``slurmbridge:``).
"""

import re

from bridge import keys

CORDONED = f"{keys.DRAIN_REASON_PREFIX} cordoned in Kubernetes"
NOT_READY = f"{keys.DRAIN_REASON_PREFIX} Kubernetes node NotReady"
NODE_DELETED = (f"{keys.DRAIN_REASON_PREFIX} Kubernetes node deleted; resume the Slurm node "
                "once the host runs none of the deleted pods' containers")
STILL_RUNNING = "may still run, jobs kept"
DELETED = "deleted, jobs cancelled, containers may remain"
MAX_NAMED = 5  # pods named per list: Slurm shows the reason on one line

_NAMED = re.compile(r"([a-z0-9][-a-z0-9.]*/[a-z0-9][-a-z0-9.]*) \(job (\d+)\)")


def ours(reason: str) -> bool:
    return reason.startswith(keys.DRAIN_REASON_PREFIX)


def not_ready(running: dict[str, int], before: str) -> str:
    """``running``: pod (ns/name) → job id of the bridge's pods on the node whose containers
    were not seen stopped.  ``before``: the node's current reason."""
    gone = {pod: job for pod, job in named(before).items() if pod not in running}
    return _with(NOT_READY, (STILL_RUNNING, running), (DELETED, gone))


def node_deleted(before: str) -> str:
    """The Node is gone, and with it (pod GC) its pods: every pod named before was deleted."""
    return _with(NODE_DELETED, (DELETED, named(before)))


def named(reason: str) -> dict[str, int]:
    """The pods (→ job id) a reason of the bridge's names; none in anyone else's."""
    if not ours(reason):
        return {}
    return {pod: int(job) for pod, job in _NAMED.findall(reason)}


def _with(head: str, *lists: tuple[str, dict[str, int]]) -> str:
    return "; ".join([head, *(f"{label}: {_names(pods)}" for label, pods in lists if pods)])


def _names(pods: dict[str, int]) -> str:
    shown = sorted(pods.items())
    text = ", ".join(f"{pod} (job {job})" for pod, job in shown[:MAX_NAMED])
    return text + (f", +{len(shown) - MAX_NAMED} more" if len(shown) > MAX_NAMED else "")

