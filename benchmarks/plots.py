"""The benchmarks' plots (issue 45): PNGs drawn with matplotlib beside RESULTS.md's sections.

Drawn from the stored figures and series alone (benchmarks/report.py), so ``--render`` redraws
exactly what a measuring run drew; never edited by hand.  A curve needing a series that a stored
run did not keep (runs older than the series) is not drawn: its section says it awaits the next
measuring run.  Fixed size, dpi and no software tag, so the same results give the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure as Canvas

from benchmarks.common import MEASURED, Outcome
from benchmarks.soak.schedule import FaultKind

DPI = 100
SYSTEMS = {"a": "Slurm alone", "b": "default scheduler", "bridge": "bridge"}
COLORS = {"a": "tab:green", "b": "tab:blue", "bridge": "tab:orange"}
SYSTEM_KEYS = {"Slurm alone": "a", "default scheduler": "b", "default kube-scheduler": "b",
               "bridge": "bridge"}
Curves = dict[str, list[dict[str, list[int]]]]  # system -> one per repeat (b1_report.curves)


@dataclass(frozen=True)
class Plot:
    caption: str
    file: str  # within the plots folder


@dataclass
class Section:
    """One benchmark's plots, and the curves that await a measuring run that keeps series."""

    plots: list[Plot] = field(default_factory=list)
    awaiting: list[str] = field(default_factory=list)


def draw(outcomes: dict[str, Outcome], folder: Path) -> dict[str, Section]:
    """Every plot of the measured benchmarks into ``folder``; PNGs there no plot wrote (a round
    since replaced) are removed, so RESULTS.md's links and the folder agree."""
    folder.mkdir(parents=True, exist_ok=True)
    drawers: dict[str, Callable[[Outcome, Path], Section]] = {
        "B1": _b1, "B3": _b3, "B4": _b4, "B6": _b6, "SOAK": _soak}
    out = {bench: drawer(outcomes[bench], folder) for bench, drawer in drawers.items()
           if bench in outcomes and outcomes[bench].status == MEASURED}
    written = {p.file for section in out.values() for p in section.plots}
    for stale in sorted(folder.glob("*.png")):
        if stale.name not in written:
            stale.unlink()
    return out


