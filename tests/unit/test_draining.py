"""A webhook or extender replica told to stop keeps answering, and lets its clients close."""

import asyncio
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import h2.connection
import hpack
import httpx
import pytest
import trustme
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    SettingsFrame,
)
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from bridge.draining import DrainingServer, ServerConfig, https_config
from tests.served import listening


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _slow(request: Request) -> PlainTextResponse:
    await asyncio.sleep(1)
    return PlainTextResponse("slow")


class Running:
    """The server on a loop of its own in a thread (the test sends no real signal)."""

    def __init__(self, drain_seconds: float) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        config = ServerConfig(Counter("handshakes", "unused", registry=CollectorRegistry()))
        config.bind = [f"127.0.0.1:{port}"]  # plain HTTP: the drain does not depend on TLS
        app = Starlette(routes=[Route("/", _ok), Route("/slow", _slow)])
        self.server = DrainingServer(app, config, drain_seconds)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self.server.serve(),), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.01)
        self.url, self.port = f"http://127.0.0.1:{port}/", port

    def signal(self, sig: signal.Signals = signal.SIGTERM) -> float:
        self.loop.call_soon_threadsafe(self.server.handle_exit, sig)
        return time.monotonic()

    def wait_stopped(self, within: float) -> float:
        self.thread.join(within)
        assert not self.thread.is_alive(), f"still serving {within} s after SIGTERM"
        return time.monotonic()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def test_a_stopping_server_answers_on_open_connections_and_asks_the_client_to_close(
        client: httpx.Client) -> None:
    running = Running(drain_seconds=1.5)
    first = client.get(running.url)
    assert first.status_code == 200 and first.headers.get("connection") != "close"
    signalled = running.signal()
    time.sleep(0.5)  # a server without a drain would be gone

    again = client.get(running.url)  # the keep-alive connection opened before SIGTERM
    assert again.status_code == 200
    assert again.headers.get("connection") == "close"
    with httpx.Client(timeout=5) as other:  # Service rules not caught up yet: a new connection
        assert other.get(running.url).status_code == 200

    stopped = running.wait_stopped(within=5)
    assert stopped - signalled >= 1.5


def test_without_a_drain_sigterm_stops_at_once(client: httpx.Client) -> None:
    running = Running(drain_seconds=0)
    assert client.get(running.url).status_code == 200
    signalled = running.signal()
    assert running.wait_stopped(within=3) - signalled < 1


def test_a_second_signal_during_the_drain_stops_at_once() -> None:
    running = Running(drain_seconds=60)
    signalled = running.signal()
    time.sleep(0.3)
    assert running.thread.is_alive()
    running.signal(signal.SIGINT)
    assert running.wait_stopped(within=3) - signalled < 3


def _frames_until_closed(sock: socket.socket) -> list[Frame]:
    """The frames the server sends until it closes the connection, its PINGs and SETTINGS
    acknowledged as Go's client does (h2's own state machine refuses the PING that follows a
    first GOAWAY)."""
    received, frames = b"", []
    while data := sock.recv(65536):
        received += data
        while len(received) >= 9:
            frame, length = Frame.parse_frame_header(memoryview(received[:9]))
            if len(received) < 9 + length:
                break
            frame.parse_body(memoryview(received[9:9 + length]))
            received = received[9 + length:]
            frames.append(frame)
            if isinstance(frame, PingFrame | SettingsFrame) and "ACK" not in frame.flags:
                ack = PingFrame(0, frame.opaque_data) if isinstance(frame, PingFrame) \
                    else SettingsFrame(0)
                ack.flags.add("ACK")
                sock.sendall(ack.serialize())
    return frames


