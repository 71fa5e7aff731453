"""What every benchmark shares: figures with their samples, outcomes, statistics, machine facts."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "benchmarks"

MEASURED = "measured"
NOT_RUN = "not yet measured"
FAILED = "failed"


@dataclass
class Figure:
    """One reported quantity; ``samples`` holds one value per repeat, the table shows the median."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    target: str = ""  # human-readable, e.g. "≤ 5 ms"
    met: bool | None = None  # None: no target
    verdict: str = ""  # by how much a target is met or missed
    date: str = ""  # when measured, if not with the rest of its section (rows kept beside)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    def spread(self) -> str:
        if len(self.samples) < 2:
            return ""
        return f"{fmt(min(self.samples))}-{fmt(max(self.samples))}"


@dataclass
class Outcome:
    bench: str  # "B3"
    title: str
    status: str = MEASURED
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Paragraphs on the run's conditions, read before its figures (a busy machine, an outlier
    # and its cause): kept in results.json so a re-render keeps them, dropped by a re-run.
    conditions: list[str] = field(default_factory=list)
    profile: str = ""  # preformatted text: where the time goes
    error: str = ""
    command: str = ""
    date: str = ""
    repeats: int = 0
    machine: dict[str, str] = field(default_factory=dict)
    # What the plots' curves need beyond the figures (B1's per-pod times, a soak's timeline),
    # keyed by the row tag of the figures it belongs to; stored in series.json beside
    # results.json (benchmarks/report.py), drawn by benchmarks/plots.py.
    series: dict[str, Any] = field(default_factory=dict)

    def figure(self, name: str) -> Figure:
        for f in self.figures:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """Everything but ``series`` (kept in a file of its own: thousands of numbers)."""
        out = asdict(self)
        del out["series"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        figures = [Figure(**f) for f in data.pop("figures", [])]
        return cls(figures=figures, **data)


def fmt(value: float) -> str:
    if math.isnan(value):
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of unsorted values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def at_most(fig: Figure, limit: float, label: str) -> None:
    """Judge ``fig`` against an upper bound and say by how much."""
    fig.target = label
    fig.met = fig.median <= limit
    if fig.met:
        fig.verdict = f"met ({fmt(fig.median)} ≤ {fmt(limit)})"
    else:
        over = fig.median / limit if limit else float("inf")
        fig.verdict = f"MISSED by {fmt(fig.median - limit)} {fig.unit} ({over:.1f}x the limit)"


def at_least(fig: Figure, limit: float, label: str) -> None:
    fig.target = label
    fig.met = fig.median >= limit
    if fig.met:
        fig.verdict = f"met ({fmt(fig.median)} ≥ {fmt(limit)})"
    else:
        fig.verdict = f"MISSED: {fmt(fig.median)} is {fig.median / limit:.2f}x the floor"


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def rss_kb(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak) in kB from /proc (no psutil needed)."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0])
    return out


def run_child(module: str, what: str, *, args: list[str], timeout: float) -> dict[str, float]:
    """``python -m module args`` from the repository root; the JSON object its last line of
    output prints (a benchmark's measurement in a fresh process)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, check=False,
        timeout=timeout, cwd=str(REPO),
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _version(module: str) -> str:
    try:
        return version(module)
    except Exception:
        return "absent"


def _git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
        return done.stdout.strip() + (" (tree has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_facts() -> dict[str, str]:
    load = os.getloadavg()
    return {
        "CPU": _cpu_model(),
        "nproc": str(os.cpu_count()),
        "memory": _mem_total(),
        "kernel": platform.release(),
        "Python": sys.version.split()[0],
        "fastapi / uvicorn / httpx / pydantic": " / ".join(
            _version(m) for m in ("fastapi", "uvicorn", "httpx", "pydantic")
        ),
        "uvloop / httptools": " / ".join(_version(m) for m in ("uvloop", "httptools")),
        "load average at start (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load),
        "commit": _git_commit(),
    }


def package_of(filename: str, func: str) -> str:
    """The package a profiled function belongs to (site-packages, this repo, stdlib, C)."""
    if filename == "~" or not filename.startswith("/"):
        name = func.split(" of ", maxsplit=1)[0][:60]
        return f"C code: {name}" if "method" in func else "C code"
    parts = Path(filename).parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].split(".")[0]
    for top in ("bridge", "extender", "benchmarks", "admission"):
        if top in parts:
            return f"{top} (this repo)"
    lib = next((p for p in parts if p.startswith("python3")), None)
    if lib is not None:
        rest = parts[parts.index(lib) + 1:]
        return f"stdlib {rest[0].removesuffix('.py')}" if rest else "stdlib"
    return filename
