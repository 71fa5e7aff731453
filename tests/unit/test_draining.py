"""A webhook or extender replica told to stop keeps answering, and lets its clients close."""

import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from bridge.draining import DrainingServer


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


class Running:
    def __init__(self, drain_seconds: float) -> None:
        config = uvicorn.Config(Starlette(routes=[Route("/", _ok)]), host="127.0.0.1", port=0,
                                log_config=None, lifespan="off")
        self.server = DrainingServer(config, drain_seconds)
        # Not the main thread: uvicorn installs no signal handlers, the test sends none.
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/"

    def sigterm(self) -> float:
        self.server.handle_exit(signal.SIGTERM, None)
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
    signalled = running.sigterm()
    time.sleep(0.5)  # several of uvicorn's 0.1 s ticks: a plain server would be gone

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
    signalled = running.sigterm()
    assert running.wait_stopped(within=3) - signalled < 1


def test_a_second_signal_during_the_drain_stops_at_once() -> None:
    running = Running(drain_seconds=60)
    signalled = running.sigterm()
    time.sleep(0.3)
    assert running.thread.is_alive()
    running.server.handle_exit(signal.SIGINT, None)
    assert running.wait_stopped(within=3) - signalled < 3
