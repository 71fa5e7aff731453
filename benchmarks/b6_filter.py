"""B6's filter latency with every Slurm node a candidate, two ways.

* ``probe``: one bound bridge pod, then ``/filter`` sent to the running extender one call
  at a time (as one kube-scheduler profile does) with all N kube-node names, over the
  scheduler's own mutual-TLS client; wall time per call on this side, so TLS and HTTP are in.
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
from lightkube.resources.core_v1 import Pod
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import live
from benchmarks.b1_measure import drop_pods
from bridge import keys
from slurmbridge_devkit.kube import create_namespace, unique_name
from slurmbridge_devkit.stack import BridgeStack

FILTER_HISTOGRAM = "slurmbridge_filter_seconds"


async def _bound_pod(kube: AsyncClient, ns: str, timeout: float = 180) -> Pod:  # noqa: ASYNC109
    pod = live.bench_pod("probe", keys.SCHEDULER_NAME, "bench-b6")
    await kube.create(pod, namespace=ns)  # type: ignore[call-overload]  # lightkube overloads
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = await kube.get(Pod, "probe", namespace=ns)
        if current.spec is not None and current.spec.nodeName:
            return current
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the filter probe pod in {ns} was not bound in {timeout:.0f} s")


async def probe(
    stack: BridgeStack, kube: AsyncClient, candidates: list[str], calls: int, warmup: int = 50,
) -> list[float]:
    """Seconds per sequential /filter call for a bound pod with ``candidates`` node names."""
    ns = unique_name("bench-b6-probe")
    await create_namespace(kube, ns)
    try:
        pod = await _bound_pod(kube, ns)
        body = json.dumps({"Pod": pod.to_dict(), "NodeNames": candidates}).encode()
        headers = {"Content-Type": "application/json"}
        seconds: list[float] = []
        async with stack.scheduler_client() as client:
            for i in range(warmup + calls):
                t0 = time.perf_counter()
                answer = await client.post("/filter", content=body, headers=headers)
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
    failed = len(data.get("FailedNodes") or {}) + len(data.get("FailedAndUnresolvableNodes") or {})
    if len(kept) != 1 or len(kept) + failed != n:
        raise AssertionError(f"/filter kept {kept!r}, failed {failed} of {n} candidates")


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
