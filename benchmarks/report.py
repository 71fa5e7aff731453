"""The printed table and benchmarks/RESULTS.md (kept across runs via results.json)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import plots
from benchmarks.common import MEASURED, NOT_RUN, Outcome, fmt

PLOTS = "plots"  # the plots' folder beside RESULTS.md, which links them relatively
ORDER = ("B1", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "SOAK")
LIVE_COMMAND = "cd /work/main && python -m benchmarks.run --only B1,B5,B6,B9"


def series_path(results_json: Path) -> Path:
    """The plots' series (per-pod times, soak timelines) beside results.json."""
    return results_json.with_name("series.json")


def load(path: Path) -> dict[str, Outcome]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    outcomes = {k: Outcome.from_json(v) for k, v in data.items()}
    beside = series_path(path)
    for bench, series in (json.loads(beside.read_text()) if beside.exists() else {}).items():
        if bench in outcomes:
            outcomes[bench].series = series
    return outcomes


def save(path: Path, outcomes: dict[str, Outcome]) -> None:
    path.write_text(json.dumps({k: v.to_json() for k, v in outcomes.items()}, indent=1) + "\n")
    series = {k: v.series for k, v in outcomes.items() if v.series}
    # one line per benchmark: thousands of numbers, kept out of results.json's diffs
    series_path(path).write_text("{\n" + ",\n".join(
        f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in series.items()
    ) + "\n}\n")


def write(results_md: Path, outcomes: dict[str, Outcome], pending: dict[str, str]) -> None:
    """RESULTS.md and the plots it links (plots/ beside it), both from ``outcomes``."""
    drawn = plots.draw(outcomes, results_md.parent / PLOTS)
    results_md.write_text(markdown(outcomes, pending, drawn))


def table(outcomes: list[Outcome]) -> str:
    rows = [("bench", "figure", "median", "unit", "min-max", "target", "verdict")]
    for o in outcomes:
        if o.status != MEASURED:
            rows.append((o.bench, o.title, "-", "", "", "", o.status + (f": {o.error}"
                                                                           if o.error else "")))
            continue
        for f in o.figures:
            rows.append((o.bench, f.name, fmt(f.median), f.unit, f.spread(), f.target,
                         f.verdict))
    widths = [min(max(len(r[i]) for r in rows), 60) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell[:60].ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    )


def markdown(outcomes: dict[str, Outcome], pending: dict[str, str],
             drawn: dict[str, plots.Section] | None = None) -> str:
    out = [
        "# slurmbridge benchmarks: results",
        "",
        "Written by `python -m benchmarks.run` (see benchmarks/README.md); rerunning a "
        "benchmark replaces its section, the others keep their last measurement "
        "(benchmarks/results.json). Every figure is the median over the repeats; "
        "min-max is the spread of the repeats.",
        "",
        "## Summary",
        "",
        "| bench | figure | median | target | verdict | measured |",
        "|---|---|---|---|---|---|",
    ]
    for bench in ORDER:
        o = outcomes.get(bench)
        if o is None or o.status != MEASURED:
            out.append(f"| {bench} | {pending.get(bench, '')} | - | - | **{NOT_RUN}** | - |")
            continue
        judged = [f for f in o.figures if f.target] or o.figures[:1]
        for f in judged:
            out.append(f"| {bench} | {f.name} | {fmt(f.median)} {f.unit} | {f.target or '-'} | "
                       f"{f.verdict or '-'} | {f.date or o.date} |")
    for bench in ORDER:
        o = outcomes.get(bench)
        if o is None or o.status != MEASURED:
            continue
        out += ["", f"## {bench}: {o.title}", "",
                f"Measured {o.date}, {o.repeats} repeats, with `{o.command}`.", ""]
        for paragraph in o.conditions:
            out += [paragraph, ""]
        out += _plots((drawn or {}).get(bench))
        out += ["| figure | median | unit | min-max | samples | target | verdict |",
                "|---|---|---|---|---|---|---|"]
        for f in o.figures:
            samples = ", ".join(fmt(s) for s in f.samples)
            out.append(f"| {f.name} | {fmt(f.median)} | {f.unit} | {f.spread()} | {samples} | "
                       f"{f.target or '-'} | {f.verdict or '-'} |")
        out += [""] + [f"- {n}" for n in o.notes]
        if o.profile:
            out += ["", "Where the time goes:", "", "```", o.profile, "```"]
        out += ["", "Machine:", ""] + [f"- {k}: {v}" for k, v in o.machine.items()]
    missing = [b for b in ORDER if b not in outcomes or outcomes[b].status != MEASURED]
    if missing:
        out += ["", "## Not yet measured", "",
                "These need the project's local Slurm 26.05 (deploy/slurm/cluster.sh) and "
                "control plane (deploy/k8s/controlplane.sh) on an otherwise idle machine: "
                "the runner starts or joins both, cancels every job of users slurm and root, "
                "and for B1 restarts Slurm with 128-CPU nodes when it has fewer CPUs than pods "
                "(restoring the default shape afterwards). No figure below exists yet.", "",
                f"Command: `{LIVE_COMMAND}`", ""]
        for bench in missing:
            o = outcomes.get(bench)
            why = f" (last attempt failed: {o.error})" if o is not None and o.error else ""
            out.append(f"- **{bench}**: {pending.get(bench, '')}{why}")
    return "\n".join(out) + "\n"


def _plots(section: plots.Section | None) -> list[str]:
    """A section's images and what awaits a run that keeps the series; nothing if neither."""
    if section is None or not (section.plots or section.awaiting):
        return []
    out: list[str] = []
    for p in section.plots:
        out += [f"![{p.caption}]({PLOTS}/{p.file})", ""]
    if section.awaiting:
        out += [*(f"- Not drawn: {why}" for why in section.awaiting), ""]
    return out
