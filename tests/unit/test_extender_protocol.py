"""The extender's HTTP surface: exact protocol keys, and no 5xx whatever the body."""

import asyncio
import json
import socket
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from bridge.config import ExtenderSettings, Settings, SlurmSettings
from bridge.draining import DrainingServer
from bridge.runtime import Bridge
from extender.protocol import create_app, create_health_app
from extender.server import TLSConfigError, api_config
from slurmbridge_cli.compose import build_bridge
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm
from tests.served import listening, requests_on_four_connections

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")



def unreachable(cfg: Settings) -> Bridge:
    """The bridge with fake Slurm and apiserver that are both down: the worst case."""
    slurm, kube = FakeSlurm(), FakeKube()
    slurm.down = kube.down = True
    return build_bridge(cfg, slurm=slurm, kube=kube)


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    cfg = Settings(slurm=SlurmSettings(url="http://127.0.0.1:9", token="t"))
    app = create_app(unreachable(cfg))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as c:
        yield c


def _pod() -> dict[str, Any]:
    return PodBuilder("p", "ns").uid(str(uuid.uuid4())).manifest()


async def test_filter_speaks_pascal_case_and_names_the_problem(
    client: httpx.AsyncClient,
) -> None:
    resp = await client.post("/filter", json={"Pod": _pod(), "NodeNames": ["a", "b"]})
    assert resp.status_code == 200
    body = resp.json()
    assert body["NodeNames"] == []
    assert set(body["FailedAndUnresolvableNodes"]) == {"a", "b"}
    # The apiserver (the pod is read from it before anything acts) is down: it is named.
    assert "cannot read the pod" in body["FailedAndUnresolvableNodes"]["a"]
    assert set(body) >= {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


async def test_prioritize_is_a_bare_list_of_host_scores(client: httpx.AsyncClient) -> None:
    resp = await client.post("/prioritize", json={"Pod": _pod(), "NodeNames": ["a"]})
    assert resp.status_code == 200
    assert resp.json() == [{"Host": "a", "Score": 0}]


async def test_bind_reports_an_unreachable_apiserver_in_error(client: httpx.AsyncClient) -> None:
    args = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"}
    resp = await client.post("/bind", json=args)
    assert resp.status_code == 200
    assert resp.json()["Error"]


async def test_pod_without_identity_is_a_400(client: httpx.AsyncClient) -> None:
    body = {"Pod": {"spec": {"containers": []}}, "NodeNames": ["a"]}
    resp = await client.post("/filter", json=body)
    assert resp.status_code == 400
    assert "metadata.uid" in resp.json()["Error"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4)
    | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
protocol_keys = st.sampled_from(
    ["Pod", "Nodes", "NodeNames", "PodName", "PodNamespace", "PodUID", "Node", "metadata"]
)
shaped = st.dictionaries(protocol_keys, json_values, max_size=6)
raw = st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()) | shaped.map(
    lambda v: json.dumps(v).encode()
)


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(verb=st.sampled_from(["filter", "prioritize", "bind"]), body=raw)
async def test_random_bodies_never_get_a_5xx(
    client: httpx.AsyncClient, verb: str, body: bytes
) -> None:
    headers = {"content-type": "application/json"}
    resp = await client.post(f"/{verb}", content=body, headers=headers)
    assert resp.status_code < 500, resp.text


def _mutual_tls(tmp_path: Path) -> tuple[trustme.CA, ExtenderSettings]:
    """A CA, and the extender's settings with a serving certificate it signed and it as the
    client CA."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    served = ca.issue_cert("127.0.0.1")
    served.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    served.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    return ca, ExtenderSettings(tls_cert_file=tmp_path / "tls.crt",
                                tls_key_file=tmp_path / "tls.key",
                                client_ca_file=tmp_path / "ca.crt")


def test_the_protocol_port_requires_a_client_certificate(tmp_path: Path) -> None:
    """No TLS material, no extender: whoever reaches filter could submit Slurm jobs."""
    with pytest.raises(TLSConfigError) as err:
        api_config(ExtenderSettings())
    assert "CLIENT_CA_FILE" in str(err.value) and "TLS_CERT_FILE" in str(err.value)

    _, tls = _mutual_tls(tmp_path)
    context = api_config(tls).create_ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED


async def test_each_connection_to_the_protocol_port_is_one_handshake_counted(
    tmp_path: Path,
) -> None:
    """B1 reports TLS handshakes per bound pod from this counter: a connection kept alive
    costs one, however many calls it carries."""
    cfg = Settings(slurm=SlurmSettings(url="http://127.0.0.1:9", token="t"))
    ca, tls = _mutual_tls(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tls.host, tls.port = "127.0.0.1", port
    server = DrainingServer(create_app(unreachable(cfg)), api_config(tls), drain_seconds=0)
    serving = asyncio.create_task(server.serve())
    await listening(port, serving)
    url = f"https://127.0.0.1:{port}/nothing"
    client = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    ca.issue_cert("kube-scheduler").configure_cert(client)

    def count() -> float:
        return REGISTRY.get_sample_value("slurmbridge_extender_tls_handshakes_total") or 0.0

    before = count()
    try:
        opened = await requests_on_four_connections(url, client)
        assert count() - before == opened
    finally:
        server.handle_exit(15)
        await serving


async def test_health_app_serves_probes_and_metrics_only() -> None:
    cfg = Settings(slurm=SlurmSettings(url="http://127.0.0.1:9", token="t"))
    transport = httpx.ASGITransport(app=create_health_app(unreachable(cfg)))
    async with httpx.AsyncClient(transport=transport, base_url="http://health") as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 503  # no Slurm listing yet
        assert "slurmbridge_" in (await http.get("/metrics/")).text
        for verb in ("filter", "prioritize", "bind"):
            assert (await http.post(f"/{verb}", json={})).status_code == 404
