"""B6's filter latency with every Slurm node a candidate, two ways.

* ``probe``: one bridge pod Slurm placed (and nobody binds), then ``/filter`` sent to the
  running extender one call at a time (as one kube-scheduler profile does) with all N
  kube-node names, over the scheduler's own mutual-TLS client; wall time per call on this
  side, so TLS and HTTP are in.
* ``round_quantiles``: the extender's own ``slurmbridge_filter_seconds`` histogram over a
  measured bridge round (kube-scheduler's real calls under load), p50/p99 interpolated
  within its buckets the way Prometheus' ``histogram_quantile`` does.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from lightkube import AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import live
from benchmarks.b1_measure import drop_pods
from bridge import keys
from slurmbridge_devkit.namespaces import create_namespace, unique_name
from slurmbridge_devkit.stack import BridgeStack

FILTER_HISTOGRAM = "slurmbridge_filter_seconds"
HEADERS = {"Content-Type": "application/json"}


UNBINDABLE = {"slurmbridge.io/bench-probe": "no-node-has-this"}


async def _placed(
    client: httpx.AsyncClient, body: bytes, n: int, timeout: float = 180  # noqa: ASYNC109
) -> None:
    """Until /filter keeps Slurm's node for the probe pod (its job is running)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = await client.post("/filter", content=body, headers=HEADERS)
        answer.raise_for_status()
        if len(answer.json().get("NodeNames") or []) == 1:
            return
        if time.monotonic() > deadline:
            _check(answer, n)
        await asyncio.sleep(0.5)


async def probe(
    stack: BridgeStack, kube: AsyncClient, candidates: list[str], calls: int, warmup: int = 50,
) -> list[float]:
    """Seconds per sequential /filter call with ``candidates`` node names.

    The pod's nodeSelector matches no Node, so kube-scheduler's own plugins rule out
    every node and never bind it; the bridge still submits its job, and each probe call
    takes the path a real pending pod takes (API read, placement, answer).
    """
    ns = unique_name("bench-b6-probe")
    await create_namespace(kube, ns)
    try:
        pod = live.bench_pod("probe", keys.SCHEDULER_NAME, "bench-b6")
        assert pod.spec is not None
        pod.spec.nodeSelector = UNBINDABLE
        created = await kube.create(pod, namespace=ns)  # type: ignore[call-overload]  # lightkube overloads
        body = json.dumps({"Pod": created.to_dict(), "NodeNames": candidates}).encode()
        seconds: list[float] = []
        async with stack.scheduler_client() as client:
            await _placed(client, body, len(candidates))
            for i in range(warmup + calls):
                t0 = time.perf_counter()
                answer = await client.post("/filter", content=body, headers=HEADERS)
                took = time.perf_counter() - t0
                _check(answer, len(candidates))
                if i >= warmup:
                    seconds.append(took)
        return seconds
    finally:
        await drop_pods(kube, ns)


def _check(answer: httpx.Response, n: int) -> None:
    answer.raise_for_status()
    data = answer.json()
    kept = data.get("NodeNames") or []
    reasons = {**(data.get("FailedNodes") or {}), **(data.get("FailedAndUnresolvableNodes") or {})}
    if len(kept) != 1 or reasons:  # one node kept; the other candidates are left out
        why = next(iter(reasons.values()), data.get("Error"))
        raise AssertionError(
            f"/filter kept {kept!r}, failed {len(reasons)} of {n} candidates: {why}"
        )


def filter_buckets(port: int) -> dict[float, float]:
    """Cumulative count per upper bound of the extender's filter histogram."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics/", timeout=10).text
    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != FILTER_HISTOGRAM:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                out[float(sample.labels["le"])] = sample.value
    return out


def round_quantiles(
    before: dict[float, float], after: dict[float, float], qs: tuple[float, ...] = (50, 99),
) -> tuple[int, list[float]]:
    """Calls between two scrapes and their quantiles (seconds; inf past the last bucket)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    out = []
    for q in qs:
        rank = total * q / 100
        lower, below = 0.0, 0.0
        value = float("nan")
        for bound, cum in zip(bounds, counts, strict=True):
            if cum >= rank and total:
                inside = cum - below
                value = bound if bound == float("inf") else (
                    lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
                )
                break
            lower, below = bound, cum
        out.append(value)
    return int(total), out
