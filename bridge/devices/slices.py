"""Which Slurm GPU index each DRA device is: the node's ResourceSlices (each pool's newest
generation) name it in an attribute (``DeviceClassGres.index_attribute``, plain or prefixed
with the driver).  Pinning reads it one way (Slurm's index → the device to write), the GPU map
the other (a pinned claim's device → its index)."""

from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from lightkube.resources.resource_v1 import ResourceSlice

from bridge.devices.marks import DeviceId


class DeviceIndex(NamedTuple):
    node: str  # the Kubernetes node publishing the device
    gpu: int  # Slurm's GPU index


def device_indices(
    slices: Iterable[ResourceSlice], index_names: Collection[str],
) -> dict[DeviceId, DeviceIndex]:
    """Every indexed device of each pool's newest generation, with its node and index."""
    listed = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for s in listed:
        key = (s.spec.driver, s.spec.pool.name)
        newest[key] = max(newest.get(key, 0), s.spec.pool.generation)
    found: dict[DeviceId, DeviceIndex] = {}
    for s in listed:
        pool = s.spec.pool
        if pool.generation != newest[(s.spec.driver, pool.name)]:
            continue
        for device in s.spec.devices or []:
            index = _index(s.spec.driver, device.attributes or {}, index_names)
            if index is not None:
                found[DeviceId(s.spec.driver, pool.name, device.name)] = DeviceIndex(
                    s.spec.nodeName or "", index)
    return found


def _index(driver: str, attributes: Mapping[str, Any], names: Collection[str]) -> int | None:
    for name in names:
        for key in (name, f"{driver}/{name}"):
            value = attributes.get(key)  # lightkube leaves a map's values as dicts
            number = (value.get("int") if isinstance(value, dict)
                      else getattr(value, "int", None))
            if isinstance(number, int):
                return number
    return None
