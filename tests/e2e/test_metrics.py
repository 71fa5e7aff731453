"""/metrics tells an operator what happened: counts and histograms match the pods."""

import re

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


async def test_build_leader_token_and_webhook_series_on_a_running_stack(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    """What the chart's alerts read, from the processes an operator runs: the build with the
    data parser slurmrestd and the bridge agreed on, the one replica leading, the Slurm
    token's remaining life, and the webhook's reviews on its own /metrics (HTTPS)."""
    ns = await e2e_namespace("opsmetrics")
    await create_pod(kube, ns, pod_manifest("ops0", gpus=1))
    await wait_bound(kube, ns, "ops0")
    values = _scrape(bridge_stack)
    builds = [k for k in values if k.startswith("slurmbridge_build_info{")]
    assert len(builds) == 1 and re.search(r'data_parser="v0\.0\.\d+"', builds[0]), builds
    assert values["slurmbridge_leader"] == 1
    assert values['slurmbridge_slurm_token_expiry_seconds{credential="token"}'] > 0

    webhook = bridge_stack.webhook
    async with httpx.AsyncClient(verify=webhook.verify, timeout=5) as client:
        text = (await client.get(webhook.health_url.replace("/healthz", "/metrics"))).text
    patched = [line for line in text.splitlines()
               if line.startswith("slurmbridge_webhook_requests_total{")
               and 'webhook="mutate"' in line and 'outcome="patched"' in line]
    assert patched and float(patched[0].rsplit(" ", 1)[1]) >= 1, text
    assert "slurmbridge_slurm_reachable" not in text
