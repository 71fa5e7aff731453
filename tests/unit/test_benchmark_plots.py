"""The benchmarks' plots (issue 45): ``python -m benchmarks.run --render`` draws every PNG that
benchmarks/RESULTS.md links, from results.json and the per-pod / per-fault series stored beside
it; a curve whose series a stored run lacks is named as awaiting the next run, never linked."""

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from benchmarks import plots, report, run
from benchmarks.b1_end_to_end import Config, Runs, Shape
from benchmarks.b1_measure import SystemRun
from benchmarks.b1_report import curves, outcome
from benchmarks.common import Figure, Outcome
from benchmarks.soak.faults import Injector
from benchmarks.soak.schedule import Fault, FaultKind
from benchmarks.soak.tracker import Timeline, Tracker

PNG = b"\x89PNG\r\n\x1a\n"
LINK = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def _figure(name: str, unit: str, *samples: float) -> dict[str, Any]:
    return {"name": name, "unit": unit, "samples": list(samples)}


def _outcome(bench: str, figures: list[dict[str, object]]) -> dict[str, object]:
    return {"bench": bench, "title": f"{bench} title", "figures": figures,
            "date": "2026-12-01 10:00 UTC", "command": "python -m benchmarks.run", "repeats": 1}


def _b1_round(tag: str) -> list[dict[str, Any]]:
    return [
        _figure(f"{tag} bridge: pods/s", "pods/s", 30.0, 32.0),
        _figure(f"{tag} Slurm alone: pods/s", "pods/s", 200.0),
        _figure(f"{tag} default scheduler: pods/s", "pods/s", 60.0),
        _figure(f"{tag} Slurm alone: submit -> RUNNING p50", "ms", 800.0),
        _figure(f"{tag} Slurm alone: submit -> RUNNING p99", "ms", 1200.0),
        _figure(f"{tag} default scheduler: create -> bound p50", "ms", 700.0),
        _figure(f"{tag} default scheduler: create -> bound p99", "ms", 1300.0),
        _figure(f"{tag} bridge: create -> bound p50", "ms", 5000.0),
        _figure(f"{tag} bridge: create -> bound p99", "ms", 6000.0),
    ]


def _results() -> dict[str, object]:
    b3 = [_figure(f"filter p{q}, one at a time, {n} ({side})", "ms", base * q / 50, base)
          for n, base in (("1 node, released pod", 0.3), ("256 nodes", 0.5),
                          ("5,000 nodes", 1.0))
          for q in (50, 99) for side in ("bridge", "bare")]
    b4 = [_figure(f"{what}, {n:,} pods", "MB", mb, mb + 1)
          for n, scale in ((10_000, 1.0), (50_000, 2.0))
          for what, mb in (("RSS with all jobs and pods tracked", 120 * scale),
                           ("RSS before loading (bridge imported and built)", 90.0),
                           ("peak RSS (VmHWM)", 125 * scale))]
    soak = [_figure(f"[{row}] faults: kube-apiserver restart", "faults", 2.0)
            for row in ("seed 1", "seed 2")]
    soak += [_figure(f"[{row}] invariant violations", "violations", 0.0)
             for row in ("seed 1", "seed 2")]
    return {
        "B1": _outcome("B1", _b1_round("[50 pods, qps 50]") + _b1_round("[50 pods, qps 400]")),
        "B3": _outcome("B3", b3),
        "B4": _outcome("B4", b4),
        "SOAK": _outcome("SOAK", soak),
    }


def _round(pods: int, speed: float) -> SystemRun:
    created = [i * 0.01 for i in range(pods)]
    bound = [c + speed * (1 + i % 7) for i, c in enumerate(created)]
    return SystemRun(pods, max(bound), [b - c for b, c in zip(bound, created, strict=True)],
                     {"kube-apiserver": 1.0}, created=created, bound=bound)


