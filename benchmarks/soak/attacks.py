"""The adversarial tenant's cases (issue 41, cases 1-6): its seeded schedule, the victims it
picks from a snapshot, and what it sends.  Pure, so a seed names the attempts and a unit test
checks what they would send; ``adversary.py`` carries them out beside the faults.

Everything an attempt makes is named ``adv<case>-<n>`` (pods, the forged job's name, the
claim, the ephemeral container), so a violation's objects say which case caused it.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from lightkube.models.rbac_v1 import PolicyRule
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

from benchmarks.soak.invariants import LIVE_STATES, JobObs, PodObs, Snapshot
from benchmarks.soak.kubelet import JOB_NAME_LABEL
from benchmarks.soak.schedule import pick_one
from benchmarks.soak.tracker import Violation
from bridge import keys
from slurmbridge_devkit.builders.pods import PodBuilder
from slurmbridge_devkit.e2e import pod_manifest

# case -> (what the tenant tries, its variants; the n-th round of the schedule tries variant
# n modulo their count)
CASES: dict[int, tuple[str, tuple[str, ...]]] = {
    1: ("a second pod joins a placed group under a taken rank",
        ("the group's labels with rank 0", "an owner reference to another's gang Job")),
    2: ("a mixed group: a CPU launcher first, then GPU workers", ("the group's labels",)),
    3: ("a Slurm user mapped to another namespace forges a placeholder",
        ("a group owner in the comment", "a pending pod's UID in the comment")),
    4: ("a tenant labels its own ResourceClaim with an ended job's id",
        (f"label {keys.CLAIM_JOB_LABEL}",)),
    5: ("a foreign pod with NVIDIA_VISIBLE_DEVICES=all on a managed node",
        ("spec.nodeName preset", f"tolerates {keys.MANAGED_TAINT}")),
    6: ("an ephemeral container with NVIDIA_VISIBLE_DEVICES=all on a bound bridge pod",
        ("pods/ephemeralcontainers, as kubectl debug",)),
}
FIRST_SECONDS = (20.0, 30.0)  # the load has placed groups by then
GAP_SECONDS = (20.0, 35.0)  # between two attempts' starts: every case within ~3 minutes
HOLD_SECONDS = (60.0, 120.0)  # how long the tenant keeps what it made, then deletes it
FORGER = "researcher"  # a Slurm user with its own account (deploy/slurm/recipe.sh)
FORGER_ACCOUNT = "research"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
DEVICE_CLASS = "gpu.soak-adversary.slurmbridge.test"  # the plain node's own DRA driver
CASE_OF = re.compile(r"\badv([1-6])-")


class Result(StrEnum):
    REFUSED = "refused"  # the apiserver (webhook, policy, RBAC) or Slurm said no
    ADMITTED = "admitted"  # the write went through: the invariants judge what followed
    SKIPPED = "skipped"  # no victim alive
    FAILED = "failed"  # the API or Slurm was away (a fault), or the setup did not happen


@dataclass(frozen=True)
class Attack:
    at: float  # seconds after the load starts
    case: int
    variant: int
    hold: float
    pick: float  # in [0, 1): which victim, among those alive when it fires
    n: int  # its number in the run

    @property
    def name(self) -> str:
        return f"adv{self.case}-{self.n}"

    def describe(self) -> str:
        what, variants = CASES[self.case]
        return f"t+{self.at:.0f}s case {self.case} {what} ({variants[self.variant]})"


@dataclass
class Attempt:
    attack: Attack
    started: float  # seconds after the load starts
    result: Result
    detail: str
    aftermath: str = ""  # what the snapshot showed of its objects just before they went

    def describe(self) -> str:
        after = f"; before it was undone: {self.aftermath}" if self.aftermath else ""
        return (f"{self.attack.name} at t+{self.started:.0f}s: case {self.attack.case} "
                f"({CASES[self.attack.case][1][self.attack.variant]}): {self.result.value}: "
                f"{self.detail}{after}")


@dataclass
class Made:
    """What one attempt made: undone after its hold, described from a snapshot first."""

    pods: list[tuple[str, str]] = field(default_factory=list)  # (namespace, name)
    claims: list[tuple[str, str]] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)  # forged Slurm job ids

    def describe(self, snap: Snapshot | None) -> str:
        if snap is None:
            return ""
        pods = {(snap.namespace_of(p), p.name): p for p in snap.every_pod()}
        jobs = {j.job_id: j for j in snap.jobs}
        claims = {(c.namespace, c.name): c for c in snap.claims}
        told = []
        for key in self.pods:
            pod = pods.get(key)
            told.append(f"pod {key[1]} gone" if pod is None else
                        f"pod {key[1]} {pod.phase} on {pod.node or '(no node)'}"
                        + (f" (job {pod.job_id} on {pod.slurm_node}, GPUs {list(pod.gpu_ids)})"
                           if pod.job_id else ""))
        for job_id in self.jobs:
            job = jobs.get(job_id)
            inside = sorted(p.name for p in snap.every_pod() if p.job_id == job_id)
            told.append(f"job {job_id} {job.state if job else 'not listed'}, pods in it: "
                        f"{inside or 'none'}")
        for key in self.claims:
            claim = claims.get(key)
            told.append(f"claim {key[1]} gone" if claim is None else
                        f"claim {key[1]} allocated {list(claim.devices) or 'nothing'}"
                        + (f", labelled job-id {claim.job_label}" if claim.job_label else ""))
        return "; ".join(told)


def attack_schedule(seed: int, seconds: float) -> list[Attack]:
    """Every attempt of a run of ``seconds`` at ``seed``: rounds of the six cases in a seeded
    order, variants taking turns round by round from a seeded first one."""
    rng = random.Random(f"soak-attacks-{seed}")
    first = {case: rng.randrange(len(variants)) for case, (_, variants) in CASES.items()}
    found: list[Attack] = []
    at, rounds = rng.uniform(*FIRST_SECONDS), 0
    while at < seconds:
        order = list(CASES)
        rng.shuffle(order)
        for case in order:
            if at >= seconds:
                break
            variant = (first[case] + rounds) % len(CASES[case][1])
            found.append(Attack(round(at, 1), case, variant, round(rng.uniform(*HOLD_SECONDS), 1),
                                rng.random(), len(found) + 1))
            at += rng.uniform(*GAP_SECONDS)
        rounds += 1
    return found


def cases_of(violations: list[Violation]) -> Counter[int]:
    """How many violations name an object of each case (0: none of the adversary's)."""
    return Counter(int(m[1]) if (m := CASE_OF.search(v.detail)) else 0 for v in violations)


# --- victims, from the checker's latest snapshot -------------------------------------------


def _theirs(pod: PodObs) -> bool:
    """Another tenant's (the load's) pod, not one the adversary made."""
    return not CASE_OF.match(pod.name) and not pod.deleting


def _groups(snap: Snapshot) -> dict[str, list[PodObs]]:
    found: dict[str, list[PodObs]] = {}
    for pod in snap.pods:
        if pod.group and _theirs(pod) and pod.phase not in ("Succeeded", "Failed"):
            found.setdefault(pod.group, []).append(pod)
    return found


def placed_group(snap: Snapshot, pick: float) -> tuple[str, list[PodObs]] | None:
    """A group whose members all run (GPU groups first: a shared GPU shows at once)."""
    placed = {g: ms for g, ms in _groups(snap).items() if all(m.running for m in ms)}
    gpus = sorted(g for g, ms in placed.items() if any(m.gpu_ids for m in ms))
    name = pick_one(gpus or sorted(placed), pick)
    return (name, placed[name]) if name else None


def gang_job(snap: Snapshot, pick: float) -> str | None:
    """A batch Job whose pods run as one group (the load's gang Jobs)."""
    return pick_one(sorted({p.workload for p in snap.pods
                            if p.workload and p.group and p.running and _theirs(p)}), pick)


def forge_victim(snap: Snapshot, variant: int, pick: float) -> tuple[str, int, int] | None:
    """(owner for the comment, nodes, GPUs per node) of another tenant's workload, those
    not placed yet first: a group (variant 0) or a lone pod's UID (variant 1)."""
    if variant == 0:
        groups = _groups(snap)
        waiting = sorted(g for g, ms in groups.items() if not any(m.node for m in ms))
        name = pick_one(waiting or sorted(groups), pick)
        if name is None:
            return None
        members = groups[name]
        return (f"group:{snap.namespace}/{name}", len(members),
                max(m.gpus_asked for m in members))
    lone = [p for p in snap.pods if not p.group and not p.workload and _theirs(p)
            and p.phase not in ("Succeeded", "Failed")]
    unbound = [p for p in lone if not p.node]
    pod = pick_one(sorted(unbound or lone, key=lambda p: p.name), pick)
    return (pod.uid, 1, pod.gpus_asked) if pod else None


def ended_job(snap: Snapshot) -> JobObs | None:
    """The newest job Slurm lists as ended (a placeholder's first)."""
    ended = [j for j in snap.jobs if j.state not in LIVE_STATES and j.state != "COMPLETING"]
    ours = [j for j in ended if j.owner] or ended
    return max(ours, key=lambda j: int(j.job_id), default=None)


def busy_node(snap: Snapshot, kube_nodes: dict[str, str], pick: float) -> str | None:
    """A managed Node whose Slurm node has GPUs held by running jobs (any, if none has)."""
    held = {n for j in snap.jobs if j.state == "RUNNING" for n, ids in j.gpus.items() if ids}
    busy = sorted(k for k, s in kube_nodes.items() if s in held)
    return pick_one(busy or sorted(kube_nodes), pick)


def debug_victim(snap: Snapshot, pick: float) -> PodObs | None:
    """A running bridge pod of another tenant (GPU pods first)."""
    running = sorted((p for p in snap.pods if p.running and p.job_id and _theirs(p)),
                     key=lambda p: p.name)
    return pick_one([p for p in running if p.gpu_ids] or running, pick)


# --- what the tenant sends ------------------------------------------------------------------


def rank_taken_pod(name: str, group: str, size: int, gpus: int) -> Pod:
    """A pod naming a placed group and rank 0, which a member already holds."""
    return pod_manifest(name, cpu="1", memory="512Mi", gpus=gpus, labels={
        keys.GROUP: group, keys.GROUP_SIZE: str(size), keys.GROUP_RANK: "0"})


def owner_ref_pod(name: str, job: str, uid: str) -> Pod:
    """A pod claiming to be index 0 of another's gang Job: its controller reference and the
    labels and annotation the Job controller puts on its own pods."""
    return (PodBuilder(name).memory("512Mi").owned_by("Job", job, uid=uid)
            .annotate(keys.JOB_COMPLETION_INDEX, "0")
            .labels({JOB_NAME_LABEL: job, "batch.kubernetes.io/controller-uid": uid}).build())


def mixed_group(base: str) -> list[Pod]:
    """A launcher that needs no GPU (rank 0, sent first), then two workers of one GPU each."""
    def member(rank: int, gpus: int) -> Pod:
        return pod_manifest(f"{base}-{rank}", cpu="1", memory="512Mi", gpus=gpus, labels={
            keys.GROUP: base, keys.GROUP_SIZE: "3", keys.GROUP_RANK: str(rank)})

    return [member(0, 0), member(1, 1), member(2, 1)]


def forged_sbatch(job_name: str, owner: str, nodes: int, gpus: int) -> list[str]:
    """``sbatch`` as the forger types it: the bridge's name form and owner marker, without the
    bridge's signature (bridge/slurm/signing.py: the forger has no key to make one)."""
    return ["sbatch", "--parsable", "-J", job_name, f"--comment={keys.COMMENT_OWNER}{owner}",
            "-N", str(nodes), "-c", "1", "--mem=256", "-t", "10", "-o", "/dev/null",
            *([f"--gres=gpu:{gpus}"] if gpus else []), "--wrap", "sleep 900"]


def _all_gpus(name: str = "main") -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["sleep", "3600"],
            "env": [{"name": VISIBLE, "value": "all"}]}


