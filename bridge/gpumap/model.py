"""The GPU map: per Slurm node and GPU index, its holders, and every disagreement between
what Slurm allocated and what the bridge recorded.

Facts come in three kinds, each from one source: ``JobHold`` (Slurm's allocation: a job's
indices on a node), ``PodHold`` (the bridge's ``gpu-ids`` on a pod) and ``ClaimHold`` (a DRA
claim the bridge pinned).  Without Slurm's word (``kubectl slurmbridge gpus``) the pods are
the holders; with it, pods and claims are attached to the job Slurm gave the index, and any
that do not fit are flagged.  Plain types and no I/O: the CLI and the metrics both use it.
"""

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar


class Kind(StrEnum):
    """What holds a GPU index."""

    NATIVE = "native"  # a Slurm job that is not the bridge's
    PLACEHOLDER = "placeholder"  # the bridge's job, with the pods it was released to
    POD = "pod"  # a pod's record alone (Slurm not read, or Slurm gave the index no such job)
    CLAIM = "claim"  # a pinned DRA claim whose job Slurm did not give the index


class Problem(StrEnum):
    """The disagreements the map flags."""

    POD_OUTSIDE_JOB = "pod-outside-job"  # a pod's gpu-ids are not within its job's IDX
    TWO_HOLDERS = "two-holders"  # two jobs hold one index whole
    CLAIM_OUTSIDE_JOB = "claim-outside-job"  # a claim pinned on a device its job was not given


@dataclass(frozen=True, slots=True)
class Slot:
    """One GPU of a node as gres.conf declares it."""

    index: int
    type: str = ""  # a typed slice (Type=), "" untyped
    shards: int = 0  # Slurm shards declared on it


@dataclass(frozen=True, slots=True)
class JobHold:
    """Slurm's word: ``job_id`` holds ``indices`` on ``node`` (``shared``: as shards)."""

    node: str
    job_id: int
    indices: tuple[int, ...]
    user: str = ""
    owner: str = ""  # the placeholder's believed owner (pod UID, group:<ns>/<name>); "": native
    shared: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class PodHold:
    """The bridge's record on a pod: ``gpu-ids`` on its Slurm node, for its job."""

    node: str
    pod: str  # namespace/name; "" where the reader may not name it
    namespace: str  # "" for another namespace than the reader's
    job_id: int | None
    indices: tuple[int, ...]
    shared: bool = False
    kube_node: str = ""


@dataclass(frozen=True, slots=True)
class ClaimHold:
    """A DRA claim the bridge pinned for ``job_id``: its devices as indices on ``node``."""

    node: str
    claim: str  # namespace/name
    job_id: int
    indices: tuple[int, ...]


_Hold = TypeVar("_Hold", JobHold, PodHold, ClaimHold)


@dataclass(frozen=True)
class Facts:
    slots: dict[str, tuple[Slot, ...]] = field(default_factory=dict)  # Slurm node -> its GPUs
    kube_nodes: dict[str, str] = field(default_factory=dict)  # Slurm node -> Kubernetes Node
    jobs: Sequence[JobHold] = ()
    pods: Sequence[PodHold] = ()
    claims: Sequence[ClaimHold] = ()
    slurm_read: bool = True  # False: Slurm's allocation unknown, the pods' records are all


@dataclass(slots=True)
class Holder:
    kind: Kind
    job_id: int | None
    user: str = ""
    owner: str = ""
    namespace: str = ""  # the pods' namespace ("" for another namespace, or a native job)
    pods: list[str] = field(default_factory=list)  # the pods released to it ("" hidden)
    claims: list[str] = field(default_factory=list)
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Disagreement:
    problem: Problem
    node: str
    index: int
    text: str


@dataclass(slots=True)
class Gpu:
    index: int
    type: str = ""
    shards: int = 0
    holders: list[Holder] = field(default_factory=list)
    problems: list[Disagreement] = field(default_factory=list)

    @property
    def state(self) -> str:
        """free, the holder's kind, or ``disagreement``."""
        if self.problems:
            return "disagreement"
        return str(self.holders[0].kind) if self.holders else "free"


@dataclass(slots=True)
class NodeMap:
    node: str
    kube_node: str
    gpus: list[Gpu]


@dataclass(slots=True)
class GpuMap:
    nodes: list[NodeMap]

    @property
    def disagreements(self) -> list[Disagreement]:
        return [p for n in self.nodes for g in n.gpus for p in g.problems]


