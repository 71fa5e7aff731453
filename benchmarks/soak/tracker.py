"""How long a suspect may last: counted in time the bridge could act, then a violation.

A fault that takes away what the bridge needs (the leader, slurmrestd, slurmctld, the
apiserver) stops the clock from its start until ``tail`` seconds after its repair (the new
leader's lease and resync, the poller's backoff of up to 30 s).  A suspect becomes a violation
once it was seen in two consecutive snapshots and has lasted its bound in such time.  Each
violation is printed once, with what reproduces it: seed, time, the last faults, the objects.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.soak.invariants import BOUND_SECONDS, Suspect

LAST_FAULTS = 4  # how many earlier faults a violation names


@dataclass(frozen=True)
class Outage:
    start: float  # epoch seconds
    end: float  # epoch seconds, the tail included


def healthy_seconds(start: float, end: float, outages: list[Outage]) -> float:
    """Seconds of [start, end] outside every outage (outages may overlap)."""
    if end <= start:
        return 0.0
    clipped = sorted((max(o.start, start), min(o.end, end)) for o in outages
                     if o.end > start and o.start < end)
    covered, reach = 0.0, start
    for low, high in clipped:
        begin = max(low, reach)
        if high > begin:
            covered += high - begin
            reach = high
    return (end - start) - covered


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str
    seed: int
    seen_at: float  # epoch seconds first seen
    judged_at: float
    since_load: float  # seconds since the load began, when judged
    last_faults: tuple[str, ...]

    def describe(self) -> str:
        first = time.strftime("%H:%M:%S", time.gmtime(self.seen_at))
        judged = time.strftime("%H:%M:%S", time.gmtime(self.judged_at))
        faults = "; ".join(self.last_faults) or "none yet"
        return (f"VIOLATION [{self.invariant}] seed {self.seed}, t+{self.since_load:.0f}s "
                f"(first seen {first} UTC, judged {judged} UTC): {self.detail}; last faults: "
                f"{faults}")


@dataclass
class Timeline:
    """What a soak's plot draws (benchmarks/plots.py), in seconds since the load began."""

    faults: list[tuple[float, str]] = field(default_factory=list)  # (t, kind as counted)
    # one per snapshot judged: (t, pods placed so far, suspects seen, violations so far)
    checks: list[tuple[float, int, int, int]] = field(default_factory=list)
    skipped: list[float] = field(default_factory=list)  # snapshots Slurm or the API refused

    def to_json(self) -> dict[str, list[Any]]:
        return {"faults": [[round(t, 1), kind] for t, kind in self.faults],
                "checks": [[round(t, 1), *rest] for t, *rest in self.checks],
                "skipped": [round(t, 1) for t in self.skipped]}


@dataclass
class Tracker:
    seed: int
    load_start: float
    timeline: Timeline = field(default_factory=Timeline)
    outages: list[Outage] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)  # described, in order
    checks: int = 0
    violations: list[Violation] = field(default_factory=list)
    _first_seen: dict[str, float] = field(default_factory=dict)
    _seen_twice: set[str] = field(default_factory=set)
    _reported: set[str] = field(default_factory=set)

    def fault(self, described: str) -> None:
        self.faults.append(described)

    def open_outage(self, start: float) -> int:
        """An outage whose end is not known yet (the clock stops until ``close_outage``)."""
        self.outages.append(Outage(start, math.inf))
        return len(self.outages) - 1

    def close_outage(self, index: int, end: float) -> None:
        self.outages[index] = Outage(self.outages[index].start, end)

    def observe(self, suspects: list[Suspect], now: float | None = None, *,
                placed: int = 0) -> list[Violation]:
        """Take one snapshot's suspects (``placed``: pods placed so far, for the timeline);
        return the violations judged now (new ones only)."""
        now = time.time() if now is None else now
        self.checks += 1
        new = self._judge(suspects, now)
        self.timeline.checks.append((now - self.load_start, placed, len(suspects),
                                     len(self.violations)))
        return new

    def _judge(self, suspects: list[Suspect], now: float) -> list[Violation]:
        current = {s.key: s for s in suspects}
        for key in list(self._first_seen):
            if key not in current:  # resolved: a later return starts afresh
                del self._first_seen[key]
                self._seen_twice.discard(key)
        new: list[Violation] = []
        for key, suspect in current.items():
            if key in self._first_seen:
                self._seen_twice.add(key)
            else:
                self._first_seen[key] = now
            since = min(suspect.since or self._first_seen[key], self._first_seen[key])
            if key in self._reported or key not in self._seen_twice:
                continue
            if healthy_seconds(since, now, self.outages) < BOUND_SECONDS[suspect.bound]:
                continue
            self._reported.add(key)
            violation = Violation(
                suspect.invariant, suspect.detail, self.seed, since, now, now - self.load_start,
                tuple(self.faults[-LAST_FAULTS:]),
            )
            self.violations.append(violation)
            new.append(violation)
        return new

    def final(self, invariant: str, detail: str, now: float | None = None) -> Violation:
        """A violation of an end-of-run check (no bound: the run already waited it out)."""
        now = time.time() if now is None else now
        violation = Violation(invariant, detail, self.seed, now, now, now - self.load_start,
                              tuple(self.faults[-LAST_FAULTS:]))
        self.violations.append(violation)
        return violation
