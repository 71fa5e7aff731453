"""``webhook.validateCreates: false``: a created pod costs one AdmissionReview, the mutating
webhook's ``/admit``, against the real API server.  It must refuse what the two reviews refused
and admit what they admitted, including a pod the API server names only after the mutating
webhooks (``generateName``, as every Job's pods)."""

from collections.abc import AsyncIterator

import httpx
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest, wait_bound
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.stack_objects import replace_objects
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

ONE_REVIEW = ("--set", "webhook.validateCreates=false")


@pytest.fixture
async def one_review(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> AsyncIterator[str]:
    """A namespace whose creates the stack's webhooks review once (the API server picks the
    configurations up from its own watch, a moment later); as shipped again afterwards."""
    ns = await e2e_namespace("one-review")
    forged = pod_manifest("forged", annotations={keys.GPU_IDS: "0"})

    async def refused_by(prefix: str) -> bool:
        assert forged.metadata is not None
        forged.metadata.namespace = ns
        try:
            await kube.create(forged, dry_run=True)
        except ApiError as exc:
            return f'"{prefix}.slurmbridge.io" denied' in str(exc.status.message)
        return False

    await replace_objects(kube, bridge_stack.webhook_configs(*ONE_REVIEW))
    try:
        await wait_for(lambda: refused_by("mutate"), 30, interval=0.5,
                       what="the API server to send creates to /admit")
        yield ns
    finally:
        await replace_objects(kube, bridge_stack.webhook_configs())
        await wait_for(lambda: refused_by("validate"), 30, interval=0.5,
                       what="the API server to validate creates apart again")


def _reviews(stack: BridgeStack, webhook: str) -> float:
    """Creates the webhook's /metrics counted under ``webhook`` (admit, mutate, validate)."""
    hook = stack.webhook
    text = httpx.get(hook.health_url.replace("/healthz", "/metrics"), verify=hook.verify).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("slurmbridge_webhook_requests_total{")
               and f'webhook="{webhook}"' in line and 'operation="CREATE"' in line)


async def test_one_review_per_create_refuses_and_admits_as_two_did(
    bridge_stack: BridgeStack, kube: AsyncClient, one_review: str
) -> None:
    ns = one_review
    before = {w: _reviews(bridge_stack, w) for w in ("admit", "mutate", "validate")}
    with pytest.raises(ApiError) as err:  # a bridge-owned annotation, as before
        await create_pod(kube, ns, pod_manifest("forged", annotations={keys.GPU_IDS: "0"}))
    message = str(err.value.status.message)
    assert err.value.status.code == 403 and keys.GPU_IDS in message, message
    assert "only be written by slurmbridge" in message, message

    unnamed = pod_manifest("ignored", gpus=1)
    unnamed.metadata = ObjectMeta(generateName="trainer-")  # named after the mutation
    created = await create_pod(kube, ns, unnamed)
    assert created.metadata is not None and created.metadata.name
    assert created.metadata.name.startswith("trainer-") and created.metadata.uid
    bound = await wait_bound(kube, ns, created.metadata.name)
    assert bound.metadata is not None and bound.metadata.annotations
    assert bound.metadata.annotations.get(keys.GPU_IDS), bound.metadata.annotations

    after = {w: _reviews(bridge_stack, w) for w in before}
    assert after["admit"] - before["admit"] == 2  # the refused pod and the admitted one
    assert after["mutate"] == before["mutate"] and after["validate"] == before["validate"]
