"""Ephemeral containers (`kubectl debug`, the pods/ephemeralcontainers subresource) added to a
pod the bridge placed: they see the pod's GPUs, never ones they name themselves (issue 41,
case 6)."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from admission.webhook import create_app
from bridge import keys
from tests.unit.test_admission import OPEN, SETTINGS, apply, lookups, make_pod, make_review, post

SOURCES = {name: f"metadata.annotations['{source}']"
           for name, source in keys.GPU_ENV_SOURCES.items()}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, lookups(), tenancy=OPEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://webhook") as c:
        yield c


def placed(*ephemeral: dict[str, Any], scheduler: str | None = keys.SCHEDULER_NAME
           ) -> dict[str, Any]:
    """A bound pod (of the bridge's scheduler unless told), with ``ephemeral`` containers."""
    spec: dict[str, Any] = {"nodeName": "gpu01"}
    if scheduler:
        spec["schedulerName"] = scheduler
    if ephemeral:
        spec["ephemeralContainers"] = list(ephemeral)
    return make_pod(namespace="other", annotations={keys.GPU_IDS: "4,5"}, **spec)


def debug(name: str = "debugger", **env: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "nvidia/cuda", "targetContainerName": "c"}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return container


def review(pod: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    body = make_review(pod, operation="UPDATE", old=old)
    body["request"]["subResource"] = "ephemeralcontainers"
    return body


def gpu_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's GPU variables: the downward-API field each is read from, or its value."""
    out = {}
    for var in container.get("env", []):
        if var["name"] in keys.GPU_ENV_VARS:
            ref = var.get("valueFrom", {}).get("fieldRef", {})
            out[var["name"]] = ref.get("fieldPath") or var.get("value", "")
    return out


async def test_an_ephemeral_container_gets_the_pods_gpus_only(client: httpx.AsyncClient) -> None:
    """Without a variable of its own, the image's NVIDIA_VISIBLE_DEVICES (CUDA images: all)
    would choose: the webhook gives the new container the pod's GPU variables."""
    old = placed()
    new = placed(debug())
    response = await post(client, "mutate", review(new, old))
    assert response["allowed"] is True, response
    (container,) = apply(new, response)["spec"]["ephemeralContainers"]
    assert gpu_env(container) == SOURCES
    assert (await post(client, "validate", review(apply(new, response), old)))["allowed"]


async def test_an_ephemeral_container_naming_its_gpus_is_refused(
    client: httpx.AsyncClient,
) -> None:
    old = placed(debug("earlier"))
    new = placed(debug("earlier"), debug("thief", NVIDIA_VISIBLE_DEVICES="all"))
    mutated = apply(new, await post(client, "mutate", review(new, old)))
    (earlier, thief) = mutated["spec"]["ephemeralContainers"]
    assert earlier == debug("earlier"), "an existing ephemeral container cannot change"
    assert gpu_env(thief)["NVIDIA_VISIBLE_DEVICES"] == "all", "the user's value is kept..."
    response = await post(client, "validate", review(mutated, old))
    assert response["allowed"] is False, "...and refused"
    message = response["status"]["message"]
    assert "thief" in message and "NVIDIA_VISIBLE_DEVICES" in message, message
    assert "other/train" in message and keys.GPU_IDS in message, message


async def test_an_ephemeral_container_without_the_bridges_variables_is_refused(
    client: httpx.AsyncClient,
) -> None:
    """The mutating webhook was skipped (or another one removed the variables)."""
    response = await post(client, "validate", review(placed(debug()), placed()))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "debugger" in message and "NVIDIA_VISIBLE_DEVICES" in message, message


async def test_ephemeral_containers_of_other_pods_are_left_alone(
    client: httpx.AsyncClient,
) -> None:
    old, new = placed(scheduler=None), placed(debug(NVIDIA_VISIBLE_DEVICES="all"), scheduler=None)
    for endpoint in ("mutate", "validate"):
        assert await post(client, endpoint, review(new, old)) == {
            "uid": "review-1", "allowed": True}
