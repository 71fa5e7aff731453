"""What must hold (issue 25 item 2; issue 41 item 9 for what a hostile tenant may try: no
two running things on one GPU index, a foreign pod's or an ephemeral container's own
NVIDIA_VISIBLE_DEVICES included; no pod running in a job its namespace does not own; no
allocation cleared under a running pod; one pod a seat; the GPUs a pod asked for), judged on
one snapshot read from outside the bridge.

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
from collections.abc import Mapping
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
    namespace: str = ""  # "": the snapshot's own
    # NVIDIA_VISIBLE_DEVICES as a container (ephemeral ones included) sets it itself, not from
    # the bridge's annotation: (container, value).  "all" names every GPU of the node.
    visible: tuple[tuple[str, str], ...] = ()
    gpus_asked: int = 0  # slurmbridge.io/gpus: the whole GPUs the webhook moved out of it
    claims: tuple[str, ...] = ()  # the ResourceClaims it uses, in its namespace
    workload: str = ""  # its batch Job (batch.kubernetes.io/job-name), if any

    @property
    def running(self) -> bool:
        """Its containers may run (the harness's kubelet stops them by setting a terminal phase)."""
        return self.phase == "Running"

    def owner(self, namespace: str) -> str:
        return f"group:{namespace}/{self.group}" if self.group else self.uid


@dataclass(frozen=True)
class ClaimObs:
    """One DRA ResourceClaim as the apiserver shows it."""

    namespace: str
    name: str
    devices: tuple[str, ...] = ()  # "pool/device" allocated; empty: no allocation
    job_label: str = ""  # slurmbridge.io/job-id, the label the bridge frees by


@dataclass(frozen=True)
class Snapshot:
    at: float  # epoch seconds
    namespace: str
    pods: tuple[PodObs, ...]
    jobs: tuple[JobObs, ...]
    # Pods of other namespaces looked at (a tenant's who is not the bridge's): judged only by
    # what they may take from the bridge's (GPUs, claims, jobs).
    others: tuple[PodObs, ...] = ()
    claims: tuple[ClaimObs, ...] = ()
    node_gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # Slurm node's GPUs
    tenants: Mapping[str, str] = field(default_factory=dict)  # namespace -> its Slurm user

    def placeholders(self) -> list[JobObs]:
        prefix = f"k8s:{self.namespace}/"
        return [j for j in self.jobs if j.owner and j.name.startswith(prefix)]

    def every_pod(self) -> tuple[PodObs, ...]:
        return self.pods + self.others

    def namespace_of(self, pod: PodObs) -> str:
        return pod.namespace or self.namespace


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
        *job_of_its_tenant(snap),
        *allocation_kept(snap),
        *one_pod_per_seat(snap),
        *gpus_as_asked(snap),
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


@dataclass
class _Holdings:
    """Who holds each GPU index of each node: whole, or by shards (held, of the GPU's)."""

    whole: dict[tuple[str, int], set[str]] = field(default_factory=lambda: defaultdict(set))
    shared: dict[tuple[str, int], dict[str, tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(dict))
    excused: set[str] = field(default_factory=set)

    def job(self, job: JobObs) -> None:
        who = f"job {job.job_id} ({job.name}, {job.user})"
        for node, indices in job.gpus.items():
            for idx in indices:
                self.whole[(node, idx)].add(who)
        for node, counts in job.shards.items():
            for idx, share in counts.items():
                self.shared[(node, idx)][who] = share

    def stale_pod(self, pod: PodObs, excused: bool) -> None:
        """A running pod whose job no longer holds the GPUs it was told."""
        who = f"pod {pod.name} (job {pod.job_id}, no longer holding them)"
        if excused:
            self.excused.add(who)
        for idx in pod.gpu_ids:
            if pod.shards:
                self.shared[(pod.slurm_node, idx)][who] = (pod.shards, 0)  # total unknown
            else:
                self.whole[(pod.slurm_node, idx)].add(who)

    def suspects(self) -> list[Suspect]:
        out = []
        for (node, idx) in sorted(self.whole.keys() | self.shared.keys()):
            shares = self.shared.get((node, idx), {})
            totals = [total for _, total in shares.values() if total]
            over = bool(totals) and sum(held for held, _ in shares.values()) > min(totals)
            names = self.whole.get((node, idx), set()) | set(shares)
            if len(self.whole.get((node, idx), ())) + (1 if shares else 0) <= 1 and not over:
                continue
            held = "".join(f"; {who}: {n} shards" for who, (n, _) in sorted(shares.items()))
            out.append(Suspect(
                "two running things on one GPU", f"gpu:{node}:{idx}:{'|'.join(sorted(names))}",
                Bound.EVICT if names & self.excused else Bound.STRICT,
                f"{node} GPU {idx} held by {sorted(names)}"
                + (f" (of {min(totals)} shards{held})" if totals else held),
            ))
        return out


def visible_gpus(pod: PodObs, node_gpus: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The GPUs of its node a pod's own NVIDIA_VISIBLE_DEVICES names: ``all`` (or names the
    runtime resolves, such as UUIDs) every one of them, ``none``/``void``/empty none."""
    every = node_gpus.get(pod.slurm_node, ())
    found: set[int] = set()
    for _, value in pod.visible:
        for token in filter(None, (t.strip() for t in value.split(","))):
            if token in ("none", "void"):
                continue
            if token.isdigit():
                found.add(int(token))
            else:
                return every
    return tuple(sorted(found))


def gpu_held_once(snap: Snapshot, faulted: frozenset[str]) -> list[Suspect]:
    """No GPU index of a node held beyond what Slurm allows at once: whole by two running
    things (pods or jobs), whole by one and by shards of another, or by more shards than it
    has.  A running pod holds its GPUs as its job did when it was bound, whatever Slurm says
    now; two pods of one job on one index are two things; a pod whose containers (ephemeral
    ones too) set NVIDIA_VISIBLE_DEVICES themselves on a Slurm node hold what it names
    (``all``: every GPU of the node), whoever's pod it is."""
    jobs, held = _by_id(snap), _Holdings()
    for job in snap.jobs:
        if job.state == "RUNNING":
            held.job(job)
    seats: dict[tuple[str, int, str], list[str]] = defaultdict(list)
    for pod in snap.every_pod():
        if not pod.running:
            continue
        own = jobs.get(pod.job_id)
        if pod.gpu_ids and own is not None and own.state == "RUNNING" and (
                own.gpus_on(pod.slurm_node) == sorted(pod.gpu_ids)):
            for idx in pod.gpu_ids:  # its job's own entry stands for it, once
                seats[(pod.slurm_node, idx, own.job_id)].append(pod.name)
        elif pod.gpu_ids:
            held.stale_pod(pod, excused=pod.job_id in faulted)
        if pod.slurm_node and pod.visible:
            setters = ", ".join(f"{c}: NVIDIA_VISIBLE_DEVICES={v}" for c, v in pod.visible)
            for idx in sorted(set(visible_gpus(pod, snap.node_gpus)) - set(pod.gpu_ids)):
                held.whole[(pod.slurm_node, idx)].add(f"pod {pod.name} ({setters})")
    for (node, idx, job_id), names in seats.items():
        if len(names) > 1:
            held.whole[(node, idx)].update(f"pod {n} (of job {job_id})" for n in names)
    return held.suspects()


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


def job_of_its_tenant(snap: Snapshot) -> list[Suspect]:
    """No pod running in a job its namespace does not own: the job's Slurm user is the one
    the tenancy maps the pod's namespace to (``tenants``; a namespace not listed is not
    judged)."""
    jobs, out = _by_id(snap), []
    for pod in snap.every_pod():
        want = snap.tenants.get(snap.namespace_of(pod))
        job = jobs.get(pod.job_id)
        if not pod.running or want is None or job is None or job.user == want:
            continue
        out.append(Suspect(
            "pod running in a job its namespace does not own", f"tenant:{pod.uid}:{job.job_id}",
            Bound.STRICT,
            f"pod {snap.namespace_of(pod)}/{pod.name} (its namespace runs as Slurm user {want}) "
            f"runs in job {job.job_id} ({job.name}, user {job.user}, owner {job.owner or '-'})",
        ))
    return out


def allocation_kept(snap: Snapshot) -> list[Suspect]:
    """No allocation cleared under a running pod: every ResourceClaim a running pod uses is
    there and allocated (kube-scheduler, or the bridge, allocated it before the pod bound)."""
    claims = {(c.namespace, c.name): c for c in snap.claims}
    out = []
    for pod in snap.every_pod():
        if not pod.running:
            continue
        ns = snap.namespace_of(pod)
        for name in pod.claims:
            claim = claims.get((ns, name))
            if claim is not None and claim.devices:
                continue
            state = "gone" if claim is None else "without an allocation" + (
                f" (labelled job-id {claim.job_label})" if claim.job_label else "")
            out.append(Suspect(
                "allocation cleared under a running pod", f"claim:{ns}/{name}:{pod.uid}",
                Bound.STRICT, f"pod {ns}/{pod.name} Running on {pod.node}; its claim "
                f"{ns}/{name} {state}",
            ))
    return out


def one_pod_per_seat(snap: Snapshot) -> list[Suspect]:
    """No two running pods in one seat of a job: each pod of a job has a node of the job's
    to itself (a group's members one per node, by rank); a pod being deleted is not
    counted (its containers are stopping)."""
    seats: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in snap.every_pod():
        if pod.running and pod.job_id and pod.slurm_node and not pod.deleting:
            seats[(pod.job_id, pod.slurm_node)].append(pod.name)
    return [
        Suspect("two running pods in one seat of a job", f"seat:{job}:{node}:{'|'.join(names)}",
                Bound.STRICT, f"job {job} on {node}: pods {sorted(names)}")
        for (job, node), names in sorted(seats.items()) if len(names) > 1
    ]


def gpus_as_asked(snap: Snapshot) -> list[Suspect]:
    """Every running pod was told as many whole GPUs as it asked for (the webhook's
    ``slurmbridge.io/gpus``): never fewer, or none, because its group's job was built from
    another member's ask."""
    return [
        Suspect("pod running without the GPUs it asked for", f"asked:{pod.uid}", Bound.STRICT,
                f"pod {pod.name} on {pod.node} asked for {pod.gpus_asked} GPUs, was told "
                f"{list(pod.gpu_ids)} (job {pod.job_id or '(none recorded)'})")
        for pod in snap.pods
        if pod.running and pod.gpus_asked and not pod.shards
        and len(pod.gpu_ids) != pod.gpus_asked
    ]