def _series() -> dict[str, object]:
    """B1's qps-50 round and SOAK's seed 1 have their series; qps 400 and seed 2 do not."""
    b1 = curves({(50, 50.0): {"a": [_round(50, 0.1)], "b": [_round(50, 0.3)],
                              "bridge": [_round(50, 0.9), _round(50, 1.0)]}})
    timeline = Timeline(faults=[(30.0, "kube-apiserver restart"), (70.0, "drain of a node"),
                                (75.0, "kube-apiserver restart")],
                        checks=[(t, t // 5, t % 2, 0) for t in range(5, 120, 5)],
                        skipped=[35.0, 40.0])
    return {"B1": b1, "SOAK": {"seed 1": timeline.to_json()}}


def _render(folder: Path, *, series: bool = True) -> str:
    (folder / "results.json").write_text(json.dumps(_results()))
    if series:
        (folder / "series.json").write_text(json.dumps(_series()))
    assert run.main(["--render", "--results", str(folder / "RESULTS.md")]) == 0
    return (folder / "RESULTS.md").read_text()


def _links(markdown: str) -> list[str]:
    return LINK.findall(markdown)


def test_render_writes_every_png_results_md_links(tmp_path: Path) -> None:
    markdown = _render(tmp_path)
    links = _links(markdown)
    assert links, "RESULTS.md links no plot"
    for link in links:
        assert not link.startswith("/"), f"{link}: not a relative link"
        png = tmp_path / link
        assert png.is_file(), f"RESULTS.md links {link}, which was not written"
        assert png.read_bytes().startswith(PNG), f"{link} is not a PNG"
    named = " ".join(links)
    for expected in ("b1-50-pods-qps-50-bound", "b1-50-pods-qps-50-cdf", "b1-throughput",
                     "b3-latency-by-candidates", "b4-rss", "soak-seed-1"):
        assert expected in named, f"no {expected} plot among {links}"


def test_the_committed_results_md_links_every_committed_plot_and_no_other() -> None:
    """benchmarks/RESULTS.md and benchmarks/plots/ as --render left them: no link to a missing
    image, no image no section shows."""
    bench = Path(run.__file__).parent
    links = _links((bench / "RESULTS.md").read_text())
    assert sorted(links) == sorted(f"plots/{p.name}" for p in (bench / "plots").glob("*.png"))
    assert all((bench / link).read_bytes().startswith(PNG) for link in links)


def test_a_curve_whose_series_a_stored_run_lacks_awaits_the_next_run_unlinked(
    tmp_path: Path,
) -> None:
    markdown = _render(tmp_path)
    named = " ".join(_links(markdown))
    assert "qps-400-bound" not in named and "soak-seed-2" not in named
    assert _not_drawn(markdown) == [
        "pods bound over time and create->bound CDFs of [50 pods, qps 400] await",
        "the timelines of [seed 2] await"]
    bare = tmp_path / "bare"
    bare.mkdir()
    markdown = _render(bare, series=False)
    assert all((bare / link).is_file() for link in _links(markdown))
    assert "bound" not in " ".join(_links(markdown))
    assert _not_drawn(markdown) == [
        "pods bound over time and create->bound CDFs of [50 pods, qps 50], [50 pods, qps 400] "
        "await", "the timelines of [seed 1], [seed 2] await"]


def _not_drawn(markdown: str) -> list[str]:
    """What RESULTS.md says awaits a measuring run, up to its "await"."""
    return [line.removeprefix("- Not drawn: ").partition(" await")[0] + " await"
            for line in markdown.splitlines() if line.startswith("- Not drawn: ")]


def test_rendering_again_gives_the_same_bytes_and_drops_plots_no_longer_linked(
    tmp_path: Path,
) -> None:
    _render(tmp_path)
    plots = tmp_path / "plots"
    first = {p.name: p.read_bytes() for p in plots.glob("*.png")}
    (plots / "b1-9-pods-qps-1-bound.png").write_bytes(PNG)  # from a round since replaced
    _render(tmp_path)
    again = {p.name: p.read_bytes() for p in plots.glob("*.png")}
    assert again == first


def test_the_stored_series_survive_a_save_and_a_load(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(_results()))
    (tmp_path / "series.json").write_text(json.dumps(_series()))
    stored = report.load(tmp_path / "results.json")
    report.save(tmp_path / "copy.json", stored)
    assert report.load(tmp_path / "copy.json")["B1"].series == stored["B1"].series
    assert "series" not in json.loads((tmp_path / "copy.json").read_text())["B1"]
    b1 = stored["B1"].series["[50 pods, qps 50]"]
    assert [len(r["bound_ms"]) for r in b1["bridge"]] == [50, 50]
    assert b1["a"][0]["created_ms"][:3] == [0, 10, 20]


# --- the measuring code keeps what the curves need ---------------------------------------------


def test_b1_keeps_each_complete_rounds_per_pod_times_per_system_and_repeat() -> None:
    runs = Runs()
    for system, speed in (("a", 0.1), ("b", 0.3), ("bridge", 0.9)):
        runs.add(50, 50.0, system, _round(50, speed))
    runs.add(50, 400.0, "bridge", _round(50, 1.0))  # its other systems failed: no figures
    slurm = cast(Any, SimpleNamespace(version="26.05", url="http://127.0.0.1:6820"))
    got = outcome(Config(pods=(50,), limits=((50, 100), (400, 800))), runs, slurm,
                  Shape(cpus=128, memory_mb=262144, pods=250))
    assert list(got.series) == ["[50 pods, qps 50]"]
    assert {k: len(v) for k, v in got.series["[50 pods, qps 50]"].items()} == {
        "a": 1, "b": 1, "bridge": 1}
    curve = got.series["[50 pods, qps 50]"]["bridge"][0]
    assert curve["created_ms"][:2] == [0, 10] and curve["bound_ms"][:2] == [900, 1810]
    assert all(f.name.startswith("[50 pods, qps 50]") for f in got.figures)


class _Nodes:
    async def patch(self, *args: object) -> None:
        pass


async def test_a_soak_keeps_a_timeline_of_its_faults_placements_and_checks() -> None:
    tracker = Tracker(seed=1, load_start=time.time() - 60)
    injector = Injector(cast(Any, None), cast(Any, _Nodes()), [], cast(Any, None),
                        {"kube-node1": "node1"}, tracker, Path("/"), cast(Any, None),
                        lambda: None)
    await injector.inject(Fault(at=60, kind=FaultKind.CORDON, hold=10, pick=0.0))
    tracker.observe([], placed=4)
    tracker.observe([], placed=6)
    saved = tracker.timeline.to_json()
    ((at, kind),) = saved["faults"]
    assert kind == FaultKind.CORDON.value and 59 <= at <= 62
    assert [c[1:] for c in saved["checks"]] == [[4, 0, 0], [6, 0, 0]]


def test_an_adversarial_soaks_timeline_joins_the_stored_ones(tmp_path: Path) -> None:
    row = Figure("[seed 1] invariant violations", "violations", [0.0])
    before = Outcome("SOAK", "soak", figures=[row], series={"seed 1": {"faults": []}},
                     date="2026-12-04 03:05 UTC")
    added = Outcome("SOAK", "soak", date="2026-12-05 01:00 UTC",
                    figures=[Figure("[adversarial seed 1] invariant violations", "v", [0.0])],
                    series={"adversarial seed 1": {"faults": [[1.0, "x"]]}})
    joined = run.beside(before, added)
    assert set(joined.series) == {"seed 1", "adversarial seed 1"}
    other = tmp_path / "results.json"
    report.save(other, {"SOAK": added})
    ours = run.merged({"SOAK": before}, other, ["SOAK"])["SOAK"]
    assert ours.series == joined.series


def test_a_round_is_never_drawn_from_another_sizes_series(tmp_path: Path) -> None:
    b1 = Outcome("B1", "b1", figures=[Figure(**f) for f in _b1_round("[500 pods, qps 50]")],
                 series=curves({(1500, 50.0): {"a": [_round(5, 0.1)], "b": [_round(5, 0.2)],
                                               "bridge": [_round(5, 0.3)]}}))
    section = plots.draw({"B1": b1}, tmp_path)["B1"]
    assert [p.file for p in section.plots] == ["b1-throughput.png"]
    assert "[500 pods, qps 50] await" in section.awaiting[0]
