"""The bridge's apiserver client (lightkube over aiohttp) against a stand-in apiserver on
127.0.0.1: what lightkube promises its callers must hold over the new transport."""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from aiohttp import web
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from bridge.kube.apierrors import is_conflict
from bridge.kube.connection import kube_client
from slurmbridge_devkit.builders import PodBuilder
from tests.served import aiohttp_served, kubeconfig_for

TOKEN = "t0ken"


def _pod(name: str, version: str = "7") -> dict[str, object]:
    return PodBuilder(name, "ns").uid("u-" + name).resource_version(version).manifest()


def _json(doc: object, status: int = 200) -> web.Response:
    """As the apiserver answers: ``application/json`` exactly (lightkube compares it)."""
    return web.Response(body=json.dumps(doc).encode(), status=status,
                        headers={"Content-Type": "application/json"})


class StandIn:
    def __init__(self) -> None:
        self.seen: list[web.Request] = []
        self.bodies: list[bytes] = []
        self.more_events = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/ns/pods/{name}", self.get)
        app.router.add_patch("/api/v1/namespaces/ns/pods/{name}", self.patch)
        app.router.add_get("/api/v1/namespaces/ns/pods", self.watch)
        return app

    async def get(self, request: web.Request) -> web.Response:
        self.seen.append(request)
        return _json(_pod(request.match_info["name"]))

    async def patch(self, request: web.Request) -> web.Response:
        self.seen.append(request)
        self.bodies.append(await request.read())
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                  "reason": "Conflict", "message": "the object has been modified"}
        return _json(status, status=409)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for i in range(2):
            line = {"type": "MODIFIED", "object": _pod("p", str(10 + i))}
            await resp.write(json.dumps(line).encode() + b"\n")
        await self.more_events.wait()  # a watch stays open: events come when they happen
        await resp.write(json.dumps({"type": "DELETED", "object": _pod("p", "12")}).encode()
                         + b"\n")
        return resp


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[tuple[StandIn, AsyncClient]]:
    stand_in = StandIn()
    async with aiohttp_served(stand_in.app()) as server:
        client = kube_client(kubeconfig_for(tmp_path / "kubeconfig", server, {"token": TOKEN}))
        try:
            yield stand_in, client
        finally:
            await client.close()


async def test_a_read_carries_the_users_credential_and_decodes(
    apiserver: tuple[StandIn, AsyncClient],
) -> None:
    stand_in, client = apiserver
    pod = await client.get(Pod, "p", namespace="ns")
    assert pod.metadata is not None and pod.metadata.uid == "u-p"
    [request] = stand_in.seen
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert "gzip" not in request.headers.get("Accept-Encoding", "")  # nothing to inflate


async def test_a_refused_write_is_lightkubes_api_error_with_the_status(
    apiserver: tuple[StandIn, AsyncClient],
) -> None:
    stand_in, client = apiserver
    patch = [{"op": "test", "path": "/metadata/uid", "value": "u-p"}]
    with pytest.raises(ApiError) as refused:
        await client.patch(Pod, "p", patch, namespace="ns", patch_type=PatchType.JSON)
    assert is_conflict(refused.value)
    assert json.loads(stand_in.bodies[0]) == patch
    assert stand_in.seen[0].headers["Content-Type"] == "application/json-patch+json"


async def test_a_watch_streams_events_as_they_come(
    apiserver: tuple[StandIn, AsyncClient],
) -> None:
    stand_in, client = apiserver
    events: list[tuple[str, str]] = []
    async with asyncio.timeout(10):
        async for event, pod in client.watch(Pod, namespace="ns"):
            assert pod.metadata is not None and pod.metadata.resourceVersion
            events.append((event, pod.metadata.resourceVersion))
            if len(events) == 2:  # both came before the server's third
                stand_in.more_events.set()
            if event == "DELETED":
                break
    assert events == [("MODIFIED", "10"), ("MODIFIED", "11"), ("DELETED", "12")]


async def test_an_apiserver_that_is_away_is_a_connect_error(tmp_path: Path) -> None:
    """Nothing listens: httpx2's ConnectError, which the bridge's loops retry."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    client = kube_client(kubeconfig)
    try:
        with pytest.raises(httpx2.ConnectError):
            await client.get(Pod, "p", namespace="ns")
    finally:
        await client.close()


async def test_a_request_waits_for_a_free_connection_no_longer_than_the_pool_timeout(
    apiserver: tuple[StandIn, AsyncClient], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx2's pool timeout holds over aiohttp too: every connection busy (here: the one
    allowed, held by an open watch) is an error after the wait, never a request that hangs."""
    from bridge.kube import transport  # noqa: PLC0415

    monkeypatch.setattr(transport, "CONNECTIONS", 1)
    stand_in, client = apiserver
    watch = client.watch(Pod, namespace="ns")
    await anext(aiter(watch))  # the only connection now streams the watch
    client._client._client.timeout = httpx2.Timeout(0.5)  # lightkube's httpx2 client
    try:
        async with asyncio.timeout(10):
            with pytest.raises(httpx2.TimeoutException):
                await client.get(Pod, "p", namespace="ns")
    finally:
        stand_in.more_events.set()  # the stand-in's watch ends
        await watch.aclose()  # type: ignore[attr-defined]