@dataclass(slots=True)
class _NodeFacts:
    """The facts about one node."""

    slots: tuple[Slot, ...] = ()
    jobs: list[JobHold] = field(default_factory=list)
    pods: list[PodHold] = field(default_factory=list)
    claim_holds: list[ClaimHold] = field(default_factory=list)


def build(facts: Facts) -> GpuMap:
    """Every node any fact names (its declared GPUs, and any index a fact names beyond); each
    fact is looked at with its own node's alone."""
    on: defaultdict[str, _NodeFacts] = defaultdict(_NodeFacts)
    for name, slots in facts.slots.items():
        on[name].slots = slots
    for job in facts.jobs:
        on[job.node].jobs.append(job)
    for pod in facts.pods:
        on[pod.node].pods.append(pod)
    for claim in facts.claims:
        on[claim.node].claim_holds.append(claim)
    kube = dict(facts.kube_nodes) | {p.node: p.kube_node for p in facts.pods if p.kube_node}
    return GpuMap([_node(on[name], name, kube.get(name, ""), facts.slurm_read)
                   for name in sorted(on)])


def _node(facts: _NodeFacts, node: str, kube_node: str, slurm_read: bool) -> NodeMap:
    slots = {s.index: s for s in facts.slots}
    holds: list[JobHold | PodHold | ClaimHold] = [*facts.jobs, *facts.pods, *facts.claim_holds]
    named = {i for h in holds for i in h.indices}
    gpus = [Gpu(i, slots[i].type, slots[i].shards) if i in slots else Gpu(i)
            for i in sorted(slots.keys() | named)]
    for gpu in gpus:
        _fill(facts, node, gpu, slurm_read)
    return NodeMap(node, kube_node, gpus)


def _on(holds: Iterable[_Hold], index: int) -> list[_Hold]:
    return [h for h in holds if index in h.indices]


def _fill(facts: _NodeFacts, node: str, gpu: Gpu, slurm_read: bool) -> None:
    by_job: dict[int | None, Holder] = {}
    for job in _on(facts.jobs, gpu.index):
        kind = Kind.PLACEHOLDER if job.owner else Kind.NATIVE
        by_job[job.job_id] = Holder(kind, job.job_id, job.user, job.owner,
                                    shared=gpu.index in job.shared)
    slurm_jobs = set(by_job)
    for pod in _on(facts.pods, gpu.index):
        if slurm_read and pod.job_id not in slurm_jobs:
            gpu.problems.append(_outside(node, gpu.index, pod, facts.jobs))
        holder = by_job.setdefault(pod.job_id, Holder(Kind.POD, pod.job_id, shared=pod.shared))
        holder.pods.append(pod.pod)
        holder.namespace = holder.namespace or pod.namespace
    for claim in _on(facts.claim_holds, gpu.index):
        if slurm_read and claim.job_id not in slurm_jobs:
            given = sorted(j for j in slurm_jobs if j is not None)
            gpu.problems.append(Disagreement(
                Problem.CLAIM_OUTSIDE_JOB, node, gpu.index,
                f"claim {claim.claim} is pinned to GPU {gpu.index} for job {claim.job_id}, but "
                f"Slurm gave it {_jobs_text(given)}"))
        holder = by_job.setdefault(claim.job_id, Holder(Kind.CLAIM, claim.job_id))
        holder.claims += [claim.claim]
    gpu.holders = sorted(by_job.values(), key=lambda h: h.job_id or 0)
    whole = [h for h in gpu.holders if not h.shared]
    if len(gpu.holders) > 1 and whole:
        gpu.problems.append(Disagreement(
            Problem.TWO_HOLDERS, node, gpu.index,
            f"GPU {gpu.index} has {len(gpu.holders)} holders, "
            f"{len(whole)} of them whole: {', '.join(_holder_text(h) for h in gpu.holders)}"))


def _outside(node: str, index: int, pod: PodHold, jobs: Sequence[JobHold]) -> Disagreement:
    given = next((j.indices for j in jobs if j.job_id == pod.job_id), None)
    slurm = ("no such job on this node" if given is None
             else f"IDX {','.join(map(str, given)) or 'none'}")
    return Disagreement(
        Problem.POD_OUTSIDE_JOB, node, index,
        f"pod {pod.pod or 'in another namespace'} says GPU {index} for job {pod.job_id}; "
        f"Slurm: {slurm}")


def _jobs_text(ids: Sequence[int]) -> str:
    return "no job" if not ids else "job " + ", ".join(map(str, ids))


def _holder_text(holder: Holder) -> str:
    share = " (shards)" if holder.shared else ""
    return f"{holder.kind} job {holder.job_id}{share}"
