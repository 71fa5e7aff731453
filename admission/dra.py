"""The GPUs a pod's DRA claims ask Slurm for, read at admission.

The claims and templates are read once, here: the webhook writes their sum as the pod's
``slurmbridge.io/gpus`` (and ``gpu-type``), the bridge asks Slurm for that, and when Slurm has
allocated, writes each claim's allocation to the devices of Slurm's GPU indices
(``bridge/devices/pinning.py``).  A claim another pod already uses is refused: a claim's
devices are on one node, and each pod of a group is on its own node.
"""

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.resource_v1 import ResourceClaimSpec
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate

from admission.owners import Kind, OwnerReader, WorkloadLookupError
from admission.pod import PodResourceClaim, PodShape
from admission.ttl_cache import TtlCache
from bridge import keys
from bridge.config import DeviceClassGres
from bridge.devices.asks import DeviceAsk, GpuTotal, UnmappableClaim, claim_asks, gpu_total
from bridge.kube.apierrors import is_not_found

CLAIM = Kind("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")
CLAIM_TEMPLATE = Kind("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates")
# A DeviceClass's extended resource when it names none (Kubernetes' KEP-5004).
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
CLASS_CACHE_SECONDS = 5.0

ExtendedResources = Callable[[], Awaitable[Mapping[str, str]]]
"""Extended resource name → the DeviceClass standing for it (``spec.extendedResourceName``)."""


async def claimed_gpus(
    pod: PodShape, namespace: str, read: OwnerReader, classes: Mapping[str, DeviceClassGres]
) -> GpuTotal | None:
    """The Slurm GPU ask of all the pod's claims (None: it has none); raises UnmappableClaim
    (what Slurm cannot allocate), WorkloadLookupError (a claim that cannot be read now)."""
    refs = pod.spec.resource_claims or []
    asks: list[tuple[str, DeviceAsk]] = []
    for ref in refs:
        label, spec = await _claim_spec(ref, namespace, read)
        asks += [(label, ask) for ask in claim_asks(label, spec, classes)]
    return gpu_total(asks, classes) if refs else None


async def _claim_spec(
    ref: PodResourceClaim, namespace: str, read: OwnerReader
) -> tuple[str, ResourceClaimSpec | None]:
    if ref.resource_claim_name:
        kind, name = CLAIM, ref.resource_claim_name
    elif ref.resource_claim_template_name:
        kind, name = CLAIM_TEMPLATE, ref.resource_claim_template_name
    else:
        raise UnmappableClaim(f"spec.resourceClaims {ref.name!r} names no claim and no template")
    label = f"{kind.kind} {namespace}/{name}"
    try:
        found = await read(kind, namespace, name)
    except Exception as err:  # unreachable, RBAC: never admit a pod whose GPUs are unknown
        raise WorkloadLookupError(f"cannot read {label} for the pod's GPUs: {err}") from err
    if found is None:
        raise UnmappableClaim(
            f"{label} (spec.resourceClaims {ref.name!r}) does not exist: create it first"
        )
    if kind is CLAIM_TEMPLATE:
        template = cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict(found))
        return label, template.spec.spec if template.spec else None
    claim = cast(ResourceClaim, ResourceClaim.from_dict(found))
    _unused(label, found)
    return label, claim.spec


def _unused(label: str, claim: dict[str, Any]) -> None:
    """A claim in use or allocated already is on a node of someone else's choosing."""
    status = claim.get("status") or {}
    users = [f"{r.get('resource')}/{r.get('name')}" for r in status.get("reservedFor") or []]
    if users or status.get("allocation"):
        held = f"in use by {', '.join(users)}" if users else "allocated already"
        raise UnmappableClaim(
            f"{label} is {held}: Slurm allocates a claim's devices on the node it gives one "
            "pod; give each pod its own claim (a ResourceClaimTemplate makes one per pod)"
        )


async def extended_gpu_resources(
    pod: PodShape, read: ExtendedResources, classes: Mapping[str, DeviceClassGres]
) -> dict[str, DeviceClassGres]:
    """The extended resources the pod asks for that a DeviceClass stands for (KEP-5004),
    each with what Slurm allocates for it: Slurm allocates them as it does ``nvidia.com/gpu``
    (the webhook moves them out of the containers).  Left in, kube-scheduler's DRA plugin would
    pick the devices on Slurm's node itself, possibly the GPU Slurm gives a native job: one
    of a class not mapped to Slurm is refused (UnmappableClaim).  The classes are read only
    for a pod asking some extended resource besides ``nvidia.com/gpu``."""
    asked = sorted({
        (container.name, name)
        for container in [*pod.spec.containers, *(pod.spec.init_containers or [])]
        for amounts in (container.resources.requests if container.resources else None,
                        container.resources.limits if container.resources else None)
        for name in amounts or {}
        if "/" in name and name != keys.GPU_RESOURCE and not name.startswith("kubernetes.io/")
    })
    if not asked:
        return {}
    try:
        backed = await read()
    except Exception as err:  # unreachable, RBAC: never admit a pod whose devices are unknown
        raise WorkloadLookupError(f"cannot list DeviceClasses: {err}") from err
    found: dict[str, DeviceClassGres] = {}
    for container, name in asked:
        device_class = backed.get(name) or (
            name.removeprefix(IMPLICIT_PREFIX) if name.startswith(IMPLICIT_PREFIX) else None)
        if device_class is None:
            continue
        if device_class not in classes:
            mapped = ", ".join(sorted(classes)) or "none"
            raise UnmappableClaim(
                f"container {container!r} asks for {name}, a DRA extended resource of "
                f"DeviceClass {device_class}, which is not one Slurm allocates (mapped to a "
                f"Slurm GRES: {mapped}): kube-scheduler would pick its devices, not Slurm"
            )
        found[name] = classes[device_class]
    return found


def kube_extended_resources(
    client: AsyncClient, clock: Callable[[], float] = time.monotonic
) -> ExtendedResources:
    """The DeviceClasses' extended resource names, listed through the API server and kept
    CLASS_CACHE_SECONDS, for a burst of a workload's pods."""
    kept = TtlCache[None, Mapping[str, str]](CLASS_CACHE_SECONDS, clock)

    async def listed() -> Mapping[str, str]:
        try:
            return {c.spec.extendedResourceName: c.metadata.name
                    async for c in client.list(DeviceClass)
                    if c.spec and c.spec.extendedResourceName and c.metadata and c.metadata.name}
        except ApiError as err:
            if not is_not_found(err):
                raise
            return {}  # resource.k8s.io/v1 not served here (Kubernetes before 1.34): no DRA

    async def read() -> Mapping[str, str]:
        return await kept.get(None, listed)

    return read
