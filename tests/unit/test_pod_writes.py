"""The per-pod writes the bridge's client sends bare (bridge/kube/podwrites.py), against a
stand-in apiserver on 127.0.0.1: each refusal reaches its caller as it did through lightkube
(a Binding that lost: ``AlreadyBound``; a release whose precondition failed: a conflict; a pod
gone: not found), with the credential and the session of the lightkube client."""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp import web
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from bridge import keys
from bridge.kube import writes
from bridge.kube.apierrors import is_conflict, is_not_found, is_unprocessable
from bridge.kube.connection import kube_client
from bridge.kube.podwrites import BridgeClient
from tests.served import aiohttp_served, kubeconfig_for

TOKEN = "t0ken"
PODS = "/api/v1/namespaces/ns/pods"


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    return web.Response(body=json.dumps(body).encode(), status=code,
                        headers={"Content-Type": "application/json"})


class StandIn:
    """Answers each write with the next of ``answers`` (a success when none is left)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []
        self.answers: list[web.Response] = []
        self.expired = ""  # an Authorization header answered 401

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_patch(PODS + "/{name}", self.answer)
        app.router.add_post(PODS + "/{name}/binding", self.answer)
        app.router.add_post("/api/v1/namespaces/{ns}/events", self.answer)
        app.router.add_get(PODS + "/{name}", self.pod)
        return app

    async def answer(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path_qs, dict(request.headers),
                          json.loads(await request.read())))
        if request.headers.get("Authorization") == self.expired:
            return _status(401, "Unauthorized", "Unauthorized")
        if self.answers:
            return self.answers.pop(0)
        # A Binding is answered with a Status, a patch with the pod: neither is read.
        return web.Response(body=b'{"kind":"Status","status":"Success","code":201}',
                            status=201, headers={"Content-Type": "application/json"})

    async def pod(self, request: web.Request) -> web.Response:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": request.match_info["name"], "namespace": "ns", "uid": "u-1"}}
        return web.Response(body=json.dumps(pod).encode(),
                            headers={"Content-Type": "application/json"})


def _rotating(tmp_path: Path, server: str) -> tuple[Path, BridgeClient]:
    """A client whose token is read from a file (holding "old"), as a pod's mounted one."""
    token_file = tmp_path / "token"
    token_file.write_text("old")
    return token_file, kube_client(kubeconfig_for(tmp_path / "kubeconfig", server,
                                                {"tokenFile": str(token_file)}))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[StandIn, str]]:
    stand_in = StandIn()
    async with aiohttp_served(stand_in.app()) as server:
        yield stand_in, server


@pytest.fixture
async def apiserver(
    served: tuple[StandIn, str], tmp_path: Path
) -> AsyncIterator[tuple[StandIn, BridgeClient]]:
    stand_in, server = served
    client = kube_client(kubeconfig_for(tmp_path / "kubeconfig", server, {"token": TOKEN}))
    try:
        yield stand_in, client
    finally:
        await client.close()


class _Pod:
    namespace, name, uid = "ns", "p", "u-1"


