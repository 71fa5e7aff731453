"""One command for the benchmarks: ``python -m benchmarks.run [--only B3,B4] [--repeats N]``.

Prints a table and writes benchmarks/RESULTS.md and the plots it links (benchmarks/plots/,
drawn by benchmarks/plots.py).  B3, B4, B7 and B8 run in-process (no Slurm, no
Kubernetes); B1, B5, B6 and B9 use the project's local Slurm (B1 and B6 also the control
plane), as does SOAK (``--only SOAK --minutes M --seed S[,S...]``: faults, not timings; never in the
default set; ``--adversarial``: a tenant tries issue 41's attacks beside the faults, its rows
``[adversarial seed S] ...`` added to the SOAK section's earlier ones).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from benchmarks import report
from benchmarks.common import BENCH_DIR, FAILED, MEASURED, Outcome, machine_facts, now_iso

TITLES = {
    "B1": "end to end at 500 and 5,000 single-CPU pods, both kube-schedulers at qps 50 and "
          "400: the bridge (kube-scheduler + extender + Slurm) vs Slurm alone (placeholder jobs "
          "via slurmrestd) and the default kube-scheduler: pods/s (target >= 0.95x the "
          "default at qps 50, >= 0.7x at 400), create->bind p50/p99 (bridge p99 <= 1.5 x Slurm "
          "alone's + the default's), CPU-ms per pod (<= 1.5x the default's), apiserver writes "
          "per pod (<= 3)",
    "B3": "extender filter as kube-scheduler calls it: one at a time with 1 candidate node "
          "(a released gated pod) and with 256 and 5,000 (an ungated pod), p50/p99 (target "
          "p99 <= 2 ms), and throughput at 100 in flight vs a bare FastAPI handler (target "
          ">= 0.7x); 10,000 jobs indexed",
    "B4": "bridge RSS with 10,000 and 50,000 tracked pods and jobs; target <= 150 MB at "
          "10,000, growth linear (per-pod growth of the two sizes within 20%), bytes per pod",
    "B5": "Slurm poll cost (B2 merged in) with the bridge owning 10 live jobs while Slurm "
          "holds 100, 1,000 and 10,000 other jobs: requests and bytes per cycle (target: "
          "within 20% across the sizes) and requests/s when nothing changes (target <= 2)",
    "B6": "site scale: B1's round with 1,024 Slurm nodes (8 GPUs each) mirrored by 1,024 "
          "Kubernetes Nodes, 5,000 pods and 20,000 native jobs in the queue, plus filter "
          "latency with 1,024 candidates; target: bridge / default ratio within 20% of "
          "B1's; then the leader's failover on that site: SIGKILL -> first pod released by "
          "the new leader (target <= 15 s)",
    "B7": "CPU per exchange: apiserver (pod GET/PATCH, Binding, Event, watch event over TLS: "
          "lightkube vs aiohttp vs kubernetes_asyncio) and extender filter/bind served; "
          "client CPU per slurmrestd exchange (submit, job read of 28.5 kB and 375 kB, state "
          "poll) against a stand-in server, side by side: httpx, aiohttp, the bridge's "
          "SlurmClient, pydantic vs a msgspec struct of the fields read; adopt what wins by "
          ">= 1.5x",
    "B8": "the extender's connections as kube-scheduler makes them (a Go client built as "
          "extender.go's makeTransport, client certificate, N POSTs to /filter at 16 and 64 "
          "in flight, warm) against the real app served by uvicorn, hypercorn and granian "
          "(today's, bridge/draining.py): TLS handshakes per request (target 0 after "
          "warm-up), server and client CPU per request, requests/s, the protocol negotiated",
    "B9": "node sync's round at site scale: Slurm's node table read in full vs asked "
          "\"changed since?\" and found unchanged (HTTP 304): wall ms, slurmrestd + slurmctld "
          "CPU-ms and the bridge's CPU-ms per round, at 4 and 1,024 nodes",
    "SOAK": "seeded fault soak (issue 25): two bridge replicas and the webhook under a mixed "
            "load (pods, GPU pods, 2- and 4-pod groups, pods that exit, random deletions, "
            "native GPU jobs) with a fault every 20-40 s from a seeded schedule; invariants "
            "checked from outside the bridge every few seconds and at the end; target: 0 "
            "violations. Run alone: --only SOAK --minutes M --seed S (--adversarial: a tenant "
            "also tries issue 41's attacks)",
}


def _b6_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("B6 (site scale)")
    g.add_argument("--b6-pods", type=int, default=5_000, help="pods per system per round")
    g.add_argument("--b6-nodes", type=int, default=1024, help="Slurm nodes = Kubernetes Nodes")
    g.add_argument("--b6-native", default="1000,19000",
                   help="native jobs in Slurm's queue: running,pending")
    g.add_argument("--b6-limits", default="50:100,400:800",
                   help="qps:burst of both kube-schedulers, comma-separated pairs")
    g.add_argument("--b6-repeats", type=int, default=1, help="rounds per limit (each is long)")
    g.add_argument("--b6-failovers", type=int, default=3,
                   help="leader SIGKILLs after the rounds, plain pods arriving (0: none)")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="slurmbridge benchmarks: prints a table, writes RESULTS.md and its plots.",
    )
    p.add_argument("--only", default="B1,B3,B4,B5,B6,B7,B8,B9",
                   help="comma-separated benchmarks to run (default: all)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per benchmark (median)")
    p.add_argument("--results", type=Path, default=BENCH_DIR / "RESULTS.md")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--render", action="store_true",
                   help="run nothing: RESULTS.md and its plots from benchmarks/results.json")
    p.add_argument("--merge", type=Path, metavar="RESULTS_JSON",
                   help="run nothing: set the --only sections of another clone's results.json "
                        "beside this one's (rows of the same name replaced), then rewrite")
    p.add_argument("--slurm-version", default="26.05")
    g = p.add_argument_group("B3/B4/B7/B8 (in-process)")
    g.add_argument("--jobs", type=int, default=10_000, help="B3: jobs indexed (one per pod)")
    g.add_argument("--nodes", type=int, default=16, help="B4: candidate nodes per filter")
    g.add_argument("--b4-sizes", default="10000,50000",
                   help="B4: tracked pods per child process, comma-separated, ascending")
    g.add_argument("--candidates", default="1,256,5000",
                   help="B3: candidate node names per sequential filter, comma-separated "
                        "(1: a released gated pod, from the pod cache)")
    g.add_argument("--sequential", type=int, default=2_000,
                   help="B3: timed one-at-a-time filters per side and candidate count")
    g.add_argument("--concurrency", type=int, default=100, help="B3: in flight for throughput")
    g.add_argument("--requests", type=int, default=20_000,
                   help="B3: timed requests per side at --concurrency")
    g.add_argument("--profile", choices=["auto", "always", "never"], default="auto",
                   help="profile the bridge (B3, auto: when a target is missed; B1: an "
                        "extra round under py-spy unless never)")
    g.add_argument("--b7-requests", type=int, default=200,
                   help="B7: timed exchanges per stack, kind and repeat (the 375 kB read: "
                        "a quarter)")
    g = p.add_argument_group("B1 (end to end)")
    g.add_argument("--pods", default="500,5000", help="pods per round, comma-separated")
    g.add_argument("--b1-repeats", default="3,1",
                   help="repeats per --pods size, comma-separated (empty: --repeats each)")
    g.add_argument("--kube-qps", default="50,400",
                   help="clientConnection.qps of both kube-schedulers, comma-separated")
    g.add_argument("--kube-burst", default="100,800",
                   help="clientConnection.burst for each --kube-qps, comma-separated")
    g.add_argument("--cpus-per-node", type=int, default=128,
                   help="Slurm CPUs per node if Slurm is too small for --pods")
    g.add_argument("--b1-full-pods", type=int, default=500,
                   help="B1-full: pods created while a native job holds every node")
    g.add_argument("--b1-full-hold", type=float, default=60,
                   help="B1-full: seconds they wait before the holder ends (0: no B1-full)")
    g = p.add_argument_group("B5 (poll cost, B2 merged in)")
    g.add_argument("--other-jobs", default="100,1000,10000",
                   help="other (native) jobs in Slurm, comma-separated, ascending")
    g.add_argument("--cycles", type=int, default=5, help="poll cycles measured per repeat")
    g.add_argument("--idle-window", type=float, default=20.0,
                   help="seconds the running poller is counted per repeat")
    _b6_arguments(p)
    g = p.add_argument_group("B9 (node sync's round)")
    g.add_argument("--b9-nodes", default="4,1024", help="Slurm nodes, comma-separated")
    g = p.add_argument_group("SOAK (seeded faults; only when named in --only)")
    g.add_argument("--minutes", type=float, default=30.0, help="SOAK: minutes of load and faults")
    g.add_argument("--seed", default="1",
                   help="SOAK: the seed of the faults and the load; several (1,2,3) run one "
                        "after the other, each reported as [seed N]")
    g.add_argument("--adversarial", action="store_true",
                   help="SOAK: an adversarial tenant tries issue 41's cases 1-6 on the seed's "
                        "schedule beside the faults; reported as [adversarial seed N], kept "
                        "beside the SOAK rows already in RESULTS.md")
    args = p.parse_args(argv)
    args.only = [b.strip().upper() for b in args.only.split(",") if b.strip()]
    unknown = set(args.only) - set(TITLES)
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def runners(args: argparse.Namespace) -> dict[str, Callable[[], Outcome]]:
    """Imported lazily: B1/B5/B6/B9 pull in the test harness, B3/B4/B7/B8 do not need it."""

    def b1() -> Outcome:
        from benchmarks import b1_end_to_end as m  # noqa: PLC0415

        qps = [float(x) for x in args.kube_qps.split(",")]
        burst = [int(x) for x in args.kube_burst.split(",")]
        return m.run(m.Config(
            repeats=args.repeats, pods=tuple(int(x) for x in args.pods.split(",")),
            repeats_per_size=tuple(int(x) for x in args.b1_repeats.split(",") if x),
            slurm_version=args.slurm_version, limits=tuple(zip(qps, burst, strict=True)),
            cpus_per_node=args.cpus_per_node, profile=args.profile != "never",
            full_pods=args.b1_full_pods, full_hold=args.b1_full_hold,
        ))

    def b3() -> Outcome:
        from benchmarks import b3_filter_latency as m  # noqa: PLC0415

        profile = {"auto": None, "always": True, "never": False}[args.profile]
        return m.run(m.Config(
            repeats=args.repeats, jobs=args.jobs,
            candidates=tuple(int(x) for x in args.candidates.split(",")),
            sequential=args.sequential, concurrency=args.concurrency,
            requests=args.requests, profile=profile,
        ))

    def b4() -> Outcome:
        from benchmarks import b4_memory as m  # noqa: PLC0415

        sizes = tuple(int(x) for x in args.b4_sizes.split(","))
        return m.run(m.Config(repeats=args.repeats, sizes=sizes, nodes=args.nodes))

    def b5() -> Outcome:
        from benchmarks import b5_poll_cost as m  # noqa: PLC0415

        return m.run(m.Config(
            repeats=args.repeats, sizes=tuple(int(x) for x in args.other_jobs.split(",")),
            cycles=args.cycles, window=args.idle_window, slurm_version=args.slurm_version,
        ))

    def b6() -> Outcome:
        from benchmarks import b6_scale as m  # noqa: PLC0415
        from benchmarks.b6_setup import Shape  # noqa: PLC0415

        running, pending = (int(x) for x in args.b6_native.split(","))
        limits = tuple((float(q), int(b)) for q, b in
                       (pair.split(":") for pair in args.b6_limits.split(",")))
        return m.run(m.Config(
            repeats=args.b6_repeats, pods=args.b6_pods, slurm_version=args.slurm_version,
            limits=limits, failovers=args.b6_failovers,
            shape=Shape(nodes=args.b6_nodes, native_running=running, native_pending=pending),
        ))

    def b7() -> Outcome:
        from benchmarks import b7_exchanges as m  # noqa: PLC0415

        return m.run(m.Config(repeats=args.repeats, requests=args.b7_requests))

    def b8() -> Outcome:
        from benchmarks import b8_extender_conns as m  # noqa: PLC0415

        return m.run(m.Config(repeats=args.repeats))

    def b9() -> Outcome:
        from benchmarks import b9_node_sync as m  # noqa: PLC0415

        return m.run(m.Config(repeats=args.repeats, slurm_version=args.slurm_version,
                              nodes=tuple(int(x) for x in args.b9_nodes.split(","))))

    def soak() -> Outcome:
        from benchmarks.soak import bench as m  # noqa: PLC0415

        seeds = [int(s) for s in args.seed.split(",") if s.strip()]
        return m.run_seeds(m.Config(minutes=args.minutes, slurm_version=args.slurm_version,
                                    adversarial=args.adversarial), seeds)

    return {"B1": b1, "B3": b3, "B4": b4, "B5": b5, "B6": b6, "B7": b7, "B8": b8, "B9": b9,
            "SOAK": soak}


def beside(before: Outcome | None, added: Outcome) -> Outcome:
    """``added``'s rows (the adversarial soak's) after ``before``'s, those of the same name
    replaced: one SOAK section keeps every seed's rows, each row its own date, each run's
    command in the notes, the section's command and conditions those of ``before``."""
    if before is None or before.status != MEASURED:
        return added
    names = {f.name for f in added.figures}
    kept = [dataclasses.replace(f, date=f.date or before.date)
            for f in before.figures if f.name not in names]
    fresh = [dataclasses.replace(f, date=f.date or added.date) for f in added.figures]
    rows = ", ".join(sorted({f.name.split("]")[0] + "]" for f in fresh}))
    return dataclasses.replace(
        before, figures=kept + fresh,
        notes=[*before.notes, f"Rows {rows}: `{added.command}` ({added.date}).", *added.notes],
        series=before.series | added.series,
    )


