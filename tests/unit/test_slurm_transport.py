"""The bridge's own HTTP path to slurmrestd (aiohttp, bridge/slurm/transport.py) against a
local stand-in on 127.0.0.1: what slurmrestd receives, and what each kind of failure becomes
(retried or not, which ``SlurmError``, which metric).  The other Slurm unit tests put
handler-style fakes behind the same seam (slurmbridge_devkit/slurmrest.py)."""

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import REGISTRY

from bridge.config import SlurmSettings
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmAuthError, SlurmUnavailable
from bridge.slurm.transport import AiohttpTransport
from bridge.slurm.types import JobState

PARSER = "v0.0.44"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StandIn:
    """slurmrestd answering the negotiation itself and everything else with ``handler``;
    records every request it saw (method, path, query, headers, body)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.seen: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/openapi/v3":
            return web.json_response({"paths": {f"/slurm/{PARSER}/jobs/": {}}})
        self.seen.append({
            "method": request.method, "path": request.path,
            "query": list(request.query.items()), "headers": dict(request.headers),
            "body": await request.read(),
        })
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await self.handler(request)
        finally:
            self.in_flight -= 1


@asynccontextmanager
async def stand_in(handler: Handler, **settings: Any) -> AsyncIterator[tuple[StandIn, SlurmClient]]:
    rest = StandIn(handler)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rest.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        config = SlurmSettings(url=str(server.make_url("")).rstrip("/"), user="slurm",
                               token="t", backoff_seconds=0, **settings)
        async with SlurmClient(config) as client:
            yield rest, client
    finally:
        await server.close()


def _errors(op: str, kind: str) -> float:
    labels = {"operation": op, "kind": kind}
    return REGISTRY.get_sample_value("slurmbridge_slurm_errors_total", labels) or 0.0


def _req() -> JobRequest:
    return JobRequest(name="k8s:ns/p", owner=PodOwner("uid-1"))


async def test_slurmrestd_receives_what_the_bridge_sent() -> None:
    async def answer(request: web.Request) -> web.Response:
        if request.path.endswith("/job/submit"):
            return web.json_response({"job_id": 42})
        return web.json_response({"jobs": [{"job_id": 7, "state": ["RUNNING"]}]})

    async with stand_in(answer) as (rest, client):
        assert await client.submit(_req()) == 42
        assert await client.job_states([7, 9]) == {7: JobState.RUNNING}
    submit, states = rest.seen
    assert (submit["method"], submit["path"]) == ("POST", f"/slurm/{PARSER}/job/submit")
    assert submit["headers"]["Content-Type"] == "application/json"
    assert submit["headers"]["X-SLURM-USER-NAME"] == "slurm"
    assert submit["headers"]["X-SLURM-USER-TOKEN"] == "t"
    body = json.loads(submit["body"])
    assert body["job"]["name"] == "k8s:ns/p" and body["job"]["requeue"] is False
    assert (states["method"], states["path"]) == ("GET", f"/slurm/{PARSER}/jobs/state/")
    assert states["query"] == [("job_id", "7"), ("job_id", "9")]
    assert states["body"] == b"" and "Content-Type" not in states["headers"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_nothing_listening_is_retried_then_unavailable() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    settings = SlurmSettings(url=url, token="t", retries=2, backoff_seconds=0.01)
    before = _errors("negotiate", "connect")
    started = time.monotonic()
    async with SlurmClient(settings) as client:
        with pytest.raises(SlurmUnavailable, match=r"failed negotiate after 3 attempts"):
            await client.list_nodes()
    assert time.monotonic() - started < 5
    assert _errors("negotiate", "connect") == before + 3


async def test_a_503_is_retried_when_idempotent_only() -> None:
    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=503, text="slurmctld busy")

    async with stand_in(busy, retries=2) as (rest, client):
        with pytest.raises(SlurmUnavailable, match="after 3 attempts: HTTP 503"):
            await client.job_states([1])
        assert len(rest.seen) == 3
        rest.seen.clear()
        with pytest.raises(SlurmUnavailable, match="HTTP 503: slurmctld busy"):
            await client.submit(_req())  # never sent twice: it may have been acted on
        assert len(rest.seen) == 1


async def test_a_dropped_connection_is_retried_when_idempotent_only() -> None:
    async def drop(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    async with stand_in(drop, retries=1) as (rest, client):
        before = _errors("submit", "transport")
        with pytest.raises(SlurmUnavailable, match="submit may or may not have happened"):
            await client.submit(_req())
        assert len(rest.seen) == 1 and _errors("submit", "transport") == before + 1
        rest.seen.clear()
        with pytest.raises(SlurmUnavailable, match="failed get_job after 2 attempts"):
            await client.get_job(1)
        # each attempt: aiohttp itself resends an idempotent request once on a dropped
        # connection (RFC 9112 9.3.1, the stale keep-alive case), then tenacity's retry
        assert len(rest.seen) == 4


async def test_a_slow_answer_times_out_and_is_retried() -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({"jobs": []})

    async with stand_in(slow, retries=1, timeout_seconds=0.2) as (rest, client):
        started = time.monotonic()
        with pytest.raises(SlurmUnavailable, match="failed job_states after 2 attempts"):
            await client.job_states([1])
        assert time.monotonic() - started < 1.5 and len(rest.seen) == 2


async def test_a_refused_credential_is_read_again_once_then_an_auth_error() -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=401)

    async with stand_in(refuse, retries=3) as (rest, client):
        with pytest.raises(SlurmAuthError, match="refused the credential"):
            await client.get_job(1)
    assert len(rest.seen) == 2  # no retries on 401: once more after re-reading


async def test_no_more_connections_than_configured() -> None:
    async def slowish(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        return web.json_response({"jobs": []})

    async with stand_in(slowish, max_connections=2) as (rest, client):
        await asyncio.gather(*(client.job_states([i]) for i in range(8)))
    assert len(rest.seen) == 8 and rest.most_in_flight == 2


async def test_a_redirect_is_not_followed() -> None:
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    transport = AiohttpTransport("http://127.0.0.1", timeout_seconds=5, max_connections=1)
    async with stand_in(moved) as (rest, client):
        url = client.rest.settings.url + f"/slurm/{PARSER}/jobs/"
        reply = await transport.send("GET", url, headers={})
        await transport.aclose()
    assert reply.status == 302 and [s["path"] for s in rest.seen] == [f"/slurm/{PARSER}/jobs/"]


def test_the_client_can_be_built_outside_an_event_loop() -> None:
    """The aiohttp session is made on first use, inside the loop that uses it."""
    client = SlurmClient(SlurmSettings(token="t"))
    assert client.rest.transport is not None
