"""What must hold (issue 25 item 2), judged on one snapshot read from outside the bridge.

Each check returns suspects, not verdicts: a snapshot is two reads (Slurm, then the pods) that
are not one instant, and the bridge needs time to act on what a fault did.  ``tracker`` turns
a suspect that lasts past its bound into a violation.  Bounds, by class:

* ``STRICT``: nothing excuses it; it must only survive two consecutive snapshots (which rules
  out the gap between the two reads of one snapshot).
* ``EVICT``: a placeholder the harness itself cancelled or requeued: Slurm freed its node
  and GPUs at once, the bridge can only evict the pod (a poll, a confirming read, the
  eviction, the kubelet's stop).
* ``ORPHAN``, ``DUPLICATE``, ``SILENT``: the bridge's own grace periods plus slack.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum

# Slurm states in which a job holds, or may yet hold, resources (COMPLETING is on its way out).
LIVE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
    "RESIZING",
})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class Bound(StrEnum):
    STRICT = "strict"
    EVICT = "evict"
    ORPHAN = "orphan"
    DUPLICATE = "duplicate"
    SILENT = "silent"


# Seconds of time the bridge could act (tracker.healthy_seconds) a suspect may last.  The
# bridge runs with the dev kit's test timings: poll 1 s, controllers 1 s, lease 6 s, orphan
# grace 20 s, resync 30 s, notify_quiet 10 s (slurmbridge_devkit/stack.py).
BOUND_SECONDS: dict[Bound, float] = {
    Bound.STRICT: 0.0,
    Bound.EVICT: 30.0,  # poll + confirming read + eviction + the kubelet's 2 s stop, slack
    Bound.ORPHAN: 45.0,  # the orphan grace 20 s + controllers' rounds and slack
    Bound.DUPLICATE: 45.0,  # the resync interval 30 s + 15 s
    Bound.SILENT: 60.0,  # notify_quiet 10 s + reason refresh 10 s + slack
}


@dataclass(frozen=True)
class JobObs:
    """One Slurm job as ``scontrol show job -d -o`` shows it."""

    job_id: str
    name: str
    state: str
    user: str
    owner: str  # the bridge's comment marker value ("" for a native job)
    nodes: tuple[str, ...] = ()
    gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)  # whole GPUs
    # node -> GPU index -> (shards the job holds of it, shards it has): GPUs it shares.
    shards: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def gpus_on(self, node: str) -> list[int]:
        """The GPUs a pod of this job on ``node`` is told: whole ones and those it shares."""
        return sorted({*self.gpus.get(node, ()), *self.shards.get(node, {})})


@dataclass(frozen=True)
class PodObs:
    """One pod of the soak's namespace as the apiserver shows it."""

    name: str
    uid: str
    created: float  # epoch seconds
    phase: str = "Pending"
    node: str = ""  # spec.nodeName
    slurm_node: str = ""  # the Binding's slurmbridge.io/slurm-node
    job_id: str = ""
    gpu_ids: tuple[int, ...] = ()
    shards: int = 0  # slurmbridge.io/gpu-shards: gpu_ids are shared, this many shards each
    group: str = ""
    deleting: bool = False
    told_why: bool = False  # a SlurmPending event or a SlurmJobAllocated condition

    @property
    def running(self) -> bool:
        """Its containers may run (the harness's kubelet stops them by setting a terminal phase)."""
        return self.phase == "Running"

    def owner(self, namespace: str) -> str:
        return f"group:{namespace}/{self.group}" if self.group else self.uid


@dataclass(frozen=True)
class Snapshot:
    at: float  # epoch seconds
    namespace: str
    pods: tuple[PodObs, ...]
    jobs: tuple[JobObs, ...]

    def placeholders(self) -> list[JobObs]:
        prefix = f"k8s:{self.namespace}/"
        return [j for j in self.jobs if j.owner and j.name.startswith(prefix)]


@dataclass(frozen=True)
class Suspect:
    invariant: str
    key: str  # the same broken thing in two snapshots has the same key
    bound: Bound
    detail: str
    since: float | None = None  # epoch seconds it started, when known (else: first seen)


def check_all(snap: Snapshot, faulted_jobs: frozenset[str]) -> list[Suspect]:
    """Every invariant on ``snap``; ``faulted_jobs``: placeholders the harness cancelled or
    requeued itself."""
    return [
        *bound_where_job_runs(snap, faulted_jobs),
        *running_with_live_job(snap, faulted_jobs),
        *gpu_held_once(snap, faulted_jobs),
        *no_orphan_placeholder(snap),
        *one_job_per_owner(snap),
        *placed_or_told(snap),
    ]


def _by_id(snap: Snapshot) -> dict[str, JobObs]:
    return {j.job_id: j for j in snap.jobs}


def _pod_bound(pod: PodObs) -> bool:
    return bool(pod.node) and pod.phase not in TERMINAL_PHASES and not pod.deleting


