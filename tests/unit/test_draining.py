"""A webhook or extender replica told to stop keeps answering, and lets its clients close."""

import asyncio
import signal
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from bridge.draining import DrainingServer, ServerConfig


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


class Running:
    """The server on a loop of its own in a thread (the test sends no real signal)."""

    def __init__(self, drain_seconds: float) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        config = ServerConfig(Counter("handshakes", "unused", registry=CollectorRegistry()))
        config.bind = [f"127.0.0.1:{port}"]  # plain HTTP: the drain does not depend on TLS
        self.server = DrainingServer(Starlette(routes=[Route("/", _ok)]), config, drain_seconds)
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
        self.url = f"http://127.0.0.1:{port}/"

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
