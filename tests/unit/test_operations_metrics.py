"""What an operator alerts on, read from the extender's /metrics as Prometheus would: the build
(version, Python, the negotiated data parser), which replica leads, when the Slurm token in use
expires, and how long the longest-gated pod has waited."""

import asyncio
import contextlib
import platform
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import httpx
import jwt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.config import SlurmSettings
from bridge.controllers.leader import LeaderElector
from bridge.runtime import Bridge
from bridge.slurm.client import SlurmClient
from extender.protocol import create_health_app
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(bridge: Bridge) -> Samples:
    """The extender's /metrics/ on its health app, parsed."""
    transport = httpx.ASGITransport(app=create_health_app(bridge))
    async with httpx.AsyncClient(transport=transport, base_url="http://health") as client:
        reply = await client.get("/metrics/")
    assert reply.status_code == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(reply.text) for s in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"{name}{labels} not on /metrics: " + ", ".join(
        f"{n}{dict(ls)}" for n, ls in samples if n == name)
    return samples[key]


def openapi(request: httpx.Request) -> httpx.Response:
    """slurmrestd offering data parser v0.0.44 and nothing else."""
    if request.url.path == "/openapi/v3":
        return httpx.Response(200, json={"paths": {"/slurm/v0.0.44/jobs/": {}}})
    return httpx.Response(404)


@pytest.fixture
def bridge(tmp_path: Path) -> Bridge:
    return bridge_over_fakes(tmp_path, FakeSlurm(), FakeKube())


async def test_build_info_names_version_python_and_the_negotiated_data_parser(
    bridge: Bridge, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token_file=token, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(openapi)) as client:
        await client.connect()
    samples = await scrape(bridge)
    assert sample(samples, "slurmbridge_build_info", version=version("slurmbridge-k8s"),
                  python=platform.python_version(), data_parser="v0.0.44") == 1
    assert [n for n, _ in samples if n == "slurmbridge_build_info"] == ["slurmbridge_build_info"]


async def test_leader_gauge_is_one_while_the_replica_holds_the_lease_and_zero_after(
    bridge: Bridge
) -> None:
    kube = FakeKube()
    elector = LeaderElector(kube, namespace="slurmbridge", identity="a", lease_seconds=3)
    leading = asyncio.Event()

    async def lead(_: datetime) -> None:
        leading.set()
        await asyncio.Event().wait()

    run = asyncio.create_task(elector.run(lead))
    await asyncio.wait_for(leading.wait(), 5)
    assert sample(await scrape(bridge), "slurmbridge_leader") == 1
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert sample(await scrape(bridge), "slurmbridge_leader") == 0


async def test_token_file_expiry_is_the_seconds_until_its_exp_claim(
    bridge: Bridge, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(jwt.encode({"sun": "slurm", "exp": int(time.time()) + 3 * 86400},
                                b"k" * 32, algorithm="HS256"))
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token_file=token, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(openapi)) as client:
        await client.connect()  # the token is read when it is first sent
    left = sample(await scrape(bridge), "slurmbridge_slurm_token_expiry_seconds",
                  credential="token")
    assert 3 * 86400 - 60 < left <= 3 * 86400


async def test_minted_tokens_expiry_is_their_lifespan(bridge: Bridge, tmp_path: Path) -> None:
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 64)
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", jwt_key_file=key,
                             token_lifespan_seconds=600, retries=0)
    async with SlurmClient(settings, exchange=HttpxExchange.mock(openapi)) as client:
        await client.connect()
    assert sample(await scrape(bridge), "slurmbridge_slurm_token_expiry_seconds",
                  credential="jwt_key") == 600


async def test_oldest_gated_pod_age_is_exported_without_pod_names(tmp_path: Path) -> None:
    kube = FakeKube()
    bridge = bridge_over_fakes(tmp_path, FakeSlurm(), kube)
    now = datetime.now(UTC)
    for name, age, gates in (("held-longest", 20, [True]), ("young", 0, [True]),
                             ("kueue-held", 60, [True, False]), ("released", 90, [])):
        builder = PodBuilder(name, "ns").uid(f"uid-{name}").created(
            (now - timedelta(minutes=age)).strftime("%Y-%m-%dT%H:%M:%SZ"))
        if gates:
            builder.gated(*(["kueue.x-k8s.io/admission"] if len(gates) > 1 else []))
        kube.add(builder.build())
    await bridge.start()
    try:
        await asyncio.wait_for(bridge.pod_cache.wait_synced(), 5)
        samples = await scrape(bridge)
    finally:
        await bridge.stop()
    oldest = sample(samples, "slurmbridge_oldest_gated_pod_seconds")
    assert 20 * 60 - 5 < oldest < 20 * 60 + 60
    names = {"held-longest", "ns/held-longest", "uid-held-longest"}
    assert not [labels for name, labels in samples if name.startswith("slurmbridge_")
                and any(v in names for _, v in labels)]
