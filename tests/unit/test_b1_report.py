"""B1's per-pod cost and verdicts (issue 15): what is counted, what is left out, each target."""

from types import SimpleNamespace

from benchmarks import live
from benchmarks.b1_full import FullRun, costs
from benchmarks.b1_measure import SystemRun, scheduler_cycles
from benchmarks.b1_report import beyond_floor_notes, combo_figures, combo_notes, full_figures


def run(seconds: float, cpu: dict[str, float], requests: dict[str, float],
        latencies: list[float] | None = None, pods: int = 100) -> SystemRun:
    return SystemRun(pods, seconds, latencies or [0.1] * pods, cpu, requests)


def test_cost_per_pod_leaves_out_the_load_generator_and_the_benchmarks_own_creates() -> None:
    r = run(
        1.0,
        {"kube-apiserver": 0.5, "etcd": 0.3, "benchmark client": 9.0, "other": 9.0},
        {"POST pods": 100, "POST pods/binding": 100, "PATCH pods": 50, "GET pods": 999},
    )
    assert r.cpu_ms_per_pod == 8.0
    assert r.writes_per_pod == 1.5
    assert r.pods_per_s == 100


def test_each_target_is_judged_and_the_latency_bound_comes_from_a_and_b() -> None:
    alone = run(1.0, {}, {}, latencies=[0.2] * 100)
    default = run(2.0, {"kube-apiserver": 1.0}, {"POST pods": 100, "POST pods/binding": 100},
                  latencies=[0.3] * 100)
    bridge = run(2.5, {"kube-apiserver": 2.0}, {"POST pods": 100, "PATCH pods": 400},
                 latencies=[0.5] * 100)
    figures = {f.name.split("] ")[1]: f for f in combo_figures(
        100, 50, {"a": [alone], "b": [default], "bridge": [bridge]})}
    assert figures["ratio bridge / default scheduler"].met is False  # 0.8 < 0.95
    assert figures["CPU per pod, bridge / default"].met is False  # 2.0 > 1.5
    assert figures["bridge: apiserver writes per pod"].met is False  # 4 > 3
    p99 = figures["bridge: create -> bound p99"]
    assert "= 600 ms" in p99.target  # 1.5 x 200 + 300
    assert p99.met is True
    at_400 = {f.name.split("] ")[1]: f for f in combo_figures(
        100, 400, {"a": [alone], "b": [default], "bridge": [bridge]})}
    assert at_400["ratio bridge / default scheduler"].met is True  # 0.8 >= 0.7


SDIAG = """*******************************************************
sdiag output at Tue Dec 01 08:00:00 2026 (1764576000)
Data since      Tue Dec 01 07:59:00 2026 (1764575940)
*******************************************************
Server thread count:  3
Jobs submitted: 500

Main schedule statistics (microseconds):
\tLast cycle:   1200
\tMax cycle:    45000
\tTotal cycles: 31
\tMean cycle:   8500
\tMean depth cycle:  120
\tLast queue length: 0

Main scheduler exit:
\tEnd of job queue:31
\tMax cycle: 0

Backfilling stats (WARNING: data obtained in the middle of backfilling execution.)
\tTotal backfilled jobs (since last slurm start): 7
\tTotal cycles: 4
\tLast cycle when: Tue Dec 01 07:59:30 2026 (1764575970)
\tLast cycle: 3000
\tMax cycle:  9000
\tMean cycle: 5000
"""


def test_scheduler_cycles_read_from_sdiag_main_and_backfill_in_ms() -> None:
    assert scheduler_cycles(SDIAG) == (
        "main: 31 cycles, mean 8.5 ms, max 45.0 ms; backfill: 4 cycles, mean 5.0 ms, max 9.0 ms"
    )
    assert scheduler_cycles("sdiag: error: slurmctld not responding") == ""