def foreign_pod(name: str, variant: int, kube_node: str) -> Pod:
    """A default-scheduler pod asking every GPU through its environment, on ``kube_node``
    (variant 0) or wherever kube-scheduler puts a pod tolerating the managed taint and
    asking for a node Slurm has (variant 1)."""
    container = _all_gpus() | {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    pod = PodBuilder(name).scheduler(None).containers(container)
    if variant == 0:
        return pod.node(kube_node).build()
    return pod.tolerate(keys.MANAGED_TAINT).spec(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": keys.SLURM_NODE, "operator": "Exists"}]}]}}}).build()


def debug_patch(container: str) -> dict[str, Any]:
    """The strategic-merge patch ``kubectl debug`` sends to pods/ephemeralcontainers."""
    return {"spec": {"ephemeralContainers": [_all_gpus(container)]}}


def own_claim(name: str, namespace: str) -> ResourceClaim:
    """One device of the plain node's driver, for a default-scheduler pod."""
    return cast(ResourceClaim, ResourceClaim.from_dict({
        "metadata": {"name": name, "namespace": namespace}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS, "count": 1}}]}}}))


def claimed_pod(name: str, claim: str) -> Pod:
    return (PodBuilder(name).scheduler(None).cpu("100m").memory("64Mi")
            .claim("gpu", resourceClaimName=claim).build())


