"""The views for people: aligned tables as ``kubectl get`` prints them, and ``why``'s report."""

from collections.abc import Iterable, Sequence

from bridge import keys
from slurmbridge_cli.kubeviews.events import EventLine
from slurmbridge_cli.kubeviews.nodes import NodeRow
from slurmbridge_cli.kubeviews.pods import PodRow
from slurmbridge_cli.kubeviews.why import Why

_LABEL = len("Slurm says: ")  # the width of why's labels, the longest one's


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns as ``kubectl get`` aligns them; an empty cell shows ``-``."""
    cells = [list(header)] + [[c or "-" for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def status_table(rows: Sequence[PodRow]) -> str:
    return table(
        ("POD", "JOB", "STATE", "REASON", "EXPECTED", "NODE", "GPUS", "AGE"),
        ((f"{r.namespace}/{r.pod}", r.job, r.state, r.reason, r.expected, r.node,
          r.gpus, r.age) for r in rows),
    )


def _kubernetes_side(row: NodeRow) -> str:
    shown = ["cordoned (kubernetes admin)"] if row.cordoned else []
    shown += [f"{t.key}{'=' + t.value if t.value else ''}:{t.effect} ({t.set_by})"
              for t in row.taints if t.key != keys.MANAGED_TAINT]
    return ", ".join(shown)


def nodes_table(rows: Sequence[NodeRow]) -> str:
    return table(
        ("NODE", "SLURM NODE", "SLURM STATE", "SLURM REASON", "SET BY", "KUBERNETES"),
        ((r.node, r.slurm_node, r.slurm_state, r.slurm_reason, r.drained_by,
          _kubernetes_side(r)) for r in rows),
    )


def _pairs(values: dict[str, str]) -> str:
    return "  ".join(f"{k}={v}" for k, v in sorted(values.items()))


def why_text(why: Why) -> str:
    """``why`` for people: one fact a line, then the events, then what to do."""
    lines: list[tuple[str, str]] = [("Pod", f"{why.namespace}/{why.pod}")]
    row = why.status
    if not why.found:
        lines.append(("State", "not found"))
    elif not why.bridge:
        lines.append(("Scheduler", f"{why.scheduler} (not {keys.SCHEDULER_NAME})"))
    if row is not None:
        lines.append(("State", row.state + (f" ({row.reason})" if row.reason else "")))
        job = str(row.job_id) if row.job_id is not None else "none yet"
        if why.slurm_state:
            job += f" ({why.slurm_state}" + (
                f", reason {why.slurm_reason})" if why.slurm_reason else ")")
        lines.append(("Slurm job", job))
        if why.said:
            lines.append(("Slurm says", f"{why.said} ({why.said_age} ago)"))
        if row.expected:
            lines.append(("Expected", f"{row.expected} (Slurm's estimate, {why.said_age} ago)"))
        if row.node:
            lines.append(("Node", row.node + (f" (Slurm node {row.slurm_node})"
                                              if row.slurm_node else "")))
        if row.gpus:
            lines.append(("GPUs", row.gpus))
        lines.append(("Age", row.age))
    for label, value in (("Group", why.group), ("Gates", ", ".join(why.gates)),
                         ("Asked", _pairs(why.asked)), ("Recorded", _pairs(why.recorded))):
        if value:
            lines.append((label, value))
    text = [f"{label + ':':<{_LABEL}}{value}" for label, value in lines]
    if why.bridge:
        text += _events_block("Events", why.events, pod=True)
    if why.refusals:
        text += _events_block("Refused at creation (events of its controller)", why.refusals,
                              pod=False)
    text.append(f"{'Next:':<{_LABEL}}{why.next}")
    return "\n".join(text)


def _events_block(title: str, events: list[EventLine] | None, *, pod: bool) -> list[str]:
    if events is None:
        return [f"{title}: not readable (your RBAC does not allow listing events here)"]
    if not events:
        return [f"{title}: none"]
    header = ("AGE", "TYPE", "REASON", "FROM", "MESSAGE") if pod else (
        "AGE", "OBJECT", "COUNT", "MESSAGE")
    rows = [(e.age, e.type, e.reason, e.source, e.message) if pod else
            (e.age, e.object, str(e.count), e.message) for e in events]
    return [f"{title}:"] + ["  " + line for line in table(header, rows).splitlines()]
