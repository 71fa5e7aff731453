"""What a DRA claim asks for, in Slurm's terms: a count of GPUs, of one type or any.

A request Slurm cannot express is refused, naming the claim and the request, never narrowed
to something Slurm can: the pod would get devices other than the ones it asked for.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lightkube.models.resource_v1 import DeviceRequest, ResourceClaimSpec

from bridge.config import DeviceClassGres


class UnmappableClaim(ValueError):
    """A claim asks for something Slurm cannot allocate; the message names it and says why."""


@dataclass(frozen=True, slots=True)
class DeviceAsk:
    """``count`` devices of ``device_class`` for the claim's request ``request``."""

    request: str
    device_class: str
    count: int


@dataclass(frozen=True, slots=True)
class GpuTotal:
    """All of a pod's claims as one Slurm GPU ask: ``gpus`` GPUs of ``gpu_type`` (or any)."""

    gpus: int
    gpu_type: str | None


def claim_asks(
    claim: str, spec: ResourceClaimSpec | None, classes: Mapping[str, DeviceClassGres]
) -> list[DeviceAsk]:
    """The requests of the claim (or template) named ``claim`` (as the user will read it,
    e.g. ``ResourceClaimTemplate gpus``); raises UnmappableClaim."""
    devices = spec.devices if spec else None
    if devices is None or not devices.requests:
        raise UnmappableClaim(f"{claim} asks for no device")
    if devices.constraints:
        raise UnmappableClaim(
            f"{claim}: constraints (matchAttribute/distinctAttribute) are not something Slurm "
            "can keep when it picks the GPUs: drop them"
        )
    return [_ask(claim, request, classes) for request in devices.requests]


def _ask(claim: str, request: DeviceRequest, classes: Mapping[str, DeviceClassGres]) -> DeviceAsk:
    where = f"{claim} request {request.name!r}"
    exact = request.exactly
    if exact is None:
        raise UnmappableClaim(
            f"{where}: firstAvailable (a list of alternatives) is not something Slurm can "
            "choose between: ask for one device class with 'exactly'"
        )
    if exact.deviceClassName not in classes:
        mapped = ", ".join(sorted(classes)) or "none (the chart's deviceClasses is empty)"
        raise UnmappableClaim(
            f"{where}: device class {exact.deviceClassName!r} is not one Slurm allocates "
            f"(mapped to a Slurm GRES: {mapped})"
        )
    if classes[exact.deviceClassName].gres == "shard":
        raise UnmappableClaim(
            f"{where}: device class {exact.deviceClassName!r} is Slurm's GPU shards, which a "
            "claim cannot hold (it names whole devices, and one GPU's shards go to several "
            "pods): ask with the class's extended resource or annotation "
            "slurmbridge.io/gpu-shards"
        )
    if exact.allocationMode == "All":
        raise UnmappableClaim(
            f"{where}: allocationMode All is not a count Slurm can be asked for: give a count"
        )
    if exact.selectors:
        raise UnmappableClaim(
            f"{where}: CEL selectors pick devices by attributes Slurm has no feature for: "
            "drop them, or ask the admin for a device class mapped to a Slurm GPU type"
        )
    if exact.adminAccess or exact.capacity:
        field = "adminAccess" if exact.adminAccess else "capacity"
        raise UnmappableClaim(f"{where}: {field} is not something Slurm allocates: drop it")
    count = 1 if exact.count is None else exact.count
    if count < 1:
        raise UnmappableClaim(f"{where}: count {count}: at least 1")
    return DeviceAsk(request=request.name, device_class=exact.deviceClassName, count=count)


def gpu_total(
    asks: Iterable[tuple[str, DeviceAsk]], classes: Mapping[str, DeviceClassGres]
) -> GpuTotal:
    """One Slurm ask for every (claim, ask) of a pod: a job has one GPU type or none."""
    total, types = 0, dict[str | None, str]()
    for claim, ask in asks:
        total += ask.count
        types[classes[ask.device_class].type] = claim
    if len(types) > 1:
        kinds = ", ".join(f"{t or 'any type'} ({claim})" for t, claim in types.items())
        raise UnmappableClaim(
            f"the pod's claims ask for GPUs of more than one Slurm type ({kinds}): Slurm gives "
            "a job one GPU type; split the pod or use classes of one type"
        )
    return GpuTotal(gpus=total, gpu_type=next(iter(types), None))