def _canvas(rows: int = 1, cols: int = 1, height: float = 4.0) -> tuple[Canvas, list[Axes]]:
    fig = Canvas(figsize=(9.0, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _save(fig: Canvas, folder: Path, name: str, caption: str) -> Plot:
    fig.savefig(folder / f"{name}.png", metadata={"Software": None})
    return Plot(caption, f"{name}.png")


def _kind_color(kind: str) -> tuple[float, float, float, float]:
    """A fault kind's colour in every soak plot, its skipped or failed attempts' too: the ten
    dark hues of tab20 first, then the light ones."""
    known = [k.value for k in FaultKind]
    base = kind.split(" (", maxsplit=1)[0]
    index = known.index(base) if base in known else len(known)
    return colormaps["tab20"]((2 * index) % 20 + (2 * index) // 20 % 2)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


# --- B1 and B6: three systems in one round ---------------------------------------------------

_B1_ROW = re.compile(r"^\[(?P<group>[^\]]+ pods, qps [^\]]+)\] (?P<system>Slurm alone|default "
                     r"scheduler|bridge): (?:pods/s|(?:submit -> RUNNING|create -> bound) "
                     r"(?P<q>p50|p99))$")
_B6_ROW = re.compile(r"^(?P<system>Slurm alone|default kube-scheduler|bridge): (?:pods/s|latency "
                     r"(?P<q>p50|p99)) \((?P<group>qps [^)]+)\)$")


def _b1(o: Outcome, folder: Path) -> Section:
    return _rounds(o, folder, "b1", _B1_ROW, "--only B1")


def _b6(o: Outcome, folder: Path) -> Section:
    return _rounds(o, folder, "b6", _B6_ROW, "--only B6")


def _rounds(o: Outcome, folder: Path, prefix: str, row: re.Pattern[str], only: str) -> Section:
    """Per round with its series, pods bound over time and the latency CDFs; for every round,
    pods/s and latency from the figures."""
    values: dict[str, dict[tuple[str, str], float]] = {}
    for f in o.figures:
        if m := row.match(f.name):
            metric = m["q"] or "pods/s"
            values.setdefault(m["group"], {})[(SYSTEM_KEYS[m["system"]], metric)] = f.median
    section = Section()
    if values:
        section.plots.append(_throughput(o.bench, values, folder, prefix))
    lacking = []
    for group in values:
        # B1's group is the whole tag, B6's its client limit ("qps 50" of "[5000 pods, qps 50]")
        tag = next((t for t in o.series if t == f"[{group}]" or t.endswith(f", {group}]")),
                   None)
        if tag is None:
            lacking.append(f"[{group}]")
            continue
        section.plots += _round_curves(o.bench, tag, o.series[tag], folder, prefix)
    if lacking:
        section.awaiting.append(
            f"pods bound over time and create->bound CDFs of {', '.join(lacking)} await the "
            f"next measuring run (`python -m benchmarks.run {only}`): the stored run "
            f"({o.date}) kept no per-pod times.")
    return section


def _throughput(bench: str, values: dict[str, dict[tuple[str, str], float]], folder: Path,
                prefix: str) -> Plot:
    fig, (rate, latency) = _canvas(1, 2)
    groups = list(values)
    width = 0.8 / len(SYSTEMS)
    for k, (key, name) in enumerate(SYSTEMS.items()):
        xs = [g + (k - 1) * width for g in range(len(groups))]
        rate.bar(xs, [values[g].get((key, "pods/s"), 0.0) for g in groups], width,
                 label=name, color=COLORS[key])
        latency.bar(xs, [values[g].get((key, "p50"), 0.0) / 1000 for g in groups], width,
                    color=COLORS[key], label=f"{name} p50")
        latency.scatter(xs, [values[g].get((key, "p99"), 0.0) / 1000 for g in groups],
                        marker="_", s=300, color="black", zorder=3)
    for ax, what in ((rate, "pods/s (median)"), (latency, "s, p50 bars, p99 marks (median)")):
        ax.set_xticks(range(len(groups)), groups, fontsize=8, rotation=15)
        ax.set_ylabel(what)
        ax.grid(axis="y", alpha=0.3)
    rate.legend(fontsize=8)
    latency.set_yscale("log")
    fig.suptitle(f"{bench}: throughput and create->bound latency per round")
    return _save(fig, folder, f"{prefix}-throughput", f"{bench}: pods/s and latency per round")


def _round_curves(bench: str, tag: str, curves: Curves, folder: Path, prefix: str) -> list[Plot]:
    name, caption = f"{prefix}-{_slug(tag)}", f"{bench}, {tag.strip('[]')}"  # alt text: no [ ]
    fig = _bound_over_time(curves)
    fig.suptitle(f"{bench} {tag}: pods bound over time, the bridge's median repeat")
    bound = _save(fig, folder, f"{name}-bound", f"{caption}: pods bound over time")
    fig = _latency_cdf(curves)
    fig.suptitle(f"{bench} {tag}: latency CDF, every repeat")
    return [bound, _save(fig, folder, f"{name}-cdf", f"{caption}: create->bound latency CDF")]


def _bound_over_time(curves: Curves) -> Canvas:
    """One repeat of the round (the bridge's median wall time), the three systems in it."""
    walls = [max(r["bound_ms"], default=0) for r in curves.get("bridge", [])]
    pick = sorted(range(len(walls)), key=walls.__getitem__)[len(walls) // 2] if walls else 0
    fig, (ax,) = _canvas()
    for key, runs in _ordered(curves):
        one = runs[min(pick, len(runs) - 1)]
        xs = sorted(t / 1000 for t in one["bound_ms"])
        ax.step([0.0, *xs], list(range(len(xs) + 1)), where="post", color=COLORS[key],
                label=SYSTEMS[key])
        if key == "bridge":
            made = sorted(t / 1000 for t in one["created_ms"])
            ax.step([0.0, *made], list(range(len(made) + 1)), where="post", color="grey",
                    linestyle=":", label="pods created (bridge round)")
    ax.set(xlabel="seconds since the first create (Slurm alone: submit)",
           ylabel="pods bound (jobs RUNNING)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _latency_cdf(curves: Curves) -> Canvas:
    """Every repeat's pods pooled, per system; log seconds (a 0 ms wait drawn at 1 ms)."""
    fig, (ax,) = _canvas()
    for key, runs in _ordered(curves):
        waits = sorted(max(b - c, 1) / 1000 for r in runs
                       for c, b in zip(r["created_ms"], r["bound_ms"], strict=True))
        ax.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post",
                color=COLORS[key], label=f"{SYSTEMS[key]} ({len(runs)} repeats)")
    ax.set_xscale("log")
    ax.set(xlabel="create -> bound (Slurm alone: submit -> RUNNING), seconds",
           ylabel="fraction of pods")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def _ordered(curves: Curves) -> list[tuple[str, list[dict[str, list[int]]]]]:
    return [(key, curves[key]) for key in SYSTEMS if curves.get(key)]


# --- B3 and B4: from the figures ----------------------------------------------------------------

_B3_ROW = re.compile(r"^filter (?P<q>p50|p99), one at a time, (?P<n>[\d,]+) nodes?"
                     r"(?:, released pod)? \((?P<side>bridge|bare)\)$")
_B4_ROW = re.compile(r"^(?P<what>RSS with all jobs and pods tracked|peak RSS \(VmHWM\)|RSS before "
                     r"loading \(bridge imported and built\)), (?P<n>[\d,]+) pods$")


def _b3(o: Outcome, folder: Path) -> Section:
    lines: dict[tuple[str, str], list[tuple[int, list[float]]]] = {}
    for f in o.figures:
        if m := _B3_ROW.match(f.name):
            lines.setdefault((m["side"], m["q"]), []).append((int(m["n"].replace(",", "")),
                                                             f.samples))
    if not lines:
        return Section()
    fig, (ax,) = _canvas()
    for (side, q), points in sorted(lines.items()):
        points.sort()
        color = COLORS["bridge" if side == "bridge" else "b"]
        ax.plot([n for n, _ in points], [_median(s) for _, s in points], marker="o",
                label=f"{side} {q}", color=color, linestyle="-" if q == "p99" else "--")
        for n, samples in points:
            ax.scatter([n] * len(samples), samples, s=8, alpha=0.5, color=color)
    ax.axhline(2.0, color="red", linewidth=0.8, label="target: bridge p99 <= 2 ms")
    ax.set_xscale("log")
    ax.set(xlabel="candidate nodes per filter", ylabel="ms (line: median; dots: repeats)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.suptitle("B3: extender filter latency by candidates, one call at a time")
    return Section([_save(fig, folder, "b3-latency-by-candidates",
                          "B3: filter latency by candidate nodes")])


def _b4(o: Outcome, folder: Path) -> Section:
    lines: dict[str, dict[int, list[float]]] = {}
    for f in o.figures:
        if m := _B4_ROW.match(f.name):
            before = m["what"].startswith("RSS before")
            what = "RSS with all jobs and pods tracked" if before else m["what"]
            pods = 0 if before else int(m["n"].replace(",", ""))
            lines.setdefault(what, {}).setdefault(pods, []).extend(f.samples)
    if not lines:
        return Section()
    fig, (ax,) = _canvas()
    for what, points in sorted(lines.items()):
        xs = sorted(points)
        line = ax.plot(xs, [_median(points[x]) for x in xs], marker="o", label=what)
        for x in xs:
            ax.scatter([x] * len(points[x]), points[x], s=8, alpha=0.5,
                       color=line[0].get_color())
    ax.scatter([10_000], [150], marker="x", color="red", s=60, label="target: <= 150 MB at 10,000")
    ax.set(xlabel="pods and jobs tracked (0: before loading)", ylabel="MB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle("B4: the bridge's memory against the pods it tracks")
    return Section([_save(fig, folder, "b4-rss", "B4: RSS against tracked pods")])


def _median(samples: list[float]) -> float:
    ordered = sorted(samples)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# --- SOAK: one timeline per run ---------------------------------------------------------------

_SOAK_FAULT = re.compile(r"^(?:\[(?P<row>[^\]]+)\] )?faults: (?P<kind>.+)$")


def _soak(o: Outcome, folder: Path) -> Section:
    counts: dict[str, dict[str, float]] = {}
    for f in o.figures:
        if m := _SOAK_FAULT.match(f.name):
            counts.setdefault(m["row"] or "", {})[m["kind"]] = f.median
    section = Section()
    if counts:
        section.plots.append(_fault_counts(counts, folder))
    for row in sorted(o.series):
        section.plots.append(_timeline(row, o.series[row], folder))
    lacking = [f"[{row}]" for row in counts if row and row not in o.series]
    if lacking:
        section.awaiting.append(
            f"the timelines of {', '.join(lacking)} await the next soak of those seeds "
            "(`python -m benchmarks.run --only SOAK --seed N`, with `--adversarial` for the "
            "adversarial rows): those runs kept no timeline of their faults, placements and "
            "checks.")
    return section


def _fault_counts(counts: dict[str, dict[str, float]], folder: Path) -> Plot:
    rows = list(counts)
    kinds = sorted({k for by in counts.values() for k in by})
    fig, (ax,) = _canvas(height=1.5 + 0.45 * len(rows))
    left = [0.0] * len(rows)
    for kind in kinds:
        color = _kind_color(kind)
        widths = [counts[r].get(kind, 0.0) for r in rows]
        ax.barh(range(len(rows)), widths, left=left, color=color, label=kind,
                hatch="//" if "(" in kind else None)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(range(len(rows)), [f"[{r}]" if r else "run" for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("faults injected")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("SOAK: faults by kind, per run")
    return _save(fig, folder, "soak-faults-by-kind", "SOAK: faults by kind, per run")


def _timeline(row: str, timeline: dict[str, list[Any]], folder: Path) -> Plot:
    faults, checks = timeline.get("faults", []), timeline.get("checks", [])
    skipped = [t / 60 for t in timeline.get("skipped", [])]
    kinds = sorted({kind for _, kind in faults})
    fig, (top, mid, low) = _canvas(3, 1, height=7.0)
    for line, kind in enumerate(kinds):  # skipped or failed attempts: crosses
        at = [t / 60 for t, k in faults if k == kind]
        top.scatter(at, [line] * len(at), color=_kind_color(kind), s=30,
                    marker="x" if "(" in kind else "v")
    top.set_yticks(range(len(kinds)), kinds, fontsize=7)
    top.set_ylim(-0.5, max(len(kinds), 1) - 0.5)
    top.set_title("faults, by kind", fontsize=9)
    minutes = [c[0] / 60 for c in checks]
    mid.step(minutes, [c[1] for c in checks], where="post", color=COLORS["bridge"])
    mid.set_title("pods placed (bound at least once), so far", fontsize=9)
    low.step(minutes, [c[2] for c in checks], where="post", color="grey",
             label="suspects in the snapshot")
    low.step(minutes, [c[3] for c in checks], where="post", color="red",
             label="violations so far")
    low.scatter(skipped, [0] * len(skipped), marker="|", color="black", s=80,
                label="snapshot skipped (Slurm or apiserver away)")
    low.set_title("invariant checks", fontsize=9)
    low.set_xlabel("minutes since the load began")
    low.legend(fontsize=7)
    end = max([*minutes, *skipped, *(t / 60 for t, _ in faults)], default=1.0)
    for ax in (top, mid, low):
        ax.grid(alpha=0.3)
        ax.set_xlim(0, end * 1.02)
    violations = checks[-1][3] if checks else 0
    fig.suptitle(f"SOAK [{row}]: {len(faults)} faults, {len(checks)} snapshots judged, "
                 f"{len(skipped)} skipped, {violations} violations")
    return _save(fig, folder, f"soak-{_slug(row)}", f"SOAK, {row}: faults, placements, checks")
