"""The fault schedule: one fault every 20-40 s, its kind and parameters fixed by the seed.

Pure, so a seed names one schedule whatever the cluster does: a violation found at seed S
reproduces by running seed S again.  Victims (which job, node or replica) are chosen when the
fault fires, from what is alive then, with the fault's own ``pick`` in [0, 1).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

T = TypeVar("T")

GAP_SECONDS = (20.0, 40.0)  # between two faults' starts (issue 25)


class FaultKind(StrEnum):
    KILL_LEADER = "SIGKILL of the leader replica"
    KILL_FOLLOWER = "SIGKILL of the other replica"
    KILL_WEBHOOK = "SIGKILL of the webhook"
    KILL_SLURMRESTD = "SIGKILL + restart of slurmrestd"
    NET_CUT = "network cut between the bridge and slurmrestd"
    RESTART_SLURMCTLD = "slurmctld restart with its state"
    RESTART_APISERVER = "kube-apiserver restart"
    SCANCEL = "scancel of a random placeholder"
    REQUEUE = "scontrol requeue of a random placeholder"
    DRAIN = "drain of a random Slurm node"
    CORDON = "cordon of a random Node"


# How long the fault lasts (the component is away, the node drained): seconds, min-max.
HOLD_SECONDS: dict[FaultKind, tuple[float, float]] = {
    FaultKind.KILL_LEADER: (2, 10),
    FaultKind.KILL_FOLLOWER: (2, 10),
    FaultKind.KILL_WEBHOOK: (2, 10),
    FaultKind.KILL_SLURMRESTD: (5, 30),
    FaultKind.NET_CUT: (10, 60),
    FaultKind.RESTART_SLURMCTLD: (0, 5),
    FaultKind.RESTART_APISERVER: (0, 5),
    FaultKind.SCANCEL: (0, 0),
    FaultKind.REQUEUE: (0, 0),
    FaultKind.DRAIN: (10, 60),
    FaultKind.CORDON: (10, 60),
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the load starts
    kind: FaultKind
    hold: float  # seconds the fault lasts before its repair
    pick: float  # in [0, 1): which victim, among those alive when it fires

    def describe(self) -> str:
        return f"t+{self.at:.0f}s {self.kind.value} (hold {self.hold:.0f}s)"


def fault_schedule(
    seed: int, seconds: float, kinds: Sequence[FaultKind] = tuple(FaultKind)
) -> list[Fault]:
    """Every fault of a run of ``seconds`` at ``seed``, in order; the first after one gap."""
    rng = random.Random(f"soak-faults-{seed}")
    faults: list[Fault] = []
    at = rng.uniform(*GAP_SECONDS)
    while at < seconds:
        kind = rng.choice(list(kinds))
        low, high = HOLD_SECONDS[kind]
        faults.append(Fault(round(at, 1), kind, round(rng.uniform(low, high), 1), rng.random()))
        at += rng.uniform(*GAP_SECONDS)
    return faults


def pick_one(candidates: Sequence[T], pick: float) -> T | None:
    """The victim ``pick`` names among ``candidates`` (sorted by the caller), None if none."""
    if not candidates:
        return None
    return candidates[min(int(pick * len(candidates)), len(candidates) - 1)]
