"""B4: bridge RSS with 10,000 and 50,000 tracked pods and jobs, and how it grows.

Issue 15's targets: at most 150 MB at 10,000 pods, and growth linear in the pods with a
stated bytes per pod: the slope between the two sizes, and the growth per pod at each size
agreeing within 20% (a cost that is not per pod would show as a gap).

Each repeat at each size is a fresh process (``python -m benchmarks.b4_memory child``)
that reads its own VmRSS from /proc at three points:

1. ``interpreter``: at start, before importing the bridge;
2. ``baseline``: after importing the bridge, building it over the dev kit's fakes and the
   extender app, and putting the ``app_filters`` pods in the fake apiserver (nothing loaded);
3. ``loaded``: after indexing ``jobs`` placeholder jobs (``JobIndex.record``) and running
   one filter per pod through ``Placer.filter`` (so ``SeenPods`` and the notifier track
   every pod, as after kube-scheduler asked about each), each pod also in the pod cache
   (``PodCache.apply``, as its watch delivers it: one ``PodView`` per pod), plus
   ``app_filters`` filters through the FastAPI app, then ``gc.collect()``.

The bridge never holds the Pod objects themselves (the cache keeps a view, kube-scheduler
sends the pod per request), so this is the steady-state footprint; VmHWM (the peak) is
reported too.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, cast

from benchmarks.common import Figure, Outcome, at_most, fmt, rss_kb, run_child

RSS_LIMIT_MB = 150.0  # at the first size (10,000 pods)
LINEAR_TOLERANCE = 0.2  # growth per pod at each size within 20% of each other


@dataclass
class Config:
    repeats: int = 3
    sizes: tuple[int, ...] = (10_000, 50_000)
    nodes: int = 16
    app_filters: int = 200


def child(jobs: int, nodes: int, app_filters: int) -> dict[str, float]:
    """Runs in the fresh process; imports are deferred so the first reading is bare Python."""
    interpreter = rss_kb()["VmRSS"]

    import asyncio  # noqa: PLC0415 - measured: the import cost belongs to the baseline
    import gc  # noqa: PLC0415

    import httpx  # noqa: PLC0415
    from lightkube.models.core_v1 import Pod  # noqa: PLC0415
    from lightkube.resources.core_v1 import Pod as PodResource  # noqa: PLC0415

    from benchmarks import synthetic  # noqa: PLC0415
    from bridge import logs  # noqa: PLC0415
    from bridge.jobs.owner import PodOwner  # noqa: PLC0415
    from extender.protocol import create_app  # noqa: PLC0415

    logs.configure("info")  # as `slurmbridge extender` does

    bridge, kube = synthetic.offline_bridge()
    app = create_app(bridge)
    for i in range(app_filters):  # the (fake) apiserver's pods the app filters read
        kube.add(cast(PodResource, PodResource.from_dict(synthetic.pod(i, nodes))))
    gc.collect()
    baseline = rss_kb()["VmRSS"]

    synthetic.load(bridge, kube, jobs, nodes, pods=False)  # the bridge's memory, not the fake's
    candidates = [synthetic.kube_node(k) for k in range(1, nodes + 1)]

    async def filters() -> int:
        kept = 0
        for i in range(jobs):
            pod = cast(Pod, Pod.from_dict(synthetic.pod(i, nodes)))
            verdict = await bridge.placer.filter(pod, candidates)
            kept += len(verdict.keep)
            bridge.pod_cache.apply("ADDED", pod)  # as its watch holds every pod of the bridge
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for i in range(app_filters):
                resp = await client.post("/filter", json=synthetic.filter_body(i, nodes))
                resp.raise_for_status()
        return kept

    kept = asyncio.run(filters())
    gc.collect()
    loaded = rss_kb()
    cache_bytes = _cache_bytes(jobs)
    return {
        "interpreter_kb": interpreter,
        "baseline_kb": baseline,
        "loaded_kb": loaded["VmRSS"],
        "peak_kb": loaded["VmHWM"],
        "indexed_jobs": len(bridge.index.jobs()),
        "tracked_pods": sum(
            len(bridge.seen.pods_of(PodOwner(synthetic.pod_uid(i)))) for i in range(jobs)
        ),
        "kept": kept,
        "cached_pods": len(bridge.pod_cache.views()),
        "cache_bytes_per_pod": cache_bytes / jobs,
        "notifier_writes": kube.writes,
    }


def _cache_bytes(jobs: int) -> int:
    """What a fresh pod cache holding ``jobs`` pods allocates (tracemalloc: the views that
    stay, not the Pods decoded on the way, which are freed)."""
    import gc  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415

    from lightkube.models.core_v1 import Pod  # noqa: PLC0415

    from benchmarks import synthetic  # noqa: PLC0415
    from bridge.link.podcache import PodCache  # noqa: PLC0415

    cache = PodCache(cast(Any, None))  # never runs: fed by apply, as its watch would
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(jobs):
        cache.apply("ADDED", cast(Pod, Pod.from_dict(synthetic.pod(i, 1))))
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(cache.views()) == jobs
    return held


def _child(cfg: Config, jobs: int) -> dict[str, float]:
    return run_child("benchmarks.b4_memory", f"B4 child ({jobs:,} pods)", timeout=1200, args=[
        "child", "--jobs", str(jobs), "--nodes", str(cfg.nodes),
        "--app-filters", str(cfg.app_filters)])


def _size_figures(jobs: int, results: list[dict[str, float]]) -> list[Figure]:
    names = {
        "loaded_kb": "RSS with all jobs and pods tracked",
        "baseline_kb": "RSS before loading (bridge imported and built)",
        "peak_kb": "peak RSS (VmHWM)",
    }
    figs = [Figure(f"{name}, {jobs:,} pods", "MB", [r[key] / 1024 for r in results])
            for key, name in names.items()]
    figs.append(Figure(f"growth per tracked pod+job, {jobs:,} pods", "bytes",
                       [(r["loaded_kb"] - r["baseline_kb"]) * 1024 / jobs for r in results]))
    figs.append(Figure(f"pod cache: bytes per pod (tracemalloc), {jobs:,} pods", "bytes",
                       [r["cache_bytes_per_pod"] for r in results]))
    return figs


def linearity(sizes: tuple[int, ...], by_size: dict[int, list[dict[str, float]]]) -> list[Figure]:
    """The slope between the smallest and largest size, and how far the per-pod growth of
    the two sizes differ (0 = exactly linear), repeat by repeat."""
    small, large = sizes[0], sizes[-1]
    slope, gap = Figure(f"bytes per pod ({small:,} -> {large:,} pods: RSS slope)", "bytes"), \
        Figure(f"per-pod growth at {large:,} vs {small:,} pods (0 = linear)", "x")
    for lo, hi in zip(by_size[small], by_size[large], strict=True):
        slope.samples.append((hi["loaded_kb"] - lo["loaded_kb"]) * 1024 / (large - small))
        per_lo = (lo["loaded_kb"] - lo["baseline_kb"]) / small
        per_hi = (hi["loaded_kb"] - hi["baseline_kb"]) / large
        gap.samples.append(abs(per_hi / per_lo - 1))
    at_most(gap, LINEAR_TOLERANCE, f"<= {LINEAR_TOLERANCE:g} (linear growth)")
    return [slope, gap]


def run(cfg: Config) -> Outcome:
    by_size: dict[int, list[dict[str, float]]] = {n: [] for n in cfg.sizes}
    for rep in range(cfg.repeats):
        for jobs in cfg.sizes:
            result = _child(cfg, jobs)
            by_size[jobs].append(result)
            print(f"  B4 repeat {rep + 1}/{cfg.repeats}, {jobs:,} pods: RSS "
                  f"{fmt(result['loaded_kb'] / 1024)} MB (baseline "
                  f"{fmt(result['baseline_kb'] / 1024)} MB)", flush=True)
    figures = [f for jobs in cfg.sizes for f in _size_figures(jobs, by_size[jobs])]
    at_most(figures[0], RSS_LIMIT_MB, f"<= {RSS_LIMIT_MB:g} MB")
    if len(cfg.sizes) > 1:
        figures += linearity(cfg.sizes, by_size)
    first, last = by_size[cfg.sizes[0]][-1], by_size[cfg.sizes[-1]][-1]
    notes = [
        f"Each repeat and size is a fresh process: at {cfg.sizes[-1]:,} pods "
        f"{int(last['indexed_jobs']):,} jobs indexed, {int(last['tracked_pods']):,} pods "
        f"remembered by SeenPods, each filtered once through `Placer.filter` "
        f"({int(last['kept']):,} kept a node), then {cfg.app_filters} filters through the "
        "FastAPI app (httpx ASGITransport), then `gc.collect()`. RSS from /proc/self/status "
        "(VmRSS, VmHWM; psutil is not installed). The bare interpreter: "
        f"{fmt(first['interpreter_kb'] / 1024)} MB.",
        "Same offline bridge as B3 (Slurm and the apiserver are the dev kit's in-memory "
        "fakes, the app's pods in the fake apiserver before the baseline; notifier in its "
        "steady state; apiserver writes counted: "
        f"{int(sum(r['notifier_writes'] for rs in by_size.values() for r in rs))}). Pod "
        "objects are not retained by the bridge; the index holds `SlurmJob`s, `SeenPods` "
        "`PodView`s.",
    ]
    return Outcome(bench="B4", title="bridge memory", figures=figures, notes=notes,
                   repeats=cfg.repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description="B4 child process (used by the runner)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("child")
    c.add_argument("--jobs", type=int, default=10_000)
    c.add_argument("--nodes", type=int, default=16)
    c.add_argument("--app-filters", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(child(args.jobs, args.nodes, args.app_filters)))


if __name__ == "__main__":
    main()
