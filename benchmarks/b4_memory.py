"""B4: bridge RSS with 10,000 tracked pods and jobs.

Each repeat is a fresh process (``python -m benchmarks.b4_memory child``) that reads its
own VmRSS from /proc at three points:

1. ``interpreter``: at start, before importing the bridge;
2. ``baseline``: after importing the bridge, building it over the dev kit's fakes and the
   extender app, and putting the ``app_filters`` pods in the fake apiserver (nothing loaded);
3. ``loaded``: after indexing ``jobs`` placeholder jobs (``JobIndex.record``) and running
   one filter per pod through ``Placer.filter`` (so ``PodRegistry`` and the notifier track
   every pod, as after kube-scheduler asked about each), plus ``app_filters`` filters
   through the FastAPI app, then ``gc.collect()``.

The bridge never holds the Pod objects themselves (kube-scheduler sends them per request),
so this is the steady-state footprint; VmHWM (the peak) is reported too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from benchmarks.common import Figure, Outcome, at_most, fmt, rss_kb

RSS_LIMIT_MB = 250.0


@dataclass
class Config:
    repeats: int = 3
    jobs: int = 10_000
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
    from extender.app import create_app  # noqa: PLC0415

    logs.configure("info")  # as `slurmbridge extender` does

    bridge, kube = synthetic.offline_bridge()
    app = create_app(bridge, manage_lifecycle=False)
    for i in range(app_filters):  # the (fake) apiserver's pods the app filters read
        kube.add(cast(PodResource, PodResource.from_dict(synthetic.pod(i))))
    gc.collect()
    baseline = rss_kb()["VmRSS"]

    synthetic.load(bridge, kube, jobs, nodes, pods=False)  # the bridge's memory, not the fake's
    candidates = [synthetic.kube_node(k) for k in range(1, nodes + 1)]

    async def filters() -> int:
        kept = 0
        for i in range(jobs):
            pod = cast(Pod, Pod.from_dict(synthetic.pod(i)))
            verdict = await bridge.placer.filter(pod, candidates)
            kept += len(verdict.keep)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for i in range(app_filters):
                resp = await client.post("/filter", json=synthetic.filter_body(i, nodes))
                resp.raise_for_status()
        return kept

    kept = asyncio.run(filters())
    gc.collect()
    loaded = rss_kb()
    return {
        "interpreter_kb": interpreter,
        "baseline_kb": baseline,
        "loaded_kb": loaded["VmRSS"],
        "peak_kb": loaded["VmHWM"],
        "indexed_jobs": len(bridge.index.jobs()),
        "tracked_pods": sum(
            len(bridge.pods.pods_of(PodOwner(synthetic.pod_uid(i)))) for i in range(jobs)
        ),
        "kept": kept,
        "notifier_writes": kube.writes,
    }


def run(cfg: Config) -> Outcome:
    names = {
        "loaded_kb": "RSS with all jobs and pods tracked",
        "baseline_kb": "RSS before loading (bridge imported and built)",
        "interpreter_kb": "RSS of the bare interpreter",
        "peak_kb": "peak RSS (VmHWM)",
    }
    figs = {k: Figure(v, "MB") for k, v in names.items()}
    delta = Figure("growth from loading (RSS - baseline)", "MB")
    per_item = Figure("growth per tracked pod+job", "kB")
    checks: list[dict[str, float]] = []
    for rep in range(cfg.repeats):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.b4_memory", "child", "--jobs", str(cfg.jobs),
             "--nodes", str(cfg.nodes), "--app-filters", str(cfg.app_filters)],
            capture_output=True, text=True, check=False, timeout=600,
            cwd=str(Path(__file__).parents[1]),
        )
        if done.returncode != 0:
            raise RuntimeError(f"B4 child failed: {done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        checks.append(result)
        for key, fig in figs.items():
            fig.samples.append(result[key] / 1024)
        grown = (result["loaded_kb"] - result["baseline_kb"])
        delta.samples.append(grown / 1024)
        per_item.samples.append(grown / cfg.jobs)
        print(f"  B4 repeat {rep + 1}/{cfg.repeats}: RSS {fmt(result['loaded_kb'] / 1024)} MB "
              f"(baseline {fmt(result['baseline_kb'] / 1024)} MB)", flush=True)
    at_most(figs["loaded_kb"], RSS_LIMIT_MB, f"<= {RSS_LIMIT_MB:g} MB")
    last = checks[-1]
    notes = [
        f"Each repeat is a fresh process: {int(last['indexed_jobs']):,} jobs indexed, "
        f"{int(last['tracked_pods']):,} pods remembered by PodRegistry, each filtered once "
        f"through `Placer.filter` ({int(last['kept']):,} kept a node), then "
        f"{cfg.app_filters} filters through the FastAPI app (httpx ASGITransport), then "
        "`gc.collect()`. RSS from /proc/self/status (VmRSS, VmHWM; psutil is not installed).",
        "Same offline bridge as B3 (Slurm and the apiserver are the dev kit's in-memory "
        "fakes, the app's pods in the fake apiserver before the baseline; notifier in its "
        "steady state; apiserver writes counted: "
        f"{int(sum(c['notifier_writes'] for c in checks))}). Pod objects are "
        "not retained by the bridge; the index holds `SlurmJob`s, the registry `PodKey`s.",
    ]
    return Outcome(
        bench="B4", title="bridge memory",
        figures=[figs["loaded_kb"], figs["baseline_kb"], figs["interpreter_kb"],
                 figs["peak_kb"], delta, per_item],
        notes=notes, repeats=cfg.repeats,
    )


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
