"""A pod's own placement rules weighed against Slurm's choice of node.

The bridge pins each pod to the node Slurm allocated (bridge/link/gate.py), so
kube-scheduler checks the pod's rules on that one node only: a spread then has a single
domain and always holds, an affinity to other pods either holds by chance or leaves the pod
pending while its job holds the node.  So each hard rule is kept through what Slurm does
(a group's members each get their own node; ``slurmbridge.io/switches`` or ``segment``
keep a group within one switch or block) or refused, saying what would keep it.  Soft
rules (``ScheduleAnyway``, ``preferred...``) are admitted with a warning: Slurm does not
weigh them.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from admission.pod import PodAffinity, PodShape
from bridge import keys
from bridge.jobs.request import JobRequest, TopologyAsk

HOSTNAME = "kubernetes.io/hostname"
_SLURM_CHOOSES = "Slurm chooses the node of every slurmbridge pod"
_GROUPS = "docs/workloads.md"


@dataclass(slots=True)
class Verdict:
    """The first hard rule Slurm cannot keep (None: all kept), and the soft rules it ignores."""

    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Pod:
    group_size: int | None  # None: a pod with a node of its own only by chance
    topology: TopologyAsk | None

    def keeps_one_unit(self) -> bool:
        """Slurm keeps the group within one leaf switch, or within one block."""
        ask = self.topology
        return ask is not None and (ask.switches == 1 or ask.segment == self.group_size)


_Check = Callable[[str, str, _Pod], str | None]


def placement_rules(pod: PodShape, job: JobRequest) -> Verdict:
    """Which of ``pod``'s spreads and pod (anti-)affinities Slurm keeps with ``job``, the
    pod's placeholder (a group's: one node per member)."""
    shape = _Pod(job.nodes if job.nodes > 1 else None, job.placement.topology)
    verdict = Verdict()
    spreads = pod.spec.topology_spread_constraints or []
    for i, spread in enumerate(spreads):
        where = f"spec.topologySpreadConstraints[{i}] (topologyKey {spread.topology_key})"
        if spread.when_unsatisfiable == "ScheduleAnyway":
            verdict.warnings.append(f"{where} is not applied: {_SLURM_CHOOSES} and does not "
                                    "weigh preferences")
        elif verdict.refusal is None:
            verdict.refusal = _spread(where, spread.topology_key, shape)
    affinity = pod.spec.affinity
    if affinity is not None:
        for kind, rules, check in (
            ("podAffinity", affinity.pod_affinity, _together),
            ("podAntiAffinity", affinity.pod_anti_affinity, _apart),
        ):
            _terms(verdict, f"spec.affinity.{kind}", rules, shape, check)
    return verdict


def _terms(verdict: Verdict, where: str, rules: PodAffinity | None, shape: _Pod,
           check: _Check) -> None:
    if rules is None:
        return
    if rules.preferred:
        verdict.warnings.append(f"{where}.preferredDuringSchedulingIgnoredDuringExecution is "
                                f"not applied: {_SLURM_CHOOSES} and does not weigh preferences")
    for i, term in enumerate(rules.required or []):
        if verdict.refusal is None:
            at = (f"{where}.requiredDuringSchedulingIgnoredDuringExecution[{i}] "
                  f"(topologyKey {term.topology_key})")
            verdict.refusal = check(at, term.topology_key, shape)


def _spread(where: str, key: str, shape: _Pod) -> str | None:
    if key == HOSTNAME:
        return _apart(where, key, shape)
    return (
        f"{where} cannot be kept: {_SLURM_CHOOSES} and never spreads pods over "
        f"{'its topology units' if _topology_key(key) else key}; remove it, or set "
        "whenUnsatisfiable: ScheduleAnyway"
    )


def _apart(where: str, key: str, shape: _Pod) -> str | None:
    """Apart by node: a group's members each get a node of their own."""
    if key == HOSTNAME and shape.group_size is not None:
        return None
    if key == HOSTNAME:
        return (
            f"{where} cannot be kept: {_SLURM_CHOOSES}, and separate pods are separate Slurm "
            f"jobs that may share a node; make the pods one group ({_GROUPS}), whose members "
            "each get a node of their own, or remove the rule"
        )
    return (
        f"{where} cannot be kept: {_SLURM_CHOOSES} and keeps pods apart only by node (the "
        f"members of one group, {_GROUPS}); use topologyKey {HOSTNAME} in a group, or "
        "remove the rule"
    )


def _together(where: str, key: str, shape: _Pod) -> str | None:
    """Together within a switch or block: a group whose job Slurm keeps in one unit."""
    if _topology_key(key) and shape.group_size is not None:
        if shape.keeps_one_unit():
            return None
        return (
            f"{where} cannot be kept as asked: Slurm places the group's nodes; add annotation "
            f'{keys.SWITCHES}: "1" (a partition with a tree topology) or {keys.SEGMENT}: '
            f'"{shape.group_size}" (a block topology) so that Slurm keeps the group within one '
            "switch or block"
        )
    return (
        f"{where} cannot be kept: {_SLURM_CHOOSES} and places a pod next to others only as "
        f"one group ({_GROUPS}) kept within one switch or block ({keys.SWITCHES}, "
        f"{keys.SEGMENT}) with topologyKey {keys.TOPOLOGY_LABEL_PREFIX}<topology>; "
        "remove the rule"
    )


def _topology_key(key: str) -> bool:
    return key.startswith(keys.TOPOLOGY_LABEL_PREFIX)