def test_b1_full_splits_the_cost_at_the_release_and_judges_the_waiting_pods() -> None:
    """While waiting: the pending status (an event each) but the benchmark's creates left
    out; one status write more per pod misses the target, a filter call misses it too."""
    bridge_work = {"slurmbridge_filter_seconds_count{}": 0.0,
                   "slurmbridge_slurm_request_seconds_count{operation=submit}": 100.0,
                   "slurmbridge_slurm_request_seconds_count{operation=get_job}": 20.0}
    waiting = costs({"POST pods": 100, "POST events": 100}, bridge_work, created=100)
    assert (waiting.writes, waiting.slurm_requests, waiting.events) == (100, 120, 100)
    after = costs({"PATCH pods": 100, "POST pods/binding": 100, "POST events": 100},
                   {"slurmbridge_filter_seconds_count{}": 100.0}, created=0)
    good = FullRun(100, 60, 4.0, [1.0] * 100, waiting, after, bound_while_full=0)
    figures = {f.name.split("] ")[1]: f for f in full_figures([good])}
    assert figures["apiserver writes per pod while its job pended"].met is True
    assert figures["filter calls per pod while its job pended"].met is True
    assert figures["apiserver writes per pod after allocation"].median == 3
    chatty = costs({"POST pods": 100, "POST events": 100, "PATCH pods/status": 100},
                    {"slurmbridge_filter_seconds_count{}": 5.0}, created=100)
    bad = FullRun(100, 60, 4.0, [1.0] * 100, chatty, after, bound_while_full=0)
    figures = {f.name.split("] ")[1]: f for f in full_figures([bad])}
    assert figures["apiserver writes per pod while its job pended"].met is False  # 2 > 1
    assert figures["filter calls per pod while its job pended"].met is False


def test_the_apiservers_time_per_create_and_per_webhook_call_is_read_as_means() -> None:
    """What a researcher's create pays, as the apiserver times it: creates of pods only (not
    bindings, not other resources), each webhook by name, before and after a round."""
    req, hook_time = "apiserver_request_duration_seconds", "apiserver_admission_webhook_admission"
    create = 'verb="POST",resource="pods",subresource=""'
    binding = 'verb="POST",resource="pods",subresource="binding"'
    mutate = 'name="mutate.slurmbridge.io",operation="CREATE",type="admit"'

    def scrape(creates: float, hook: float) -> str:
        return "\n".join([
            f"# TYPE {req} histogram",
            f"{req}_sum{{{create}}} {creates * 0.05}", f"{req}_count{{{create}}} {creates}",
            f"{req}_sum{{{binding}}} {creates}", f"{req}_count{{{binding}}} {creates}",
            f"# TYPE {hook_time}_duration_seconds histogram",
            f"{hook_time}_duration_seconds_sum{{{mutate}}} {hook * 0.004}",
            f"{hook_time}_duration_seconds_count{{{mutate}}} {hook}",
            "# TYPE apiserver_request_total counter",
            f'apiserver_request_total{{{create},code="201"}} {creates}',
        ]) + "\n"

    class ControlPlane:
        def __init__(self, text: str) -> None:
            self.text = text

        def kubectl(self, *args: str) -> SimpleNamespace:
            return SimpleNamespace(stdout=self.text)

    calls0, timed0 = live.apiserver_requests(ControlPlane(scrape(100, 10)))  # type: ignore[arg-type]
    calls, timed = live.apiserver_requests(ControlPlane(scrape(600, 510)))  # type: ignore[arg-type]
    assert live.counts_since(calls0, calls) == {"POST pods": 500}
    assert live.format_latency(live.counts_since(timed0, timed)) == (
        "create 50.0 ms x 500, webhook mutate.slurmbridge.io 4.0 ms x 500")


def test_the_bridges_cpu_beyond_the_floor_is_named_per_process_against_each_targets_room() -> None:
    alone = run(1.0, {"slurmctld": 0.1, "slurmrestd": 0.1, "benchmark client": 0.1}, {})
    default = run(0.5, {"kube-apiserver": 0.4, "kube-scheduler": 0.2, "benchmark client": 0.1},
                  {})
    bridge = run(2.0, {"kube-apiserver": 0.9, "kube-scheduler": 0.3, "slurmctld": 0.2,
                       "slurmrestd": 0.1, "slurmbridge extender": 0.3,
                       "slurmbridge webhook": 0.1, "benchmark client": 0.1}, {})
    by = {"a": [alone], "b": [default], "bridge": [bridge]}
    costs, room = beyond_floor_notes("[100 pods, qps 400]", 400, by, cores=2)
    # floor 8 ms (2 + 6); the bridge 19 ms: 11 beyond it, where 1.25x leaves 2
    assert "kube-apiserver +5.0, slurmbridge extender +3.0" in costs
    assert "slurmctld +1.0" in costs and "slurmrestd" not in costs  # no more than Slurm alone
    assert "+11.0 in all, where the <= 1.25x target leaves 2.0 (a quarter of the floor's 8.0)" \
        in costs
    # every process of the floor: 10 ms a pod, so 2 cores bind at most 200 pods/s; the default
    # bound 200 pods/s, 0.7x of it is 140: 1000 * 2 / 140 - 10 = 4.3 ms of room
    assert "at most 200; the pods/s target (140) leaves the bridge 4.3 CPU-ms" in room
    assert any("beyond the floor" in n for n in combo_notes(100, 400, by))