def merged(stored: dict[str, Outcome], other: Path, only: list[str]) -> dict[str, Outcome]:
    """``stored`` with the sections ``only`` of another clone's results.json joined in (soaks
    run side by side in clones of their own, one per Slurm version): that clone's rows replace
    ours of the same name, its notes not yet ours follow ours (its run's command among them)."""
    theirs = report.load(other)
    missing = [b for b in only if b not in theirs]
    if missing:
        raise SystemExit(f"{other} holds no {', '.join(missing)}: run that benchmark there first")
    out = dict(stored)
    for bench in only:
        ours, added = stored.get(bench), theirs[bench]
        if ours is None or ours.status != MEASURED:
            out[bench] = added
            continue
        rows = {f.name: dataclasses.replace(f, date=f.date or ours.date) for f in ours.figures}
        rows |= {f.name: dataclasses.replace(f, date=f.date or added.date) for f in added.figures}
        out[bench] = dataclasses.replace(
            ours, figures=list(rows.values()),
            notes=[*ours.notes, *(n for n in added.notes if n not in ours.notes)],
            series=ours.series | added.series)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.render or args.merge:
        stored = report.load(args.results.with_name("results.json"))
        if args.merge:
            stored = merged(stored, args.merge, args.only)
            report.save(args.results.with_name("results.json"), stored)
        report.write(args.results, stored, TITLES)
        print(report.table([stored[b] for b in report.ORDER if b in stored]))
        return 0
    command = "python -m benchmarks.run " + shlex.join(sys.argv[1:] if argv is None else argv)
    machine = machine_facts()
    print("machine: " + "; ".join(f"{k} {v}" for k, v in machine.items()), flush=True)
    results_json = args.results.with_name("results.json")
    stored = report.load(results_json)
    ran: list[Outcome] = []
    for bench, job in runners(args).items():
        if bench not in args.only:
            continue
        print(f"{bench}: {TITLES[bench]}", flush=True)
        started = time.monotonic()
        try:
            outcome = job()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the harness reports setup trouble via pytest.fail
            traceback.print_exc()
            outcome = Outcome(bench=bench, title=TITLES[bench], status=FAILED,
                              error=f"{type(exc).__name__}: {str(exc)[:500]}")
        outcome.command, outcome.date, outcome.machine = command, now_iso(), machine
        print(f"{bench}: {outcome.status} in {time.monotonic() - started:.0f} s", flush=True)
        ran.append(outcome)
        if bench == "SOAK" and args.adversarial and outcome.status == MEASURED:
            outcome = beside(stored.get(bench), outcome)
        if outcome.status == MEASURED or bench not in stored:
            stored[bench] = outcome
        elif outcome.status == FAILED:
            stored[bench].error = outcome.error if stored[bench].status != MEASURED else ""
        if not args.no_write:  # at once: B6 compares with the B1 of this run
            report.save(results_json, stored)
    print()
    print(report.table(ran))
    if not args.no_write:
        report.write(args.results, stored, TITLES)
        print(f"\nwrote {args.results} and its plots")
    return 0 if all(o.status == MEASURED for o in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
