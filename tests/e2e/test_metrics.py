"""/metrics tells an operator what happened: counts and histograms match the pods."""

import httpx
import pytest
from lightkube import AsyncClient

from slurmbridge_devkit.e2e import create_pod, pod_manifest, wait_bound
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory

pytestmark = pytest.mark.e2e


def _scrape(stack: BridgeStack) -> dict[str, float]:
    url = stack.extender.health_url.replace("/healthz", "/metrics/")
    values: dict[str, float] = {}
    for line in httpx.get(url, timeout=5).text.splitlines():
        if line.startswith("slurmbridge_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def _sum(values: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in values.items() if k.startswith(prefix))


async def test_metrics_count_the_pods_of_a_run(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("metrics")
    before = _scrape(bridge_stack)
    for i in range(3):
        await create_pod(kube, ns, pod_manifest(f"m{i}", gpus=1))
    for i in range(3):
        await wait_bound(kube, ns, f"m{i}")
    after = _scrape(bridge_stack)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta("slurmbridge_pods_bound_total") == 3
    assert delta("slurmbridge_pod_to_bind_seconds_count") == 3
    assert delta('slurmbridge_filter_total{outcome="allocated"}') >= 3
    submits = _sum(after, 'slurmbridge_slurm_request_seconds_count{operation="submit"}') - _sum(
        before, 'slurmbridge_slurm_request_seconds_count{operation="submit"}'
    )
    assert submits == 3
    assert after.get('slurmbridge_placeholder_jobs{state="RUNNING"}', 0) >= 3
