"""Who owns a placeholder job: one pod, or one pod group.

The owner key is what the job's comment records and what the index is keyed
by: the pod UID for a lone pod, ``group:<namespace>/<group>`` for a group.
"""

from lightkube.models.core_v1 import Pod

from bridge import keys

GROUP_PREFIX = "group:"


def owner_key(pod: Pod) -> str:
    meta = pod.metadata
    if meta is None or not meta.uid:
        raise ValueError("pod has no metadata.uid: it must come from the API server")
    group = (meta.labels or {}).get(keys.GROUP)
    if group:
        return f"{GROUP_PREFIX}{meta.namespace}/{group}"
    return meta.uid


def pod_ref(pod: Pod) -> str:
    meta = pod.metadata
    return f"{meta.namespace}/{meta.name}" if meta else "<unnamed pod>"