def test_at_the_drains_end_h2_clients_get_goaway_and_their_calls_in_flight_finish() -> None:
    """The GOAWAY tells the client to open its next call's connection elsewhere; the call it
    sent before is still answered."""
    running = Running(drain_seconds=0.3)
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock:
        client = h2.connection.H2Connection()
        client.initiate_connection()
        client.send_headers(1, [(":method", "GET"), (":path", "/slow"), (":scheme", "http"),
                                (":authority", "127.0.0.1")], end_stream=True)
        sock.sendall(client.data_to_send())
        time.sleep(0.2)  # the call is in flight
        signalled = running.signal()
        frames = _frames_until_closed(sock)
    goaways = [f for f in frames if isinstance(f, GoAwayFrame)]
    assert goaways and all(f.error_code == 0 for f in goaways)
    (headers,) = [f for f in frames if isinstance(f, HeadersFrame) and f.stream_id == 1]
    assert dict(hpack.Decoder().decode(headers.data, raw=True))[b":status"] == b"200"
    assert b"".join(f.data for f in frames if isinstance(f, DataFrame)) == b"slow"
    assert running.wait_stopped(within=5) - signalled >= 0.3


def test_an_http1_call_in_flight_when_the_drain_ends_is_answered() -> None:
    running = Running(drain_seconds=0.3)
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.2)
        running.signal()
        answer = b""
        while data := sock.recv(65536):  # then the server closes the connection
            answer += data
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"slow")
    running.wait_stopped(within=5)


_SERVE_ONE_CALL_AND_EXIT = """
import asyncio, ssl, sys
from pathlib import Path
import httpx
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from bridge.draining import DrainingServer, https_config

async def ok(request):
    return PlainTextResponse("ok")

async def main():
    tls, port = Path(sys.argv[1]), int(sys.argv[2])
    config = https_config(f"127.0.0.1:{port}", tls / "tls.crt", tls / "tls.key",
                          connections=Counter("c", "c", registry=CollectorRegistry()))
    server = DrainingServer(Starlette(routes=[Route("/", ok)]), config, 0)
    serving = asyncio.create_task(server.serve())
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=tls / "ca.crt"),
                                 http2=True) as http:
        for _ in range(200):
            try:
                await http.get(f"https://127.0.0.1:{port}/")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.02)
    server.handle_exit(15)
    await serving

asyncio.run(main())
"""


def test_a_stopped_server_lets_its_process_exit_cleanly(tmp_path: Path) -> None:
    """The process exits as soon as its server stops (the webhook's does): granian's stopping
    thread must be done with Python by then, or the process aborts.  A race: 8 runs."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    for _ in range(8):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-c", _SERVE_ONE_CALL_AND_EXIT, str(tmp_path), str(port)],
            capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-2000:]


class _Parts:
    def __init__(self) -> None:
        self.started = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        pass


async def test_a_client_ca_that_is_no_certificate_fails_the_start_before_the_parts_start(
        tmp_path: Path) -> None:
    """The server's own loader (Rust) aborts the process on such a file: Python's ssl reads
    the material first and names the problem."""
    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    config = https_config("127.0.0.1:0", tmp_path / "tls.crt", tmp_path / "tls.key",
                          connections=Counter("c", "unused", registry=CollectorRegistry()),
                          client_ca=tmp_path / "ca.crt")
    parts = _Parts()
    with pytest.raises(ssl.SSLError):
        await DrainingServer(Starlette(), config, 0, parts=parts).serve()
    assert not parts.started


def test_idle_connections_by_the_thousand_never_keep_a_caller_out() -> None:
    """Anyone reaching the webhook's Service may open connections and send nothing; the API
    server's next connection is still served."""
    running = Running(drain_seconds=0)
    idle = [socket.create_connection(("127.0.0.1", running.port)) for _ in range(1_100)]
    try:
        with httpx.Client(timeout=5) as client:
            assert client.get(running.url).status_code == 200
    finally:
        for sock in idle:
            sock.close()
        running.signal()
        running.wait_stopped(within=5)


async def test_a_host_given_by_name_is_served() -> None:
    """``extender.host``/``admission.host`` may name the host (granian binds addresses only)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = ServerConfig(Counter("c", "unused", registry=CollectorRegistry()))
    config.bind = [f"localhost:{port}"]
    server = DrainingServer(Starlette(routes=[Route("/", _ok)]), config, 0)
    serving = asyncio.create_task(server.serve())
    try:
        await listening(port, serving)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{port}/")).text == "ok"
    finally:
        server.handle_exit(signal.SIGTERM)
        await serving
