"""What ``slurmbridge uninstall`` did (or, with ``--dry-run``, would do): one line per object
and action as it happens, so a run cut short still shows how far it got, then a summary."""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

PAST = {
    "stop": "stopped", "delete": "deleted", "cancel": "cancelled", "free": "freed",
    "untaint": "untainted", "unlabel": "unlabelled", "clear": "cleared", "resume": "resumed",
    "leave": "left",
}


@dataclass(frozen=True, slots=True)
class Action:
    verb: str  # a key of PAST
    what: str  # the object: "pod ns/name", "slurm job 12 (k8s:ns/name)", ...
    why: str

    @property
    def changes(self) -> bool:
        return self.verb != "leave"


class Report:
    def __init__(self, echo: Callable[[str], None], *, dry_run: bool) -> None:
        self._echo = echo
        self.dry_run = dry_run
        self.actions: list[Action] = []

    @property
    def acting(self) -> bool:
        """Whether the run changes anything (not a dry run)."""
        return not self.dry_run

    def did(self, verb: str, what: str, why: str) -> None:
        action = Action(verb, what, why)
        self.actions.append(action)
        self._echo(self.line(action))

    def leave(self, what: str, why: str) -> None:
        self.did("leave", what, why)

    def line(self, action: Action) -> str:
        verb = f"would {action.verb}" if self.dry_run else PAST[action.verb]
        return f"{verb:<14} {action.what}: {action.why}"

    def summary(self) -> str:
        done = Counter(PAST[a.verb] for a in self.actions if a.changes)
        left = sum(1 for a in self.actions if not a.changes)
        tail = f"; {left} left as they are (lines 'left' say whose and why)" if left else ""
        if not done:
            return f"nothing of the bridge to remove{tail}"
        counts = ", ".join(f"{n} {verb}" for verb, n in sorted(done.items()))
        head = "would have: " if self.dry_run else "done: "
        return head + counts + tail
