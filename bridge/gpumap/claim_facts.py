"""DRA claims the bridge pinned, as GPU map facts: a claim carrying the bridge's record (its
finalizer and ``pinned-allocation``: ``bridge/devices/marks.py``) holds the indices of the
devices allocated on it, for the job in its record."""

from collections.abc import Iterable, Mapping

from lightkube.resources.resource_v1 import ResourceClaim

from bridge.devices.marks import DeviceId, allocated_devices, record_of
from bridge.devices.slices import DeviceIndex
from bridge.gpumap.model import ClaimHold


def claim_holds(
    claims: Iterable[ResourceClaim], devices: Mapping[DeviceId, DeviceIndex],
    slurm_nodes: Mapping[str, str],
) -> list[ClaimHold]:
    """``devices``: each device's node and index (``device_indices``); ``slurm_nodes``: the
    Slurm node of each Kubernetes node (its own name where none is known)."""
    holds = []
    for claim in claims:
        record, meta = record_of(claim), claim.metadata
        if record is None or meta is None:
            continue
        on: dict[str, set[int]] = {}
        for device in allocated_devices(claim):
            if (at := devices.get(device)) is not None:
                on.setdefault(slurm_nodes.get(at.node, at.node), set()).add(at.gpu)
        holds += [ClaimHold(node, f"{meta.namespace}/{meta.name}", record.job,
                            tuple(sorted(indices))) for node, indices in on.items()]
    return holds