async def test_a_binding_is_one_post_with_the_users_credential(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    stand_in, client = apiserver
    await writes.bind(client, "ns", "p", "u-1", "node-a", annotations={keys.JOB_ID: "7"})
    [(method, target, headers, body)] = stand_in.seen
    assert (method, target) == ("POST", f"{PODS}/p/binding?fieldManager=slurmbridge")
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Content-Type"] == "application/json"
    assert body == {"apiVersion": "v1", "kind": "Binding", "metadata": {
        "name": "p", "namespace": "ns", "uid": "u-1", "annotations": {keys.JOB_ID: "7"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}}


async def test_a_binding_refused_with_409_is_already_bound(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    """The pod is bound already, or was recreated (the UID precondition): the binder reads
    it again to tell which."""
    stand_in, client = apiserver
    stand_in.answers.append(_status(409, "Conflict", "pod p is already assigned to node b"))
    with pytest.raises(writes.AlreadyBound, match="already assigned to node b"):
        await writes.bind(client, "ns", "p", "u-1", "node-a")


async def test_a_binding_refused_otherwise_is_lightkubes_api_error(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    stand_in, client = apiserver
    stand_in.answers.append(_status(403, "Forbidden", "bindings is forbidden"))
    with pytest.raises(ApiError) as refused:
        await writes.bind(client, "ns", "p", "u-1", "node-a")
    assert refused.value.status.code == 403
    assert refused.value.status.message == "bindings is forbidden"


async def test_a_release_whose_precondition_failed_is_a_conflict_or_unprocessable(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    """What the releaser reads the pod again on: a failed ``test`` (422), a moved
    resourceVersion (409); the JSON Patch goes as sent."""
    stand_in, client = apiserver
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
           {"op": "remove", "path": "/spec/schedulingGates"}]
    stand_in.answers += [_status(422, "Invalid", "the test operation failed"),
                         _status(409, "Conflict", "the object has been modified")]
    with pytest.raises(ApiError) as failed_test:
        await client.patch_pod("ns", "p", ops)
    assert is_unprocessable(failed_test.value)
    with pytest.raises(ApiError) as moved:
        await client.patch_pod("ns", "p", ops)
    assert is_conflict(moved.value)
    method, target, headers, body = stand_in.seen[0]
    assert (method, target, body) == ("PATCH", f"{PODS}/p?fieldManager=slurmbridge", ops)
    assert headers["Content-Type"] == "application/json-patch+json"


async def test_a_write_to_a_pod_that_is_gone_is_not_found(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    stand_in, client = apiserver
    stand_in.answers.append(_status(404, "NotFound", 'pods "p" not found'))
    with pytest.raises(ApiError) as gone:
        await client.patch_pod("ns", "p", [{"op": "test", "path": "/metadata/uid",
                                             "value": "u-1"}])
    assert is_not_found(gone.value)


async def test_an_answer_that_is_no_status_is_an_api_error_of_its_http_status(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    """A proxy in front of the apiserver answers in HTML: the HTTP status still decides."""
    stand_in, client = apiserver
    stand_in.answers.append(web.Response(body=b"<html>Bad Gateway</html>", status=502))
    with pytest.raises(ApiError) as refused:
        await client.patch_pod("ns", "p", [])
    assert refused.value.status.code == 502
    assert "Bad Gateway" in (refused.value.status.message or "")


async def test_an_event_is_one_post_and_a_refused_one_fails_no_caller(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    stand_in, client = apiserver
    await writes.record_event(client, _Pod(), keys.EventReason.PENDING, "Slurm job 7 pending")
    stand_in.answers.append(_status(403, "Forbidden", "events is forbidden"))
    await writes.record_event(client, _Pod(), keys.EventReason.PENDING, "again")  # no raise
    method, target, _, body = stand_in.seen[0]
    assert (method, target) == ("POST", "/api/v1/namespaces/ns/events?fieldManager=slurmbridge")
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p",
                                      "namespace": "ns", "uid": "u-1"}
    assert (body["reason"], body["message"], body["type"]) == (
        "SlurmPending", "Slurm job 7 pending", "Normal")
    assert body["metadata"] == {"generateName": "p.", "namespace": "ns"}


async def test_a_rotated_token_file_is_read_again_after_a_401(
    served: tuple[StandIn, str], tmp_path: Path,
) -> None:
    """In a cluster the kubelet rotates the service account's token: as lightkube does, the
    file is read again after a 401 and the write sent once more; the new token is kept."""
    stand_in, server = served
    token_file, client = _rotating(tmp_path, server)
    try:
        await client.patch_pod("ns", "p", [])
        token_file.write_text("new")
        stand_in.answers.append(_status(401, "Unauthorized", "Unauthorized"))
        await client.patch_pod("ns", "p", [])
        await client.patch_pod("ns", "p", [])
    finally:
        await client.close()
    assert [headers["Authorization"] for _, _, headers, _ in stand_in.seen] == [
        "Bearer old", "Bearer old", "Bearer new", "Bearer new"]


async def test_a_burst_of_writes_refused_with_a_rotated_token_all_go_again_with_the_new(
    served: tuple[StandIn, str], tmp_path: Path,
) -> None:
    stand_in, server = served
    token_file, client = _rotating(tmp_path, server)
    try:
        await client.patch_pod("ns", "p", [])
        token_file.write_text("new")
        stand_in.expired = "Bearer old"
        await asyncio.gather(*(client.patch_pod("ns", f"p{i}", []) for i in range(8)))
    finally:
        await client.close()
    sent = [headers["Authorization"] for _, _, headers, _ in stand_in.seen[1:]]
    assert sent.count("Bearer new") == 8 and sent.count("Bearer old") == 8


async def test_a_401_with_a_fixed_token_is_not_sent_again(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    stand_in, client = apiserver
    stand_in.answers.append(_status(401, "Unauthorized", "Unauthorized"))
    with pytest.raises(ApiError) as refused:
        await client.patch_pod("ns", "p", [])
    assert refused.value.status.code == 401 and len(stand_in.seen) == 1


async def test_the_writes_and_lightkubes_reads_share_one_connection(
    apiserver: tuple[StandIn, BridgeClient],
) -> None:
    """One session, one pool: a read through lightkube and a bare write reuse a connection."""
    _, client = apiserver
    await client.get(Pod, "p", namespace="ns")
    await client.patch_pod("ns", "p", [])
    await client.get(Pod, "p", namespace="ns")
    connector = client._transport.session().connector
    assert connector is not None
    assert sum(len(idle) for idle in connector._conns.values()) == 1


async def test_an_apiserver_that_is_away_is_httpx2s_connect_error(tmp_path: Path) -> None:
    """As for lightkube's own requests: the bridge's loops retry it."""
    client = kube_client(kubeconfig_for(tmp_path / "kubeconfig", "http://127.0.0.1:9",
                                     {"token": TOKEN}))
    try:
        with pytest.raises(httpx2.ConnectError):
            await client.patch_pod("ns", "p", [])
    finally:
        await client.close()