def plain_node_driver(node: str, devices: int = 4) -> list[Any]:
    """What a DRA driver publishes for a Node Slurm does not manage: its class and slice."""
    device_class = DeviceClass.from_dict({"metadata": {"name": DEVICE_CLASS}, "spec": {
        "selectors": [{"cel": {"expression": f"device.driver == '{DEVICE_CLASS}'"}}]}})
    published = ResourceSlice.from_dict({
        "metadata": {"name": f"{node}-gpus"},
        "spec": {"driver": DEVICE_CLASS, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
                             for i in range(devices)]}})
    return [device_class, published]


def tenant_rules(*, own: bool) -> list[PolicyRule]:
    """What a namespace's user may do: pods (and, in the victims' namespace, debug them and
    read its Jobs); in its own namespace, its ResourceClaims."""
    rules = [PolicyRule(apiGroups=[""], resources=["pods"],
                        verbs=["get", "list", "watch", "create", "delete"])]
    if own:
        return [*rules, PolicyRule(apiGroups=["resource.k8s.io"], resources=["resourceclaims"],
                                   verbs=["get", "list", "create", "patch", "update", "delete"])]
    return [*rules,
            PolicyRule(apiGroups=[""], resources=["pods/ephemeralcontainers"],
                       verbs=["get", "patch", "update"]),
            PolicyRule(apiGroups=["batch"], resources=["jobs"], verbs=["get", "list"])]
