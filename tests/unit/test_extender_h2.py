"""The extender's protocol port speaks h2 to a client that offers it: kube-scheduler's
extender client does (ALPN), and over HTTP/1.1 its parallel calls churned a TLS handshake per
0.13-0.30 calls (B8), since it keeps only 2 idle connections."""

import asyncio
import signal
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trustme
from prometheus_client import REGISTRY

from bridge.config import ExtenderSettings, Settings, SlurmSettings
from bridge.draining import DrainingServer
from extender.protocol import create_app
from extender.server import api_config
from tests.served import REFUSED, listening
from tests.unit.test_extender_protocol import unreachable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def drain_seconds() -> float:
    return 0


@pytest.fixture
async def protocol(
    tmp_path: Path, drain_seconds: float
) -> AsyncIterator[tuple[DrainingServer, str, ssl.SSLContext]]:
    """The protocol port over the extender's own settings; a client context with a client
    certificate."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    port = _free_port()
    tls = ExtenderSettings(host="127.0.0.1", port=port, tls_cert_file=tmp_path / "tls.crt",
                           tls_key_file=tmp_path / "tls.key", client_ca_file=tmp_path / "ca.crt")
    cfg = Settings(slurm=SlurmSettings(url="http://127.0.0.1:9", token="t"))
    server = DrainingServer(create_app(unreachable(cfg)), api_config(tls), drain_seconds)
    serving = asyncio.create_task(server.serve())
    client = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    ca.issue_cert("kube-scheduler").configure_cert(client)
    try:
        await listening(port, serving)
        yield server, f"https://127.0.0.1:{port}", client
    finally:
        server.handle_exit(signal.SIGTERM)
        server.handle_exit(signal.SIGTERM)
        await serving


@pytest.fixture
def served(
    protocol: tuple[DrainingServer, str, ssl.SSLContext],
) -> tuple[str, ssl.SSLContext]:
    return protocol[1], protocol[2]


def _handshakes() -> float:
    return REGISTRY.get_sample_value("slurmbridge_extender_tls_handshakes_total") or 0.0


async def test_a_client_offering_h2_gets_h2(served: tuple[str, ssl.SSLContext]) -> None:
    url, client = served
    async with httpx.AsyncClient(http2=True, verify=client) as http:
        response = await http.get(f"{url}/nothing")
    assert response.http_version == "HTTP/2"


async def test_many_parallel_calls_over_h2_cost_one_handshake(
    served: tuple[str, ssl.SSLContext],
) -> None:
    """kube-scheduler's parallel binds: with h2 they share the one connection."""
    url, client = served
    before = _handshakes()
    async with httpx.AsyncClient(http2=True, verify=client) as http:
        await http.get(f"{url}/nothing")  # the connection, then 32 calls at once on it
        answers = await asyncio.gather(*(http.get(f"{url}/nothing") for _ in range(32)))
    assert {a.http_version for a in answers} == {"HTTP/2"}
    assert _handshakes() - before == 1


async def test_a_client_without_a_certificate_is_refused(
    served: tuple[str, ssl.SSLContext], tmp_path: Path
) -> None:
    url, _ = served
    anonymous = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    async with httpx.AsyncClient(http2=True, verify=anonymous) as http:
        with pytest.raises(REFUSED):
            await http.get(f"{url}/nothing")


async def test_a_client_speaking_tls_1_2_is_served(served: tuple[str, ssl.SSLContext]) -> None:
    """As before granian, whose own default is TLS 1.3 only."""
    url, client = served
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    async with httpx.AsyncClient(http2=True, verify=client) as http:
        assert (await http.get(f"{url}/nothing")).status_code == 404


async def test_a_client_certificate_another_ca_signed_is_refused(
    served: tuple[str, ssl.SSLContext], tmp_path: Path
) -> None:
    url, _ = served
    stranger = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    trustme.CA().issue_cert("kube-scheduler").configure_cert(stranger)
    async with httpx.AsyncClient(http2=True, verify=stranger) as http:
        with pytest.raises(REFUSED):
            await http.get(f"{url}/nothing")


@pytest.mark.parametrize("drain_seconds", [1.0])
async def test_after_sigterm_the_port_serves_on_for_the_drain_then_stops(
    protocol: tuple[DrainingServer, str, ssl.SSLContext],
) -> None:
    """A replica told to stop still gets calls (bridge/draining.py): HTTP/1.1 answers ask the
    client to close, h2 ones carry on until the GOAWAY at the drain's end."""
    server, url, client = protocol
    async with httpx.AsyncClient(verify=client) as h1, \
            httpx.AsyncClient(http2=True, verify=client) as h2:
        await h2.get(f"{url}/nothing")
        server.handle_exit(signal.SIGTERM)
        start = time.monotonic()
        await asyncio.sleep(0.3)
        assert (await h1.get(f"{url}/nothing")).headers["connection"] == "close"
        assert (await h2.get(f"{url}/nothing")).http_version == "HTTP/2"
        while time.monotonic() - start < 5:
            try:
                await h1.get(f"{url}/nothing")
            except httpx.TransportError:
                break
            await asyncio.sleep(0.1)
        assert 0.9 < time.monotonic() - start < 5
