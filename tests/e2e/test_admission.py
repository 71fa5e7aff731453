"""The webhook's rejections reach the person creating the pod, with their message."""

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from bridge import keys
from slurmbridge_devkit.e2e import create_pod, pod_manifest
from slurmbridge_devkit.namespaces import delete_namespace
from slurmbridge_devkit.stack import (
    ALLOWED_ACCOUNTS,
    BridgeStack,
    NamespaceFactory,
    make_e2e_namespace,
)

pytestmark = pytest.mark.e2e


async def test_spoofed_bridge_annotation_is_rejected(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    ns = await e2e_namespace("spoof")
    pod = pod_manifest("spoof", annotations={keys.GPU_IDS: "0,1,2,3"})
    with pytest.raises(ApiError) as err:
        await create_pod(kube, ns, pod)
    assert keys.GPU_IDS in str(err.value.status.message)


async def test_account_outside_namespace_policy_is_rejected(
    bridge_stack: BridgeStack, kube: AsyncClient
) -> None:
    ns = await make_e2e_namespace(kube, "", name=bridge_stack.restricted_ns)
    try:
        pod = pod_manifest("chem", annotations={keys.ACCOUNT: "chemistry"})
        with pytest.raises(ApiError) as err:
            await create_pod(kube, ns, pod)
        message = str(err.value.status.message)
        assert "chemistry" in message and ALLOWED_ACCOUNTS[0] in message
        allowed = pod_manifest("phys", annotations={keys.ACCOUNT: ALLOWED_ACCOUNTS[0]})
        await create_pod(kube, ns, allowed)
    finally:
        await delete_namespace(kube, ns)
