"""The pod a filter request names, as the API server holds it.

The body of a filter request is whatever the caller sent.  Before the bridge submits
a job or writes an annotation for a pod, it reads that pod from the API server and
works from the API's copy: a body naming a pod that does not exist, or one with
another UID, or one that is not the bridge's to place (another scheduler's, bound,
scheduling-gated), gets nothing.
"""

from typing import cast

from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.kube.apierrors import is_not_found
from bridge.ports import KubePort
from extender.wire import PodMeta


class UnverifiedPod(Exception):
    """The named pod is not one the bridge may act on; the message says why."""


class PodUnreadable(Exception):
    """The API server could not be asked (try again later)."""


async def pod_from_api(kube: KubePort, meta: PodMeta) -> Pod:
    """The API server's copy of the pod ``meta`` names (same namespace, name and UID),
    unbound, ours."""
    assert meta.name and meta.namespace and meta.uid
    ref = f"{meta.namespace}/{meta.name}"
    try:
        pod = cast(Pod, await kube.get(PodResource, meta.name, namespace=meta.namespace))
    except ApiError as exc:
        if is_not_found(exc):
            raise UnverifiedPod(f"pod {ref} does not exist in the API server") from None
        raise PodUnreadable(f"reading pod {ref}: {exc.status.message}") from exc
    except Exception as exc:  # connection refused, timeout: the apiserver is away
        raise PodUnreadable(f"reading pod {ref}: {exc!r}") from exc
    uid = pod.metadata.uid if pod.metadata else None
    if uid != meta.uid:
        raise UnverifiedPod(f"pod {ref} has UID {uid} in the API server, not {meta.uid}")
    spec = pod.spec
    if spec is None or spec.schedulerName != keys.SCHEDULER_NAME:
        raise UnverifiedPod(f"pod {ref} does not ask for schedulerName {keys.SCHEDULER_NAME}")
    if spec.nodeName:
        raise UnverifiedPod(f"pod {ref} is already bound to {spec.nodeName}")
    if spec.schedulingGates:  # kube-scheduler never asks about a gated pod
        raise UnverifiedPod(f"pod {ref} is scheduling-gated: nothing to place yet")
    return pod