def bound_where_job_runs(snap: Snapshot, faulted: frozenset[str]) -> list[Suspect]:
    """No pod bound to a node (or GPUs) its job does not hold."""
    jobs, out = _by_id(snap), []
    for pod in snap.pods:
        if not _pod_bound(pod):
            continue
        job = jobs.get(pod.job_id)
        if not pod.job_id or job is None or job.state != "RUNNING":
            continue  # judged by running_with_live_job once the kubelet runs it
        if pod.slurm_node in job.nodes and sorted(pod.gpu_ids) == job.gpus_on(pod.slurm_node):
            continue
        out.append(Suspect(
            "pod bound to a node its job does not hold", f"bound:{pod.uid}:{job.job_id}",
            Bound.EVICT if job.job_id in faulted else Bound.STRICT,
            f"pod {pod.name} on {pod.node} ({pod.slurm_node}, GPUs {list(pod.gpu_ids)}); job "
            f"{job.job_id} RUNNING on {list(job.nodes)} with GPUs {job.gpus}"
            + (f", shards {job.shards}" if job.shards else ""),
        ))
    return out


def running_with_live_job(snap: Snapshot, faulted: frozenset[str]) -> list[Suspect]:
    """No pod running without a live (RUNNING) job."""
    jobs, out = _by_id(snap), []
    for pod in snap.pods:
        if not pod.running:
            continue
        job = jobs.get(pod.job_id)
        if job is not None and job.state == "RUNNING":
            continue
        state = job.state if job is not None else "not in Slurm"
        out.append(Suspect(
            "pod running without a live job", f"running:{pod.uid}:{pod.job_id}",
            Bound.EVICT if pod.job_id in faulted else Bound.STRICT,
            f"pod {pod.name} Running on {pod.node}{' (deleting)' if pod.deleting else ''}; "
            f"job {pod.job_id or '(none recorded)'} {state}",
        ))
    return out


def gpu_held_once(snap: Snapshot, faulted: frozenset[str]) -> list[Suspect]:
    """No GPU index of a node held beyond what Slurm allows at once: whole by two running
    things (pods or jobs), whole by one and by shards of another, or by more shards than it
    has.  A running pod holds its GPUs as its job did when it was bound, whatever Slurm says
    now."""
    jobs = _by_id(snap)
    whole: dict[tuple[str, int], set[str]] = defaultdict(set)
    shared: dict[tuple[str, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    excused: set[str] = set()
    for job in snap.jobs:
        if job.state == "RUNNING":
            who = f"job {job.job_id} ({job.name}, {job.user})"
            for node, indices in job.gpus.items():
                for idx in indices:
                    whole[(node, idx)].add(who)
            for node, counts in job.shards.items():
                for idx, share in counts.items():
                    shared[(node, idx)][who] = share
    for pod in snap.pods:
        if not pod.running or not pod.gpu_ids:
            continue
        own = jobs.get(pod.job_id)
        if own is not None and own.state == "RUNNING" and (
                own.gpus_on(pod.slurm_node) == sorted(pod.gpu_ids)):
            continue  # its job's own entry stands for it
        who = f"pod {pod.name} (job {pod.job_id}, no longer holding them)"
        if pod.job_id in faulted:
            excused.add(who)
        for idx in pod.gpu_ids:
            if pod.shards:
                shared[(pod.slurm_node, idx)][who] = (pod.shards, 0)  # its GPU's total unknown
            else:
                whole[(pod.slurm_node, idx)].add(who)
    out = []
    for (node, idx) in sorted(whole.keys() | shared.keys()):
        shares = shared.get((node, idx), {})
        totals = [total for _, total in shares.values() if total]
        over = bool(totals) and sum(held for held, _ in shares.values()) > min(totals)
        names = whole.get((node, idx), set()) | set(shares)
        if len(whole.get((node, idx), ())) + (1 if shares else 0) > 1 or over:
            held = "".join(f"; {who}: {n} shards" for who, (n, _) in sorted(shares.items()))
            out.append(Suspect(
                "two running things on one GPU", f"gpu:{node}:{idx}:{'|'.join(sorted(names))}",
                Bound.EVICT if names & excused else Bound.STRICT,
                f"{node} GPU {idx} held by {sorted(names)}"
                + (f" (of {min(totals)} shards{held})" if totals else held),
            ))
    return out


def no_orphan_placeholder(snap: Snapshot) -> list[Suspect]:
    """No placeholder alive without a pod that may still run (past the orphan grace)."""
    owners = {p.owner(snap.namespace) for p in snap.pods
              if p.phase not in TERMINAL_PHASES and not (p.deleting and not p.running)}
    return [
        Suspect("placeholder alive without its pod", f"orphan:{job.job_id}", Bound.ORPHAN,
                f"job {job.job_id} ({job.name}) {job.state}, owner {job.owner}: no live pod")
        for job in snap.placeholders() if job.live and job.owner not in owners
    ]


def one_job_per_owner(snap: Snapshot) -> list[Suspect]:
    """At most one live job per owner (after a resync interval)."""
    per_owner: dict[str, list[str]] = defaultdict(list)
    for job in snap.placeholders():
        if job.live:
            per_owner[job.owner].append(job.job_id)
    return [
        Suspect("more than one live job for one owner", f"dup:{owner}:{','.join(ids)}",
                Bound.DUPLICATE, f"owner {owner}: jobs {ids}")
        for owner, ids in sorted(per_owner.items()) if len(ids) > 1
    ]


def placed_or_told(snap: Snapshot) -> list[Suspect]:
    """Every pod bound, or showing Slurm's reason, within SILENT's bound of its creation."""
    return [
        Suspect("pod neither bound nor told why", f"silent:{pod.uid}", Bound.SILENT,
                f"pod {pod.name} unbound, no SlurmPending event or condition", since=pod.created)
        for pod in snap.pods
        if not pod.node and not pod.deleting and not pod.told_why
        and pod.phase not in TERMINAL_PHASES
    ]
