"""Is this pod the bridge's to place?  One answer, for the extender's filter and the intake.

The body of a filter request is whatever the caller sent.  Before the bridge submits
a job or writes an annotation for a pod, it reads that pod from the API server and
works from the API's copy: a body naming a pod that does not exist, or one with
another UID, or one that is not the bridge's to place (another scheduler's, bound,
scheduling-gated), gets nothing.  The intake asks the same of each pod its watch shows,
except that the bridge's own gate is what it submits for.
"""

from typing import cast

from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod
from lightkube.resources.core_v1 import Pod as PodResource

from bridge import keys
from bridge.kube.apierrors import is_not_found
from bridge.link.gate import other_gates
from bridge.link.ownership import pod_ref
from bridge.ports import KubeGet


class UnverifiedPod(Exception):
    """The named pod is not one the bridge may act on; the message says why."""


class PodUnreadable(Exception):
    """The API server could not be asked (try again later)."""


def unplaceable_reason(pod: Pod, *, own_gate_allowed: bool = False) -> str | None:
    """Why ``pod`` is not the bridge's to place (None: it asks for the bridge and neither a
    node nor a gate holds it); ``own_gate_allowed``: the bridge's own gate does not count
    (the intake submits a gated pod's job; kube-scheduler never asks about a gated pod)."""
    spec = pod.spec
    if spec is None or spec.schedulerName != keys.SCHEDULER_NAME:
        return f"pod {pod_ref(pod)} does not ask for schedulerName {keys.SCHEDULER_NAME}"
    if spec.nodeName:
        return f"pod {pod_ref(pod)} is already bound to {spec.nodeName}"
    if other_gates(pod) if own_gate_allowed else spec.schedulingGates:
        return f"pod {pod_ref(pod)} is scheduling-gated: nothing to place yet"
    return None


async def pod_from_api(kube: KubeGet, namespace: str, name: str, uid: str) -> Pod:
    """The API server's copy of the pod named ``namespace``/``name`` with ``uid``,
    unbound, ours."""
    ref = f"{namespace}/{name}"
    try:
        pod = cast(Pod, await kube.get(PodResource, name, namespace=namespace))
    except ApiError as exc:
        if is_not_found(exc):
            raise UnverifiedPod(f"pod {ref} does not exist in the API server") from None
        raise PodUnreadable(f"reading pod {ref}: {exc.status.message}") from exc
    except Exception as exc:  # connection refused, timeout: the apiserver is away
        raise PodUnreadable(f"reading pod {ref}: {exc!r}") from exc
    found_uid = pod.metadata.uid if pod.metadata else None
    if found_uid != uid:
        raise UnverifiedPod(f"pod {ref} has UID {found_uid} in the API server, not {uid}")
    reason = unplaceable_reason(pod)
    if reason is not None:
        raise UnverifiedPod(reason)
    return pod
